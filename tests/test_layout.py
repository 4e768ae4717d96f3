"""The package layout is the pipeline: every stage folder imports only the stages before it, no module imports
itself back through others (lazy imports inside functions included), and private names stay in their module."""

import ast
from pathlib import Path

import rolellm


PACKAGE = Path(rolellm.__file__).parent
# Stage folders bottom-up; a module may import its own folder and the folders before it.
FLOORS = [
    "roles", "rouge", "data", "encoding", "clients", "generation", "training", "evaluation", "rewards", "metrics",
    "lm_eval_tasks", "scripts",
]  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, top_level_only: bool) -> set[str]:
    """`from pkg import mod` counts as importing `pkg.mod`, `from pkg.mod import name` as importing `pkg.mod`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
    names = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "__version__")
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "rolellm" or name.startswith("rolellm.")}


def import_graph(top_level_only: bool) -> dict[str, set[str]]:
    modules = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in imported_modules(path, top_level_only):
            while imported not in modules and "." in imported:  # a name inside a module -> the module
                imported = imported.rsplit(".", 1)[0]
            if imported in modules and imported != name:
                targets.add(imported)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def floor(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else None


def test_no_import_cycle_at_module_level():
    assert find_cycle(import_graph(top_level_only=True)) is None


def test_no_import_cycle_including_imports_inside_functions():
    # Package __init__ files re-export their own submodules; leave them out so a package is not its own cycle.
    graph = import_graph(top_level_only=False)
    graph = {name: {t for t in targets if t != "rolellm"} for name, targets in graph.items() if name != "rolellm"}
    graph = {name: targets & set(graph) for name, targets in graph.items()}
    assert find_cycle(graph) is None


def test_stages_import_only_earlier_stages():
    wrong = []
    for name, targets in import_graph(top_level_only=False).items():
        if floor(name) is None:
            continue
        for target in targets:
            if target == "rolellm" or target.startswith("rolellm.testing"):
                wrong.append(f"{name} -> {target}")
            elif floor(target) is None:
                continue
            elif floor(target) > floor(name):
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_roles_depends_on_nothing_else_of_rolellm():
    graph = import_graph(top_level_only=False)
    outside = {t for name, targets in graph.items() if name.startswith("rolellm.roles") for t in targets}
    assert {t for t in outside if not t.startswith("rolellm.roles")} == set()


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_lives_in_a_stage_folder():
    # besides the package's own entry files, only the test kit sits at the top (no stage imports it)
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py"]
    assert sorted(path.name for path in PACKAGE.iterdir() if path.is_dir() and path.name != "__pycache__") == sorted(
        [*FLOORS, "prompts", "testing"]
    )


# Rooms of evaluation/ bottom-up: the shared page and chart helpers, the run log and the interface every evaluation
# follows (base: config, run, typed result, report), then the pairwise judge, the multi-turn
# evaluation with its rubric judges, the single-turn benchmark (which judges against a baseline and on the rubric),
# CoSER (on the multi-turn log, scored with the benchmark's ROUGE-L) and the preference pairs ranked by those judges.
EVALUATION_ROOMS = ["charts", "pages", "runlog", "base", "judge", "multiturn", "benchmark", "coser", "preference"]


def room(module: str) -> int | None:
    parts = module.split(".")
    return EVALUATION_ROOMS.index(parts[2]) if len(parts) > 2 and parts[1] == "evaluation" else None


def test_evaluation_rooms_import_only_earlier_rooms():
    wrong = []
    for name, targets in import_graph(top_level_only=False).items():
        for target in targets:
            if room(name) is not None and room(target) is not None and room(target) > room(name):
                wrong.append(f"{name} -> {target}")
    assert wrong == []
    inside = (PACKAGE / "evaluation").iterdir()
    rooms = ["__init__.py", "base.py", "benchmark", "charts.py", "coser", "judge", "multiturn", "pages.py", "preference.py",
             "runlog.py"]  # fmt: skip
    assert sorted(p.name for p in inside if p.suffix == ".py" or p.is_dir() and p.name != "__pycache__") == rooms


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(source: str, module: str, modules: set[str], is_package: bool = False) -> list[str]:
    """The private names (`_name`, not `__dunder__`) that the source of `module` takes from other modules of
    `modules`, as `line: module._name`: `from rolellm.m import _name` (relative imports too), or an attribute
    `_name` of a module it imported (`from rolellm import m` / `import rolellm.m as m` then `m._name`,
    `import rolellm.m` then `rolellm.m._name`). `is_package`: the source is a package's `__init__`, for which `.` is
    the package itself."""
    package = module if is_package else module.rpartition(".")[0]
    bound, found = {}, []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            origin = ".".join([*base, node.module] if node.module else base)
            if origin.split(".")[0] != "rolellm":
                continue
            for alias in node.names:
                if is_private(alias.name) and origin != module:
                    found.append((node.lineno, f"{origin}.{alias.name}"))
                if f"{origin}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{origin}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "rolellm":
                    bound[alias.asname or "rolellm"] = alias.name if alias.asname else "rolellm"
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not is_private(node.attr):
            continue
        chain, value = [], node.value
        while isinstance(value, ast.Attribute):
            chain.insert(0, value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            owner = ".".join([bound[value.id], *chain])
            if owner in modules and owner != module:
                found.append((node.lineno, f"{owner}.{node.attr}"))
    return [f"{line}: {name}" for line, name in sorted(found)]


def test_no_private_name_is_imported_from_another_module():
    """A private name is its module's: a room that needs one of another's names needs a public name (the stricter
    rule of "private names stay in their room": across modules of one room too)."""
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    wrong = [
        f"{name}:{hit}"
        for name, path in sorted(paths.items())
        for hit in private_imports(path.read_text(encoding="utf-8"), name, set(paths), path.name == "__init__.py")
    ]
    assert wrong == []


def test_the_private_import_finder_finds_planted_ones():
    modules = {"rolellm", "rolellm.clients", "rolellm.clients.base", "rolellm.roles", "rolellm.roles.profile"}
    source = """
import argparse
import rolellm.roles.profile
import rolellm.roles.profile as profile_module
from rolellm.clients import base
from rolellm.clients.base import EndpointError, _Hidden
from rolellm.roles import profile as p
from . import base as sibling
from .base import _helper, __version__


def use(parser: argparse.ArgumentParser, client):
    rolellm.roles.profile._read(p._cache, profile_module._LIMIT, base.EndpointError, sibling._retry)
    return parser._actions, client._session, base.__name__, EndpointError
"""
    assert private_imports(source, "rolellm.clients.chat", modules) == [
        "6: rolellm.clients.base._Hidden",
        "9: rolellm.clients.base._helper",
        "13: rolellm.clients.base._retry",
        "13: rolellm.roles.profile._LIMIT",
        "13: rolellm.roles.profile._cache",
        "13: rolellm.roles.profile._read",
    ]
    # a module's own private names are its own to use
    assert private_imports("from rolellm.clients.base import _helper", "rolellm.clients.base", modules) == []
    # in a package's `__init__`, `.` is the package itself
    assert private_imports("from .base import _x", "rolellm.clients", modules, is_package=True) == [
        "1: rolellm.clients.base._x"
    ]
