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
"""

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.scripts.recipe import dataclasses_from, make_command_parser


@dataclass
class RoleBenchArguments:
    """Which RoleBench data to train and evaluate on.

    Args:
        dataset_configs (`list[str]`, *optional*): RoleBench configs to train on, concatenated (`zh`,
            `en-instruction`, `en-role`, or a `-general` / `-role_specific` variant of one); defaults to every config
            whose train split is in `data_dir` (`rolellm.data.layout.configs_with_split`, printed), else `["zh"]`.
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
    limit = script_args.max_train_samples if split == script_args.dataset_train_split else script_args.max_eval_samples
    rows = rows.select(range(min(limit, len(rows)))) if limit is not None else rows
    if counts is not None:  # the rows each config contributes, after `limit` (which keeps the first rows)
        left = len(rows)
        for name, part in zip(script_args.dataset_configs, parts):
            counts[name], left = min(len(part), left), left - min(len(part), left)
    return rows


def default_configs(script_args) -> list[str]:
    """`--dataset_configs`, else the configs with a train split in `--data_dir` (said in one line), else `zh`."""
    if script_args.dataset_configs:
        return script_args.dataset_configs
    if script_args.data_dir is None:
        return ["zh"]
    from rolellm.data.layout import configs_with_split

    split = script_args.dataset_train_split
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


def describe_engine(accelerator) -> str:
    """How the run is distributed, in the words of the accelerate configs: `"DDP"`, `"FSDP2"`, `"DeepSpeed ZeRO-3"`,
    `""` for one process."""
    kind = accelerator.distributed_type.value
    if kind == "FSDP":
        return f"FSDP{accelerator.state.fsdp_plugin.fsdp_version}"
    if kind == "DEEPSPEED":
        return f"DeepSpeed ZeRO-{accelerator.state.deepspeed_plugin.zero_stage}"
    return "" if kind == "NO" else "DDP" if kind.startswith("MULTI_") else kind


def check_engine(training_args) -> None:
    """Refuse an accelerate config asking for FSDP or DeepSpeed on the CPU: accelerate applies either only on an
    accelerator, so the run would be plain DDP (FSDP) or one process per rank that crashes (DeepSpeed)."""
    import os

    asked = [name for name in ("FSDP", "DEEPSPEED") if os.environ.get(f"ACCELERATE_USE_{name}", "").lower() == "true"]
    if asked and training_args.device.type == "cpu":
        engine = {"FSDP": "FSDP", "DEEPSPEED": "DeepSpeed"}[asked[0]]
        raise ValueError(
            f"the accelerate config asks for {engine}, which accelerate runs only on GPUs (or other accelerators), "
            "and this run is on the CPU: launch DDP on the CPU instead (torchrun --nproc_per_node N "
            "examples/train_rolellama.py ... --use_cpu true), or run on GPUs"
        )


def train(script_args, training_args, model_args):
    """Train, save the model with its chat template and model card, print what was trained; returns the trainer."""
    from trl import get_peft_config, get_quantization_config

    from rolellm.clients.loading import check_model_source, is_adapter_checkpoint
    from rolellm.data.release import HUB_REPO_ID
    from rolellm.training.trainer import RoCITTrainer

    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }
    check_model_source(model_args.model_name_or_path)
    check_engine(training_args)
    if Path(model_args.model_name_or_path).expanduser().is_dir():  # an adapter records its base: one that resolves
        model_args.model_name_or_path = str(Path(model_args.model_name_or_path).expanduser().resolve())
    script_args.dataset_configs = default_configs(script_args)
    row_counts = {}
    train_rows = load_rows(script_args, script_args.dataset_train_split, row_counts)
    eval_rows = None
    if training_args.eval_strategy != "no":
        eval_rows = load_rows(script_args, script_args.dataset_test_split)
    trainer = RoCITTrainer(
        model_args.model_name_or_path,
        args=training_args,
        train_dataset=train_rows,
        eval_dataset=eval_rows,
        profiles=load_profiles_for(script_args, training_args),
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        dataset_name=script_args.dataset_name or script_args.data_dir or HUB_REPO_ID,
        dataset_configs=row_counts,
    )
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


def main(args):
    """The `rolellm train` entry point: `args` is the namespace of `make_parser().parse_args()`."""
    from trl import ModelConfig

    from rolellm.training.config import RoCITConfig

    if getattr(args, "stage", None) == "grpo":  # `--stage grpo`: rolellm.scripts.train_grpo, on the same data
        from rolellm.scripts.train_grpo import main as train_grpo

        return train_grpo(args, RoleBenchArguments, (default_configs, load_rows, load_profiles_for))
    train(*dataclasses_from(args, (RoleBenchArguments, RoCITConfig, ModelConfig)))


def make_parser(subparsers: argparse._SubParsersAction | None = None):
    """The recipe parser (`rolellm.scripts.recipe`) over (`RoleBenchArguments`, `RoCITConfig`, `trl.ModelConfig`)
    with `--config recipe.yaml`; flags override the recipe. `parse_args_into_dataclasses` gives the three
    dataclasses, `parse_args` the namespace `main` takes."""
    from trl import ModelConfig

    from rolellm.scripts.train_grpo import add_grpo_stage
    from rolellm.training.config import RoCITConfig

    description = "Train with RoCIT on RoleBench rows and role profiles (LoRA, QLoRA, full)."
    parser = make_command_parser("train", (RoleBenchArguments, RoCITConfig, ModelConfig), description, subparsers)
    return add_grpo_stage(parser, RoleBenchArguments)  # `--stage grpo` parses with the GRPO stage's fields


if __name__ == "__main__":
    main(make_parser().parse_args())
