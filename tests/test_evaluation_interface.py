"""The interface every evaluation follows (`rolellm.evaluation.base`): a benchmark added from outside the package, as
docs/development.md shows, runs through it against a real chat-completions server; the built-in evaluations are
registered; the names of the previous release still work, with a warning."""

import json
import re
import shutil
import warnings
from pathlib import Path

import pytest
from fixtures.examples import EXAMPLES, run_example

import rolellm
from rolellm.clients.config import ClientConfig
from rolellm.evaluation.base import EVALUATIONS, EvaluationResult, get_evaluation, run_evaluation
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.evaluation.benchmark.report import write_benchmark_report
from rolellm.evaluation.benchmark.runner import run_benchmark
from rolellm.evaluation.coser.report import write_coser_report
from rolellm.evaluation.coser.run import CoserConfig, run_coser
from rolellm.evaluation.multiturn.report import write_dialogue_report
from rolellm.evaluation.multiturn.run import DialogueConfig, run_dialogue
from rolellm.scripts.exit_codes import evaluation_exit_code
from rolellm.testing.server import ChatCompletionsServer, Fault


DEVELOPMENT = Path(__file__).resolve().parents[1] / "docs" / "development.md"


@pytest.fixture
def echo(tmp_path, monkeypatch):
    """The toy benchmark of docs/development.md as a user's module in a folder of their own, registered with the one
    line the page shows."""
    folder = tmp_path / "my_evaluations"
    folder.mkdir()
    shutil.copy(EXAMPLES / "custom_benchmark.py", folder / "echo_benchmark.py")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(EVALUATIONS, "echo", ("echo_benchmark", "ECHO"))
    return get_evaluation("echo")


def parrot(body):
    """Answers with the word it was asked to repeat, fails on "parrot", and cannot say "rum" (it says "grog")."""
    word = re.search(r"'(\w+)'", body["messages"][-1]["content"]).group(1)
    if word == "parrot":
        return Fault("server_error", status=500, message="the parrot flew off")
    return f"{word.replace('rum', 'grog').title()}!"


def test_a_benchmark_added_from_outside_the_package_runs_through_the_interface(echo, tmp_path, capsys):
    with ChatCompletionsServer(parrot) as server:
        client = ClientConfig("parrot-model", base_url=server.base_url, max_retries=0, progress=False)
        config = echo.config_class(str(tmp_path / "run"), client)
        result = run_evaluation("echo", config)
        assert len(server.requests) == 3
    assert isinstance(result, EvaluationResult) and type(result).__name__ == "EchoResult"
    assert result.answers == {"ahoy": "Ahoy!", "rum": "Grog!", "parrot": None}
    assert result.accuracy == 0.5 and result.failed == {"answers": 1} and result.failed_count == 1
    assert result.error is None and config.client.cache_path == str(tmp_path / "run" / "cache.sqlite")
    report = result.report["report"].read_text(encoding="utf-8")
    assert "Accuracy 0.50" in report and "| parrot | failed |" in report and "| rum | Grog! |" in report
    assert json.loads((tmp_path / "run" / "results.json").read_text())["failed"] == {"answers": 1}
    result.report["report"].unlink()
    assert echo.write_report(tmp_path / "run")["report"].read_text(encoding="utf-8") == report  # written again

    # the exit codes of the commands: 1 for a partial run unless allow_partial, 3 when nothing was evaluated
    assert evaluation_exit_code("echo", result, config) == 1
    assert capsys.readouterr().err == "rolellm echo: 1 answers failed (pass --allow_partial to accept a partial run)\n"
    config.allow_partial = True
    assert evaluation_exit_code("echo", result, config) == 0 and capsys.readouterr().err == ""
    with ChatCompletionsServer(lambda body: Fault("server_error", status=500)) as server:
        client = ClientConfig("parrot-model", base_url=server.base_url, max_retries=0, progress=False)
        config = echo.config_class(str(tmp_path / "silent"), client)
        nothing = run_evaluation("echo", config)
    assert nothing.error == "none of the 3 words was answered" and nothing.report is None
    assert not (tmp_path / "silent" / "results.json").exists()
    assert evaluation_exit_code("echo", nothing, config) == 3
    assert capsys.readouterr().err == "rolellm echo: none of the 3 words was answered\n"


