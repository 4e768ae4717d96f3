"""`rolellm train`: train a role-playing model with RoCIT (RoleLLM stage 4) on RoleBench rows + role profiles.

The same script runs as `rolellm train ...`, `python examples/train_rolellama.py ...` and under `accelerate launch`
or `torchrun`. The RoleLLaMA recipe of the paper (LLaMA-7B, English, LoRA) and the others are in `examples/recipes/`:

```bash
# one process (GPU or CPU)
rolellm train --config examples/recipes/rolellama-7b-lora.yaml
# several GPUs: DDP, FSDP2 or DeepSpeed ZeRO-3 through an accelerate config
accelerate launch --config_file examples/accelerate_configs/multi_gpu.yaml examples/train_rolellama.py \
    --config examples/recipes/rolellama-7b-lora.yaml
torchrun --nproc_per_node 8 examples/train_rolellama.py --config examples/recipes/roleglm-qwen2.5-7b-lora.yaml
# the tiny CPU recipe of `make demo`, on the bundled sample (any field of a recipe can be overridden)
python examples/train_rolellama.py --config examples/recipes/tiny-cpu.yaml --model_name_or_path ./tiny-llama
```

Data come from a local RoleBench release folder (`--data_dir`), a dataset in the Hub layout (`--dataset_name`,
e.g. one exported by `rolellm`), or the official release on the Hub when neither is given. Profiles are the
release's in `--data_dir` (the Hub's when there is no local data), with those of `--profiles` added and taking
precedence (repeatable: release folders, `desc.json`, screenplays with `--roles`, Character Cards), as
`rolellm.roles.resolve.profiles_for` decides for every command; `--roles` also keeps only those roles' rows:

```bash
rolellm train --config examples/recipes/tiny-cpu.yaml --profiles my_card.png --roles "Ada Quill"
```

`--stage` picks the training stage, each with its own configuration (and so its own flags: `rolellm train --stage
dpo --help`): `sft` (RoCIT, `RoCITConfig`, the default), `dpo` (`RoleDPOConfig`) and `kto` (`RoleKTOConfig`) on the
preference configs of `--data_dir` (`rolellm generate preferences` writes them), `grpo` (`rolellm.scripts.train_grpo`,
with its rewards and endpoints). Every stage selects its rows and profiles the same way (`rolellm.data.selection`):

```bash
rolellm train --stage dpo --config examples/recipes/dpo-tiny-cpu.yaml --model_name_or_path runs/rocit-adapter
```

`rolellm train --help` lists every flag of the stage, those of `transformers.TrainingArguments` and TRL's configs
included; the text is kept in a cache (`rolellm.scripts.recipe.cached_help`), so from the second call on it prints in a
fraction of a second, without importing torch.
"""

import argparse
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.data.selection import (
    RoleBenchArguments,
    default_configs,
    load_profiles_for,
    train_and_eval_rows,
)
from rolellm.scripts.cli import lighten_imports
from rolellm.scripts.recipe import cached_help, dataclasses_from, make_command_parser


STAGES = ("sft", "dpo", "kto", "grpo")
# stage -> (module, class) of its training configuration; `grpo` brings its own dataclasses (`train_grpo`)
STAGE_CONFIGS = {
    "sft": ("rolellm.training.config", "RoCITConfig"),
    "dpo": ("rolellm.training.preference", "RoleDPOConfig"),
    "kto": ("rolellm.training.preference", "RoleKTOConfig"),
}
DESCRIPTION = (
    "Train a role-playing model on RoleBench data and role profiles: RoCIT (--stage sft), then DPO or KTO on "
    "preference pairs, or GRPO with role-play rewards (LoRA, QLoRA, full)."
)


@dataclass
class StageArguments(RoleBenchArguments):
    """`RoleBenchArguments` and the stage: the data flags of `rolellm train --stage sft|dpo|kto`. (The GRPO stage's
    script declares `stage` among its own fields, and is given `RoleBenchArguments`.)

    Args:
        stage (`str`, *optional*, defaults to `"sft"`): the training stage, `sft`, `dpo`, `kto` or `grpo`.
    """

    stage: Literal["sft", "dpo", "kto", "grpo"] = field(
        default="sft",
        metadata={
            "help": "Training stage: sft (RoCIT), dpo or kto (on the preference configs), grpo (with role-play "
            "rewards). Each stage has its own flags: rolellm train --stage dpo --help."
        },
    )


