"""The package layout is the pipeline: every stage folder imports only the stages before it, and no module imports
itself back through others (lazy imports inside functions included)."""

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
