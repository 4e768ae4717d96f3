"""Malformed release files through `rolellm data export`, as a user runs it: each ends within seconds with one line
naming the file (and the line or field), exit 2, no traceback.

The cases run in one child process, each under a time limit of its own (`signal.alarm`), and the child under one
as a whole: a command that spins on an input (an error chain that comes back on itself, followed forever) fails
its case instead of hanging the suite.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.mini_release import write_mini_release


ROLE_FILE = "profiles-zh/profiles-zh-说书人.jsonl"
LINE = {"act_id": 0, "diag_id": 0, "role": "说书人", "content": "列位看官"}
ROWS = "rolebench-zh/general/train.jsonl"
PROFILES = ("--configs", "profiles-zh")

# name -> (file of the mini release, its new bytes, the configs exported, the message expected)
CASES = {
    "desc-an-array": ("profiles-zh/desc.json", b"[1, 2]", PROFILES,
                      r"profiles-zh/desc\.json: expected a JSON object of role -> text, got list"),
    "desc-a-number": ("profiles-zh/desc.json", b"3", PROFILES,
                      r"profiles-zh/desc\.json: expected a JSON object of role -> text, got int"),
    "desc-an-object-value": ("profiles-zh/desc.json", '{"说书人": {"a": 1}}'.encode(), PROFILES,
                             r"profiles-zh/desc\.json: the value of '说书人' must be a string, got dict"),
    "desc-invalid-json": ("profiles-zh/desc.json", '{"说书人": '.encode(), PROFILES,
                          r"profiles-zh/desc\.json:1: not valid JSON"),
    "role-line-without-content": (ROLE_FILE, json.dumps({k: v for k, v in LINE.items() if k != "content"}).encode(),
                                  PROFILES, r"profiles-zh-说书人\.jsonl:1: field 'content' is missing"),
    "role-line-string-act-id": (ROLE_FILE, json.dumps({**LINE, "act_id": "one"}).encode(), PROFILES,
                                r"profiles-zh-说书人\.jsonl:1: field 'act_id' must be int, got str 'one'"),
    "role-line-invalid-utf8": (ROLE_FILE, b'{"act_id": 0, "diag_id": 0, "role": "x", "content": "\xe9t\xe9"}\n',
                               PROFILES, r"profiles-zh-说书人\.jsonl:1: not UTF-8 text \(byte 53 is 0xe9\)"),
    "role-line-cut-short": (ROLE_FILE, b'{"act_id": 0, "diag_id": 0, "role": "x", "cont', PROFILES,
                            r"profiles-zh-说书人\.jsonl:1: not valid JSON \(the line looks truncated\)"),
    "scripts-invalid-json": ("profiles-zh/scripts.json", '{"说书人": '.encode(), PROFILES,
                             r"profiles-zh/scripts\.json:1: not valid JSON"),
    "rows-lone-surrogate": (ROWS, b'{"role": "x", "question": "\\ud800", "generated": ["a"]}\n',
                            ("--configs", "zh-general"),
                            r"general/train\.jsonl:1: a lone UTF-16 surrogate \('\\ud800'\) is not text"),
}  # fmt: skip

# Runs `main(argv)` for each case of a JSON list on stdin and prints `{"code", "err"}` per case as a JSON line;
# a case still running after its seconds prints `{"hung": true}` and the next one starts.
CHILD = """
import contextlib, io, json, signal, sys

from rolellm.scripts.cli import main


class Hang(BaseException):  # not an `Exception`: `main` reports those as errors of the command
    pass


def stop(signum, frame):
    raise Hang


signal.signal(signal.SIGALRM, stop)
for argv in json.loads(sys.stdin.read()):
    err = io.StringIO()
    signal.alarm(10)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        outcome = {"code": code}
    except Hang:
        outcome = {"hung": True}
    signal.alarm(0)
    print(json.dumps({**outcome, "err": err.getvalue()}), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """`{case: {"code", "err", "out"}}` of every case, run in one child process (`out`: the export's folder)."""
    argvs, folders = [], []
    for name, (rel, content, configs, _) in CASES.items():
        root = write_mini_release(tmp_path_factory.mktemp(name) / "release")
        (root / rel).write_bytes(content)
        folders.append(root.parent / "out")
        argvs.append(["data", "export", str(folders[-1]), "--data_dir", str(root), *configs])
    repo = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD], input=json.dumps(argvs), capture_output=True, text=True, timeout=30 + 10 * len(argvs),
            cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)},
        )  # fmt: skip
        stdout = done.stdout
    except subprocess.TimeoutExpired as expired:  # what the cases before the one that hung said
        stdout = (expired.stdout or b"").decode()
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return {name: {**line, "out": out} for name, line, out in zip(CASES, lines, folders)}


@pytest.mark.parametrize("name", list(CASES))
def test_a_malformed_release_file_ends_at_once_with_one_line_and_exit_2(name, outcomes):
    assert name in outcomes, f"{name}: the command did not end (the child ran out of time)"
    outcome = outcomes[name]
    assert not outcome.get("hung"), f"{name}: the command did not end within 10 s"
    err = outcome["err"]
    assert outcome["code"] == 2 and "Traceback" not in err, err
    [line] = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("rolellm ")]
    assert re.search(CASES[name][3], line), line
    assert not outcome["out"].exists()  # nothing that looks like an export