def build_trainer(trainer_class, script_args, training_args, model_args, stage: str, counts=None, **kwargs):
    """How every stage of `rolellm train` but GRPO starts: the engine prepared (`prepare_start`), the stage's configs
    (`default_configs`), their rows (`train_and_eval_rows`, the train rows' counts per config into `counts`) and the
    profiles (`load_profiles_for`), and `trainer_class` built on them with the PEFT and quantization settings of
    `model_args`; `kwargs` go to the trainer."""
    from trl import get_peft_config, get_quantization_config

    from rolellm.training.engine import prepare_start

    prepare_start(model_args, training_args)
    script_args.dataset_configs = default_configs(script_args, stage)
    train_rows, eval_rows = train_and_eval_rows(script_args, training_args, counts)
    return trainer_class(
        model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_rows,
        eval_dataset=eval_rows,
        profiles=load_profiles_for(script_args, training_args),
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        **kwargs,
    )


def train(script_args, training_args, model_args):
    """Train, save the model with its chat template and model card, print what was trained; returns the trainer."""
    from rolellm.clients.loading import is_adapter_checkpoint
    from rolellm.data.release import HUB_REPO_ID
    from rolellm.training.engine import announce_plan, describe_engine
    from rolellm.training.trainer import RoCITTrainer

    row_counts = {}
    trainer = build_trainer(
        RoCITTrainer, script_args, training_args, model_args, "sft", counts=row_counts,
        dataset_name=script_args.dataset_name or script_args.data_dir or HUB_REPO_ID, dataset_configs=row_counts,
    )  # fmt: skip
    announce_plan(trainer)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)  # with its profiles, chat template and model card
    trainer.save_state()  # trainer_state.json: the logged losses at full precision, as transformers' examples do
    samples = trainer.role_stats["train"]["samples"]
    engine = describe_engine(trainer.accelerator)
    trainer.accelerator.print(
        f"Trained on {sum(samples.values())} samples ({samples}) of {len(trainer.role_stats['train']['roles'])} roles "
        f"in {trainer.state.global_step} steps on {trainer.accelerator.num_processes} process(es)"
        f"{f' ({engine})' if engine else ''}; "
        f"saved to {training_args.output_dir}"
    )
    if is_adapter_checkpoint(training_args.output_dir):
        trainer.accelerator.print(
            "An adapter folder: load it with rolellm.clients.loading.load_model_and_tokenizer(DIR) or "
            "pipeline('text-generation', model=DIR, tokenizer=DIR); merge it into a full model with "
            f"rolellm export {training_args.output_dir} --merge --output_dir MERGED"
        )
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=trainer.dataset_name)
    trainer.end()
    return trainer


def train_preference(script_args, training_args, model_args):
    """`--stage dpo` / `kto`: train on the preference rows of the configs, from a RoCIT checkpoint or adapter; save
    the model with its role files and model card and print what was trained. Returns the trainer."""
    from rolellm.training.engine import announce_plan
    from rolellm.training.preference import RoleDPOTrainer, RoleKTOTrainer

    trainer_class = RoleDPOTrainer if script_args.stage == "dpo" else RoleKTOTrainer
    trainer = build_trainer(
        trainer_class, script_args, training_args, model_args, script_args.stage,
        dataset_name=script_args.dataset_name or script_args.data_dir,
    )  # fmt: skip
    announce_plan(trainer)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    stats = trainer.preference_stats["train"]
    unit = "pairs" if script_args.stage == "dpo" else "labelled answers"
    dropped = f" ({stats.rows - stats.kept} dropped: {stats.dropped()})" if stats.kept < stats.rows else ""
    trainer.accelerator.print(
        f"Trained with {script_args.stage.upper()} on {stats.kept} {unit}{dropped} of {len(stats.roles)} roles in "
        f"{trainer.state.global_step} steps; saved to {training_args.output_dir}"
    )
    if training_args.push_to_hub:
        trainer.push_to_hub()
    return trainer


def stage_dataclasses(stage: str) -> tuple:
    """The dataclasses of a stage's flags: `StageArguments`, the stage's configuration, `trl.ModelConfig` (for
    `grpo`, those of the GRPO stage's script)."""
    from trl import ModelConfig

    if stage == "grpo":
        from rolellm.scripts import train_grpo

        return train_grpo.dataclass_types()
    module, name = STAGE_CONFIGS[stage]
    return StageArguments, getattr(importlib.import_module(module), name), ModelConfig


