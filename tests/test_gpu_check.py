"""bench/gpu_check.sh on the CPU: the table, a row's time limit, and the Python of its GPU rows at tiny sizes.

The rows themselves need a GPU (bf16, FlexAttention, 4-bit kernels, vLLM); `--dry-run` runs the same code on the
CPU with a two-layer model, so the script is exercised wherever the tests run.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows_printed(out: str) -> list[dict]:
    import json

    return [json.loads(line[len("ROW ") :]) for line in out.splitlines() if line.startswith("ROW ")]


def test_table_with_a_skipped_row_and_a_row_past_its_time_limit(tmp_path):
    """`gpu_check.sh --dry-run`: every row in one table; a row past its limit is FAIL with the reason, exit 1."""
    assert (ROOT / "bench" / "gpu_check.sh").stat().st_mode & 0o111  # executable
    command = [sys.executable, str(SCRIPT), "--dry-run", "--rows", "vllm,packing", "--row-timeout", "1.5",
               "--work", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("rolellm GPU check: ") and "(dry run on the CPU, tiny sizes)" in lines[0]
    assert lines[2:4] == ["| row | status | result | seconds |", "|---|---|---|---|"]
    vllm_result = "vllm not installed" if importlib.util.find_spec("vllm") is None else "vLLM needs a GPU"
    assert lines[4].startswith(f"| vllm | SKIP | {vllm_result} | ")
    assert lines[5] == "| packing | FAIL | timed out after 1.5 s | 1.5 |"
    assert len(lines) == 6


@pytest.mark.slow
def test_packing_and_qlora_rows_on_the_cpu(gpu_check, tmp_path, capsys, monkeypatch):
    """The packing and QLoRA rows' code, in this process, at the dry run's tiny sizes."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    args = gpu_check.make_parser().parse_args(["--dry-run", "--work", str(tmp_path)])
    gpu_check.row_packing(args)
    gpu_check.row_qlora(args)
    rows = {row["row"]: row for row in rows_printed(capsys.readouterr().out)}
    assert list(rows) == [
        "packing: RoCIT prefix-shared (sdpa)", "packing: TRL packing (sdpa)", "packing: ratio", "qlora",
    ]  # fmt: skip
    assert all(row["status"] == "PASS" for row in rows.values()), rows
    for label in ("RoCIT prefix-shared (sdpa)", "TRL packing (sdpa)"):
        result = rows[f"packing: {label}"]["result"]
        assert "tok/s" in result and "MFU n/a (no known peak); 2 timed steps of 2 rows x 512" in result
    assert rows["packing: ratio"]["result"].startswith("prefix-shared / TRL packing, trained tokens per second: ")
    assert rows["qlora"]["result"].startswith("14 4-bit NF4 layers + LoRA r=16")  # 7 linear layers x 2 blocks
