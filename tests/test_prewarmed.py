"""The forking server the end-to-end tests run their commands through (tests/fixtures/prewarmed.py): a forked command
gets its own arguments, folder, environment, streams, exit code and signals, as a new interpreter would; one it cannot
fork faithfully runs in a new interpreter. The server here imports only `json`, so these checks cost no model
library's import."""

import os
import signal
import subprocess
import sys
import time

import pytest
from fixtures.prewarmed import prewarmed


SHOW = "import json, os, sys; print(json.dumps([sys.argv, os.getcwd(), os.environ.get('WHO'), input()]))"


@pytest.fixture
def shims(tmp_path):
    env = {**os.environ, "WHO": "server", "PYTHONPATH": os.pathsep.join(sys.path)}
    with prewarmed(env, tmp_path / "bin", modules=("json",)) as env:
        yield env, tmp_path / "bin"


def log(folder) -> list[str]:
    return (folder / "prewarmed.log").read_text("utf-8").splitlines()


def test_a_forked_command_has_its_own_arguments_folder_streams_and_exit_code(shims, tmp_path):
    env, folder = shims
    python = str(folder / "python")
    shown = subprocess.run([python, "-c", SHOW, "a b"], input="typed\n", capture_output=True, text=True, env=env,
                           cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f'[["-c", "a b"], "{tmp_path}", "server", "typed"]'
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint(sys.argv[1:], __name__)\nsys.exit(3)\n")
    ran = subprocess.run([python, "-u", str(script), "x"], capture_output=True, text=True, env=env)
    assert (ran.returncode, ran.stdout) == (3, "['x'] __main__\n")
    piped = subprocess.run([python, "-", "y"], input="import sys; print(sys.argv)", capture_output=True, text=True,
                           env=env)  # fmt: skip
    assert piped.stdout == "['-', 'y']\n"
    module = subprocess.run([python, "-m", "json.tool"], input='{"a": 1}', capture_output=True, text=True, env=env)
    assert module.stdout == '{\n    "a": 1\n}\n'
    version = subprocess.run([str(folder / "rolellm"), "--version"], capture_output=True, text=True, env=env)
    assert version.returncode == 0 and version.stdout.startswith("rolellm ")
    # an exception's traceback starts at the command's own frames, and the exit code is 1
    failed = subprocess.run([python, "-c", "raise ValueError('no')"], capture_output=True, text=True, env=env)
    assert failed.returncode == 1
    traceback = ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>', "ValueError: no"]
    assert failed.stderr.splitlines() == traceback
    # what a forked python starts with `sys.executable` is forked as well (torchrun's ranks)
    nested = (
        "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', 'raise SystemExit(5)']).returncode)"
    )
    assert subprocess.run([python, "-c", nested], env=env).returncode == 5
    assert log(folder) == [line for line in log(folder) if line.startswith("forked: ")] and len(log(folder)) == 8


def test_signals_reach_the_command_and_a_differing_environment_gets_a_new_interpreter(shims):
    env, folder = shims
    python = str(folder / "python")
    sleeper = subprocess.Popen([python, "-c", "import time; print('up', flush=True); time.sleep(60)"], env=env,
                               stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert sleeper.stdout.readline() == "up\n"
    started = time.monotonic()
    sleeper.send_signal(signal.SIGTERM)
    assert sleeper.wait(timeout=30) == -signal.SIGTERM and time.monotonic() - started < 30
    sleeper.stdout.close()
    # a variable read at import time may differ: the command runs in a new interpreter, with its own environment
    other = {**env, "WHO": "user"}
    shown = subprocess.run([python, "-c", SHOW], input="typed\n", capture_output=True, text=True, env=other)
    assert shown.returncode == 0 and '"user", "typed"]' in shown.stdout
    assert (
        log(folder)[-1]
        == "new interpreter: python ['-c', " + repr(SHOW) + "] WHO differs from the server's environment"
    )
    unknown = subprocess.run([python, "-W", "error", "-c", "print('plain')"], capture_output=True, text=True, env=env)
    assert unknown.stdout == "plain\n" and "a python command line this server does not run" in log(folder)[-1]
