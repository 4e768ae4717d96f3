"""`rolellm train --help` prints every flag of the stage without importing torch, and lists the flags the real
parser takes: `source_fields` reads them from the source of the configurations."""

import subprocess
import sys

import pytest

from rolellm.scripts import train
from rolellm.scripts.recipe import source_fields


PROBE = """
import sys
from rolellm.scripts.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print("exit", exit.code)
print("heavy", sorted({"torch", "transformers", "trl.trainer.dpo_config", "datasets"} & set(sys.modules)))
"""


def test_train_help_imports_no_torch():
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "train", "--stage", "dpo", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.rstrip().endswith("exit 0\nheavy []")
    for flag in ("--stage", "--learning_rate", "--loss_type", "--ld_alpha", "--beta", "--profiles", "--lora_r"):
        assert flag in result.stdout, flag


@pytest.mark.parametrize("stage", ["sft", "dpo", "kto"])
def test_help_lists_the_flags_the_real_parser_takes(stage):
    classes = [(train.__name__, "StageArguments"), train.STAGE_CONFIGS[stage], train.MODEL_CONFIG]
    from_source = {name for module, cls in classes for name in source_fields(module, cls)}
    parser = train.make_stage_parser(stage)
    real = {action.dest for action in parser._actions if action.option_strings and action.dest not in ("help",)}
    assert from_source | {"config"} == real


def test_help_falls_back_to_the_real_parser_when_a_source_file_moved(monkeypatch, capsys):
    """A TRL release that moves a configuration's file does not break `--help`: the real parser prints it."""
    from rolellm.scripts import recipe
    from rolellm.scripts.cli import main

    monkeypatch.setitem(recipe.SOURCE_HOMES, "DPOConfig", "trl.trainer.no_such_module")
    monkeypatch.setitem(train.STAGE_CONFIGS, "dpo", ("trl", "DPOConfig"))  # found through SOURCE_HOMES only
    with pytest.raises(SystemExit) as exit:
        main(["train", "--stage", "dpo", "--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    assert all(flag in out for flag in ("--stage", "--beta", "--loss_type", "--learning_rate", "--lora_r"))
