"""The training matrix: `examples/train_rolellama.py` (= `rolellm train`) under each engine of
`examples/accelerate_configs/`, full fine-tuning and LoRA, with the loss of every step equal to one process's.

On the CPU, DDP runs as two processes over gloo (`torchrun`). accelerate 1.15 applies FSDP and DeepSpeed only on an
accelerator: launched on a CPU, an FSDP config trains plain DDP and a DeepSpeed config starts one single-rank run per
process, so `rolellm train` refuses both there (tested below) and their tests are marked `gpu`, as are the DDP tests
on CUDA. The reference is one process with the whole batch (`world size * per-device batch`), run in this process.
"""

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.examples import run_example
from fixtures.prewarmed import TRAINING, prewarmed


ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "accelerate_configs"
STEPS = 3
PER_DEVICE_BATCH = 2
# LoRA without dropout: dropout draws a different mask on each process, so no two runs would agree
VARIANTS = {
    "full": [],
    "lora": ["--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16", "--lora_target_modules", "all-linear",
             "--lora_dropout", "0"],
}  # fmt: skip


def cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def script_args(output_dir, tiny_model_path, rolebench_slice_dir, batch, variant="full", cuda=False):
    return [
        "--config", str(ROOT / "examples" / "recipes" / "tiny-cpu.yaml"),
        "--model_name_or_path", str(tiny_model_path), "--data_dir", str(rolebench_slice_dir), "--dataset_configs", "zh",
        "--max_train_samples", "48", "--max_steps", str(STEPS), "--per_device_train_batch_size", str(batch),
        "--output_dir", str(output_dir), "--logging_steps", "1", "--disable_tqdm", "true",
        # fp32 on CUDA too: the comparison is to 1e-5
        *(["--use_cpu", "false", "--bf16", "false"] if cuda else []), *VARIANTS[variant],
    ]  # fmt: skip


