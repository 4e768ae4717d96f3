"""Preference data: the rows of the preference stages (DPO, KTO), their files, and SillyTavern chats read as pairs.

Two configs per language sit beside the generated rows in a release folder (`rolellm.data.layout.preference_config`):

| config | file | one row |
|---|---|---|
| `zh-preference`, `en-instruction-preference` | `<part>/preference/{train,test}.jsonl` | `role`, `question`, `chosen`, `rejected`, `lang`, `source` |
| `zh-unpaired`, `en-instruction-unpaired` | `<part>/unpaired/{train,test}.jsonl` | `role`, `question`, `completion`, `label`, `lang`, `source` |

`source` says where a row came from (`"judge:pairwise"`, `"judge:rubric"`, `"rouge_l"`, `"sillytavern"`). The files
are plain JSON lines, so `load_rolebench("zh-preference", data_dir=...)` and
`datasets.load_dataset("json", data_files=...)` read the same rows, and `rolellm train --stage dpo` (or `kto`) trains
on them (`rolellm.training.preference`).

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "train.jsonl"
>>> _ = write_preference_rows(path, [{"role": "Po", "question": "Hi?", "chosen": "Skadoosh!", "rejected": "Hello.",
...                               "lang": "en", "source": "rouge_l"}], "preference")
>>> read_preference_rows(path, "preference")[0]["chosen"]
'Skadoosh!'
"""

import json
import logging
from pathlib import Path

import datasets

from rolellm.roles.profile import DataFormatError, parse_json_line, read_text


logger = logging.getLogger(__name__)

PREFERENCE_FEATURES = {
    "preference": datasets.Features(
        {name: datasets.Value("string") for name in ("role", "question", "chosen", "rejected", "lang", "source")}
    ),
    "unpaired": datasets.Features(
        {
            "role": datasets.Value("string"),
            "question": datasets.Value("string"),
            "completion": datasets.Value("string"),
            "label": datasets.Value("bool"),
            "lang": datasets.Value("string"),
            "source": datasets.Value("string"),
        }
    ),
}


def check_preference_row(record: dict, kind: str, where: str) -> dict:
    """One row of `kind` checked field by field; a wrong one is a `DataFormatError` naming `where` and the field.

    Text fields must be strings, `role` and `question` not blank (an answer may be blank: the trainers count and
    drop such rows); `label` must be a boolean; `lang` and `source` may be missing.
    """
    features = PREFERENCE_FEATURES[kind]
    row = {}
    for name, feature in features.items():
        value = record.get(name)
        if value is None and name in ("lang", "source"):
            row[name] = ""
            continue
        if name not in record:
            raise DataFormatError(f"{where}: missing field {name!r} (a {kind} row has {', '.join(features)})")
        expected = bool if feature.dtype == "bool" else str
        if not isinstance(value, expected):
            raise DataFormatError(f"{where}: field {name!r} must be a {expected.__name__}, got {value!r}")
        if name in ("role", "question") and not value.strip():
            raise DataFormatError(f"{where}: field {name!r} is blank")
        row[name] = value
    return row


def read_preference_rows(path: str | Path, kind: str) -> list[dict]:
    """The rows of a preference file of `kind` (`"preference"` or `"unpaired"`), each checked; errors name the file
    and the line (an empty file is one: a split without rows has no file). Rows that repeat an earlier row exactly
    are kept and counted in one warning naming their lines."""
    rows, first_line, repeats = [], {}, []
    for line_no, line in enumerate(read_text(path).splitlines(), start=1):
        if line.strip():
            row = check_preference_row(parse_json_line(line, path, line_no), kind, f"{path}:{line_no}")
            key = tuple(row[name] for name in PREFERENCE_FEATURES[kind] if name != "source")
            if key in first_line:
                repeats.append((line_no, first_line[key]))
            first_line.setdefault(key, line_no)
            rows.append(row)
    if repeats:
        shown = ", ".join(f"line {line} repeats line {first}" for line, first in repeats[:5])
        logger.warning(
            "%s: %d row(s) repeat an earlier row exactly (%s%s); they are kept and weigh twice in training",
            path, len(repeats), shown, ", ..." if len(repeats) > 5 else "",
        )  # fmt: skip
    return rows


