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
preference configs of `--data_dir` (`rolellm generate preferences` writes them), `grpo` (the GRPO stage's script,
`rolellm.scripts.train_grpo`, given `RoleBenchArguments` and the data functions of this script: its `make_parser`,
`dataclass_types` and `main`; where it is not installed, `--stage grpo` is an error saying so):

```bash
rolellm train --stage dpo --config examples/recipes/dpo-tiny-cpu.yaml --model_name_or_path runs/rocit-adapter
```

`rolellm train --help` reads the flags from the source of the configurations (`rolellm.scripts.recipe.source_fields`),
so it prints in a fraction of a second, without importing torch.
"""

import argparse
import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.scripts.cli import lighten_imports
from rolellm.scripts.recipe import dataclasses_from, make_command_parser, source_help_parser


STAGES = ("sft", "dpo", "kto", "grpo")
# stage -> (module, class) of its training configuration; `grpo` brings its own dataclasses (`GRPO_SCRIPT`)
STAGE_CONFIGS = {
    "sft": ("rolellm.training.config", "RoCITConfig"),
    "dpo": ("rolellm.training.preference", "RoleDPOConfig"),
    "kto": ("rolellm.training.preference", "RoleKTOConfig"),
}
GRPO_SCRIPT = "rolellm.scripts.train_grpo"
MODEL_CONFIG = ("trl.trainer.model_config", "ModelConfig")
DESCRIPTION = (
    "Train a role-playing model on RoleBench data and role profiles: RoCIT (--stage sft), then DPO or KTO on "
    "preference pairs, or GRPO with role-play rewards (LoRA, QLoRA, full)."
)


@dataclass
class RoleBenchArguments:
    """Which RoleBench data to train and evaluate on.

    Args:
        dataset_configs (`list[str]`, *optional*): RoleBench configs to train on, concatenated (`zh`,
            `en-instruction`, `en-role`, or a `-general` / `-role_specific` variant of one; for `--stage dpo` the
            `-preference` configs, for `kto` the `-unpaired` ones); defaults to every such config whose train split
            is in `data_dir` (`rolellm.data.layout.configs_with_split`, printed), else `["zh"]`.
        data_dir (`str`, *optional*): a local folder in the release layout; `None` uses `dataset_name` or the Hub.
        dataset_name (`str`, *optional*): a dataset in the Hub layout (a Hub id or a local folder), loaded with
            `datasets.load_dataset(dataset_name, config)`.
        dataset_train_split (`str`, *optional*, defaults to `"train"`), dataset_test_split (`str`, *optional*,
            defaults to `"test"`): the splits; evaluation runs only when `eval_strategy` is not `"no"`.
        max_train_samples (`int`, *optional*), max_eval_samples (`int`, *optional*): keep the first rows only.
        roles (`list[str]`, *optional*): train only on these roles' rows (spelled as in the data or not), and read
            these roles from a screenplay file given in `profiles`.
    """

    dataset_configs: list[str] | None = field(
        default=None,
        metadata={"help": "RoleBench configs (default: those with a train split in --data_dir, else zh)."},
    )
    data_dir: str | None = field(default=None, metadata={"help": "Local RoleBench release folder."})
    dataset_name: str | None = field(default=None, metadata={"help": "Dataset in the Hub layout (id or folder)."})
    dataset_train_split: str = field(default="train", metadata={"help": "Training split."})
    dataset_test_split: str = field(default="test", metadata={"help": "Evaluation split."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep the first N evaluation rows."})
    roles: list[str] | None = field(
        default=None, metadata={"help": "Only these roles' rows; the roles read from a screenplay file in --profiles."}
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


def load_rows(script_args, split, counts: dict | None = None):
    """The rows of `split` of every config in `dataset_configs`, concatenated; `counts` gets config -> rows."""
    import datasets

    from rolellm.data.builder import load_rolebench
    from rolellm.roles.lookup import RoleNames

    parts = []
    for name in script_args.dataset_configs:
        if script_args.dataset_name is not None:
            parts.append(datasets.load_dataset(script_args.dataset_name, name, split=split))
        else:
            parts.append(load_rolebench(name, data_dir=script_args.data_dir, splits=[split])[split])
    rows = datasets.concatenate_datasets(parts)
    if script_args.roles:
        names = RoleNames(rows.unique("role"), where=f"the {split} rows")
        wanted = {names.find(role) for role in script_args.roles} - {None}
        rows = rows.filter(lambda row: row["role"] in wanted)
        if not len(rows):
            raise ValueError(
                f"--roles {script_args.roles}: no {split} row of these roles in {script_args.dataset_configs}; "
                f"the roles of the data: {sorted(names)}"
            )
    flag = "max_train_samples" if split == script_args.dataset_train_split else "max_eval_samples"
    limit = getattr(script_args, flag)
    if limit is not None and limit < 1:
        raise ValueError(f"--{flag} {limit}: keep at least 1 row (leave it out to keep every row)")
    rows = rows.select(range(min(limit, len(rows)))) if limit is not None else rows
    if not len(rows):
        raise ValueError(
            f"no {split} row to train or evaluate on in {script_args.dataset_configs}: the files are empty"
        )
    if counts is not None:  # the rows each config contributes, after `limit` (which keeps the first rows)
        left = len(rows)
        for name, part in zip(script_args.dataset_configs, parts):
            counts[name], left = min(len(part), left), left - min(len(part), left)
    return rows


def train_and_eval_rows(script_args, training_args, counts: dict | None = None):
    """The rows of the train split (their counts per config into `counts`), and of the test split when the run
    evaluates (`eval_strategy` other than `"no"`), else None: what every stage trains and evaluates on."""
    train_rows = load_rows(script_args, script_args.dataset_train_split, counts)
    if training_args.eval_strategy == "no":
        return train_rows, None
    return train_rows, load_rows(script_args, script_args.dataset_test_split)


def default_configs(script_args, stage: str = "sft") -> list[str]:
    """`--dataset_configs`, else the configs with a train split in `--data_dir` (said in one line; for `stage` `dpo`
    the preference configs, for `kto` the unpaired ones), else `zh`."""
    if script_args.dataset_configs:
        return script_args.dataset_configs
    kind = {"dpo": "preference", "kto": "unpaired"}.get(stage)
    if script_args.data_dir is None:
        if kind is not None:
            raise ValueError(
                f"--stage {stage} trains on preference data: give --data_dir (a folder `rolellm generate "
                "preferences` wrote) or --dataset_name with --dataset_configs"
            )
        return ["zh"]
    from rolellm.data.layout import CONFIG_SPECS, available_splits, configs_with_split

    if not Path(script_args.data_dir).is_dir():
        raise FileNotFoundError(f"--data_dir {script_args.data_dir}: no such folder (a RoleBench release folder)")
    split = script_args.dataset_train_split
    if kind is not None:
        found = [
            name
            for name, spec in CONFIG_SPECS.items()
            if spec.kind == kind and split in available_splits(script_args.data_dir, name)
        ]
        if not found:
            raise FileNotFoundError(
                f"--data_dir {script_args.data_dir} holds no {kind} {split} split for --stage {stage} "
                f"(<release part>/{kind}/{split}.jsonl): write one with rolellm generate preferences"
            )
        print(f"rolellm train: training on the {kind} configs in {script_args.data_dir}: {' '.join(found)}")
        return found
    found = configs_with_split(script_args.data_dir, split)
    if not found:
        raise FileNotFoundError(
            f"--data_dir {script_args.data_dir} holds no RoleBench {split} split (rolebench-zh/ or rolebench-eng/ "
            f"with general/{split}.jsonl or role_specific/{split}.jsonl)"
        )
    print(f"rolellm train: training on the configs with a {split} split in {script_args.data_dir}: {' '.join(found)}")
    return found


def load_profiles_for(script_args, training_args):
    """The profiles to train with (`rolellm.roles.resolve.profiles_for`): the release's in `--data_dir`, with
    `--profiles` added; the release's on the Hub when neither is given."""
    from rolellm.data.builder import load_rolebench_profiles
    from rolellm.roles.lookup import Profiles
    from rolellm.roles.resolve import profiles_for

    if training_args.profiles or script_args.data_dir is not None:
        return profiles_for(training_args.profiles, data_dir=script_args.data_dir, roles=script_args.roles)
    langs = sorted({"zh" if name.startswith("zh") else "en" for name in script_args.dataset_configs})
    return Profiles({name: p for lang in langs for name, p in load_rolebench_profiles(lang).items()})


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


