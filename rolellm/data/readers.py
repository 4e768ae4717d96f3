"""Read the release's jsonl files into rows of the shared schema (`ROW_FEATURES`).

Text stays as released: `role`, `question` and every `generated` answer are the file's strings, whitespace
included (every English question starts with a space, and some references end with one, which the paper's scorer
counts as a word). Stages that show text to a model strip it there (`to_role_messages`, `build_role_messages`
callers), so scoring and export never need the raw files again. What is normalised is the structure:

- `type` is a string in `role_specific/train.jsonl`, a list parallel to `generated` in `test.jsonl` and absent in
  the general and baseline files: it becomes a list with one entry per reference (empty when absent);
- `subset` and `lang` columns say where a row came from.

Role names keep the data's spelling (`Dr. Frank-N-Furter`); a `Profiles` mapping finds their profiles however they
are spelled (`rolellm.roles.lookup`).

>>> import json, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "train.jsonl"
>>> _ = path.write_text(json.dumps({"role": "Po", "question": " Who are you?", "generated": [" Po! "],
...                                 "type": "script_agnostic"}) + "\\n")
>>> read_rolebench_jsonl(path, "role_specific", "en")
[{'role': 'Po', 'question': ' Who are you?', 'generated': [' Po! '], 'type': ['script_agnostic'], 'subset': 'role_specific', 'lang': 'en'}]
"""

import json
import json.scanner
import warnings
from collections.abc import Iterator
from pathlib import Path

from rolellm.data.release import LANGS, SUBSETS, TYPES
from rolellm.roles.profile import DataFormatError, parse_json_line, read_text


COLUMNS = ("role", "question", "generated", "type")
_SCANNER = json.scanner.make_scanner(
    json.JSONDecoder()
)  # what a file gives; `subset` and `lang` are the same on every row


class DuplicateRowsWarning(UserWarning):
    """Rows of one file repeat the role and question of an earlier row; they are kept, and counted in the warning."""


def read_rolebench_columns(path: str | Path, subset: str, lang: str) -> dict[str, list]:
    """Read one release jsonl file column by column: `{"role": [...], "question": [...], "generated": [...],
    "type": [...]}`, the rows of `read_rolebench_jsonl` without the per-row dicts (what the `RoleBench` builder turns
    into an Arrow table).

    Every line is parsed once and checked with a few type tests; a line that fails them goes through
    `normalize_row`, which raises the error naming the file, the line and the field. Rows that repeat the role and
    question of an earlier row are kept and counted in one `DuplicateRowsWarning` naming the file.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "test.jsonl"
    >>> _ = path.write_text('{"role": "Po", "question": "Hi?", "generated": ["Yo!", "Hey!"], '
    ...                     '"type": ["script_based", "script_agnostic"]}\\n')
    >>> read_rolebench_columns(path, "role_specific", "en")["type"]
    [['script_based', 'script_agnostic']]
    """
    if subset not in SUBSETS:
        raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, got {lang!r}")
    path = Path(path)
    roles, questions, answers, types = columns = ([], [], [], [])
    first_line: dict[tuple[str, str], int] = {}
    repeats: list[tuple[int, int]] = []
    typed = subset == "role_specific"
    scan = _SCANNER  # the C scanner under json.loads, called once per line without the wrapper's regex matches
    # lines end at "\n", "\r\n" or "\r" (JSON strings hold neither raw), not at U+2028 and the other separators
    # `str.splitlines` knows, which may stand inside JSON strings
    text = read_text(path).replace("\r\n", "\n").replace("\r", "\n")
    for line_no, line in enumerate(text.split("\n"), start=1):
        try:
            record, end = scan(line, 0)
        except (StopIteration, ValueError, RecursionError):  # blank, not JSON, too deep: the careful path
            record, end = None, 0
        surrogate = "\\ud" in line or "\\uD" in line  # the careful path checks for a lone half of a pair
        if type(record) is not dict or surrogate or (end != len(line) and not line[end:].isspace()):
            if not line or line.isspace():
                continue
            record = parse_json_line(line, path, line_no)  # raises the error naming the file and the line
        role, question, generated = record.get("role"), record.get("question"), record.get("generated")
        kind = record.get("type")
        try:  # the common case, checked cheaply; anything else gets normalize_row's checks and messages
            common = (
                type(role) is str
                and type(question) is str
                and type(generated) is list
                and generated
                and question.strip()
                and all(map(str.strip, generated))  # a non-string answer raises TypeError
            )
        except TypeError:
            common = False
        if common and (
            kind is None
            or (typed and type(kind) is str and kind in TYPES)
            or (typed and type(kind) is list and len(kind) == len(generated) and all(k in TYPES for k in kind))
        ):
            kind = [] if kind is None else [kind] * len(generated) if type(kind) is str else kind
        else:
            row = normalize_row(record, subset, lang, where=f"{path}:{line_no}")
            role, question, generated, kind = row["role"], row["question"], row["generated"], row["type"]
        roles.append(role)
        questions.append(question)
        answers.append(generated)
        types.append(kind)
        seen = first_line.setdefault((role, question), line_no)
        if seen != line_no:
            repeats.append((line_no, seen))
    if repeats:
        examples = ", ".join(f"line {line} repeats line {first}" for line, first in repeats[:3])
        warnings.warn(
            f"{path}: {len(repeats)} of {len(roles)} rows repeat the role and question of an earlier row ({examples}"
            f"{', ...' if len(repeats) > 3 else ''}); they are kept",
            DuplicateRowsWarning,
            stacklevel=2,
        )
    return dict(zip(COLUMNS, columns))


