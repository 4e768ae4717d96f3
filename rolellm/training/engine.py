"""What every stage of `rolellm train` checks before it loads a model: the model source, the distributed engine (and
the engines a CPU cannot run), the model flags that reach the trainer's loading."""

import os
from pathlib import Path


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
    asked = [name for name in ("FSDP", "DEEPSPEED") if os.environ.get(f"ACCELERATE_USE_{name}", "").lower() == "true"]
    if asked and training_args.device.type == "cpu":
        engine = {"FSDP": "FSDP", "DEEPSPEED": "DeepSpeed"}[asked[0]]
        raise ValueError(
            f"the accelerate config asks for {engine}, which accelerate runs only on GPUs (or other accelerators), "
            "and this run is on the CPU: launch DDP on the CPU instead (torchrun --nproc_per_node N "
            "examples/train_rolellama.py ... --use_cpu true), or run on GPUs"
        )


def check_output_dir(model_args, training_args) -> None:
    """Refuse an `output_dir` that is a file (the run would fail at its first save, after training), or that holds
    another run's adapter (`adapter_config.json`) when this run saves a full model: the adapter's files would stay
    beside the new weights, and every loader would take the folder for the old adapter."""
    from rolellm.clients.loading import ADAPTER_CONFIG, is_adapter_checkpoint
    from rolellm.roles.profile import check_output_folder

    check_output_folder(training_args.output_dir)
    stale = Path(training_args.output_dir) / ADAPTER_CONFIG
    saves_adapter = model_args.use_peft or is_adapter_checkpoint(model_args.model_name_or_path)
    if stale.is_file() and not saves_adapter and training_args.resume_from_checkpoint is None:
        raise ValueError(
            f"--output_dir {training_args.output_dir} holds an adapter of another run ({ADAPTER_CONFIG}) and this run "
            "saves a full model, which would load as that adapter: pass a new --output_dir or empty it"
        )


def prepare_start(model_args, training_args) -> None:
    """Before a stage loads its model: refuse a model source that does not exist and an engine this machine cannot
    run, put a GGUF file's dequantized folder in its place (`check_model_source`), make a local folder's path absolute
    (an adapter records its base by that path, which must resolve later), and hand `trl.ModelConfig`'s loading flags
    to the trainer (`training_args.model_init_kwargs`, where flags the user set there win)."""
    from rolellm.clients.loading import check_model_source

    model_args.model_name_or_path = check_model_source(model_args.model_name_or_path)
    check_engine(training_args)
    check_output_dir(model_args, training_args)
    folder = Path(model_args.model_name_or_path).expanduser()
    if folder.is_dir():
        model_args.model_name_or_path = str(folder.resolve())
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
        **(training_args.model_init_kwargs or {}),
    }


# Fewer optimizer steps than this and a run barely moves the model, whatever its learning rate: the warning's bound.
TINY_RUN_STEPS = 10


def planned_steps(trainer) -> tuple[int, int]:
    """The optimizer steps `trainer.train()` will make and the batches of one epoch on this process (the training
    rows after packing, divided by the batch size), as `transformers.Trainer` computes them when training starts
    (`set_initial_training_values`)."""
    *_, batches, steps = trainer.set_initial_training_values(trainer.args, trainer.get_train_dataloader())
    return steps, batches


def announce_plan(trainer, command: str = "rolellm train") -> int:
    """Print how many optimizer steps the run will make and from what (rows, batch, accumulation, processes,
    epochs), and warn when they are too few to teach the model anything (`TINY_RUN_STEPS`); returns the steps.

    Small data packed into long rows makes few batches: 68 questions in 2,048-token packed rows and a batch of 8 is
    one or two steps an epoch. The warning names the settings that give more steps.
    """
    args = trainer.args
    steps, batches = planned_steps(trainer)
    rows = len(trainer.train_dataset)
    how = (
        f"max_steps={args.max_steps}"
        if args.max_steps > 0
        else f"{batches} batches an epoch x {args.num_train_epochs:g} epochs / accumulation {args.gradient_accumulation_steps}"
    )
    trainer.accelerator.print(
        f"{command}: {steps} optimizer steps ({rows} training rows, batch {args.per_device_train_batch_size} x "
        f"{trainer.accelerator.num_processes} process(es); {how})"
    )
    if steps < TINY_RUN_STEPS:
        max_length = getattr(args, "max_length", None)
        shorter = f" or --max_length (now {max_length}: more, shorter packed rows)" if max_length else ""
        trainer.accelerator.print(
            f"{command}: warning: only {steps} optimizer steps, too few for the model to learn much: lower "
            f"--per_device_train_batch_size or --gradient_accumulation_steps{shorter}, or raise --num_train_epochs "
            "(small data on a small model: examples/recipes/smollm2-cpu.yaml)"
        )
    return steps