def logged_losses(output_dir) -> list[float]:
    """The loss of every step, at full precision, from the `trainer_state.json` that `rolellm train` writes."""
    history = json.loads((Path(output_dir) / "trainer_state.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry]


def train_one_process(tmp_path, tiny_model_path, rolebench_slice_dir, variant, batch, cuda=False):
    """`python examples/train_rolellama.py ...`, run in this process (a new one would pay its imports again)."""
    output_dir = tmp_path / f"one-{variant}"
    args = script_args(output_dir, tiny_model_path, rolebench_slice_dir, batch, variant, cuda)
    return run_example("train_rolellama.py", *args), output_dir


def launch(launcher, env, tmp_path, tiny_model_path, rolebench_slice_dir, variant, cuda=False):
    """`python LAUNCHER... examples/train_rolellama.py ARGS`; on the CPU the launcher and its ranks are forked from one
    process that imported torch and TRL once (tests/fixtures/prewarmed.py), on CUDA they are new interpreters."""
    output_dir = tmp_path / f"launched-{variant}"
    args = script_args(output_dir, tiny_model_path, rolebench_slice_dir, PER_DEVICE_BATCH, variant, cuda)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **env}
    with contextlib.ExitStack() as stack:
        python = sys.executable
        if not cuda:
            env = stack.enter_context(prewarmed(env, tmp_path / "bin", TRAINING))
            python = str(tmp_path / "bin" / "python")
        command = [python, *launcher, str(ROOT / "examples" / "train_rolellama.py"), *args]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout, output_dir


def assert_same_losses(launched_dir, one_dir):
    launched, one = logged_losses(launched_dir), logged_losses(one_dir)
    assert len(launched) == len(one) == STEPS
    assert launched == pytest.approx(one, abs=1e-5, rel=0), (launched, one)


@pytest.mark.slow
def test_single_process(tmp_path, tiny_model_path, rolebench_slice_dir, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    stdout, output_dir = train_one_process(tmp_path, tiny_model_path, rolebench_slice_dir, "full", PER_DEVICE_BATCH)
    assert f"roles in {STEPS} steps on 1 process(es); saved to" in stdout
    assert (output_dir / "model.safetensors").is_file()
    assert (output_dir / "chat_template.jinja").is_file()
    card = (output_dir / "README.md").read_text()
    assert "role-conditioned instruction tuning (RoCIT)" in card and str(rolebench_slice_dir) in card
    assert len(logged_losses(output_dir)) == STEPS


@pytest.mark.slow
@pytest.mark.parametrize("variant", [pytest.param("full", marks=pytest.mark.exhaustive), "lora"])
def test_ddp_two_cpu_processes_train_as_one(variant, tmp_path, tiny_model_path, rolebench_slice_dir, monkeypatch):
    """DDP over gloo, 2 processes x 2 rows, against 1 process x 4 rows: the same loss at every step."""
    port = str(29517 + list(VARIANTS).index(variant))  # one port per test: pytest-xdist may run them at once
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", port]
    stdout, launched_dir = launch(
        launcher, {"ACCELERATE_USE_CPU": "1"}, tmp_path, tiny_model_path, rolebench_slice_dir, variant
    )
    assert f"in {STEPS} steps on 2 process(es) (DDP); saved to" in stdout
    weights = "adapter_model.safetensors" if variant == "lora" else "model.safetensors"
    assert (launched_dir / weights).is_file()
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    _, one_dir = train_one_process(tmp_path, tiny_model_path, rolebench_slice_dir, variant, 2 * PER_DEVICE_BATCH)
    assert_same_losses(launched_dir, one_dir)


@pytest.mark.parametrize("engine", ["FSDP", "DEEPSPEED"])
def test_fsdp_and_deepspeed_configs_are_refused_on_the_cpu(engine, tmp_path, tiny_model_path, monkeypatch, capsys):
    """What `accelerate launch --config_file fsdp2.yaml` (or the DeepSpeed one) sets, on a CPU: exit 2 before the
    model is loaded, instead of an unsharded DDP run or a crash."""
    from rolellm.scripts import cli

    monkeypatch.setenv(f"ACCELERATE_USE_{engine}", "true")
    code = cli.main(["train", "--model_name_or_path", str(tiny_model_path), "--output_dir", str(tmp_path / "out"),
                     "--use_cpu", "true"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    if engine == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:  # transformers asks for it first
        assert "rolellm train: a package is missing:" in err and "'deepspeed>=" in err
    else:
        name = {"FSDP": "FSDP", "DEEPSPEED": "DeepSpeed"}[engine]
        assert f"the accelerate config asks for {name}, which accelerate runs only on GPUs" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ CUDA
GPU_ENGINES = {
    "ddp": ("multi_gpu.yaml", "DDP"),
    "fsdp2": ("fsdp2.yaml", "FSDP2"),
    "deepspeed_zero3": ("deepspeed_zero3.yaml", "DeepSpeed ZeRO-3"),
}


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["full", "lora"])
@pytest.mark.parametrize("engine", list(GPU_ENGINES))
def test_engines_on_cuda_train_as_one_process(engine, variant, tmp_path, tiny_model_path, rolebench_slice_dir):
    """`accelerate launch --config_file examples/accelerate_configs/<engine>.yaml` on up to two GPUs (one GPU still
    runs the engine's wrapping, sharding and all-gathers over a single rank), fp32, against one plain process."""
    gpus = cuda_devices()
    if not gpus:
        pytest.skip("needs a CUDA GPU")
    if engine == "deepspeed_zero3":
        pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install deepspeed)")
    if engine == "ddp" and gpus < 2:
        pytest.skip("DDP needs two GPUs (one GPU is the single-process reference itself)")
    config, name = GPU_ENGINES[engine]
    processes = min(gpus, 2)
    port = 29520 + 2 * list(GPU_ENGINES).index(engine) + list(VARIANTS).index(variant)
    launcher = [
        "-m", "accelerate.commands.launch", "--config_file", str(CONFIGS / config),
        "--num_processes", str(processes), "--mixed_precision", "no", "--main_process_port", str(port),
    ]  # fmt: skip
    stdout, launched_dir = launch(
        launcher, {"ACCELERATE_USE_CPU": "0"}, tmp_path, tiny_model_path, rolebench_slice_dir, variant, cuda=True
    )
    assert f"in {STEPS} steps on {processes} process(es) ({name}); saved to" in stdout
    weights = "adapter_model.safetensors" if variant == "lora" else "model.safetensors"
    assert (launched_dir / weights).is_file()  # a folder `from_pretrained` loads, not per-rank shards
    _, one_dir = train_one_process(
        tmp_path, tiny_model_path, rolebench_slice_dir, variant, processes * PER_DEVICE_BATCH, cuda=True
    )
    assert_same_losses(launched_dir, one_dir)