def main(args):
    """The `rolellm train` entry point: `args` is the namespace of `make_parser().parse_args()`."""
    if args.stage == "grpo":
        from rolellm.scripts import train_grpo

        return train_grpo.main(args)
    script_args, training_args, model_args = dataclasses_from(args, stage_dataclasses(args.stage))
    (train_preference if args.stage in ("dpo", "kto") else train)(script_args, training_args, model_args)


def given_stage(args: list[str]) -> str:
    """The `--stage` of a command line, else the `stage` of its `--config` recipe, else `"sft"` (a value that is no
    stage is left to the parser, which names the choices)."""
    for i, arg in enumerate(args):
        if arg == "--stage" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--stage="):
            return arg.split("=", 1)[1]
    if "--config" in args and args.index("--config") + 1 < len(args):
        import yaml

        path = Path(args[args.index("--config") + 1])
        try:
            recipe = yaml.safe_load(path.read_text(encoding="utf-8-sig")) if path.is_file() else None
        except (yaml.YAMLError, UnicodeDecodeError):
            recipe = None  # the recipe parser reports it, naming the file and line
        if isinstance(recipe, dict) and recipe.get("stage") is not None:
            return str(recipe["stage"])
    return "sft"


class TrainParser(argparse.ArgumentParser):
    """The parser of `rolellm train`: it reads `--stage` (or the recipe's `stage`) and hands the command line to the
    recipe parser of that stage's dataclasses (`make_stage_parser`); a stage's `--help` is that parser's, printed from
    the cache of help texts (`recipe.cached_help`) from the second call on, without importing torch."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        stage = given_stage(args)
        if stage not in STAGES:  # before a stage's parser reads the recipe, whose fields depend on the stage
            self.error(f"--stage (or the recipe's stage): {stage!r} is not one of {list(STAGES)}")
        if {"-h", "--help"} & set(args):
            sys.stdout.write(cached_help(f"train-{stage}", lambda: stage_help_parser(stage, self.prog)))
            self.exit()
        return make_stage_parser(stage).parse_known_args(args, namespace)

    def stage_parsers(self) -> list:
        """The recipe parsers of the stages this installation has."""
        return [make_stage_parser(stage) for stage in STAGE_CONFIGS]

    def parse_args_into_dataclasses(self, args=None, **kwargs) -> tuple:
        """`(script_args, *stage configs, model_args)` of the stage the command line (or recipe) names."""
        args = list(sys.argv[1:] if args is None else args)
        return make_stage_parser(given_stage(args)).parse_args_into_dataclasses(args, **kwargs)


def stage_help_parser(stage: str, prog: str):
    """The parser of a stage, with a usage line of one line (the stage's flags are listed below it)."""
    parser = make_stage_parser(stage)
    parser.usage = f"{prog} --stage {stage} [--config RECIPE] [--FIELD VALUE ...]"
    return parser


def make_stage_parser(stage: str = "sft", subparsers: argparse._SubParsersAction | None = None):
    """The recipe parser (`rolellm.scripts.recipe`) of one stage, over `stage_dataclasses(stage)`, with
    `--config recipe.yaml`; flags override the recipe. `parse_args_into_dataclasses` gives the dataclasses,
    `parse_args` the namespace `main` takes."""
    if stage == "grpo":
        from rolellm.scripts import train_grpo

        return train_grpo.make_parser(subparsers)
    if stage not in STAGES:
        stage = "sft"  # the parser then refuses the value of --stage, naming the stages
    return make_command_parser("train", stage_dataclasses(stage), DESCRIPTION, subparsers)


def make_parser(subparsers: argparse._SubParsersAction | None = None):
    """The parser of `rolellm train` (`TrainParser`): it imports nothing heavy until it parses a command line. Added to
    `subparsers`, it is the recipe parser of the `sft` stage."""
    lighten_imports()  # `python examples/train_rolellama.py` and `torchrun` start here, not in `rolellm`'s `main`
    if subparsers is not None:
        return make_stage_parser("sft", subparsers)
    return TrainParser(prog="rolellm train", description=DESCRIPTION, add_help=False)


if __name__ == "__main__":
    main(make_parser().parse_args())
