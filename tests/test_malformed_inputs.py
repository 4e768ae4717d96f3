"""Malformed inputs, one small file or folder each, into the reader or command that owns them.

Every case is `(id, build, entry, expected)`: `build(tmp_path)` writes the input and returns its path, `entry(path)`
reads it the way a user would (a reader of the API, or the command line), and `expected` is one of

- `error(pattern)`: an exception whose message matches `pattern`, which names the file (and the line and field
  where there is one), or for the command line exit code 2 (or `code`) with that message on stderr and no traceback;
- `warns(pattern)`: accepted, with one warning matching `pattern` that names the file and counts what it found;
- `accepted(check)`: accepted with no warning, and `check(result)` holds.
"""

import base64
import gzip
import io
import json
import struct
import sys
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fixtures.mini_release import write_mini_release

from rolellm.clients.inference_settings import read_inference_settings
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.data.builder import load_rolebench, read_rolebench_table
from rolellm.data.preference import read_sillytavern_chat
from rolellm.data.readers import read_rolebench_jsonl
from rolellm.encoding.chat_template import read_chat_template
from rolellm.evaluation.benchmark.baseline import read_predictions_folder
from rolellm.evaluation.benchmark.report import update_model_card
from rolellm.evaluation.coser.prompts import checkout_prompts
from rolellm.evaluation.coser.scoring import read_results
from rolellm.evaluation.coser.testset import read_coser_test_set
from rolellm.evaluation.multiturn.agreement import read_human_labels
from rolellm.evaluation.multiturn.dialogue import Scenario, read_scenarios, read_transcripts, run_dialogues
from rolellm.generation.job import save_generation_metadata
from rolellm.generation.profile_description import ProfileDescriptionConfig
from rolellm.rewards.combine import reward_settings
from rolellm.rewards.reference import reference_rouge_l
from rolellm.rewards.style import LengthPenalty
from rolellm.roles.character_card import read_character_card
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import build_system_instruction, read_system_template
from rolellm.roles.release import read_profile_jsonl, read_release_profiles
from rolellm.roles.resolve import profiles_for
from rolellm.roles.screenplay import read_screenplay
from rolellm.scripts.cli import main
from rolellm.scripts.generate import read_instructions
from rolellm.testing.server import ChatCompletionsServer


@dataclass
class Expect:
    kind: str  # "error", "warns" or "accepted"
    pattern: str = ""
    check: Callable[[Any], bool] | None = None
    code: int = 2  # the exit code of an error on the command line


def error(pattern, code=2):
    return Expect("error", pattern, code=code)


def warns(pattern):
    return Expect("warns", pattern)


def accepted(check=None):
    return Expect("accepted", check=check)


# --- builders ------------------------------------------------------------------------------------------------------


def text_file(name, content, encoding="utf-8", raw=None):
    def build(tmp_path):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw if raw is not None else content.encode(encoding))
        return path

    return build


def jsonl(name, *records):
    return text_file(name, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


ROW = {"role": "Po", "question": " Who are you?", "generated": [" The Dragon Warrior!"]}
TYPED = {**ROW, "type": "script_agnostic"}


def rows_file(*records, name="rows.jsonl"):
    return jsonl(name, *records)


def mini_release(edit=None):
    """The mini release (every file of the layout), changed by `edit(root)`; returns the root."""

    def build(tmp_path):
        root = write_mini_release(tmp_path / "release")
        if edit is not None:
            edit(root)
        return root

    return build


def png_bytes(*extra_chunks, crc_fix=True):
    """A 1x1 PNG with `extra_chunks` ((kind, data) pairs) before IEND."""

    def chunk(kind, data, good=True):
        crc = zlib.crc32(kind + data) if good else 0
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00\x00")
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat)
    for kind, data, *good in extra_chunks:
        body += chunk(kind, data, *good)
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IEND", b"")


CARD = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Po", "description": "A kung fu panda."}}


def card_chunk(card=CARD, keyword=b"chara"):
    return (b"tEXt", keyword + b"\0" + base64.b64encode(json.dumps(card).encode()))


SCENARIO = (
    "- role: Po\n  situation: Training day.\n  user_persona: A student.\n  opening_line: Teach me!\n  num_turns: 2\n"
)


# --- entry points --------------------------------------------------------------------------------------------------


def general_rows(path):
    return read_rolebench_jsonl(path, "general", "en")


def specific_rows(path):
    return read_rolebench_jsonl(path, "role_specific", "en")


def build_config(name, splits=None):
    def entry(root):
        return load_rolebench(name, data_dir=root, splits=splits, cache_dir=root.parent / "cache")

    return entry


def profiles_en(folder):
    return read_release_profiles(folder, "en")


def profile_lines(path):
    return read_profile_jsonl(path, "Po", "en")


def screenplay_po(path):
    return read_screenplay(path, "Po")


def cli(*argv, stdin=None):
    """Run `rolellm *argv` (`{path}` replaced by the input, `{dir}` by its folder), reading `stdin` (text) when given;
    the result is the exit code."""

    def entry(path):
        args = [a.replace("{path}", str(path)).replace("{dir}", str(path.parent)) for a in argv]
        saved = sys.stdin
        if stdin is not None:
            sys.stdin = io.StringIO(stdin)  # a pipe, not a terminal
        try:
            code = main(args)
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code
        finally:
            sys.stdin = saved
        return code

    entry.cli = True
    return entry


def recipe(content, raw=None):
    return text_file("recipe.yaml", content, raw=raw)


EVALUATE = ("evaluate", "--config", "{path}")
GENERATE = ("generate", "rolegpt", "--config", "{path}")
# a complete evaluate recipe, changed per case
GOOD_RECIPE = "model_name_or_path: rolegpt\ndataset_name: zh-general\noutput_dir: out\n"


def remove(rel):
    return lambda root: (root / rel).unlink()


def write(rel, content):
    return lambda root: (root / rel).write_bytes(content if isinstance(content, bytes) else content.encode())


def append(rel, content):
    def edit(root):
        with (root / rel).open("ab") as file:
            file.write(content.encode())

    return edit


ZH_TRAIN = "rolebench-zh/general/train.jsonl"


def model_folder(**files):
    """A folder with `files` (name -> text; a dict is written as JSON) and a mini release beside it (`release/`);
    returns the folder. A `config.json` of `{}` is enough for a command that stops before loading the weights."""

    def build(tmp_path):
        write_mini_release(tmp_path / "release")
        folder = tmp_path / "model"
        folder.mkdir()
        for name, content in files.items():
            (folder / name).write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
        return folder

    return build


def train_recipe(extra="", stage="sft"):
    """A `rolellm train` recipe on the mini release and a `model/` folder holding `config.json` (`{}`: the commands
    tested stop before loading weights), with `extra` lines."""

    def build(tmp_path):
        model_folder(**{"config.json": {}})(tmp_path)
        text = (f"stage: {stage}\nmodel_name_or_path: {tmp_path / 'model'}\ndata_dir: {tmp_path / 'release'}\n"
                f"output_dir: {tmp_path / 'out'}\nuse_cpu: true\nbf16: false\nreport_to: none\n{extra}")  # fmt: skip
        return text_file("recipe.yaml", text)(tmp_path)

    return build


TRAIN = ("train", "--config", "{path}")
GRPO = "rewards: [catchphrase]\n"
ST_HEADER = {"user_name": "You", "character_name": "Ada Quill", "chat_metadata": {}}
ST_USER = {"name": "You", "is_user": True, "mes": "What are you building?"}
ST_ANSWER = {
    "name": "Ada Quill",
    "is_user": False,
    "mes": "A clock.",
    "swipes": ["A clock.", "A kite."],
    "swipe_id": 0,
}


def sillytavern(*messages, header=ST_HEADER):
    """A SillyTavern chat export and the mini release beside it; returns the chat's path."""

    def build(tmp_path):
        write_mini_release(tmp_path / "release")
        return jsonl("chat.jsonl", header, *messages)(tmp_path)

    return build


SILLYTAVERN = ("generate", "sillytavern", "--chats", "{path}", "--profiles", "{dir}/release", "--lang", "en",
               "--output_dir", "{dir}/out")  # fmt: skip


def nothing_written(path):
    return not (path.parent / "out").exists()


COSER_SET = json.loads((Path(__file__).parent / "fixtures" / "coser" / "test_set.json").read_text(encoding="utf-8"))
COSER_RESULTS = (Path(__file__).parent / "fixtures" / "coser" / "original_results.json").read_text(encoding="utf-8")


def coser_set(index, **changes):
    """The CoSER fixture set with `changes` to the fields of case `index`."""
    cases = [dict(case) for case in COSER_SET]
    cases[index].update(changes)
    return text_file("test_set.json", json.dumps(cases))


def instructions(*records):
    """An instructions file for `rolellm generate rolegpt` and the mini release beside it; returns the file."""

    def build(tmp_path):
        write_mini_release(tmp_path / "release")
        return jsonl("instructions.jsonl", *records)(tmp_path)

    return build


ROLEGPT = ("generate", "rolegpt", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--profiles",
           "{dir}/release", "--lang", "en", "--roles", "Ada Quill", "--instructions", "{path}",
           "--output_dir", "{dir}/out", "--dry_run")  # fmt: skip


DIALOGUE_SCENES = [Scenario("Po", f"Scene {i}", f"Student {i}", f"Teach me {i}!", num_turns=2) for i in range(2)]
DIALOGUE_PROFILES = {"Po": RoleProfile("Po", "en", "A panda.")}


def dialogue_run(edit):
    """A finished `run_dialogues` folder (4 turns in `turns.jsonl`, from a real server), its log's lines changed by
    `edit(lines) -> text` (or `dialogue_config.json` when `edit` is a string); returns the folder."""

    def build(tmp_path):
        folder = tmp_path / "run"
        with ChatCompletionsServer(lambda body: f"reply {len(body['messages'])}") as server:
            client = OpenAIChatClient("m", base_url=server.base_url, progress=False, max_retries=0)
            run_dialogues(DIALOGUE_SCENES, DIALOGUE_PROFILES, client, client, folder)
        if isinstance(edit, str):
            (folder / "dialogue_config.json").write_text(edit, encoding="utf-8")
        else:
            log = folder / "turns.jsonl"
            text = edit(log.read_text(encoding="utf-8").splitlines(keepends=True))
            log.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
        return folder

    return build


def resume_dialogues(folder):
    """Resume the run in `folder` against an endpoint that is not there: the saved log is read before any request."""
    client = OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", progress=False, max_retries=0)
    return run_dialogues(DIALOGUE_SCENES, DIALOGUE_PROFILES, client, client, folder)


TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"


def tokenizer_folder(template=TEMPLATE, edit=None):
    """A tiny real tokenizer saved with `template` as its chat template, changed by `edit(folder)`; returns the
    folder."""

    def build(tmp_path):
        from rolellm.testing.models import train_tiny_tokenizer

        tokenizer = train_tiny_tokenizer(vocab_size=300)
        tokenizer.chat_template = template
        tokenizer.save_pretrained(tmp_path / "tok")
        if edit is not None:
            edit(tmp_path / "tok")
        return tmp_path / "tok"

    return build


def evaluate_log(text):
    """The mini release and an `out/generations.jsonl` of `text` beside it, as a killed `rolellm evaluate` run of
    EVALUATE_RUN leaves it; returns the release folder."""

    def build(tmp_path):
        root = write_mini_release(tmp_path / "release")
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "generations.jsonl").write_text(text, encoding="utf-8")
        return root

    return build


EVALUATE_RUN = ("evaluate", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--output_dir", "{dir}/out",
                "--data_dir", "{path}", "--profiles", "{path}", "--dataset_name", "zh-general")  # fmt: skip
ZH_ANSWER = {"index": 0, "role": "说书人", "subset": "general", "question": "x", "prediction": "A"}


def judge_run(result, name="scores.json"):
    """A results folder `res/` holding `name` (a dict is written as JSON) and a human label file `h.jsonl` of item
    `a` beside it; returns the label file."""

    def build(tmp_path):
        (tmp_path / "res").mkdir()
        (tmp_path / "res" / name).write_text(
            result if isinstance(result, str) else json.dumps(result), encoding="utf-8"
        )
        return jsonl("h.jsonl", {"id": "a", "scores": {"style": 4}}, {"id": 0, "choice": "win"})(tmp_path)

    return build


AGREEMENT = ("judge", "agreement", "--human", "{path}", "--results", "{dir}/res", "--output", "{dir}/agreement.json")


CONTEXT_INSTRUCT = ("generate", "context-instruct", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--profiles", "{path}", "--lang", "en",
                    "--output_dir", "{dir}/out", "--dry_run")  # fmt: skip
DESCRIBE = ("generate", "describe", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--profiles", "{path}", "--lang", "en", "--output_dir",
            "{dir}/out", "--dry_run")  # fmt: skip


def with_raw(build, rel, raw):
    """`build`, then the file `rel` (beside what `build` returned) holding `raw` bytes; returns what `build` did."""

    def wrapped(tmp_path):
        path = build(tmp_path)
        target = path.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(raw)
        return path

    return wrapped


def dead_link(build, rel):
    """`build`, then `rel` (beside what `build` returned) a link to a file that is not there."""

    def wrapped(tmp_path):
        path = build(tmp_path)
        (path.parent / rel).symlink_to(tmp_path / "gone")
        return path

    return wrapped


CHAT_LOCAL = ("chat", "--model", "{path}", "--backend", "local", "--profiles", "{dir}/release", "--lang", "en", "--role",
              "Ada Quill")  # fmt: skip
BASE_ROWS = [{"subset": "general", "role": "Po", "question": " Who are you?"}]
BASE_ANSWER = (json.dumps({**BASE_ROWS[0], "index": 0, "prediction": "The Dragon Warrior!"}) + "\n").encode()


