"""Which distributed engine a training run is on, and the engines a CPU cannot run, for every stage."""

import os


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