def iter_rolebench_jsonl(path: str | Path, subset: str, lang: str) -> Iterator[dict]:
    """Yield the rows of one release jsonl file, in file order (see `read_rolebench_jsonl`)."""
    columns = read_rolebench_columns(path, subset, lang)
    for values in zip(*columns.values()):
        yield {**dict(zip(COLUMNS, values)), "subset": subset, "lang": lang}


def read_rolebench_jsonl(path: str | Path, subset: str, lang: str) -> list[dict]:
    """Read one release jsonl file into rows of the shared schema.

    Args:
        path (`str` or `os.PathLike`): a `train.jsonl`, `test.jsonl` or `rolegpt_baseline.jsonl` of the release.
        subset (`str`): `"general"` or `"role_specific"` (the folder the file sits in).
        lang (`str`): `"en"` or `"zh"`.

    Returns:
        `list[dict]`: rows with `role`, `question`, `generated` (as released), `type`, `subset`, `lang`. Rows that
        repeat the role and question of an earlier row are kept and counted in a `DuplicateRowsWarning`.

    Raises:
        `DataFormatError`: a truncated or non-JSON line, a missing field, a field of the wrong type, a `type` list
        not parallel to `generated`, an empty question or answer, an empty file, invalid UTF-8; the message names
        the file, the line and the field.
    """
    return list(iter_rolebench_jsonl(path, subset, lang))


def read_raw_targets(path: str | Path) -> dict[str, str]:
    """Read `instructions-general.jsonl` (`{"instruction", "target"}` per line) into `{instruction: target}`.

    Instructions are keyed without surrounding whitespace, as RoleBench questions are matched.

    Raises:
        `DataFormatError`: a line is not JSON or lacks a string `instruction` / `target`, naming file and line.
    """
    targets = {}
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        record = parse_json_line(line, path, number)
        for key in ("instruction", "target"):
            if not isinstance(record.get(key), str):
                raise DataFormatError(
                    f"{path}:{number}: field {key!r} must be a string, found {record.get(key)!r}; "
                    'each line must be {"instruction": ..., "target": ...}'
                )
        targets[record["instruction"].strip()] = record["target"]
    return targets


def normalize_row(record: dict, subset: str, lang: str, where: str = "row") -> dict:
    """One release record (already parsed) in the shared schema, its text unchanged; `where` prefixes errors.

    >>> normalize_row({"role": "李白", "question": "你好 ", "generated": ["好！"]}, "general", "zh")
    {'role': '李白', 'question': '你好 ', 'generated': ['好！'], 'type': [], 'subset': 'general', 'lang': 'zh'}
    """
    for key in ("role", "question", "generated"):
        if key not in record:
            raise DataFormatError(f"{where}: field {key!r} is missing (fields found: {sorted(record)})")
    for key in ("role", "question"):
        if not isinstance(record[key], str):
            raise DataFormatError(f"{where}: field {key!r} must be a string, got {type(record[key]).__name__}")
    generated = record["generated"]
    if not isinstance(generated, list) or not all(isinstance(answer, str) for answer in generated):
        raise DataFormatError(
            f"{where}: field 'generated' must be a list of strings, got {_describe(generated)}; "
            'wrap a single answer as ["..."]'
        )
    if not generated:
        raise DataFormatError(f"{where}: field 'generated' is an empty list; every row needs at least one reference")
    if not record["question"].strip():
        raise DataFormatError(f"{where}: field 'question' is empty")
    blank = [i for i, answer in enumerate(generated) if not answer.strip()]
    if blank:
        raise DataFormatError(f"{where}: field 'generated' has empty answers at positions {blank}")
    if subset == "general" and record.get("type") not in (None, [], ""):
        raise DataFormatError(
            f"{where}: field 'type' belongs to role_specific rows (script_based / script_agnostic); a general row "
            "has none"
        )
    return {
        "role": record["role"],
        "question": record["question"],
        "generated": list(generated),
        "type": _normalize_type(record.get("type"), len(generated), where),
        "subset": subset,
        "lang": lang,
    }


def _normalize_type(value, n_generated: int, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        value = [value] * n_generated
    elif not isinstance(value, list) or len(value) != n_generated:
        raise DataFormatError(
            f"{where}: field 'type' must be a string or a list with one entry per reference "
            f"({n_generated}), got {_describe(value)}"
        )
    for entry in value:
        if entry not in TYPES:
            raise DataFormatError(f"{where}: field 'type' has {entry!r}; expected one of {TYPES}")
    return list(value)


def _describe(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