def baseline_run(generations, results=None):
    """The mini release and a `base/` folder of another run (`generations.jsonl`, and `results.json` when given)
    beside it; returns the release folder."""

    def build(tmp_path):
        root = write_mini_release(tmp_path / "release")
        (tmp_path / "base").mkdir()
        (tmp_path / "base" / "generations.jsonl").write_bytes(generations)
        if results is not None:
            (tmp_path / "base" / "results.json").write_bytes(results)
        return root

    return build


def baseline_answers(root):
    return read_predictions_folder(root.parent / "base", BASE_ROWS)


BASELINE_RUN = (*EVALUATE_RUN, "--judge_model", "j", "--baseline", "{dir}/base")
COMPARED = {
    "model": "x",
    "dataset_name": "zh-general",
    "avg_over": ["CUS"],
    "metrics": {"CUS": 0.1, "RAW": None, "SPE": None, "avg": 0.1},
}


def compared_run(result):
    """The mini release and `other.json` (another run's results) beside it; returns the release folder."""
    return with_raw(mini_release(), "other.json", result if isinstance(result, bytes) else json.dumps(result).encode())


def saved_usage(folder):
    """Save a run's metadata into `folder` (after `generation_stats.json` of earlier runs) and return the stats."""
    client = OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", progress=False)
    save_generation_metadata(folder, ProfileDescriptionConfig(), client, {"usage": {"requests": 2}})
    return json.loads((folder / "generation_stats.json").read_text(encoding="utf-8"))


