"""The release's constants are defined once (rolellm.data.release, the language folders in rolellm.roles.release);
the copies that cannot import them (README files) hold the same text."""

import ast
import re
from pathlib import Path

import rolellm
from rolellm.data.release import CITATION


PACKAGE = Path(rolellm.__file__).parent
ROOT = PACKAGE.parent


def code_files():
    return [path for path in PACKAGE.rglob("*.py") if path.name != "release.py"]


def test_the_citation_names_every_author_of_the_paper():
    authors = re.search(r"author\s*=\s*\{(.*?)\}", CITATION, re.S).group(1)
    names = [name.strip() for name in re.split(r"\s+and\s+", " ".join(authors.split()))]
    assert len(names) == 17 and names[0] == "Zekun Moore Wang" and names[-1] == "Junran Peng"
    assert "Jian Yang" in names and "Stephen W. Huang" in names


def test_readmes_carry_the_one_citation():
    for readme in (ROOT / "README.md", PACKAGE / "metrics" / "rolebench_rouge" / "README.md"):
        assert CITATION in readme.read_text(encoding="utf-8"), readme


def string_constants(path: Path) -> list[str]:
    """The string literals of a module's code (docstrings and their examples left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_no_module_keeps_its_own_copy_of_a_release_constant():
    copies = []
    for path in code_files():
        for text in string_constants(path):
            if "@article{" in text or "Zekun" in text:
                copies.append(f"{path}: a BibTeX entry")
            if "ZenMoore/RoleBench" in text and "ZenMoore/RoleBench/" not in text:
                copies.append(f"{path}: the Hub id")
            if text in ("eng", "profiles-eng", "rolebench-eng", "instructions-eng"):
                copies.append(f"{path}: the English folder name {text!r}")
    assert copies == []


def test_the_builder_and_the_metric_cite_the_paper_with_it():
    import evaluate

    from rolellm.data.builder import RoleBench
    from rolellm.scripts.push_metric import METRICS_DIR

    assert RoleBench(config_name="zh", data_dir=str(ROOT)).info.citation == CITATION
    metric = evaluate.load(str(METRICS_DIR / "rolebench_rouge"))
    assert metric.citation == CITATION
