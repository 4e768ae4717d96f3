"""A backend of one's own, from outside the package, as docs/development.md shows it: named on the command line by
its dotted path, answering a real `rolellm evaluate` run; and what a wrong path gives."""

import json
import sys

import pytest
from fixtures.docs import write_shown_file

from rolellm.clients.config import ClientConfig, backend_class, make_client
from rolellm.scripts import cli


@pytest.fixture
def my_backends(tmp_path, monkeypatch):
    write_shown_file("development.md", "my_backends.py", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_backends"
    sys.modules.pop("my_backends", None)


def test_rolellm_evaluate_runs_a_backend_from_outside_the_package(my_backends, rolebench_slice_dir, tmp_path, capsys):
    out = tmp_path / "echo"
    argv = ["evaluate", "--backend", f"{my_backends}.EchoClient", "--model", "echo", "--dataset_name",
            "zh-role_specific", "--data_dir", str(rolebench_slice_dir), "--roles", "李白", "--max_samples_per_role", "2",
            "--output_dir", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    assert "| echo | system | n/a | n/a |" in capsys.readouterr().out
    answers = [json.loads(line) for line in (out / "generations.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(answers) == 2 and all(a["prediction"] == a["question"] for a in answers), answers  # echoed
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["counts"]["role_specific"] == 2 and results["counts"]["failed"] == 0


@pytest.mark.parametrize(
    "backend, message",
    [
        ("no_such_package.EchoClient", "backend='no_such_package.EchoClient': cannot import no_such_package"),
        ("my_backends.NoSuchClient", "backend='my_backends.NoSuchClient': my_backends has no NoSuchClient"),
        ("my_backends.ChatClient.generate", "cannot import my_backends.ChatClient"),
        ("my_backends.as_request", "backend='my_backends.as_request': as_request is no ChatClient subclass"),
        ("echo-client", "backend='echo-client' is not one of ['openai', 'local', 'vllm', 'ray', 'llamacpp'], nor"),
    ],
)
def test_a_wrong_backend_is_a_usage_error_naming_it(my_backends, tmp_path, capsys, backend, message):
    argv = ["generate", "rolegpt", "--backend", backend, "--model", "echo", "--profiles", "p", "--instructions", "i",
            "--output_dir", str(tmp_path / "out")]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    assert not (tmp_path / "out").exists()


def test_a_backend_from_outside_answers_through_the_cache_and_parse_re_asks(my_backends, tmp_path):
    config = ClientConfig("echo", backend=f"{my_backends}.EchoClient", cache_path=str(tmp_path / "c.sqlite"))
    client = make_client(config)
    assert type(client) is backend_class(f"{my_backends}.EchoClient") and client.model_name == "echo"
    [result] = client.generate([[{"role": "user", "content": "Ahoy?"}]])
    assert result.text == "Ahoy?" and client.usage.requests == 1
    again = make_client(config)  # a new run: the answer `settle` wrote to the cache
    [result] = again.generate([[{"role": "user", "content": "Ahoy?"}]])
    assert result.cached and again.usage.cached == 1 and again.usage.requests == 0

    def parse(text):
        raise ValueError("not a number")

    [result] = again.generate([[{"role": "user", "content": "Forty-two"}]], parse=parse)
    assert result.attempts == 3 and result.error.startswith("unparseable answer after 3 attempts: not a number")
