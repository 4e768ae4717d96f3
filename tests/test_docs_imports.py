"""Every import path the README and the docs show imports: `from rolellm... import ...` lines, `import rolellm...`,
dotted names in backticks (`rolellm.clients.gguf.embedded_model_file()`), and names listed after a module
(`rolellm.rewards` (`reference_rouge_l`, ...)), each resolved the way a reader would type it."""

import importlib
import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FROM_IMPORT = re.compile(r"^\s*from (rolellm[\w.]*) import \(?([\w, \n]+?)\)?\s*(?:#.*)?$", re.MULTILINE)
IMPORT = re.compile(r"^\s*import (rolellm[\w.]*)", re.MULTILINE)
DOTTED = re.compile(r"`(rolellm(?:\.\w+)+)(?:\(.*?\))?`")
LISTED = re.compile(r"`(rolellm(?:\.\w+)*)` \(([^)]*)\)")


def resolve(path: str):
    """The object `path` names: the longest importable module prefix, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return value
    raise ModuleNotFoundError(path)


def shown_paths() -> list[tuple[str, str]]:
    """(page, dotted path) for every import path the pages show."""
    shown = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        for module, names in FROM_IMPORT.findall(text):
            shown += [(name, f"{module}.{n.strip()}") for n in names.replace("\n", ",").split(",") if n.strip()]
        shown += [(name, module) for module in IMPORT.findall(text)]
        shown += [(name, path) for path in DOTTED.findall(text)]
        for module, listed in LISTED.findall(text):
            shown += [(name, f"{module}.{n}") for n in re.findall(r"`(\w+)`", listed) if not n.startswith("rolellm")]
    return sorted(set(shown))


def test_the_pages_show_import_paths():
    assert len(shown_paths()) > 100  # the patterns still find what the pages show


@pytest.mark.parametrize("page,path", shown_paths(), ids=lambda value: value)
def test_every_import_path_shown_imports(page, path):
    try:
        resolve(path)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{page} shows {path}, which does not import: {error}")
