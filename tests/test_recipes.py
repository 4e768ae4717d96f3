"""Every training recipe parses with the training script's parser, and every accelerate config loads."""

import sys
from pathlib import Path

import pytest
import yaml


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
RECIPES = ["rolellama-7b-lora", "roleglm-qwen2.5-7b-lora", "rolellama-7b-full", "rolellama-7b-qlora", "tiny-cpu"]
ACCELERATE_CONFIGS = {"single_gpu": "NO", "multi_gpu": "MULTI_GPU", "fsdp2": "FSDP", "deepspeed_zero3": "DEEPSPEED"}


@pytest.fixture(scope="module")
def make_parser():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from train_rolellama import make_parser
    finally:
        sys.path.remove(str(EXAMPLES))
    return make_parser


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_parses_into_the_script_dataclasses(make_parser, recipe):
    path = EXAMPLES / "recipes" / f"{recipe}.yaml"
    values = yaml.safe_load(path.read_text())
    # GPU recipes ask for bf16, which TrainingArguments refuses on a machine without a GPU unless told use_cpu.
    script_args, training_args, model_args = make_parser().parse_args_into_dataclasses(
        ["--config", str(path), "--use_cpu", "true"]
    )
    parsed = {**vars(script_args), **vars(model_args), **training_args.to_dict()}
    for key, value in values.items():
        expected = [] if (key, value) == ("report_to", "none") else value  # TrainingArguments' spelling of "none"
        assert parsed[key] == expected, key
    assert training_args.assistant_only_loss is True
    assert type(training_args).__name__ == "RoCITConfig"


def test_recipes_cover_the_paper_models():
    lora = yaml.safe_load((EXAMPLES / "recipes" / "rolellama-7b-lora.yaml").read_text())
    assert (
        lora["use_peft"] and lora["dataset_configs"] == ["en-instruction"] and "llama-7b" in lora["model_name_or_path"]
    )
    chinese = yaml.safe_load((EXAMPLES / "recipes" / "roleglm-qwen2.5-7b-lora.yaml").read_text())
    assert chinese["dataset_configs"] == ["zh"] and chinese["system_lang"] == "zh"
    qlora = yaml.safe_load((EXAMPLES / "recipes" / "rolellama-7b-qlora.yaml").read_text())
    assert qlora["load_in_4bit"] and qlora["use_peft"]
    assert "use_peft" not in yaml.safe_load((EXAMPLES / "recipes" / "rolellama-7b-full.yaml").read_text())


def test_rolellm_train_command_parses_a_recipe_with_overrides():
    from rolellm.scripts.cli import COMMANDS
    from rolellm.scripts.train import make_parser

    assert COMMANDS["train"][0] == "rolellm.scripts.train"
    recipe = str(EXAMPLES / "recipes" / "tiny-cpu.yaml")
    script_args, training_args, model_args = make_parser().parse_args_into_dataclasses(
        ["--config", recipe, "--max_steps", "7"]
    )
    assert script_args.dataset_configs == ["en-instruction", "zh"] and training_args.reference == "all"
    assert training_args.max_steps == 7 and model_args.model_name_or_path == "tiny-llama"


@pytest.mark.parametrize("name", ACCELERATE_CONFIGS)
def test_accelerate_config_loads(name):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(EXAMPLES / "accelerate_configs" / f"{name}.yaml"))
    assert config.distributed_type.value == ACCELERATE_CONFIGS[name]
    assert config.mixed_precision == "bf16"
    if name == "fsdp2":
        assert config.fsdp_config["fsdp_version"] == 2
    if name == "deepspeed_zero3":
        assert config.deepspeed_config["zero_stage"] == 3


def test_every_command_reads_recipes_with_the_one_parser(tmp_path):
    from rolellm.scripts import evaluate, generate, recipe, train

    bad = tmp_path / "recipe.yaml"
    bad.write_text("output_dir: out\nlearning_rat: 0.1\n")
    parsers = {
        "train": train.make_stage_parser("dpo"),
        "evaluate": evaluate.make_parser(),
        "generate rolegpt": generate.make_parser()._subparsers._group_actions[0].choices["rolegpt"],
    }
    for name, parser in parsers.items():
        assert isinstance(parser, recipe.recipe_parser_class().__mro__[1]), name
        with pytest.raises(ValueError, match=r"recipe.yaml: unknown keys \['learning_rat'\]"):
            parser.parse_args(["--config", str(bad)])


@pytest.mark.parametrize(("recipe", "config"), [("dpo-tiny-cpu", "RoleDPOConfig"), ("kto-tiny-cpu", "RoleKTOConfig")])
def test_preference_recipes_parse_into_their_stage(recipe, config):
    from rolellm.scripts.train import make_parser

    path = EXAMPLES / "recipes" / f"{recipe}.yaml"
    script_args, training_args, model_args = make_parser().parse_args_into_dataclasses(["--config", str(path)])
    assert type(training_args).__name__ == config and script_args.stage == recipe.split("-")[0]
    for key, value in yaml.safe_load(path.read_text()).items():
        parsed = {**vars(script_args), **vars(model_args), **training_args.to_dict()}
        assert parsed[key] == ([] if (key, value) == ("report_to", "none") else value), key
