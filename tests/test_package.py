import ast
import importlib
import subprocess
import sys
from pathlib import Path

import rolellm
from rolellm.scripts import cli


def test_import_is_lazy():
    # `import rolellm` must not pull in the heavy stack; names are resolved on first use.
    code = "import sys, rolellm; print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_import_loads_only_the_root_module():
    # `import rolellm` runs the root `__init__` alone: no stage, no third-party library beyond the standard library.
    code = "import sys; before = set(sys.modules); import rolellm; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # noqa: S307  (our own print of a list of module names)
    assert [name for name in loaded if name.startswith("rolellm")] == ["rolellm"]
    heavy = ("torch", "transformers", "trl", "datasets", "numpy", "yaml", "openai", "huggingface_hub")
    assert [name for name in loaded if name.split(".")[0] in heavy] == []


PACKAGE = Path(rolellm.__file__).parent


def test_subpackage_inits_are_docstrings_only():
    # each public name has one import path besides `rolellm.X`: its defining module; no package re-exports names
    wrong = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if init.parent == PACKAGE:
            continue
        body = ast.parse(init.read_text(encoding="utf-8")).body
        docstring = (
            body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else []
        )
        if not docstring or body[1:]:
            wrong.append(str(init.relative_to(PACKAGE.parent)))
    assert wrong == []


def defined_names(module: str) -> set[str]:
    """Names a module defines itself at top level (functions, classes, assignments), not the ones it imports."""
    spec = importlib.util.find_spec(module)
    names = set()
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def test_every_export_is_defined_in_the_module_it_names():
    wrong = [f"{name} -> {module}" for name, module in rolellm._EXPORTS.items() if name not in defined_names(module)]
    assert wrong == []
    for name, module in rolellm._EXPORTS.items():
        value = getattr(importlib.import_module(module), name)
        assert getattr(rolellm, name) is value, name
        if hasattr(value, "__module__"):
            assert value.__module__ == module, name


def test_public_api_resolves():
    for name in rolellm.__all__:
        assert getattr(rolellm, name) is not None, name
    assert set(rolellm.__all__) <= set(dir(rolellm))


def test_unknown_attribute_raises():
    try:
        rolellm.NotAThing  # noqa: B018
    except AttributeError as error:
        assert "NotAThing" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def test_cli_help_lists_every_command(capsys):
    try:
        cli.main(["--help"])
    except SystemExit as exit_:
        assert exit_.code == 0
    out = capsys.readouterr().out
    for name in cli.COMMANDS:
        assert name in out


def test_cli_version():
    out = subprocess.run([sys.executable, "-m", "rolellm", "--version"], capture_output=True, text=True).stdout
    assert out.strip() == f"rolellm {rolellm.__version__}"


def test_cli_unknown_command_fails(capsys):
    try:
        code = cli.main(["no-such-command"])
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_every_command_has_trl_script_shape():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        script = importlib.import_module(module)
        assert callable(script.main) and callable(script.make_parser), name
        assert script.make_parser().prog.endswith(name) or name in script.make_parser().prog


def test_env_command_prints_versions(capsys):
    assert cli.main(["env"]) == 0
    out = capsys.readouterr().out
    assert f"- rolellm: {rolellm.__version__}" in out
    assert "- transformers: 5." in out


def command_parsers(parser) -> list:
    """The parsers that read a command's fields: its sub-commands' parsers, or the parser itself (`rolellm train`:
    the parser of each stage)."""
    import argparse

    from rolellm.scripts.train import TrainParser

    if isinstance(parser, TrainParser):
        return parser.stage_parsers()
    groups = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return [sub for group in groups for sub in dict.fromkeys(group.choices.values())] or [parser]


def test_every_command_parses_through_the_recipe_parser():
    from rolellm.scripts.recipe import recipe_parser_class

    recipe_parser = recipe_parser_class()
    for module, _ in cli.COMMANDS.values():
        for parser in command_parsers(importlib.import_module(module).make_parser()):
            assert type(parser).__name__ == recipe_parser.__name__, parser.prog
            assert "--config" in parser._option_string_actions, parser.prog
            assert parser.dataclass_types, parser.prog


def test_every_field_flag_has_its_dashed_alias():
    # HfArgumentParser adds `--max-new-tokens` next to `--max_new_tokens` for every field with an underscore
    for module, _ in cli.COMMANDS.values():
        for parser in command_parsers(importlib.import_module(module).make_parser()):
            flags = set(parser._option_string_actions)
            underscored = [flag for flag in flags if flag.startswith("--") and "_" in flag]
            assert [flag for flag in underscored if flag.replace("_", "-") not in flags] == [], parser.prog


def test_dashed_and_underscored_flags_parse_alike(tmp_path):
    from rolellm.scripts import data, evaluate, export, judge

    parse = evaluate.make_parser().parse_args
    base = ["--model_name_or_path", "m", "--output_dir", "o"]
    assert (
        parse([*base, "--max-new-tokens", "7"]).max_new_tokens
        == parse([*base, "--max_new_tokens", "7"]).max_new_tokens
        == 7
    )
    args = data.make_parser().parse_args(["stats", "--data-dir", "d", "--zh-tokenizer", "chars", "--repo-id", "r/x"])
    assert (args.data_dir, args.zh_tokenizer, args.repo_id) == ("d", "chars", "r/x")
    args = judge.make_parser().parse_args(["agreement", "--human", "h", "--results", "r", "--num-bootstrap", "5"])
    assert args.num_bootstrap == 5
    args = export.make_parser().parse_args(["ckpt", "--output-dir", "out", "--push-to-hub", "me/x", "--merge"])
    assert (args.checkpoint, args.output_dir, args.push_to_hub, args.merge) == ("ckpt", "out", "me/x", True)


def test_subcommand_recipes_are_strict(tmp_path):
    from rolellm.scripts import data, export

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("data_dir: RoleBench\nzh_tokenizer: chars\n")
    args = data.make_parser().parse_args(["stats", "--config", str(recipe)])
    assert (args.data_dir, args.zh_tokenizer) == ("RoleBench", "chars")
    recipe.write_text("data_dir: RoleBench\nzh_tokenizr: chars\n")
    try:
        data.make_parser().parse_args(["stats", "--config", str(recipe)])
    except ValueError as error:
        assert "zh_tokenizr" in str(error)
    else:
        raise AssertionError("expected an unknown-key error")
    recipe.write_text("checkpoint: runs/ckpt\noutput_dir: out\n")  # a positional argument set by the recipe
    args = export.make_parser().parse_args(["--config", str(recipe), "--merge"])
    assert (args.checkpoint, args.output_dir, args.merge) == ("runs/ckpt", "out", True)


def test_type_checkers_see_every_export_from_its_module():
    """The `if TYPE_CHECKING:` imports of `rolellm/__init__.py` (what type checkers and IDEs read) are `_EXPORTS`."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    block = next(
        node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    imported = {alias.name: node.module for node in block.body for alias in node.names}
    assert imported == rolellm._EXPORTS