def test_the_page_shows_the_example_and_the_example_runs(echo, tmp_path, monkeypatch):
    text = DEVELOPMENT.read_text(encoding="utf-8")
    section = text[text.index("## Adding a benchmark") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    assert code in (EXAMPLES / "custom_benchmark.py").read_text(encoding="utf-8")
    assert 'EVALUATIONS["echo"] = ("echo_benchmark", "ECHO")' in section  # the one registry line
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as `python examples/custom_benchmark.py` has its folder
    out = run_example("custom_benchmark.py", "--output_dir", tmp_path / "example")
    assert out == f"accuracy 0.33, 0 failed; report: {tmp_path / 'example' / 'report.md'}\n"


def test_a_wrong_name_or_config_is_refused(echo):
    with pytest.raises(
        ValueError, match=r"evaluation='nope' is not one of \['benchmark', 'coser', 'dialogue', 'echo'\]"
    ):
        get_evaluation("nope")
    with pytest.raises(ValueError, match="evaluation 'echo' takes a EchoConfig, got a BenchmarkConfig"):
        run_evaluation("echo", BenchmarkConfig("o", ClientConfig("m")))


def test_the_builtin_evaluations_follow_the_interface():
    found = {name: get_evaluation(name) for name in ("benchmark", "dialogue", "coser")}
    assert [(e.config_class, e.run) for e in found.values()] == [
        (BenchmarkConfig, run_benchmark), (DialogueConfig, run_dialogue), (CoserConfig, run_coser)
    ]  # fmt: skip
    config = DialogueConfig(profiles=["p"], output_dir="o", client=ClientConfig("m"), user=ClientConfig("u"),
                            judges=[ClientConfig("j"), ClientConfig("k", cache_path="mine.sqlite")])  # fmt: skip
    assert {name: c.cache_path for name, c in config.client_configs().items()} == {
        "client": "o/cache.sqlite", "user": "o/cache.sqlite", "judges[0]": "o/cache.sqlite", "judges[1]": "mine.sqlite"
    }  # fmt: skip
    config = BenchmarkConfig("o", ClientConfig("m"), judge=ClientConfig("j"), baseline_client=ClientConfig("b"))
    assert [c.cache_path for c in config.client_configs().values()] == [
        "o/cache.sqlite", "o/judge_cache.sqlite", "o/baseline/cache.sqlite"
    ]  # fmt: skip


def test_the_names_of_the_previous_release_still_work_with_a_warning():
    from rolellm.evaluation.benchmark import config, runner
    from rolellm.evaluation.multiturn import run

    renamed = [
        (rolellm, "EvaluateConfig", BenchmarkConfig), (config, "EvaluateConfig", BenchmarkConfig),
        (runner, "EvaluateConfig", BenchmarkConfig), (rolellm, "run_dialogue_eval", run_dialogue),
        (run, "run_dialogue_eval", run_dialogue),
    ]  # fmt: skip
    for module, old, new in renamed:
        with pytest.warns(DeprecationWarning, match=f"{old} is renamed {new.__name__}; the old name goes in the next"):
            assert getattr(module, old) is new
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rolellm.BenchmarkConfig is BenchmarkConfig and rolellm.run_dialogue is run_dialogue
        assert rolellm.write_benchmark_report is write_benchmark_report
        assert (rolellm.write_dialogue_report, rolellm.write_coser_report) == (
            write_dialogue_report,
            write_coser_report,
        )
    for module in (rolellm, config):
        with pytest.raises(AttributeError, match="has no attribute 'EvaluateConfg'"):
            module.EvaluateConfg  # noqa: B018
