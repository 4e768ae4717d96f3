"""The quickstart notebook runs top to bottom (its cells in order, in one namespace, as its kernel runs them), trains
the tiny model and prints role answers."""

from pathlib import Path

from fixtures.examples import run_notebook


NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs():
    outputs = run_notebook(NOTEBOOK)
    text = "\n".join(outputs)
    assert "num_rows: 24" in text  # 12 English + 12 Chinese training rows of the sample
    assert "你是孙悟空，你的性格和背景是" in text
    assert "samples per subset: {'general': 32, 'role_specific': 8}" in text
    assert "[孙悟空] 下雨天适合做什么？ ->" in text and "[Long John Silver] What should I cook for dinner? ->" in text
    losses = [line for line in text.splitlines() if line.startswith("loss ")]
    first, last = (float(x) for x in losses[0].split(";")[0].removeprefix("loss ").split(" -> "))
    assert last < first
