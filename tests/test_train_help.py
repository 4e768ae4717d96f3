"""`rolellm train --help` prints the real parser's help of the stage (every flag of TRL's and transformers'
configurations), once built and then from the cache of help texts, without importing torch."""

import argparse
import subprocess
import sys

import pytest

from rolellm.scripts import train
from rolellm.scripts.cli import main
from rolellm.scripts.recipe import cached_help, help_cache_dir


PROBE = """
import sys
from rolellm.scripts.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print("exit", exit.code)
print("heavy", sorted({"torch", "transformers", "trl.trainer.dpo_config", "datasets"} & set(sys.modules)))
"""


def test_train_help_is_the_real_parsers_then_printed_from_the_cache_without_torch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROLELLM_CACHE", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "100")  # the width is part of the cache key: the same in the child process
    with pytest.raises(SystemExit) as exit:
        main(["train", "--stage", "dpo", "--help"])
    assert exit.value.code == 0
    first = capsys.readouterr().out
    assert first == train.stage_help_parser("dpo", "rolellm train").format_help()
    assert first.startswith("usage: rolellm train --stage dpo [--config RECIPE] [--FIELD VALUE ...]\n")
    for flag in ("--stage", "--learning_rate", "--loss_type", "--ld_alpha", "--beta", "--profiles", "--lora_r"):
        assert f"\n  {flag} " in first, flag
    (cached,) = (tmp_path / "help").iterdir()
    assert cached.name.startswith("train-dpo-") and cached.read_text(encoding="utf-8") == first

    env = {"ROLELLM_CACHE": str(tmp_path), "COLUMNS": "100", "PYTHONPATH": ":".join(sys.path), "PATH": ""}
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "train", "--stage", "dpo", "--help"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == first + "exit 0\nheavy []\n"


def test_the_cached_text_is_what_is_printed(tmp_path, monkeypatch, capsys):
    """The second call reads the file: what it holds is printed, and no parser is built."""
    monkeypatch.setenv("ROLELLM_CACHE", str(tmp_path))
    first = cached_help("demo", lambda: argparse.ArgumentParser(prog="demo", description="A demo."))
    assert first.startswith("usage: demo [-h]\n\nA demo.\n")
    (cached,) = (tmp_path / "help").iterdir()
    cached.write_text("usage: demo (from the cache)\n", encoding="utf-8")
    assert cached_help("demo", None) == "usage: demo (from the cache)\n"
    monkeypatch.setenv("COLUMNS", "61")  # another width: another key, the parser is built again
    assert cached_help("demo", lambda: argparse.ArgumentParser(prog="demo", description="A demo.")) == first
    assert len(list((tmp_path / "help").iterdir())) == 2


def test_help_is_printed_when_the_cache_cannot_be_written(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("ROLELLM_CACHE", str(blocked))
    text = cached_help("demo", lambda: argparse.ArgumentParser(prog="demo"))
    assert text.startswith("usage: demo [-h]") and help_cache_dir() == blocked / "help"
    assert blocked.read_text(encoding="utf-8") == "not a folder"


def test_help_of_a_stage_that_does_not_exist_is_a_usage_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROLELLM_CACHE", str(tmp_path))
    with pytest.raises(SystemExit) as exit:
        main(["train", "--stage", "ppo", "--help"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "--stage (or the recipe's stage): 'ppo' is not one of ['sft', 'dpo', 'kto', 'grpo']" in err
    assert "Traceback" not in err and not (tmp_path / "help").exists()