def grpo_script():
    """The GRPO stage's script module (`GRPO_SCRIPT`): `make_parser(RoleBenchArguments)`,
    `dataclass_types(RoleBenchArguments)` and `main(args, RoleBenchArguments, (default_configs, load_rows,
    load_profiles_for))`; an error saying so where this installation has none."""
    try:
        return importlib.import_module(GRPO_SCRIPT)
    except ModuleNotFoundError as error:
        if error.name != GRPO_SCRIPT:
            raise
        raise ValueError(
            f"--stage grpo is not available in this installation of rolellm ({GRPO_SCRIPT} is missing); the stages "
            "here are sft, dpo and kto"
        ) from None


def stage_dataclasses(stage: str) -> tuple:
    """The dataclasses of a stage's flags: `StageArguments`, the stage's configuration, `trl.ModelConfig` (for
    `grpo`, those of the GRPO stage's script)."""
    from trl import ModelConfig

    if stage == "grpo":
        return grpo_script().dataclass_types(RoleBenchArguments)
    module, name = STAGE_CONFIGS[stage]
    return StageArguments, getattr(importlib.import_module(module), name), ModelConfig


def main(args):
    """The `rolellm train` entry point: `args` is the namespace of `make_parser().parse_args()`."""
    if args.stage == "grpo":
        return grpo_script().main(args, RoleBenchArguments, (default_configs, load_rows, load_profiles_for))
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
    recipe parser of that stage's dataclasses (`make_stage_parser`); `--help` of `sft`, `dpo` and `kto` is printed from
    the configurations' source (`source_help_parser`), without importing torch, transformers or TRL."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        stage = given_stage(args)
        if stage not in STAGES:  # before a stage's parser reads the recipe, whose fields depend on the stage
            self.error(f"--stage (or the recipe's stage): {stage!r} is not one of {list(STAGES)}")
        if {"-h", "--help"} & set(args) and stage in STAGE_CONFIGS:
            classes = [(__name__, "StageArguments"), STAGE_CONFIGS[stage], MODEL_CONFIG]
            source_help_parser(self.prog, f"{DESCRIPTION} Stage: {stage}.", classes).print_help()
            self.exit()
        return make_stage_parser(stage).parse_known_args(args, namespace)

    def stage_parsers(self) -> list:
        """The recipe parsers of the stages this installation has."""
        return [make_stage_parser(stage) for stage in STAGE_CONFIGS]

    def parse_args_into_dataclasses(self, args=None, **kwargs) -> tuple:
        """`(script_args, *stage configs, model_args)` of the stage the command line (or recipe) names."""
        args = list(sys.argv[1:] if args is None else args)
        return make_stage_parser(given_stage(args)).parse_args_into_dataclasses(args, **kwargs)


def make_stage_parser(stage: str = "sft", subparsers: argparse._SubParsersAction | None = None):
    """The recipe parser (`rolellm.scripts.recipe`) of one stage, over `stage_dataclasses(stage)`, with
    `--config recipe.yaml`; flags override the recipe. `parse_args_into_dataclasses` gives the dataclasses,
    `parse_args` the namespace `main` takes."""
    if stage == "grpo":
        return grpo_script().make_parser(RoleBenchArguments, subparsers)
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
