"""The training script on the Chinese RoleBench release files: one process, and two CPU processes with DDP."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]


def run_script(launcher, tmp_path, tiny_model_path, rolebench_slice_dir):
    output_dir = tmp_path / "out"
    command = [
        *launcher, str(ROOT / "examples" / "train_rolellama.py"),
        "--config", str(ROOT / "examples" / "recipes" / "tiny-cpu.yaml"),
        "--model_name_or_path", str(tiny_model_path), "--data_dir", str(rolebench_slice_dir), "--dataset_configs", "zh",
        "--max_train_samples", "48", "--max_steps", "3", "--per_device_train_batch_size", "2",
        "--output_dir", str(output_dir), "--logging_steps", "1", "--disable_tqdm", "true",
    ]  # fmt: skip
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout, output_dir


@pytest.mark.slow
def test_single_process(tmp_path, tiny_model_path, rolebench_slice_dir):
    stdout, output_dir = run_script([sys.executable], tmp_path, tiny_model_path, rolebench_slice_dir)
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
