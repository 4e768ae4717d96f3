"""`examples/evaluate_rolebench.py` runs and writes one table with the RoleGPT row and the model's rows."""

import importlib.util
from pathlib import Path

import pytest
from test_rouge import release_pairs

from rolellm.rouge.score import rouge_l


@pytest.mark.slow
def test_example_writes_the_combined_report(rolebench_slice_dir, tmp_path, capsys):
    screenplay_dir = rolebench_slice_dir.parent / "roleglm-screenplay"
    path = Path(__file__).parents[1] / "examples" / "evaluate_rolebench.py"
    spec = importlib.util.spec_from_file_location("evaluate_rolebench", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(
        ["--data_dir", str(rolebench_slice_dir), "--screenplay_dir", str(screenplay_dir), "--output_dir", str(tmp_path),
         "--modes", "system", "few-shot-dialogue", "--max_samples_per_role", "1"]
    )  # fmt: skip
    table = (tmp_path / "few-shot-dialogue" / "results.md").read_text(encoding="utf-8").split("### Answer lengths")[0]
    rows = [line for line in table.splitlines() if line.startswith("| RoleGPT") or line.startswith("| tiny-llama")]
    assert [row.split(" | ")[:2] for row in rows] == [
        ["| RoleGPT", "–"], ["| tiny-llama", "system"], ["| tiny-llama", "few-shot-dialogue"]
    ]  # fmt: skip
    # the full release: "| RoleGPT | – | 0.5707 | n/a | 0.2478 |" (`test_full_release.py`); the slice's own figures here
    cus = rouge_l(*release_pairs(rolebench_slice_dir, "rolebench-zh/general"))
    spe = rouge_l(*release_pairs(rolebench_slice_dir, "rolebench-zh/role_specific"))
    assert f"| RoleGPT | – | {cus:.4f} | n/a | {spe:.4f} |" in capsys.readouterr().out
