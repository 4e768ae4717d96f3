import subprocess
import sys

import rolellm
from rolellm.scripts import cli


def test_import_is_lazy():
    # `import rolellm` must not pull in the heavy stack; names are resolved on first use.
    code = "import sys, rolellm; print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


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