def write_preference_rows(path: str | Path, rows: list[dict], kind: str) -> Path:
    """Write checked rows of `kind` as JSON lines (UTF-8, one object per line); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(check_preference_row(row, kind, f"row {i}"), ensure_ascii=False) for i, row in enumerate(rows)]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_sillytavern_chat(path: str | Path, role: str | None = None, lang: str = "") -> tuple[list[dict], dict]:
    """Preference pairs from a SillyTavern chat export: for each answer of the character that has other swipes, the
    kept swipe is chosen and each other swipe is rejected, after the user message before it.

    A SillyTavern chat file (`.jsonl`) holds a header line (`user_name`, `character_name`, `chat_metadata`, ...)
    and then one message per line (`name`, `is_user`, `is_system`, `mes`, and for a generated answer `swipes`, the
    alternatives generated, with `swipe_id`, the one kept and shown as `mes`). Only the user message right before an
    answer becomes its `question`: earlier turns are not kept.

    Args:
        path (`str` or `os.PathLike`): the exported chat.
        role (`str`, *optional*): the role name of the rows; defaults to the header's `character_name`.
        lang (`str`, *optional*): the rows' `lang`.

    Returns:
        `tuple[list[dict], dict]`: the `preference` rows, and counts of what was not turned into pairs
        (`one_swipe`: answers without another swipe to pair with; `no_question`: answers with no user message before
        them, such as the greeting; `same_as_kept`: swipes equal to the kept one; `empty`: blank swipes), which the
        caller reports.
    """
    lines = read_text(path).splitlines()
    header = parse_json_line(lines[0], path, 1)
    if "mes" in header or "character_name" not in header:
        raise DataFormatError(
            f"{path}:1: not a SillyTavern chat export: the first line must be the chat header with 'character_name' "
            "(and 'user_name', 'chat_metadata'), then one message per line"
        )
    name = role or header["character_name"]
    if not isinstance(name, str) or not name.strip():
        raise DataFormatError(f"{path}:1: field 'character_name' must be a non-blank string, got {name!r}")
    rows, skipped, question = [], {"one_swipe": 0, "no_question": 0, "same_as_kept": 0, "empty": 0}, None
    for line_no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        message = parse_json_line(line, path, line_no)
        text = message.get("mes")
        if not isinstance(text, str):
            raise DataFormatError(f"{path}:{line_no}: field 'mes' must be a string, got {text!r}")
        for flag in ("is_user", "is_system"):
            if message.get(flag) is not None and not isinstance(message[flag], bool):
                raise DataFormatError(f"{path}:{line_no}: field {flag!r} must be true or false, got {message[flag]!r}")
        if message.get("is_system"):
            continue
        if message.get("is_user"):
            question = text
            continue
        swipes = message.get("swipes") or []
        if not isinstance(swipes, list) or not all(isinstance(swipe, str) for swipe in swipes):
            raise DataFormatError(f"{path}:{line_no}: field 'swipes' must be a list of strings, got {swipes!r}")
        swipe_id = message.get("swipe_id", 0)
        if swipes and (not isinstance(swipe_id, int) or isinstance(swipe_id, bool) or not 0 <= swipe_id < len(swipes)):
            raise DataFormatError(
                f"{path}:{line_no}: field 'swipe_id' must index 'swipes' (0 to {len(swipes) - 1}), got {swipe_id!r}"
            )
        others = [swipe for i, swipe in enumerate(swipes) if i != swipe_id]
        if not others:
            skipped["one_swipe"] += 1
        elif question is None or not question.strip():
            skipped["no_question"] += 1
        elif others:
            for other in others:
                if not other.strip():
                    skipped["empty"] += 1
                elif other.strip() == text.strip():
                    skipped["same_as_kept"] += 1
                else:
                    rows.append({"role": name, "question": question, "chosen": text, "rejected": other,
                                 "lang": lang, "source": "sillytavern"})  # fmt: skip
        question = None
    return rows, skipped
