"""The quickstart notebook runs top to bottom (nbclient), trains the tiny model and prints role answers."""

from pathlib import Path

import pytest


NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "notebooks" / "quickstart.ipynb"


@pytest.mark.slow
def test_quickstart_notebook_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    outputs = {
        i: "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in cell.get("outputs", []))
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
    }
    text = "\n".join(outputs.values())
    assert "num_rows: 24" in text  # 12 English + 12 Chinese training rows of the sample
    assert "你是孙悟空，你的性格和背景是" in text
    assert "samples per subset: {'general': 32, 'role_specific': 8}" in text
    assert "[孙悟空] 下雨天适合做什么？ ->" in text and "[Long John Silver] What should I cook for dinner? ->" in text
    losses = [line for line in text.splitlines() if line.startswith("loss ")]
    first, last = (float(x) for x in losses[0].split(";")[0].removeprefix("loss ").split(" -> "))
    assert last < first
