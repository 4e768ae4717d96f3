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
    command = [sys.executable, str(SCRIPT), "--dry-run", "--rows", "vllm,packing", "--row-timeout", "0.5",
               "--work", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("rolellm GPU check: ") and "(dry run on the CPU, tiny sizes)" in lines[0]
    assert lines[2:4] == ["| row | status | result | seconds |", "|---|---|---|---|"]
    vllm_result = "vllm not installed" if importlib.util.find_spec("vllm") is None else "vLLM needs a GPU"
    assert lines[4].startswith(f"| vllm | SKIP | {vllm_result} | ")
    assert lines[5] == "| packing | FAIL | timed out after 0.5 s | 0.5 |"
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
        "packing: rocit (sdpa)", "packing: trl-flex-compile (sdpa)", "packing: ratio", "qlora",
    ]  # fmt: skip
    assert all(row["status"] == "PASS" for row in rows.values()), rows
    for label in ("rocit (sdpa)", "trl-flex-compile (sdpa)"):
        result = rows[f"packing: {label}"]["result"]
        assert "tok/s" in result and "MFU n/a (no known peak); Liger off" in result
        assert "2 timed steps of 2 rows x 512" in result
    assert rows["packing: ratio"]["result"].startswith(
        "rocit / trl-flex-compile (TRL's fastest here), 16 rows a step, trained tokens per second: "
    )
    assert rows["qlora"]["result"].startswith("14 4-bit NF4 layers + LoRA r=16")  # 7 linear layers x 2 blocks


def test_attended_pairs_and_useful_flops_count_what_the_mask_allows(gpu_check):
    """The MFU's attention term counts the (query, key) pairs the prefix-shared mask allows, and the padding-free
    count equals it for the same samples without a shared prefix; the FLOPs add the three terms of the formula."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    # a shared prompt (segment 0) and two samples behind it, then a sample on its own and padding
    segments = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, -1, -1]])
    prefixes = torch.tensor([[0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 3, -1, -1]])
    q, kv = torch.meshgrid(torch.arange(13), torch.arange(13), indexing="ij")
    seg, pre = segments[0], prefixes[0]
    allowed = (kv <= q) & ((seg[q] == seg[kv]) | (pre[q] == seg[kv])) & (seg[q] >= 0)
    assert (
        gpu_check.prefix_shared_pairs(segments, prefixes) == int(allowed.sum()) == 6 + (3 + 2 * 3) + (10 + 4 * 3) + 3
    )

    collated = {"input_ids": torch.zeros(1, 9, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]]),
                "labels": torch.zeros(1, 9, dtype=torch.long)}  # fmt: skip
    counter = gpu_check.BatchCounter(lambda examples: collated)
    counter([])
    assert counter.batches == [(9, 8, 6 + 3 + 10)]

    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=100, tie_word_embeddings=True)  # fmt: skip
    model = LlamaForCausalLM(config)
    body = sum(p.numel() for p in model.parameters()) - 16 * 100
    assert gpu_check.model_flops(model, 10, 4, 30) == 6 * body * 10 + 6 * 16 * 100 * 4 + 12 * 2 * 16 * 30
