"""The training script on the Chinese RoleBench release files: one process, and two CPU processes with DDP."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.examples import run_example


ROOT = Path(__file__).resolve().parents[1]


def script_args(tmp_path, tiny_model_path, rolebench_slice_dir):
    return [
        "--config", str(ROOT / "examples" / "recipes" / "tiny-cpu.yaml"),
        "--model_name_or_path", str(tiny_model_path), "--data_dir", str(rolebench_slice_dir), "--dataset_configs", "zh",
        "--max_train_samples", "48", "--max_steps", "3", "--per_device_train_batch_size", "2",
        "--output_dir", str(tmp_path / "out"), "--logging_steps", "1", "--disable_tqdm", "true",
    ]  # fmt: skip


def run_script(launcher, tmp_path, tiny_model_path, rolebench_slice_dir):
    output_dir = tmp_path / "out"
    command = [
        *launcher, str(ROOT / "examples" / "train_rolellama.py"),
        *script_args(tmp_path, tiny_model_path, rolebench_slice_dir),
    ]  # fmt: skip
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout, output_dir


@pytest.mark.slow
def test_single_process(tmp_path, tiny_model_path, rolebench_slice_dir, monkeypatch):
    """`python examples/train_rolellama.py ...`, run in this process (a new one would pay its imports again)."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    output_dir = tmp_path / "out"
    stdout = run_example("train_rolellama.py", *script_args(tmp_path, tiny_model_path, rolebench_slice_dir))
    assert "roles in 3 steps on 1 process(es)" in stdout
    assert (output_dir / "model.safetensors").is_file()
    assert (output_dir / "chat_template.jinja").is_file()
    card = (output_dir / "README.md").read_text()
    assert "role-conditioned instruction tuning (RoCIT)" in card and str(rolebench_slice_dir) in card


@pytest.mark.slow
def test_ddp_two_cpu_processes(tmp_path, tiny_model_path, rolebench_slice_dir):
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517"]
    stdout, output_dir = run_script(launcher, tmp_path, tiny_model_path, rolebench_slice_dir)
    assert "in 3 steps on 2 process(es)" in stdout
    assert (output_dir / "model.safetensors").is_file()