CASES = [
    # --- RoleBench rows files -------------------------------------------------------------------------------------
    ("rows-truncated-line", rows_file(ROW, '{"role": "Po", "question": " Hi'), general_rows,
     error(r"rows\.jsonl:2: not valid JSON \(the line looks truncated\)")),
    ("rows-not-json", rows_file("hello there"), general_rows, error(r"rows\.jsonl:1: not valid JSON")),
    ("rows-trailing-comma", rows_file('{"role": "Po", "question": "Hi", "generated": ["A"],}'), general_rows,
     error(r"rows\.jsonl:1: not valid JSON")),
    ("rows-two-objects-on-a-line", rows_file(json.dumps(ROW) + json.dumps(ROW)), general_rows,
     error(r"rows\.jsonl:1: not valid JSON")),
    ("rows-array-line", rows_file("[1, 2]"), general_rows, error(r"rows\.jsonl:1: expected a JSON object, got list")),
    ("rows-string-line", rows_file('"Po"'), general_rows, error(r"rows\.jsonl:1: expected a JSON object, got str")),
    ("rows-null-line", rows_file("null"), general_rows,
     error(r"rows\.jsonl:1: expected a JSON object, got NoneType")),
    ("rows-missing-role", rows_file({k: v for k, v in ROW.items() if k != "role"}), general_rows,
     error(r"rows\.jsonl:1: field 'role' is missing")),
    ("rows-missing-question", rows_file({k: v for k, v in ROW.items() if k != "question"}), general_rows,
     error(r"rows\.jsonl:1: field 'question' is missing")),
    ("rows-missing-generated", rows_file({k: v for k, v in ROW.items() if k != "generated"}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' is missing")),
    ("rows-role-int", rows_file({**ROW, "role": 7}), general_rows,
     error(r"rows\.jsonl:1: field 'role' must be a string, got int")),
    ("rows-role-object", rows_file({**ROW, "role": {"name": "Po"}}), general_rows,
     error(r"rows\.jsonl:1: field 'role' must be a string, got dict")),
    ("rows-question-null", rows_file({**ROW, "question": None}), general_rows,
     error(r"rows\.jsonl:1: field 'question' must be a string, got NoneType")),
    ("rows-question-number", rows_file({**ROW, "question": 3.5}), general_rows,
     error(r"rows\.jsonl:1: field 'question' must be a string, got float")),
    ("rows-generated-string", rows_file({**ROW, "generated": "Skadoosh"}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' must be a list of strings, got str .*wrap a single answer")),
    ("rows-generated-int-item", rows_file({**ROW, "generated": ["A", 2]}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' must be a list of strings, got list")),
    ("rows-generated-nested", rows_file({**ROW, "generated": [["A"]]}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' must be a list of strings")),
    ("rows-generated-empty", rows_file({**ROW, "generated": []}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' is an empty list")),
    ("rows-question-empty", rows_file(ROW, {**ROW, "question": ""}), general_rows,
     error(r"rows\.jsonl:2: field 'question' is empty")),
    ("rows-question-blank", rows_file({**ROW, "question": " \t "}), general_rows,
     error(r"rows\.jsonl:1: field 'question' is empty")),
    ("rows-answer-blank", rows_file({**ROW, "generated": ["A", "  "]}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' has empty answers at positions \[1\]")),
    ("rows-empty-file", text_file("rows.jsonl", ""), general_rows, error(r"rows\.jsonl: the file is empty")),
    ("rows-blank-file", text_file("rows.jsonl", "\n  \n\t\n"), general_rows, error(r"rows\.jsonl: the file is empty")),
    ("rows-bom", text_file("rows.jsonl", "\ufeff" + json.dumps(ROW) + "\n"), general_rows,
     accepted(lambda rows: rows[0]["role"] == "Po")),
    ("rows-crlf", text_file("rows.jsonl", json.dumps(ROW) + "\r\n" + json.dumps(ROW | {"role": "Tai Lung"}) + "\r\n"),
     general_rows, accepted(lambda rows: [r["role"] for r in rows] == ["Po", "Tai Lung"])),
    ("rows-bom-and-crlf", text_file("rows.jsonl", "\ufeff" + json.dumps(ROW) + "\r\n"), general_rows,
     accepted(lambda rows: rows[0]["generated"] == [" The Dragon Warrior!"])),
    ("rows-utf16-le", text_file("rows.jsonl", json.dumps(ROW) + "\n", encoding="utf-16"), general_rows,
     error(r"rows\.jsonl: UTF-16 text; save the file as UTF-8")),
    ("rows-utf16-be", text_file("rows.jsonl", "", raw=b"\xfe\xff" + (json.dumps(ROW) + "\n").encode("utf-16-be")),
     general_rows, error(r"rows\.jsonl: UTF-16 text")),
    ("rows-invalid-utf8", text_file("rows.jsonl", "", raw=(json.dumps(ROW) + "\n").encode() + b'{"role": "\xff"}\n'),
     general_rows, error(r"rows\.jsonl:2: not UTF-8 text \(byte \d+ is 0xff\)")),
    ("rows-latin1", text_file("rows.jsonl", json.dumps({**ROW, "role": "Zoé"}, ensure_ascii=False) + "\n",
                              encoding="latin-1"), general_rows, error(r"rows\.jsonl:1: not UTF-8 text")),
    ("rows-blank-lines-between", text_file("rows.jsonl", f"\n{json.dumps(ROW)}\n\n   \n{json.dumps(ROW | {'role': 'Shifu'})}\n"),
     general_rows, accepted(lambda rows: len(rows) == 2)),
    ("rows-no-final-newline", text_file("rows.jsonl", json.dumps(ROW)), general_rows,
     accepted(lambda rows: len(rows) == 1)),
    ("rows-line-separator-in-text", text_file("rows.jsonl", json.dumps({**ROW, "question": "A\u2028B\x85C"}, ensure_ascii=False) + "\n"),
     general_rows, accepted(lambda rows: rows[0]["question"] == "A\u2028B\x85C")),
    ("rows-cr-line-ends", text_file("rows.jsonl", json.dumps(ROW) + "\r" + json.dumps(ROW | {"role": "Shifu"}) + "\r"),
     general_rows, accepted(lambda rows: [r["role"] for r in rows] == ["Po", "Shifu"])),
    ("rows-null-answer", rows_file({**ROW, "generated": ["A", None]}), general_rows,
     error(r"rows\.jsonl:1: field 'generated' must be a list of strings")),
    ("rows-duplicate-keys", rows_file('{"role": "Tai Lung", "role": "Po", "question": "Hi?", "generated": ["A"]}'),
     general_rows, accepted(lambda rows: rows[0]["role"] == "Po")),
    ("rows-type-null-in-general", rows_file({**ROW, "type": None}), general_rows, accepted(lambda rows: rows[0]["type"] == [])),
    ("rows-type-some-rows-only", rows_file(TYPED, ROW | {"role": "Shifu"}), specific_rows,
     accepted(lambda rows: [r["type"] for r in rows] == [["script_agnostic"], []])),
    ("rows-type-mixed-kinds", rows_file(TYPED, ROW | {"role": "Shifu", "type": ["script_based"]}), specific_rows,
     accepted(lambda rows: [r["type"] for r in rows] == [["script_agnostic"], ["script_based"]])),
    ("rows-unicode-escapes", text_file("rows.jsonl", json.dumps({**ROW, "role": "李白"}) + "\n"), general_rows,
     accepted(lambda rows: rows[0]["role"] == "李白")),
    ("rows-extra-fields", rows_file({**ROW, "id": 3, "source": "x"}), general_rows,
     accepted(lambda rows: sorted(rows[0]) == ["generated", "lang", "question", "role", "subset", "type"])),
    ("rows-duplicate-role-question", rows_file(ROW, ROW | {"generated": ["Other"]}, ROW | {"role": "Shifu"}),
     general_rows, warns(r"rows\.jsonl: 1 of 3 rows repeat the role and question of an earlier row \(line 2 repeats line 1\)")),
    ("rows-duplicate-identical", rows_file(ROW, ROW, ROW, ROW | {"role": "Shifu"}, ROW | {"role": "Shifu"}),
     general_rows, warns(r"rows\.jsonl: 3 of 5 rows repeat .*line 2 repeats line 1, line 3 repeats line 1, line 5 repeats line 4")),
    ("rows-same-question-other-role", rows_file(ROW, ROW | {"role": "Shifu"}), general_rows,
     accepted(lambda rows: len(rows) == 2)),
    ("rows-type-in-general", rows_file(TYPED), general_rows,
     error(r"rows\.jsonl:1: field 'type' belongs to role_specific rows")),
    ("rows-type-list-in-general", rows_file({**ROW, "type": ["script_based"]}), general_rows,
     error(r"rows\.jsonl:1: field 'type' belongs to role_specific rows")),
    ("rows-type-string", rows_file(TYPED | {"generated": ["A", "B"]}), specific_rows,
     accepted(lambda rows: rows[0]["type"] == ["script_agnostic", "script_agnostic"])),
    ("rows-type-parallel-list", rows_file(TYPED | {"generated": ["A", "B"], "type": ["script_based", "script_agnostic"]}),
     specific_rows, accepted(lambda rows: rows[0]["type"] == ["script_based", "script_agnostic"])),
    ("rows-type-absent-in-role-specific", rows_file(ROW), specific_rows, accepted(lambda rows: rows[0]["type"] == [])),
    ("rows-type-unknown-value", rows_file(TYPED | {"type": "script"}), specific_rows,
     error(r"rows\.jsonl:1: field 'type' has 'script'; expected one of")),
    ("rows-type-list-too-short", rows_file(TYPED | {"generated": ["A", "B"], "type": ["script_based"]}), specific_rows,
     error(r"rows\.jsonl:1: field 'type' must be a string or a list with one entry per reference \(2\)")),
    ("rows-type-int", rows_file(TYPED | {"type": 1}), specific_rows,
     error(r"rows\.jsonl:1: field 'type' must be a string or a list")),
    ("rows-type-list-unknown-entry", rows_file(TYPED | {"type": ["scripted"]}), specific_rows,
     error(r"rows\.jsonl:1: field 'type' has 'scripted'")),
    ("rows-error-on-a-late-line", rows_file(*[ROW | {"role": f"R{i}"} for i in range(40)], {**ROW, "role": None}),
     general_rows, error(r"rows\.jsonl:41: field 'role' must be a string")),
    ("rows-missing-file", lambda tmp_path: tmp_path / "nothing.jsonl", general_rows, error(r"nothing\.jsonl")),
    ("rows-a-folder", lambda tmp_path: tmp_path, general_rows, error(r"Is a directory")),
    ("rows-unknown-subset", rows_file(ROW), lambda path: read_rolebench_jsonl(path, "generic", "en"),
     error(r"subset must be one of \('general', 'role_specific'\), got 'generic'")),
    ("rows-unknown-lang", rows_file(ROW), lambda path: read_rolebench_jsonl(path, "general", "fr"),
     error(r"lang must be one of \('en', 'zh'\), got 'fr'")),
    # --- release folders ------------------------------------------------------------------------------------------
    ("release-empty-folder", lambda tmp_path: tmp_path, build_config("zh-general"),
     error(r"RoleBench config 'zh-general' needs 3 file\(s\) missing from .*Complete configs in this folder: none")),
    ("release-missing-test", mini_release(remove("rolebench-zh/general/test.jsonl")), build_config("zh-general"),
     error(r"needs 1 file\(s\) missing .*\n  - rolebench-zh/general/test\.jsonl")),
    ("release-missing-test-other-splits", mini_release(remove("rolebench-zh/general/test.jsonl")),
     build_config("zh-general", splits=["train", "rolegpt_baseline"]), accepted(lambda d: sorted(d) == ["rolegpt_baseline", "train"])),
    ("release-missing-role-specific-part", mini_release(remove("rolebench-zh/role_specific/train.jsonl")),
     build_config("zh"), error(r"rolebench-zh/role_specific/train\.jsonl")),
    ("release-missing-desc", mini_release(remove("profiles-zh/desc.json")), build_config("profiles-zh"),
     error(r"desc\.json")),
    ("release-bad-row-unwrapped", mini_release(append(ZH_TRAIN, '{"role": "说书人", "question": 5}\n')),
     build_config("zh-general"), error(r"train\.jsonl:5: field 'generated' is missing \(fields found: \['question', 'role'\]\)")),
    ("release-empty-file", mini_release(write(ZH_TRAIN, "")), build_config("zh-general"),
     error(r"general/train\.jsonl: the file is empty")),
    ("release-invalid-utf8", mini_release(write(ZH_TRAIN, b'{"role": "\xe8"}\n')), build_config("zh-general"),
     error(r"general/train\.jsonl:1: not UTF-8 text")),
    ("release-duplicate-rows", mini_release(lambda root: append(ZH_TRAIN, (root / ZH_TRAIN).read_text().splitlines()[0] + "\n")(root)),
     build_config("zh-general"), warns(r"general/train\.jsonl: 1 of \d+ rows repeat the role and question")),
    ("release-type-in-general", mini_release(append(ZH_TRAIN, json.dumps({**TYPED, "role": "说书人"}) + "\n")),
     build_config("zh-general"), error(r"train\.jsonl:\d+: field 'type' belongs to role_specific rows")),
    ("release-bom-and-crlf", mini_release(lambda root: write(ZH_TRAIN, "\ufeff" + (root / ZH_TRAIN).read_text().replace("\n", "\r\n"))(root)),
     build_config("zh-general"), accepted(lambda d: d["train"].num_rows == 4 and "\r" not in "".join(d["train"]["question"]))),
    ("release-complete", mini_release(), build_config("zh"), accepted(lambda d: d["test"].num_rows == 4)),
    ("release-preference-empty-file", mini_release(write("rolebench-zh/preference/train.jsonl", "")),
     build_config("zh-preference"), error(r"preference/train\.jsonl: the file is empty")),
    ("release-unpaired-label-a-string", mini_release(write("rolebench-zh/unpaired/train.jsonl", json.dumps(
        {"role": "说书人", "question": "你好", "completion": "列位看官", "label": "true"}) + "\n")),
     build_config("zh-unpaired"), error(r"unpaired/train\.jsonl:1: field 'label' must be a bool, got 'true'")),
    ("release-preference-a-list-line", mini_release(append("rolebench-zh/preference/train.jsonl", "[1]\n")),
     build_config("zh-preference"), error(r"preference/train\.jsonl:\d+: expected a JSON object, got list")),
    # --- profile files and desc.json ------------------------------------------------------------------------------
    ("profile-line-missing-act", jsonl("Po.jsonl", {"diag_id": 0, "role": "Po", "content": "Hi"}), profile_lines,
     error(r"Po\.jsonl:1: field 'act_id' is missing")),
    ("profile-line-act-string", jsonl("Po.jsonl", {"act_id": "1", "diag_id": 0, "role": "Po", "content": "Hi"}),
     profile_lines, error(r"Po\.jsonl:1: field 'act_id' must be int, got str")),
    ("profile-line-act-bool", jsonl("Po.jsonl", {"act_id": True, "diag_id": 0, "role": "Po", "content": "Hi"}),
     profile_lines, error(r"Po\.jsonl:1: field 'act_id' must be int, got bool")),
    ("profile-line-content-null", jsonl("Po.jsonl", {"act_id": 0, "diag_id": 0, "role": "Po", "content": None}),
     profile_lines, error(r"Po\.jsonl:1: field 'content' must be str")),
    ("profile-line-bad-json", jsonl("Po.jsonl", '{"act_id": 0,'), profile_lines, error(r"Po\.jsonl:1: not valid JSON")),
    ("profile-line-invalid-utf8", text_file("Po.jsonl", "", raw=b'{"act_id": 0, "content": "\xc3"}\n'), profile_lines,
     error(r"Po\.jsonl:1: not UTF-8 text")),
    ("profile-empty-file", text_file("Po.jsonl", ""), profile_lines, warns(r"Po\.jsonl is empty: the profile of 'Po'")),
    ("profile-crlf-bom", text_file("Po.jsonl", "\ufeff" + json.dumps({"act_id": 0, "diag_id": 0, "role": "Po", "content": "Hi"}) + "\r\n"),
     profile_lines, accepted(lambda p: [u.content for u in p.dialogue] == ["Hi"])),
    ("desc-missing", lambda tmp_path: (tmp_path / "profiles-eng").mkdir() or tmp_path, profiles_en,
     error(r"desc\.json not found: a profiles folder needs desc\.json")),
    ("desc-bad-json", text_file("profiles-eng/desc.json", '{\n  "Po": "A panda.",\n  "Shifu"\n}'),
     lambda p: profiles_en(p.parent), error(r"desc\.json:4: not valid JSON \(Expecting ':' delimiter, column 1\)")),
    ("desc-a-list", text_file("profiles-eng/desc.json", '["Po"]'), lambda p: profiles_en(p.parent),
     error(r"desc\.json: expected a JSON object of role -> text, got list")),
    ("desc-value-not-string", text_file("profiles-eng/desc.json", '{"Po": 3}'), lambda p: profiles_en(p.parent),
     error(r"desc\.json: the value of 'Po' must be a string, got int")),
    ("desc-empty", text_file("profiles-eng/desc.json", ""), lambda p: profiles_en(p.parent), warns(r"desc\.json is empty")),
    ("desc-utf16", text_file("profiles-eng/desc.json", '{"Po": "A panda."}', encoding="utf-16"),
     lambda p: profiles_en(p.parent), error(r"desc\.json: UTF-16 text")),
    ("desc-bom", text_file("profiles-eng/desc.json", '\ufeff{"Po": "A panda."}'), lambda p: profiles_en(p.parent),
     accepted(lambda profiles: profiles["Po"].description == "A panda.")),
    ("scripts-json-bad", lambda tmp_path: text_file("profiles-eng/scripts.json", "{oops")(tmp_path) and
     text_file("profiles-eng/desc.json", '{"Po": "A panda."}')(tmp_path).parent, profiles_en,
     error(r"scripts\.json:1: not valid JSON")),
    ("generated-json-bad", lambda tmp_path: text_file("profiles-eng/generated.json", '["Po"]')(tmp_path) and
     text_file("profiles-eng/desc.json", '{"Po": "A panda."}')(tmp_path).parent, profiles_en,
     error(r"generated\.json: expected \{\"generated\"")),
    ("desc-role-twice", text_file("profiles-eng/desc.json", '{"Po": "A panda.", "Shifu": "A master.", "Po": "Other."}'),
     lambda p: profiles_en(p.parent), error(r"desc\.json: 'Po' is given twice; keep one entry per role")),
    ("dialogue-without-desc-entry", lambda tmp_path: text_file(
        "profiles-eng/profiles-eng-Tai Lung.jsonl",
        json.dumps({"act_id": 0, "diag_id": 0, "role": "Tai Lung", "content": "Where is the scroll?"}) + "\n",
    )(tmp_path) and text_file("profiles-eng/desc.json", '{"Po": "A panda."}')(tmp_path).parent, profiles_en,
     warns(r"profiles-eng-Tai Lung\.jsonl: 'Tai Lung' has no entry in desc\.json")),
    # --- screenplays ----------------------------------------------------------------------------------------------
    ("screenplay-empty", text_file("kfp.txt", ""), screenplay_po, error(r"kfp\.txt: the file is empty")),
    ("screenplay-invalid-utf8", text_file("kfp.txt", "", raw=b"INT. PALACE - DAY\n\n          PO\n     Hi \xff\n"),
     screenplay_po, error(r"kfp\.txt:4: not UTF-8 text")),
    ("screenplay-utf16", text_file("kfp.txt", "INT. PALACE - DAY\n\n          PO\n     Hi\n", encoding="utf-16"),
     screenplay_po, error(r"kfp\.txt: UTF-16 text")),
    ("screenplay-role-absent", text_file("kfp.txt", "INT. PALACE - DAY\n\n          SHIFU\n     Focus.\n"),
     screenplay_po, error(r"kfp\.txt: no line of 'Po' \(cues found: SHIFU\)")),
    ("screenplay-no-dialogue", text_file("kfp.txt", '{"role": "Po"}\n'), screenplay_po,
     error(r"kfp\.txt: no line of 'Po' \(no speaker cue found")),
    ("screenplay-crlf-bom", text_file("kfp.txt", "\ufeffINT. PALACE - DAY\r\n\r\n          PO\r\n     Skadoosh!\r\n"),
     screenplay_po, accepted(lambda p: [u.content for u in p.dialogue if u.speaker == "Po"] == ["Skadoosh!"])),
    # --- Character Cards ------------------------------------------------------------------------------------------
    ("card-bad-json", text_file("po.json", '{"spec": "chara_card_v2",\n "data": {'), read_character_card,
     error(r"po\.json:2: not valid JSON")),
    ("card-a-list", text_file("po.json", "[]"), read_character_card, error(r"po\.json: a character card must be a JSON object")),
    ("card-wrong-spec", text_file("po.json", json.dumps({**CARD, "spec": "chara_card_v9"})), read_character_card,
     error(r"po\.json: field 'spec' is 'chara_card_v9'; expected one of")),
    ("card-v1-flat", text_file("po.json", json.dumps({"name": "Po", "description": "A panda."})), read_character_card,
     error(r"po\.json: field 'spec' is None.*V1 cards")),
    ("card-no-name", text_file("po.json", json.dumps({**CARD, "data": {"description": "x"}})), read_character_card,
     error(r"po\.json: field 'data\.name' is missing or empty")),
    ("card-description-not-string", text_file("po.json", json.dumps({**CARD, "data": {"name": "Po", "description": 1}})),
     read_character_card, error(r"po\.json: field 'data\.description' must be a string, got int")),
    ("card-empty", text_file("po.json", ""), read_character_card, error(r"po\.json: the file is empty")),
    ("card-utf16", text_file("po.json", json.dumps(CARD), encoding="utf-16"), read_character_card,
     error(r"po\.json: UTF-16 text")),
    ("card-bom-crlf", text_file("po.json", "\ufeff" + json.dumps(CARD, indent=2).replace("\n", "\r\n")),
     read_character_card, accepted(lambda p: p.name == "Po" and p.description == "A kung fu panda.")),
    ("card-png-ok", text_file("po.png", "", raw=png_bytes(card_chunk())), read_character_card,
     accepted(lambda p: p.name == "Po")),
    ("card-png-truncated", text_file("po.png", "", raw=png_bytes(card_chunk())[:-30]), read_character_card,
     error(r"po\.png: truncated PNG")),
    ("card-png-header-only", text_file("po.png", "", raw=b"\x89PNG\r\n\x1a\n"), read_character_card,
     error(r"po\.png: truncated PNG \(no IEND chunk\)")),
    ("card-png-no-card", text_file("po.png", "", raw=png_bytes()), read_character_card,
     error(r"po\.png: a PNG without a character card")),
    ("card-png-bad-base64", text_file("po.png", "", raw=png_bytes((b"tEXt", b"chara\0!!not base64!!"))),
     read_character_card, error(r"po\.png: the 'chara' chunk is not base64 UTF-8 JSON")),
    ("card-png-base64-not-json", text_file("po.png", "", raw=png_bytes((b"tEXt", b"chara\0" + base64.b64encode(b"hello")))),
     read_character_card, error(r"po\.png:1: not valid JSON")),
    ("card-png-bad-ztxt", text_file("po.png", "", raw=png_bytes((b"zTXt", b"chara\0\0not zlib"))), read_character_card,
     error(r"po\.png: the zTXt chunk at byte \d+ cannot be read")),
    ("card-png-wrong-spec", text_file("po.png", "", raw=png_bytes(card_chunk({**CARD, "spec": "v1"}))),
     read_character_card, error(r"po\.png: field 'spec' is 'v1'")),
    ("card-png-bad-crc", text_file("po.png", "", raw=png_bytes((*card_chunk(), False))), read_character_card,
     error(r"po\.png: the tEXt chunk at byte \d+ fails its CRC check")),
    ("card-v2-first-mes-a-number", text_file("po.json", json.dumps({**CARD, "data": {**CARD["data"], "first_mes": 3}})),
     read_character_card, error(r"po\.json: field 'data\.first_mes' must be a string, got int: 3")),
    ("card-v3-scenario-an-object", text_file("po.json", json.dumps({**CARD, "spec": "chara_card_v3", "spec_version": "3.0",
                                                                     "data": {**CARD["data"], "scenario": {"a": 1}}})),
     read_character_card, error(r"po\.json: field 'data\.scenario' must be a string, got dict")),
    ("card-greetings-a-string", text_file("po.json", json.dumps({**CARD, "data": {**CARD["data"], "alternate_greetings": "Hi"}})),
     read_character_card, error(r"po\.json: field 'data\.alternate_greetings' must be a list of strings, got str")),
    ("card-lorebook-entry-content", text_file("po.json", json.dumps({**CARD, "data": {**CARD["data"], "character_book": {
        "entries": [{"keys": ["noodle"], "content": "Noodles."}, {"keys": ["dad"], "content": 2}]}}})),
     read_character_card, error(r"po\.json: field 'data\.character_book\.entries\[1\]\.content' must be a string")),
    ("card-extensions-a-list", text_file("po.json", json.dumps({**CARD, "data": {**CARD["data"], "extensions": []}})),
     read_character_card, error(r"po\.json: field 'data\.extensions' must be an object, got list")),
    ("card-name-null", text_file("po.json", json.dumps({**CARD, "data": {"name": None}})), read_character_card,
     error(r"po\.json: field 'data\.name' is missing or empty")),
    ("card-null-fields", text_file("po.json", json.dumps({**CARD, "data": {**CARD["data"], "personality": None, "tags": None}})),
     read_character_card, accepted(lambda p: p.name == "Po")),
    ("card-nested-too-deeply", text_file("po.json", "[" * 100_000 + "]" * 100_000), read_character_card,
     error(r"po\.json: a JSON value nested too deeply")),
    ("cards-folder-one-role-twice", lambda tmp_path: text_file("cards/po.json", json.dumps(CARD))(tmp_path) and text_file(
        "cards/po-copy.json", json.dumps({**CARD, "data": {"name": "po", "description": "Another."}}))(tmp_path).parent,
     lambda folder: profiles_for([str(folder)]), error(r"cards/po\.json and .*cards/po-copy\.json are cards of one role")),
    ("card-png-two-cards", text_file("po.png", "", raw=png_bytes(card_chunk(), card_chunk({**CARD, "data": {"name": "Shifu"}}))),
     read_character_card, error(r"po\.png: two 'chara' text chunks")),
    ("desc-one-role-two-spellings", text_file("profiles-eng/desc.json", '{"Dr. Frank-N-Furter": "A.", "Dr. Frank N Furter": "B."}'),
     lambda p: profiles_en(p.parent), error(r"desc\.json: 'Dr\. Frank-N-Furter' and 'Dr\. Frank N Furter' name one role")),
    ("desc-empty-role-name", text_file("profiles-eng/desc.json", '{"": "A panda."}'), lambda p: profiles_en(p.parent),
     error(r"desc\.json: a role name is empty")),
    ("desc-a-folder", lambda tmp_path: (tmp_path / "profiles-eng" / "desc.json").mkdir(parents=True) or tmp_path, profiles_en,
     error(r"desc\.json is a folder")),
    ("desc-nested-too-deeply", text_file("profiles-eng/desc.json", "[" * 100_000 + "]" * 100_000),
     lambda p: profiles_en(p.parent), error(r"desc\.json: a JSON value nested too deeply")),
    ("dialogue-two-files-one-role", lambda tmp_path: [text_file(f"profiles-eng/profiles-eng-{name}.jsonl", json.dumps(
        {"act_id": 0, "diag_id": 0, "role": "Po", "content": "Hi"}) + "\n")(tmp_path) for name in ("Po", "po")] and
     text_file("profiles-eng/desc.json", '{"Po": "A panda."}')(tmp_path).parent.parent, profiles_en,
     error(r"profiles-eng-(Po|po)\.jsonl and .*profiles-eng-(Po|po)\.jsonl hold the dialogue of one role \('Po'\)")),
    # --- recipes --------------------------------------------------------------------------------------------------
    ("recipe-yaml-error", recipe("model_name_or_path: rolegpt\n  dataset_name: [zh\n"), cli(*EVALUATE),
     error(r"rolellm evaluate: .*recipe\.yaml: not valid YAML: .* line 2")),
    ("recipe-a-list", recipe("- model_name_or_path\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: a recipe must be a YAML mapping of fields, got list")),
    ("recipe-unknown-key", recipe(GOOD_RECIPE + "learning_rat: 3\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: unknown keys \['learning_rat'\]")),
    ("recipe-api-key", recipe(GOOD_RECIPE + "api_key: sk-123\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: never put an API key in a recipe")),
    ("recipe-bad-choice", recipe(GOOD_RECIPE + "mode: three_shot\n"), cli(*EVALUATE), error(r"recipe\.yaml: mode: 'three_shot' is not one of \['system', 'no-system'")),
    ("recipe-bad-int", recipe(GOOD_RECIPE + "max_new_tokens: lots\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: max_new_tokens must be int, got 'lots'")),
    ("recipe-float-for-int", recipe(GOOD_RECIPE + "num_examples: 2.5\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: num_examples must be int, got 2\.5")),
    ("recipe-generate-bad-backend", recipe("model: m\nbackend: tgi\noutput_dir: o\nprofiles: p\ninstructions: i\n"),
     cli(*GENERATE), error(r"backend='tgi' is not one of \['openai', 'local', 'vllm', 'ray', 'llamacpp'\], nor the dotted")),
    ("recipe-bad-config-name", recipe("model_name_or_path: rolegpt\ndataset_name: english\noutput_dir: out\n"),
     cli(*EVALUATE), error(r"unknown RoleBench config 'english'")),
    ("recipe-invalid-utf8", recipe("", raw=b"model_name_or_path: rolegpt\noutput_dir: \xff\n"), cli(*EVALUATE),
     error(r"recipe\.yaml:2: not UTF-8 text")),
    ("recipe-utf16", recipe(GOOD_RECIPE.encode("utf-16").decode("latin-1"), raw=GOOD_RECIPE.encode("utf-16")),
     cli(*EVALUATE), error(r"recipe\.yaml: UTF-16 text")),
    ("recipe-missing", lambda tmp_path: tmp_path / "none.yaml", cli(*GENERATE), error(r"none\.yaml")),
    ("recipe-generate-unknown-key", recipe("model: m\nmodle: x\n"), cli(*GENERATE),
     error(r"recipe\.yaml: unknown keys \['modle'\]")),
    # --- scenario files -------------------------------------------------------------------------------------------
    ("scenario-yaml-error", text_file("s.yaml", "- role: Po\n  situation: [unclosed\n"), read_scenarios,
     error(r"s\.yaml: not valid YAML")),
    ("scenario-not-a-list", text_file("s.yaml", "role: Po\n"), read_scenarios,
     error(r"s\.yaml:1: expected a YAML list of scenarios")),
    ("scenario-unknown-field", text_file("s.yaml", SCENARIO + "  mood: happy\n"), read_scenarios,
     error(r"s\.yaml:1: unknown fields \['mood'\]")),
    ("scenario-no-opening-line", text_file("s.yaml", "- role: Po\n  situation: Training day.\n  user_persona: A student.\n"), read_scenarios,
     error(r"s\.yaml:1: field 'opening_line' is missing")),
    ("scenario-turns-zero", text_file("s.yaml", SCENARIO.replace("num_turns: 2", "num_turns: 0")), read_scenarios,
     error(r"s\.yaml:1: field 'num_turns' must be a positive integer, got 0")),
    ("scenario-lang-fr", text_file("s.yaml", SCENARIO + "  lang: fr\n"), read_scenarios,
     error(r"s\.yaml:1: field 'lang' must be 'en' or 'zh'")),
    ("scenario-second-item-bad", text_file("s.yaml", SCENARIO + "- role: 3\n  situation: x\n  user_persona: z\n  opening_line: y\n"),
     read_scenarios, error(r"s\.yaml:6: field 'role' must be a non-empty string")),
    ("scenario-jsonl-bad-json", jsonl("s.jsonl", '{"role": "Po"'), read_scenarios, error(r"s\.jsonl:1: not valid JSON")),
    ("scenario-jsonl-item-not-object", jsonl("s.jsonl", "[1]"), read_scenarios, error(r"s\.jsonl:1: expected a JSON object")),
    ("scenario-txt-suffix", text_file("s.txt", SCENARIO), read_scenarios, error(r"s\.txt: a scenario file ends in")),
    ("scenario-empty", text_file("s.yaml", ""), read_scenarios, error(r"s\.yaml")),
    ("scenario-invalid-utf8", text_file("s.yaml", "", raw=SCENARIO.encode() + b"- role: \xff\n"), read_scenarios,
     error(r"s\.yaml:6: not UTF-8 text")),
    ("scenario-utf16", text_file("s.yaml", SCENARIO, encoding="utf-16"), read_scenarios, error(r"s\.yaml: UTF-16 text")),
    ("scenario-bom-crlf", text_file("s.yaml", "\ufeff" + SCENARIO.replace("\n", "\r\n")), read_scenarios,
     accepted(lambda s: s[0].opening_line == "Teach me!" and s[0].num_turns == 2)),
    # --- a dialogue run's log and settings, resumed (`evaluation.runlog.read_log`, `check_run`) ---------------------
    ("dialogue-log-bad-middle-line", dialogue_run(lambda lines: lines[0] + "{oops\n" + "".join(lines[1:])), resume_dialogues,
     error(r"run/turns\.jsonl:2: not valid JSON")),
    ("dialogue-log-a-list-line", dialogue_run(lambda lines: "".join(lines) + "[1]\n"), resume_dialogues,
     error(r"run/turns\.jsonl:5: expected a JSON object, got list")),
    ("dialogue-log-record-without-turn", dialogue_run(lambda lines: lines[0] + json.dumps({"id": json.loads(lines[1])["id"]}) + "\n"),
     resume_dialogues, error(r"run/turns\.jsonl:2: field 'turn' is missing: not a record of this log")),
    ("dialogue-log-invalid-utf8", dialogue_run(lambda lines: "".join(lines).encode() + b'{"id": "\xff"}\n'),
     resume_dialogues, error(r"run/turns\.jsonl:5: not UTF-8 text")),
    ("dialogue-log-torn-last-line", dialogue_run(lambda lines: "".join(lines[:3]) + lines[3][:20]),
     lambda folder: (resume_dialogues(folder), (folder / "turns.jsonl").read_text()), error(r"cannot reach|connection refused")),
    ("dialogue-settings-not-json", dialogue_run("{"), resume_dialogues,
     error(r"run/dialogue_config\.json:1: not valid JSON .*use a new output_dir")),
    ("dialogue-settings-a-list", dialogue_run("[]"), resume_dialogues,
     error(r"run/dialogue_config\.json: expected a JSON object of the run's settings, got list")),
    ("dialogue-scenario-file-absent-endpoint-dead", mini_release(),
     cli("dialogue", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--user_model", "u", "--profiles", "{path}",
         "--lang", "en", "--output_dir", "{dir}/out", "--scenarios", "{dir}/none.yaml"),
     error(r"none\.yaml: no such scenario file")),
    ("dialogue-scenario-role-unknown-endpoint-dead", lambda tmp_path: write_mini_release(tmp_path / "release") and text_file(
        "s.yaml", SCENARIO.replace("role: Po", "role: Nobody"))(tmp_path),
     cli("dialogue", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--user_model", "u", "--profiles",
         "{dir}/release", "--lang", "en", "--output_dir", "{dir}/out", "--scenarios", "{path}"),
     error(r"scenarios name roles with no profile: \['Nobody'\]")),
    ("dialogue-rubric-unknown", mini_release(), cli("dialogue", "--model", "m", "--user_model", "u", "--profiles", "{path}",
                                                   "--output_dir", "{dir}/out", "--rubric", "mine"),
     error(r"--rubric: invalid choice: 'mine'")),
    ("evaluate-split-unknown", mini_release(), cli(*EVALUATE_RUN, "--split", "validation"),
     error(r"unknown split 'validation'; the splits of zh-general are train, test, rolegpt_baseline")),
    ("evaluate-zero-samples-per-role", mini_release(), cli(*EVALUATE_RUN, "--max_samples_per_role", "0"),
     error(r"max_samples_per_role=0 must be at least 1")),
    ("evaluate-role-unknown", mini_release(), cli(*EVALUATE_RUN, "--roles", "Nobody"),
     error(r"roles=\['Nobody'\] are not in the dataset; its roles are")),
    ("evaluate-dataset-name-typo", mini_release(), cli(*EVALUATE_RUN[:-1], "zh-genral"),
     error(r"unknown RoleBench config 'zh-genral'; did you mean 'zh-general'\? choose one of")),
    ("chat-role-unknown", mini_release(), cli("chat", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--profiles",
                                             "{path}", "--lang", "en", "--role", "Nobody"),
     error(r"rolellm chat: roles \['Nobody'\] are not in the profiles; roles found: \['Ada Quill'")),
    ("chat-stdin-empty", mini_release(), cli("chat", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--profiles",
                                            "{path}", "--lang", "en", "--role", "Ada Quill", stdin=""),
     error(r"^rolellm chat: no message was read: stdin is empty; give one message per line [^\n]* or run it in a terminal\n$")),
    # --- a killed rolellm evaluate run's answers, resumed (`benchmark.answers.GenerationLog`) -----------------------
    ("evaluate-data-dir-absent", mini_release(), cli(*EVALUATE_RUN[:-6], "--data_dir", "{dir}/nowhere", "--dataset_name", "zh"),
     error(r"data_dir .*nowhere: no such folder \(a RoleBench release folder")),
    ("evaluate-compare-with-a-folder-without-results", mini_release(), cli(*EVALUATE_RUN, "--compare_with", "{path}"),
     error(r"--compare_with .*release is a folder without results\.json")),
    ("evaluate-compare-with-truncated", lambda tmp_path: text_file("other/results.json", '{"model": "x", "met')(tmp_path)
     and mini_release()(tmp_path), cli(*EVALUATE_RUN, "--compare_with", "{dir}/other"),
     error(r"other/results\.json:1: not valid JSON")),
    ("evaluate-log-of-another-file", evaluate_log('{"a": 1}\n'), cli(*EVALUATE_RUN),
     error(r"out/generations\.jsonl:1: field 'index' must be int, got None: not an answer of rolellm evaluate")),
    ("evaluate-log-bad-middle-line", evaluate_log("{oops\n" + json.dumps(ZH_ANSWER) + "\n"), cli(*EVALUATE_RUN),
     error(r"out/generations\.jsonl:1: not valid JSON")),
    ("evaluate-log-negative-index", evaluate_log(json.dumps({**ZH_ANSWER, "index": -1}) + "\n"), cli(*EVALUATE_RUN),
     error(r"out/generations\.jsonl:1: row -1 is not the row this run selects")),
    # the torn line is dropped and the run goes on, to the dead endpoint (tried once)
    ("evaluate-log-torn-last-line", evaluate_log('{"index": 0, "ro'), cli(*EVALUATE_RUN, "--max_retries", "0"),
     error(r"cannot reach http://127\.0\.0\.1:9/v1", code=3)),
    # --- human labels ---------------------------------------------------------------------------------------------
    ("labels-id-bool", jsonl("h.jsonl", {"id": True, "choice": "win"}), read_human_labels,
     error(r"h\.jsonl:1: field 'id' must be a string or an integer")),
    ("labels-nothing-judged", jsonl("h.jsonl", {"id": "a"}), read_human_labels,
     error(r"h\.jsonl:1: a label needs 'scores'")),
    ("labels-scores-list", jsonl("h.jsonl", {"id": "a", "scores": [4]}), read_human_labels,
     error(r"h\.jsonl:1: field 'scores' must be an object, got list")),
    ("labels-score-string", jsonl("h.jsonl", {"id": "a", "scores": {"style": "4"}}), read_human_labels,
     error(r"h\.jsonl:1: field 'scores\.style' must be a number")),
    ("labels-score-nan", jsonl("h.jsonl", '{"id": "a", "scores": {"style": NaN}}'), read_human_labels,
     error(r"h\.jsonl:1: field 'scores\.style' must be a number, got nan")),
    ("labels-bad-choice", jsonl("h.jsonl", {"id": 1, "choice": "draw"}), read_human_labels,
     error(r"h\.jsonl:1: field 'choice' must be one of")),
    ("labels-empty", text_file("h.jsonl", "\n\n"), read_human_labels, error(r"h\.jsonl: no labels")),
    ("labels-bad-json", jsonl("h.jsonl", {"id": 1, "choice": "win"}, "{oops"), read_human_labels,
     error(r"h\.jsonl:2: not valid JSON")),
    ("labels-invalid-utf8", text_file("h.jsonl", "", raw=b'{"id": "\xfe", "choice": "win"}\n'), read_human_labels,
     error(r"h\.jsonl:1: not UTF-8 text")),
    ("labels-bom-crlf", text_file("h.jsonl", '\ufeff{"id": 1, "choice": "tie"}\r\n'), read_human_labels,
     accepted(lambda labels: labels[0]["choice"] == "tie")),
    ("labels-a-csv-file", text_file("h.csv", "id,style\na,4\n"), read_human_labels,
     error(r"--human .*h\.csv: a CSV file; human labels are JSONL")),
    ("judge-scores-without-items", judge_run({"itemz": []}), cli(*AGREEMENT),
     error(r"res/scores\.json: field 'items' is missing \(fields found: \['itemz'\]\)")),
    ("judge-scores-id-twice", judge_run({"items": [{"id": "a", "scores": {"style": 4}}, {"id": "a", "scores": {"style": 1}}]}),
     cli(*AGREEMENT), error(r"res/scores\.json: items\[1\]: id 'a' is also items\[0\]")),
    ("judge-outcome-unknown", judge_run({"win_rate": {"outcomes": ["win", "WIN"]}}, name="results.json"), cli(*AGREEMENT),
     error(r"res/results\.json: win_rate\.outcomes\[1\] must be one of \('win', 'tie', 'loss'\) or 'failed', got 'WIN'")),
    ("judge-no-common-id", judge_run({"items": [{"id": "x", "scores": {"style": 4}}]}), cli(*AGREEMENT),
     error(r"nothing to compare: none of the 2 human item ids \(0, a\.\.\.\) has a judge verdict .*\(its ids: x.*nothing was written")),
    ("judge-scores-truncated", judge_run('{"items": [{"id": "a", "sco'), cli(*AGREEMENT),
     error(r"res/scores\.json: not valid JSON \(line 1: .*was the run cut short")),
    # --- values JSON reads but Python cannot hold -----------------------------------------------------------------
    ("rows-deeply-nested", rows_file('{"role": "Po", "question": "Hi", "generated": ["A"], "x": '
                                     + "[" * 100_000 + "]" * 100_000 + "}"), general_rows,
     error(r"rows\.jsonl:1: a JSON value nested too deeply")),
    ("rows-huge-integer", rows_file('{"role": "Po", "question": ' + "9" * 5000 + ', "generated": ["A"]}'),
     general_rows, error(r"rows\.jsonl:1: not a readable JSON value: Exceeds the limit")),
    ("rows-lone-surrogate", rows_file('{"role": "Po", "question": "Hi \\ud800", "generated": ["A"]}'), general_rows,
     error(r"rows\.jsonl:1: a lone UTF-16 surrogate")),
    ("rows-surrogate-pair", rows_file('{"role": "Po", "question": "Hi \\ud83d\\ude00", "generated": ["A"]}'),
     general_rows, accepted(lambda rows: rows[0]["question"] == "Hi \U0001f600")),
    ("release-rows-file-is-a-folder", mini_release(lambda root: (root / ZH_TRAIN).unlink() or (root / ZH_TRAIN).mkdir()),
     build_config("zh-general"), error(r"general/train\.jsonl is a folder")),
    ("release-rows-file-is-a-link-loop",
     mini_release(lambda root: (root / ZH_TRAIN).unlink() or (root / ZH_TRAIN).symlink_to(root / ZH_TRAIN)),
     build_config("zh-general"), error(r"general/train\.jsonl is a link that leads nowhere")),
    ("data-export-rows-file-a-folder", mini_release(lambda root: (root / ZH_TRAIN).unlink() or (root / ZH_TRAIN).mkdir()),
     cli("data", "export", "{dir}/hub", "--data_dir", "{path}", "--configs", "zh-general"),
     error(r"rolellm data: .*general/train\.jsonl is a folder: RoleBench config 'zh-general' needs a JSON-lines file")),
    ("data-export-all-rows-file-a-link-loop",
     mini_release(lambda root: (root / ZH_TRAIN).unlink() or (root / ZH_TRAIN).symlink_to(root / ZH_TRAIN)),
     cli("data", "export", "{dir}/hub", "--data_dir", "{path}"),
     error(r"general/train\.jsonl is a link that leads nowhere \(a loop, or a missing target\)")),
    ("data-stats-rows-file-a-link-loop",
     mini_release(lambda root: (root / ZH_TRAIN).unlink() or (root / ZH_TRAIN).symlink_to(root / ZH_TRAIN)),
     cli("data", "stats", "--data_dir", "{path}", "--zh_tokenizer", "chars"), error(r"general/train\.jsonl is a link that leads nowhere")),
    ("data-check-rows-file-a-folder", mini_release(lambda root: (root / ZH_TRAIN).unlink() or (root / ZH_TRAIN).mkdir()),
     cli("data", "check", "--data_dir", "{path}"), error(r"general/train\.jsonl is a folder")),
    ("screenplay-folder-file-a-link-loop", lambda tmp_path: text_file("sp/desc.json", '{"Po": "A panda."}')(tmp_path) and (
        tmp_path / "sp" / "Kung Fu-Po.jsonl").symlink_to(tmp_path / "sp" / "Kung Fu-Po.jsonl") or tmp_path / "sp",
     cli(*CONTEXT_INSTRUCT), error(r"sp/Kung Fu-Po\.jsonl is a link that leads nowhere \(a loop of links\)")),
    ("profiles-source-a-link-loop", lambda tmp_path: (tmp_path / "loop").symlink_to(tmp_path / "loop") or tmp_path / "loop",
     cli(*CONTEXT_INSTRUCT), error(r"loop is a link that leads nowhere \(a loop, or a missing target\)")),
    # --- command-line flags ---------------------------------------------------------------------------------------
    ("flag-bool-and-its-negation", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--clean", "--no_clean"),
     error(r"--clean and --no_clean contradict each other: give one of them")),
    ("flag-negation-and-bool-false", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--no-clean", "--clean=false"),
     error(r"--clean=false and --no-clean contradict each other")),
    ("flag-timeout-nan", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--timeout", "nan"),
     error(r"--timeout nan: give a finite number")),
    ("flag-timeout-inf", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--timeout", "inf"),
     error(r"--timeout inf: give a finite number")),
    ("flag-num-samples-huge", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--num_samples", "9" * 30),
     error(r"num_samples=9{30} answers for each \(role, instruction\) pair: at most 10000")),
    ("train-learning-rate-nan", train_recipe(), cli(*TRAIN, "--learning_rate", "nan"), error(r"--learning_rate nan: give a finite number")),
    ("flag-unknown", rows_file(ROW), cli("evaluate", "--model_name_or_path", "rolegpt", "--output_dir", "o",
                                          "--no_such_flag", "1"), error(r"unrecognized arguments: --no_such_flag 1")),
    ("flag-bad-int", rows_file(ROW), cli("generate", "rolegpt", "--model", "m", "--output_dir", "o", "--profiles",
                                         "p", "--instructions", "{path}", "--max_concurrency", "many"),
     error(r"--max_concurrency/--max-concurrency: invalid int value: 'many'")),
    ("flag-unknown-backend", rows_file(ROW), cli("generate", "rolegpt", "--model", "m", "--output_dir", "o",
                                                 "--profiles", "p", "--instructions", "{path}", "--backend", "tgi"),
     error(r"backend='tgi' is not one of \['openai', 'local', 'vllm', 'ray', 'llamacpp'\], nor the dotted path")),
    ("flag-missing-required", rows_file(ROW), cli("generate", "rolegpt", "--output_dir", "o"),
     error(r"the following arguments are required: .*--model")),
    ("flag-config-without-path", rows_file(ROW), cli("evaluate", "--config"), error(r"--config needs the path")),
    ("flag-data-check-missing-folder", lambda tmp_path: tmp_path / "absent",
     cli("data", "check", "--data-dir", "{path}"), error(r"rolellm data: --data_dir .*absent is not a folder")),
    ("flag-data-stats-empty-folder", lambda tmp_path: tmp_path, cli("data", "stats", "--data-dir", "{path}"),
     error(r"rolellm data stats: no RoleBench train or test file in .*nothing was counted")),
    ("flag-preferences-one-sample", mini_release(),
     cli("generate", "preferences", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--profiles", "{path}",
         "--data_dir", "{path}", "--dataset_configs", "zh", "--output_dir", "{dir}/out", "--num_samples", "1",
         "--dry_run"), error(r"num_samples=1: a pair needs two answers to a question")),
    ("flag-template-check-absent-folder", lambda tmp_path: tmp_path / "absent", cli("template", "check", "{path}"),
     error(r"cannot load the tokenizer of .*absent': the path .*absent: no such folder")),
    ("flag-unknown-role", mini_release(), cli("generate", "rolegpt", "--model", "m", "--output_dir", "{path}/out",
                                             "--profiles", "{path}", "--lang", "zh", "--instructions",
                                             "{path}/rolebench-zh/general/test.jsonl", "--roles", "Nobody"),
     error(r"Nobody")),
    ("flag-num-turns-zero", rows_file(ROW), cli("dialogue", "--profiles", "p", "--scenarios", "{path}", "--model", "m",
                                                "--user_model", "u", "--output_dir", "o", "--num_turns", "0"),
     error(r"--num_turns must be at least 1, got 0")),
    ("recipe-key-twice", recipe("model: a\nmodel: b\noutput_dir: o\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: not valid YAML: key 'model' is given twice \(line 1 and line 2\)")),
    ("recipe-int-infinite", recipe(GOOD_RECIPE + "max_new_tokens: .inf\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: max_new_tokens must be int, got inf")),
    ("recipe-int-too-large-float", recipe(GOOD_RECIPE + "max_new_tokens: 1e400\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: max_new_tokens must be int")),
    ("recipe-list-for-a-string", recipe(GOOD_RECIPE.replace("output_dir: out", "output_dir: [a, b]")), cli(*EVALUATE),
     error(r"recipe\.yaml: output_dir takes one value, got a list")),
    ("flag-negative-temperature", rows_file(ROW), cli("evaluate", "--model", "rolegpt", "--output_dir", "o",
                                                      "--temperature", "-1"),
     error(r"temperature=-1.0 must be at least 0")),
    ("flag-zero-max-new-tokens", rows_file(ROW), cli("evaluate", "--model", "m", "--output_dir", "o",
                                                     "--max_new_tokens", "0"), error(r"max_new_tokens=0 must be at least 1")),
    ("flag-zero-batch-size", rows_file(ROW), cli("evaluate", "--model", "m", "--output_dir", "o", "--batch_size", "0"),
     error(r"batch_size=0 must be at least 1")),
    ("flag-zero-save-every", rows_file(ROW), cli("evaluate", "--model", "m", "--output_dir", "o", "--save_every", "0"),
     error(r"save_every=0 must be at least 1")),
    # --- rolellm train recipes of every stage, and what they point at ----------------------------------------------
    ("train-recipe-empty", recipe(""), cli(*TRAIN), error(r"recipe\.yaml: the file is empty")),
    ("train-recipe-only-comments", recipe("# stage: dpo\n"), cli(*TRAIN),
     error(r"recipe\.yaml: the recipe sets no field \(only comments\)")),
    ("train-recipe-stage-not-a-stage", recipe("stage: 3\nrewards: [catchphrase]\n"), cli(*TRAIN),
     error(r"--stage \(or the recipe's stage\): '3' is not one of \['sft', 'dpo', 'kto', 'grpo'\]")),
    ("train-no-model", recipe("output_dir: out\nuse_cpu: true\n"), cli(*TRAIN),
     error(r"rolellm train: --model_name_or_path is required")),
    ("train-negative-learning-rate", train_recipe("learning_rate: -1\n"), cli(*TRAIN),
     error(r"learning_rate=-1 must be at least 0")),
    ("train-dpo-negative-beta", train_recipe("beta: -0.5\n", "dpo"), cli(*TRAIN), error(r"beta=-0.5 must be at least 0")),
    ("train-kto-negative-weight", train_recipe("desirable_weight: -1\n", "kto"), cli(*TRAIN),
     error(r"desirable_weight=-1 must be at least 0")),
    ("train-grpo-zero-generations", train_recipe(GRPO + "num_generations: 0\n", "grpo"), cli(*TRAIN),
     error(r"num_generations=0 must be at least 2")),
    ("train-grpo-zero-temperature", train_recipe(GRPO + "temperature: 0\n", "grpo"), cli(*TRAIN),
     error(r"temperature=0 must be above 0")),
    ("train-grpo-negative-beta", train_recipe(GRPO + "beta: -0.1\n", "grpo"), cli(*TRAIN),
     error(r"beta=-0.1 must be at least 0")),
    ("train-grpo-unknown-aggregation", train_recipe(GRPO + "multi_objective_aggregation: mean\n", "grpo"), cli(*TRAIN),
     error(r"multi_objective_aggregation='mean' is not one of \['sum_then_normalize', 'normalize_then_sum'\]")),
    ("train-grpo-no-rewards", train_recipe("rewards: []\n", "grpo"), cli(*TRAIN),
     error(r"--rewards is empty: name at least one of")),
    ("train-zero-epochs", train_recipe("num_train_epochs: 0\n"), cli(*TRAIN),
     error(r"num_train_epochs=0 without max_steps trains nothing")),
    ("train-negative-weight-decay", train_recipe("weight_decay: -0.1\n", "dpo"), cli(*TRAIN),
     error(r"weight_decay=-0.1 must be at least 0")),
    ("train-grpo-zero-completion-length", train_recipe(GRPO + "max_completion_length: 0\n", "grpo"), cli(*TRAIN),
     error(r"max_completion_length=0 must be at least 1")),
    ("train-zero-train-samples", train_recipe("max_train_samples: 0\n"), cli(*TRAIN),
     error(r"--max_train_samples 0: keep at least 1 row")),
    ("train-dpo-data-dir-absent", train_recipe(stage="dpo"), cli(*TRAIN, "--data_dir", "{dir}/nowhere"),
     error(r"--data_dir .*nowhere: no such folder")),
    ("train-output-dir-holds-an-adapter", lambda tmp_path: text_file("out/adapter_config.json", "{}")(tmp_path)
     and train_recipe()(tmp_path), cli(*TRAIN),
     error(r"--output_dir .*out holds an adapter of another run \(adapter_config\.json\) and this run saves a full")),
    # --- model and checkpoint folders -----------------------------------------------------------------------------
    ("model-config-not-json", model_folder(**{"config.json": "{not json"}),
     cli("export", "{path}", "--output_dir", "{dir}/exported"), error(r"model/config\.json:1: not valid JSON")),
    ("model-config-a-list", model_folder(**{"config.json": "[]"}),
     cli("export", "{path}", "--output_dir", "{dir}/exported"), error(r"model/config\.json: expected a JSON object")),
    ("model-adapter-config-not-json", model_folder(**{"adapter_config.json": "{"}),
     cli("export", "{path}", "--merge", "--output_dir", "{dir}/exported"),
     error(r"model/adapter_config\.json:1: not valid JSON")),
    ("model-adapter-without-base", model_folder(**{"adapter_config.json": {"base_model_name_or_path": "/no/base"}}),
     cli("export", "{path}", "--merge", "--output_dir", "{dir}/exported"),
     error(r"the base model of .*model \(adapter_config\.json: base_model_name_or_path\) /no/base: no such folder")),
    ("model-empty-folder", model_folder(), cli("train", "--model_name_or_path", "{path}", "--output_dir", "o"),
     error(r"--model_name_or_path .*model: not a model folder \(no config\.json or adapter_config\.json\)")),
    ("model-config-not-json-train", model_folder(**{"config.json": ""}),
     cli("train", "--model_name_or_path", "{path}", "--output_dir", "o"), error(r"model/config\.json: the file is empty")),
    ("output-dir-a-file", text_file("out", "another run's notes"),
     cli("coser", "run", "--test_file", str(Path(__file__).parent / "fixtures" / "coser" / "test_set.json"),
         "--actor_model", "m", "--base_url", "http://127.0.0.1:9/v1", "--judge_model", "j", "--output_dir", "{path}"),
     error(r"rolellm coser: .*out exists and is a file, not a folder")),
    ("config-a-folder", lambda tmp_path: tmp_path, cli("evaluate", "--config", "{path}"), error(r"is a folder, not a file")),
    # --- SillyTavern chat exports ---------------------------------------------------------------------------------
    ("sillytavern-header-only", sillytavern(), cli(*SILLYTAVERN),
     error(r"no preference pair in 1 chat\(s\) \(not paired: .*nothing written")),
    ("sillytavern-no-other-swipe", sillytavern(ST_USER, {**ST_ANSWER, "swipes": ["A clock."]}), cli(*SILLYTAVERN),
     error(r"no preference pair in 1 chat\(s\) \(not paired: \{'one_swipe': 1")),
    ("sillytavern-is-user-a-string", sillytavern({**ST_USER, "is_user": "true"}, ST_ANSWER), read_sillytavern_chat,
     error(r"chat\.jsonl:2: field 'is_user' must be true or false, got 'true'")),
    ("sillytavern-dry-run-writes-nothing", sillytavern(ST_USER, ST_ANSWER), cli(*SILLYTAVERN, "--dry_run"),
     accepted(nothing_written)),
    ("sillytavern-chat-given-twice", sillytavern(ST_USER, ST_ANSWER),
     cli("generate", "sillytavern", "--chats", "{path}", "{path}", *SILLYTAVERN[4:]),
     accepted(lambda path: sum(len(f.read_text().splitlines()) for f in (path.parent / "out").rglob("preference/*.jsonl"))
              == 1)),
    # --- CoSER test sets and results files ------------------------------------------------------------------------
    ("coser-results-no-cases", text_file("results.json", '{"scores": {}, "cases": {}}'), cli("coser", "rescore", "{path}"),
     error(r"results\.json: field 'cases' is empty")),
    ("coser-results-scores-a-string", text_file("results.json", '{"scores": "high", "cases": {"a": {}}}'), read_results,
     error(r"results\.json: field 'scores' must be an object")),
    ("coser-results-role-not-a-string", text_file("results.json", COSER_RESULTS.replace('"role": "Hamlet"', '"role": 5', 1)),
     read_results, error(r"results\.json: case 'Hamlet-3-0': field 'simulation' must be a list")),
    ("coser-results-invalid-utf8", text_file("results.json", "", raw=b'{"cases": {"\xff": {}}}'), cli("coser", "rescore", "{path}"),
     error(r"results\.json:1: not UTF-8 text")),
    ("coser-results-bom", text_file("results.json", "\ufeff" + COSER_RESULTS), read_results,
     accepted(lambda results: len(results["cases"]) == 2)),
    ("coser-results-nested-too-deeply", text_file("results.json", "[" * 100_000 + "]" * 100_000), cli("coser", "rescore", "{path}"),
     error(r"results\.json: a JSON value nested too deeply")),
    ("coser-results-a-folder", lambda tmp_path: tmp_path, cli("coser", "rescore", "{path}"), error(r"is a folder: give the results file \(results\.json\)")),
    ("coser-testset-huge-integer", text_file("test_set.json", '[{"i_c": ' + "9" * 5000 + "}]"), read_coser_test_set,
     error(r"test_set\.json: not a readable JSON value")),
    ("coser-testset-a-folder", lambda tmp_path: tmp_path, read_coser_test_set, error(r"is a folder: give the test set file")),
    ("coser-testset-bom-crlf", text_file("test_set.json", "\ufeff" + json.dumps(COSER_SET, indent=1).replace("\n", "\r\n")),
     read_coser_test_set, accepted(lambda cases: len(cases) == 2)),
    ("coser-testset-speaker-twice", coser_set(1, speaking_characters_w_env=["Environment", "Mr. Darcy", "Elizabeth Bennet", "Mr. Darcy"]),
     cli("coser", "run", "--test_file", "{path}", "--actor_model", "m", "--base_url", "http://127.0.0.1:9/v1",
         "--judge_model", "j", "--output_dir", "{dir}/out"),
     error(r"rolellm coser: .*test_set\.json: case 1 \(Pride and Prejudice-7-1\): field 'speaking_characters_w_env' names "
           r"'Mr\. Darcy' twice: list each character once")),
    ("coser-testset-major-character-spelled-twice", coser_set(0, major_characters=["Hamlet", "Horatio", "HAMLET"]),
     read_coser_test_set, error(r"test_set\.json: case 0 \(Hamlet-3-0\): field 'major_characters' names 'Hamlet' and "
                                r"'HAMLET', one character")),
    # --- reward settings (`rolellm.rewards.reward_settings`, the rewards of --stage grpo) ---------------------------
    ("rewards-a-bare-function", rows_file(ROW), lambda _: reward_settings([reference_rouge_l]),
     error(r"weighted\[0\] must be a \(reward function, weight\) pair, got <function reference_rouge_l")),
    ("rewards-a-name-not-a-function", rows_file(ROW), lambda _: reward_settings([("reference_rouge_l", 1.0)]),
     error(r"weighted\[0\]: 'reference_rouge_l' is not a reward function")),
    ("rewards-a-dict", rows_file(ROW), lambda _: reward_settings({reference_rouge_l: 1.0}),
     error(r"reward_settings needs a list of \(reward function, weight\) pairs")),
    ("rewards-a-weight-string", rows_file(ROW), lambda _: reward_settings([(reference_rouge_l, "1")]),
     error(r"the weight of reference_rouge_l is '1': give a finite number")),
    ("rewards-every-weight-zero", rows_file(ROW), lambda _: reward_settings([(reference_rouge_l, 0), (LengthPenalty(9), 0.0)]),
     error(r"every reward's weight is 0")),
    ("rewards-length-a-string", rows_file(ROW), lambda _: LengthPenalty("40"),
     error(r"LengthPenalty\(max_length=40\): give a positive number of words")),
    ("coser-prompts-from-not-python", text_file("CoSER/gca_evaluation/prompts.py", "critic_prompts = {\n"),
     lambda path: checkout_prompts(path.parent.parent), error(r"gca_evaluation/prompts\.py:1: not valid Python")),
    ("coser-prompts-from-invalid-utf8", text_file("CoSER/gca_evaluation/prompts.py", "", raw=b"x = '\xff'\n"),
     lambda path: checkout_prompts(path.parent.parent), error(r"gca_evaluation/prompts\.py:1: not UTF-8 text")),
    ("coser-prompts-from-critic-a-list", text_file("CoSER/gca_evaluation/prompts.py", "critic_prompts = [1]\n"),
     lambda path: checkout_prompts(path.parent.parent),
     error(r"prompts\.py: critic_prompts with 'self-play-deduct-template' and the four dimensions not found")),
    ("coser-prompts-from-absent", lambda tmp_path: tmp_path / "CoSER", checkout_prompts,
     error(r"CoSER/gca_evaluation/prompts\.py: not found; --prompts_from takes a checkout")),
    # --- chat template files --------------------------------------------------------------------------------------
    ("chat-template-empty", text_file("t.jinja", ""), lambda path: read_chat_template(str(path)),
     error(r"t\.jinja: the file is empty")),
    ("chat-template-invalid-utf8", text_file("t.jinja", "", raw=b"{{ messages }}\n\xff"), lambda path: read_chat_template(str(path)),
     error(r"t\.jinja:2: not UTF-8 text")),
    ("chat-template-bom", text_file("t.jinja", "\ufeff{{ messages }}"), lambda path: read_chat_template(str(path)),
     accepted(lambda template: template == "{{ messages }}")),
    ("chat-template-not-jinja", text_file("t.jinja", "{% for m in messages %}\n{{ m.content }"),
     lambda path: read_chat_template(str(path)), error(r"t\.jinja:2: not valid Jinja: unexpected '\}'")),
    ("chat-template-text-not-jinja", lambda tmp_path: tmp_path, lambda _: read_chat_template("{{ messages | nofilter }}"),
     error(r"chat_template:1: not valid Jinja: No filter named 'nofilter'")),
    ("template-check-own-template-not-jinja", tokenizer_folder("{% for m in messages %}{{ m.content }"),
     cli("template", "check", "{path}"), error(r"tok/chat_template\.jinja:1: not valid Jinja: unexpected '\}'")),
    ("template-check-template-file-not-jinja", tokenizer_folder(edit=lambda tok: (tok / "t.jinja").write_text("{% if %}")),
     cli("template", "check", "{path}", "--chat_template", "{path}/t.jinja"), error(r"--chat_template .*t\.jinja:1: not valid Jinja")),
    ("template-check-no-vocabulary", tokenizer_folder(edit=lambda tok: (tok / "tokenizer.json").unlink()),
     cli("template", "check", "{path}"), error(r"cannot load the tokenizer of .*tok': no vocabulary: the folder has none of tokenizer\.json")),
    ("template-check-tokenizer-json-truncated", tokenizer_folder(edit=lambda tok: (tok / "tokenizer.json").write_text('{"trunc')),
     cli("template", "check", "{path}"), error(r"tok/tokenizer\.json:1: not valid JSON")),
    ("template-check-tokenizer-config-truncated", tokenizer_folder(edit=lambda tok: (tok / "tokenizer_config.json").write_text("{")),
     cli("template", "check", "{path}"), error(r"tok/tokenizer_config\.json:1: not valid JSON")),
    # --- system template files (chat --system_template, train system_template_path) --------------------------------
    ("system-template-empty", text_file("s.jinja", ""), read_system_template, error(r"s\.jinja: the file is empty")),
    ("system-template-not-jinja", text_file("s.jinja", "You are {{ role }.\n{% if %}"), read_system_template,
     error(r"s\.jinja:1: not valid Jinja")),
    ("system-template-missing", lambda tmp_path: tmp_path / "none.jinja", read_system_template,
     error(r"none\.jinja: no such system template file")),
    ("system-template-bom-crlf", text_file("s.jinja", "\ufeffYou are {{ role }}.\r\n"), read_system_template,
     accepted(lambda text: text == "You are {{ role }}.\r\n")),
    ("system-template-a-path-as-text", text_file("s.jinja", "You are {{ role }}."),
     lambda path: build_system_instruction(RoleProfile("Po", "en", "A panda."), template=str(path)),
     error(r"template='.*s\.jinja' is the name of a file, not a template's text")),
    ("system-template-train-recipe", train_recipe("system_template_path: s.jinja\n"), cli(*TRAIN),
     error(r"rolellm train: s\.jinja: no such system template file")),
    # --- model cards given to rolellm evaluate --model_card ---------------------------------------------------------
    ("model-card-bad-yaml", text_file("README.md", "---\nlicense: [apache\n---\n# Po\n"),
     lambda path: update_model_card(path, {"model": "po"}), error(r"--model_card .*README\.md: its YAML header cannot be read")),
    ("model-card-a-folder", lambda tmp_path: tmp_path, lambda path: update_model_card(path, {"model": "po"}),
     error(r"--model_card .* is a folder: give the model card file")),
    # --- RoleGPT instructions files -------------------------------------------------------------------------------
    ("instructions-empty", instructions(), cli(*ROLEGPT), error(r"instructions\.jsonl: the file is empty")),
    ("instructions-a-list-line", instructions({"instruction": "Hi?"}, "[1]"), cli(*ROLEGPT),
     error(r"instructions\.jsonl:2: expected a JSON object, got list")),
    ("instructions-no-text", instructions({"instruction": "Hi?"}, {"prompt": "Hi?"}), cli(*ROLEGPT),
     error(r"instructions\.jsonl:2: field 'instruction' \(or 'question'\) must be a non-empty string, got None")),
    ("instructions-role-not-a-string", instructions({"instruction": "Hi?", "role": 3}), cli(*ROLEGPT),
     error(r"instructions\.jsonl:1: field 'role' must be a string")),
    ("instructions-other-roles-only", instructions({"instruction": "Hi?", "role": "Moss Brindle"}), cli(*ROLEGPT),
     error(r"instructions\.jsonl: no instruction is for the roles \['Ada Quill'\]")),
    ("instructions-zero-kept", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--max_instructions", "0"),
     error(r"--max_instructions 0: keep at least 1")),
    ("instructions-repeated", jsonl("i.jsonl", {"instruction": "Hi?"}, {"instruction": "Why?"}, {"instruction": " Hi?"},
                                    {"instruction": "Hi?", "role": "Ada Quill"}),
     lambda path: read_instructions(SimpleNamespace(instructions=path, max_instructions=None), ["Ada Quill"]),
     warns(r"i\.jsonl: 1 of 4 instructions repeat an earlier one for the same role \(line 3 repeats line 1\); each is kept")),
    ("instructions-question-column", instructions({"question": "Hi?"}, {"instruction": "Why?", "target": "Because."}),
     cli(*ROLEGPT), accepted()),
    # --- generator flags (context-instruct, describe) --------------------------------------------------------------
    ("ci-prompt-template-a-file-name", mini_release(), cli(*CONTEXT_INSTRUCT, "--prompt_template", "{path}/mine.txt"),
     error(r"prompt_template='.*mine\.txt' is the name of a file, not a template's text")),
    ("ci-prompt-template-not-jinja", mini_release(), cli(*CONTEXT_INSTRUCT, "--prompt_template", "{{ role }}\n{% if %}"),
     error(r"prompt_template: line 2: not valid Jinja")),
    ("ci-prompt-template-no-variable", mini_release(), cli(*CONTEXT_INSTRUCT, "--prompt_template", "Ask questions."),
     error(r"prompt_template='Ask questions\.' has no \{\{ variable \}\}")),
    ("ci-prompt-template-uses-source", mini_release(),
     cli(*CONTEXT_INSTRUCT, "--prompt_template", "Ask {{ role }} about {{ source }}."), accepted(nothing_written)),
    ("ci-dedup-threshold-above-100", mini_release(), cli(*CONTEXT_INSTRUCT, "--dedup_threshold", "200"),
     error(r"dedup_threshold=200\.0 must be between 0 and 100")),
    ("ci-test-fraction-1.5", mini_release(), cli(*CONTEXT_INSTRUCT, "--test_fraction", "1.5"),
     error(r"test_fraction=1\.5 must be between 0 and 1")),
    ("ci-screenplay-without-cues", text_file("s.fountain", "Just prose.\nNo cue here.\n"),
     cli("generate", "context-instruct", "--model", "m", "--profiles", "{path}", "--roles", "Po", "--output_dir",
         "{dir}/out", "--dry_run"), error(r"s\.fountain: no line of 'Po' \(no speaker cue found")),
    ("describe-zero-length", mini_release(), cli(*DESCRIBE, "--description_length", "0"),
     error(r"description_length=0 must be at least 1")),
    ("describe-prompt-template-a-file-name", mini_release(), cli(*DESCRIBE, "--prompt_template", "mine.jinja"),
     error(r"prompt_template='mine\.jinja' is the name of a file")),
    ("rolegpt-test-fraction-negative", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--test_fraction", "-0.1"),
     error(r"test_fraction=-0\.1 must be between 0 and 1")),
    ("rolegpt-zero-samples", instructions({"instruction": "Hi?"}), cli(*ROLEGPT, "--num_samples", "0"),
     error(r"below num_samples=0")),
    # --- export folders and the Hub ---------------------------------------------------------------------------------
    ("export-into-the-checkpoint", model_folder(**{"config.json": {}}), cli("export", "{path}", "--output_dir", "{path}/merged"),
     error(r"--output_dir .*model/merged is inside the checkpoint .*model: export to a folder outside it")),
    ("data-export-into-the-release", mini_release(),
     cli("data", "export", "{path}/hub", "--data_dir", "{path}", "--configs", "zh-general"),
     error(r"release/hub is inside the release folder .*release: export to a folder outside it")),
    ("data-export-unknown-config", mini_release(), cli("data", "export", "{dir}/hub", "--data_dir", "{path}", "--configs", "zh-genral"),
     error(r"unknown RoleBench config 'zh-genral'; did you mean 'zh-general'\? choose one of zh, zh-general")),
    ("model-a-hub-id-unreachable", mini_release(), cli("generate", "describe", "--model", "nobody/no-such-model", "--profiles",
                                                         "{path}", "--lang", "en", "--output_dir", "{dir}/out", "--dry_run"),
     error(r"rolellm generate: --model nobody/no-such-model: no folder of that name, so it was taken as a Hugging "
           r"Face Hub id, and that model is not in the Hub cache while the Hub is off \(HF_HUB_OFFLINE=1\)", code=3)),
    ("model-folder-absent-train", mini_release(), cli("train", "--model_name_or_path", "no-such-dir", "--data_dir", "{path}",
                                                     "--output_dir", "{dir}/out", "--use_cpu", "true"),
     error(r"rolellm train: --model_name_or_path no-such-dir: no folder of that name, so it was taken as a Hugging Face "
           r"Hub id", code=3)),
    ("preferences-no-profiles-for-the-rows", mini_release(lambda root: __import__("shutil").rmtree(root / "profiles-zh")),
     cli("generate", "preferences", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--data_dir", "{path}",
         "--dataset_configs", "zh", "--output_dir", "{dir}/out", "--dry_run"),
     error(r"roles \['说书人', '铁匠老周'\] of --data_dir .*release have no profile in .*release/profiles-eng: add its "
           r"profiles-\*/ folder, or pass --profiles")),
    ("preferences-profiles-from-the-data-dir", mini_release(),
     cli("generate", "preferences", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--data_dir", "{path}",
         "--dataset_configs", "zh", "--output_dir", "{dir}/out", "--dry_run"), accepted(nothing_written)),
    # --- recipe values of every command (`scripts.recipe.check_recipe_values`) -------------------------------------
    ("recipe-empty-required-value", recipe("model_name_or_path: rolegpt\ndataset_name: zh-general\noutput_dir:\n"),
     cli(*EVALUATE), error(r"recipe\.yaml: output_dir is empty: give it a value or remove the line")),
    ("recipe-empty-value-with-default", recipe(GOOD_RECIPE + "temperature:\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: temperature is empty")),
    ("recipe-bool-not-a-bool", recipe(GOOD_RECIPE + "allow_partial: maybe\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: allow_partial must be true or false, got 'maybe'")),
    ("recipe-bool-a-number", recipe(GOOD_RECIPE + "allow_partial: 3\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: allow_partial must be true or false, got 3")),
    ("recipe-list-for-a-number", recipe(GOOD_RECIPE + "max_new_tokens: [1, 2]\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: max_new_tokens takes one value, got a list")),
    ("recipe-tab-indent", recipe("model_name_or_path: rolegpt\n\toutput_dir: out\n"), cli(*EVALUATE),
     error(r"recipe\.yaml: not valid YAML: .*'\\t'.* line 2")),
    ("recipe-describe-string-for-int", recipe("model: m\noutput_dir: o\nprofiles: [p]\ndescription_length: long\n"),
     cli("generate", "describe", "--config", "{path}"), error(r"recipe\.yaml: description_length must be int, got 'long'")),
    ("recipe-dialogue-unknown-key", recipe("model: m\nuser_model: u\nnum_turn: 3\n"), cli("dialogue", "--config", "{path}"),
     error(r"recipe\.yaml: unknown keys \['num_turn'\]")),
    ("recipe-train-a-mapping-for-a-dict-field", train_recipe("gradient_checkpointing_kwargs: {use_reentrant: false}\n"
                                                            "num_train_epochs: 0\n"), cli(*TRAIN),
     error(r"num_train_epochs=0 without max_steps trains nothing")),
    ("recipe-train-a-mapping-for-a-number", train_recipe("learning_rate: {a: 1}\n"), cli(*TRAIN),
     error(r"recipe\.yaml: learning_rate takes one value, got a dict")),
    ("recipe-train-bool-not-a-bool", train_recipe("use_peft: maybe\n"), cli(*TRAIN),
     error(r"recipe\.yaml: use_peft must be true or false, got 'maybe'")),
    ("recipe-roles-one-name", lambda tmp_path: write_mini_release(tmp_path / "release") and recipe(
        f"model: m\nbase_url: http://127.0.0.1:9/v1\noutput_dir: {tmp_path}/out\nprofiles: [{tmp_path}/release]\nlang: en\nroles: Ada Quill\n"
        "dry_run: true\n")(tmp_path), cli("generate", "describe", "--config", "{path}"), accepted()),
    ("recipe-roles-numbers", lambda tmp_path: write_mini_release(tmp_path / "release") and recipe(
        f"model: m\noutput_dir: {tmp_path}/out\nprofiles: [{tmp_path}/release]\nlang: en\nroles: [1, 2]\n"
        "dry_run: true\n")(tmp_path), cli("generate", "describe", "--config", "{path}"), error(r"roles \['1', '2'\] are not in")),
    # --- file-level anomalies: NUL bytes, encodings, binary files, links, JSON given where other JSON is expected ---
    ("chat-template-nul-bytes", text_file("t.jinja", "", raw=b"{{ messages }}\x00\x00"),
     lambda path: read_chat_template(str(path)), error(r"t\.jinja:1: a NUL byte \(byte 14\): a binary file, not text")),
    ("system-template-nul-bytes", text_file("s.jinja", "", raw=b"You are {{ role }}.\n\x00"), read_system_template,
     error(r"s\.jinja:2: a NUL byte \(byte 20\)")),
    ("screenplay-nul-bytes", text_file("kfp.txt", "", raw=b"\x00" * 20), screenplay_po, error(r"kfp\.txt:1: a NUL byte")),
    ("recipe-nul-bytes", recipe("", raw=b"model_name_or_path: rolegpt\n\x00"), cli(*EVALUATE),
     error(r"recipe\.yaml:2: a NUL byte")),
    ("inference-settings-a-list", model_folder(**{"config.json": {}, "rolellm_inference.json": "[]"}),
     cli(*CHAT_LOCAL, stdin="hi\n"), error(r"model/rolellm_inference\.json: expected a JSON object of settings, got list")),
    ("inference-settings-keep-think-a-string", model_folder(**{"config.json": {}, "rolellm_inference.json": {"keep_think": "yes"}}),
     cli(*CHAT_LOCAL, stdin="hi\n"), error(r"rolellm_inference\.json: field 'keep_think' must be true or false, got 'yes'")),
    ("inference-settings-latin1", with_raw(model_folder(**{"config.json": {}}), "model/rolellm_inference.json",
                                           '{"chat_template_family": "modèle"}'.encode("latin-1")),
     cli(*CHAT_LOCAL, stdin="hi\n"), error(r"model/rolellm_inference\.json:1: not UTF-8 text \(byte 29 is 0xe8\)")),
    ("inference-settings-bom-crlf", with_raw(model_folder(), "model/rolellm_inference.json", b'\xef\xbb\xbf{\r\n"keep_think": true}\r\n'),
     lambda folder: read_inference_settings(str(folder)), accepted(lambda settings: settings == {"keep_think": True})),
    ("inference-settings-a-folder", with_raw(model_folder(), "model/rolellm_inference.json/x", b""),
     lambda folder: read_inference_settings(str(folder)), error(r"rolellm_inference\.json is a folder")),
    ("baseline-generations-bom-crlf-blank-line", baseline_run(b"\xef\xbb\xbf" + BASE_ANSWER.replace(b"\n", b"\r\n") + b"\r\n"),
     baseline_answers, accepted(lambda answers: answers == (["The Dragon Warrior!"], "base"))),
    ("baseline-generations-latin1", baseline_run(BASE_ANSWER + '{"role": "Zoé"}\n'.encode("latin-1")), baseline_answers,
     error(r"base/generations\.jsonl:2: not UTF-8 text")),
    ("baseline-generations-a-list-line", baseline_run(BASE_ANSWER + b"[1]\n"), baseline_answers,
     error(r"base/generations\.jsonl:2: expected a JSON object, got list")),
    ("baseline-generations-empty", baseline_run(b""), cli(*BASELINE_RUN), error(r"base/generations\.jsonl: the file is empty")),
    ("baseline-results-a-list", baseline_run(BASE_ANSWER, b"[]"), cli(*BASELINE_RUN),
     error(r"base/results\.json: not the results\.json of a rolellm evaluate run \(no 'model' name\)")),
    ("baseline-results-not-utf8", baseline_run(BASE_ANSWER, b'{"model": "\xff"}'), cli(*BASELINE_RUN),
     error(r"base/results\.json:1: not UTF-8 text \(byte 11 is 0xff\)")),
    ("baseline-results-truncated", baseline_run(BASE_ANSWER, b'{"model": "m'), baseline_answers,
     error(r"base/results\.json:1: not valid JSON")),
    ("compare-with-metric-missing", compared_run({**COMPARED, "metrics": {"CUS": 0.1}}),
     cli(*EVALUATE_RUN, "--compare_with", "{dir}/other.json"), error(r"other\.json: field 'metrics\.RAW' is missing")),
    ("compare-with-metric-a-string", compared_run({**COMPARED, "metrics": {**COMPARED["metrics"], "CUS": "0.1"}}),
     cli(*EVALUATE_RUN, "--compare_with", "{dir}/other.json"),
     error(r"other\.json: field 'metrics\.CUS' must be a number or null, got '0\.1'")),
    ("compare-with-no-dataset-name", compared_run({k: v for k, v in COMPARED.items() if k != "dataset_name"}),
     cli(*EVALUATE_RUN, "--compare_with", "{dir}/other.json"), error(r"other\.json: field 'dataset_name' must be a str, got None")),
    ("compare-with-utf16", compared_run(json.dumps(COMPARED).encode("utf-16")),
     cli(*EVALUATE_RUN, "--compare_with", "{dir}/other.json"), error(r"other\.json: UTF-16 text")),
    ("model-card-latin1", text_file("README.md", "---\nlicense: mit\n---\n# Zoé\n", encoding="latin-1"),
     lambda path: update_model_card(path, {"model": "po"}), error(r"--model_card .*README\.md:4: not UTF-8 text \(byte 25 is 0xe9\)")),
    ("desc-trailing-data", text_file("profiles-eng/desc.json", '{"Po": "A panda."} x'), lambda p: profiles_en(p.parent),
     error(r"desc\.json:1: not valid JSON \(Extra data, column 20\)")),
    ("coser-testset-an-object", text_file("test_set.json", '{"cases": []}'), read_coser_test_set,
     error(r"test_set\.json: a test set is a non-empty JSON list of cases")),
    ("instructions-a-folder", lambda tmp_path: write_mini_release(tmp_path / "release") and (tmp_path / "i.jsonl").mkdir()
     or tmp_path / "i.jsonl", cli(*ROLEGPT), error(r"i\.jsonl is a folder, not a file")),
    ("raw-targets-gzip", with_raw(mini_release(), "raw.jsonl", gzip.compress(b'{"instruction": "q", "target": "t"}\n')),
     cli(*EVALUATE_RUN, "--raw_targets_file", "{dir}/raw.jsonl"), error(r"raw\.jsonl:1: not UTF-8 text \(byte 1 is 0x8b\)")),
    ("labels-a-png", text_file("h.jsonl", "", raw=png_bytes()), read_human_labels,
     error(r"h\.jsonl:1: not UTF-8 text \(byte 0 is 0x89\)")),
    ("scenario-dangling-link", lambda tmp_path: (tmp_path / "s.yaml").symlink_to(tmp_path / "gone.yaml") or tmp_path / "s.yaml",
     read_scenarios, error(r"s\.yaml: no such scenario file")),
    ("sillytavern-bom-crlf", lambda tmp_path: with_raw(sillytavern(), "chat.jsonl", b"\xef\xbb\xbf" + b"".join(
        (json.dumps(m) + "\r\n").encode() for m in (ST_HEADER, ST_USER, ST_ANSWER)))(tmp_path),
     cli(*SILLYTAVERN, "--dry_run"), accepted(nothing_written)),
    ("rows-long-line", rows_file({**ROW, "question": " Why?" * 600_000}), general_rows,
     accepted(lambda rows: len(rows[0]["question"]) == 3_000_000)),
    ("evaluate-log-nul-tail", evaluate_log("\x00" * 64), cli(*EVALUATE_RUN, "--max_retries", "0"),
     error(r"cannot reach http://127\.0\.0\.1:9/v1", code=3)),
    ("evaluate-log-nul-in-a-middle-line", evaluate_log(json.dumps(ZH_ANSWER) + "\x00\n" + json.dumps(ZH_ANSWER) + "\n"),
     cli(*EVALUATE_RUN), error(r"out/generations\.jsonl:1: a NUL byte \(byte \d+\): a binary file, not text")),
    ("dialogue-log-nul-tail", dialogue_run(lambda lines: "".join(lines[:3]) + "\x00" * 40),
     resume_dialogues, error(r"cannot reach|connection refused")),
    ("evaluate-run-config-a-list", with_raw(mini_release(), "out/run_config.json", b"[]"), cli(*EVALUATE_RUN),
     error(r"out/run_config\.json: expected a JSON object of the run's settings, got list")),
    ("evaluate-run-config-empty", with_raw(mini_release(), "out/run_config.json", b""), cli(*EVALUATE_RUN),
     error(r"out/run_config\.json: the file is empty: not the settings of a run; use a new output_dir")),
    ("evaluate-run-config-latin1", with_raw(mini_release(), "out/run_config.json", '{"mode": "sýstem"}'.encode("latin-1")),
     cli(*EVALUATE_RUN), error(r"out/run_config\.json:1: not UTF-8 text \(byte 11 is 0xfd\)")),
    ("generation-stats-a-list", text_file("run/generation_stats.json", "[]"), lambda path: saved_usage(path.parent),
     warns(r"run/generation_stats\.json: not the usage counts of earlier runs; usage_in_all counts from this run")),
    ("generation-stats-truncated", text_file("run/generation_stats.json", '{"usage_in_all": {"requ'),
     lambda path: saved_usage(path.parent), warns(r"run/generation_stats\.json:1: not valid JSON .*; usage_in_all counts")),
    ("generation-stats-earlier-run", text_file("run/generation_stats.json", '{"usage_in_all": {"requests": 3}, "runs": 1}'),
     lambda path: saved_usage(path.parent), accepted(lambda stats: stats["usage_in_all"] == {"requests": 5} and stats["runs"] == 2)),
    ("checkpoint-role-profiles-dead-link", dead_link(model_folder(**{"config.json": {}}), "model/role_profiles.jsonl"),
     lambda folder: profiles_for(None, str(folder), str(folder.parent / "release"), lang="en"),
     error(r"model/role_profiles\.jsonl is a link that leads nowhere \(a loop, or a missing target\)")),
    ("checkpoint-role-profiles-a-folder", with_raw(model_folder(**{"config.json": {}}), "model/role_profiles.jsonl/x", b""),
     lambda folder: profiles_for(None, str(folder), str(folder.parent / "release"), lang="en"),
     error(r"model/role_profiles\.jsonl: a folder with no role profiles in it")),
    ("chat-template-a-folder", lambda tmp_path: tmp_path, lambda folder: read_chat_template(str(folder)),
     error(r"chat_template='.*' is a folder: give the template file")),
    ("raw-targets-a-folder", mini_release(), cli(*EVALUATE_RUN, "--raw_targets_file", "{path}"),
     error(r"raw_targets_file='.*release' is a folder: give the JSONL file")),
    ("release-raw-targets-dead-link", mini_release(lambda root: (root / "instructions-zh").mkdir() or (
        root / "instructions-zh" / "instructions-general.jsonl").symlink_to(root / "gone.jsonl")), cli(*EVALUATE_RUN),
     error(r"instructions-zh/instructions-general\.jsonl is a link that leads nowhere .*: the RAW references")),
    ("model-adapter-config-no-base", model_folder(**{"adapter_config.json": {"r": 8}}), cli(*CHAT_LOCAL, stdin="hi\n"),
     error(r"model/adapter_config\.json: field 'base_model_name_or_path' must name the base model .*got None")),
    ("model-adapter-config-base-a-number", model_folder(**{"adapter_config.json": {"base_model_name_or_path": 3}}),
     cli("export", "{path}", "--merge", "--output_dir", "{dir}/exported"),
     error(r"model/adapter_config\.json: field 'base_model_name_or_path' must name the base model .*got 3")),
    ("scenario-field-twice", text_file("s.yaml", SCENARIO + "  role: Shifu\n"), read_scenarios,
     error(r"s\.yaml: not valid YAML: key 'role' is given twice \(line 1 and line 6\)")),
    ("card-png-signature-damaged", text_file("po.png", "", raw=b"\x00" + png_bytes(card_chunk())[1:]), read_character_card,
     error(r"po\.png: not a PNG image \(no PNG signature at byte 0\) nor JSON text")),
    ("card-png-a-gzip", text_file("po.png", "", raw=gzip.compress(json.dumps(CARD).encode())), read_character_card,
     error(r"po\.png: not a PNG image")),
    ("train-output-dir-a-file", lambda tmp_path: text_file("out", "notes")(tmp_path) and train_recipe()(tmp_path),
     cli(*TRAIN), error(r"rolellm train: --output_dir .*out: .*out is a file, not a folder")),
    ("generate-output-dir-a-file", lambda tmp_path: text_file("out", "notes")(tmp_path) and mini_release()(tmp_path),
     cli(*DESCRIBE[:-1]), error(r"rolellm generate: --output_dir .*out: .*out is a file, not a folder")),
    ("generate-output-dir-under-a-file", lambda tmp_path: text_file("notes", "mine")(tmp_path) and mini_release()(tmp_path),
     cli(*CONTEXT_INSTRUCT, "--output_dir", "{dir}/notes/run"), error(r"--output_dir .*notes/run: .*notes is a file")),
    ("transcripts-bom-crlf", text_file("transcripts.jsonl", '\ufeff{"id": "po-1", "turns": []}\r\n'), read_transcripts,
     accepted(lambda transcripts: transcripts == [{"id": "po-1", "turns": []}])),
    ("transcripts-latin1", text_file("transcripts.jsonl", '{"id": "Zoé"}\n', encoding="latin-1"), read_transcripts,
     error(r"transcripts\.jsonl:1: not UTF-8 text \(byte 10 is 0xe9\)")),
]  # fmt: skip


def _id(case):
    return case.values[0] if hasattr(case, "values") else case[0]


@pytest.mark.parametrize(("name", "build", "entry", "expected"), CASES, ids=[_id(c) for c in CASES])
def test_malformed_input(name, build, entry, expected, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = build(tmp_path)
    if getattr(entry, "cli", False):
        code = entry(path)
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if expected.kind == "error":
            assert code == expected.code, err
            assert any(_search(expected.pattern, line) for line in [err]), err
            return
        assert code == 0, err
        assert expected.check is None or expected.check(path)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if expected.kind == "error":
            with pytest.raises(Exception) as raised:  # noqa: PT011  (the message is what is checked)
                entry(path)
            assert _search(expected.pattern, str(raised.value)), str(raised.value)
            assert type(raised.value).__name__ != "DatasetGenerationError"
            return
        result = entry(path)
    ours = [w for w in caught if "rolellm" in type(w.message).__module__ or str(tmp_path) in str(w.message)]
    if expected.kind == "warns":
        assert len(ours) == 1 and _search(expected.pattern, str(ours[0].message)), [str(w.message) for w in ours]
    else:
        assert not ours, [str(w.message) for w in ours]
    if expected.check is not None:
        assert expected.check(result)


def _search(pattern, text) -> bool:
    import re

    return re.search(pattern, text, re.S) is not None


ROW_CASES = [c for c in CASES if not hasattr(c, "values") and c[2] in (general_rows, specific_rows)]


@pytest.mark.parametrize(("name", "build", "entry", "expected"), ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_the_arrow_reader_of_the_builder_agrees_with_the_row_reader(name, build, entry, expected, tmp_path):
    """The builder reads files with Arrow and falls back on the row reader: same rows, or the same error."""
    path = build(tmp_path)
    subset = "general" if entry is general_rows else "role_specific"
    outcomes = []
    for read in (lambda: entry(path), lambda: read_rolebench_table(path, subset, "en").to_pylist()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                outcomes.append(read())
            except Exception as raised:  # noqa: BLE001  (the outcome compared is the message)
                outcomes.append(f"{type(raised).__name__}: {raised}")
    assert outcomes[0] == outcomes[1]


def test_the_suite_has_at_least_90_cases():
    assert len(CASES) >= 90
    assert len({_id(c) for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "argv",
    [
        ["push-metric", "--repo_id", "me/rolebench_rouge"],
        ["export", "{model}", "--output_dir", "{tmp}/out", "--push_to_hub", "me/po"],
        [
            "data",
            "export",
            "{tmp}/out",
            "--data_dir",
            "{tmp}/release",
            "--configs",
            "zh-general",
            "--push_to_hub",
            "me/rb",
        ],
    ],
    ids=["push-metric", "export", "data-export"],
)
def test_a_push_without_a_hub_token_stops_before_any_work(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no token file either
    model = model_folder(**{"config.json": {}})(tmp_path)
    argv = [a.replace("{model}", str(model)).replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs a Hugging Face token: run `hf auth login` or set HF_TOKEN; nothing was done" in err, err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_hub_that_cannot_be_reached_is_exit_3_and_never_shows_the_token(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_sweepsecret0123456789")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    code = main(["push-metric", "--repo_id", "me/rolebench_rouge"])
    err = capsys.readouterr().err
    assert code == 3 and "cannot reach the Hugging Face Hub" in err, err
    assert "hf_sweepsecret" not in err and "Traceback" not in err
