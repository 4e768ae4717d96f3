"""No secret in a message, a log, a run file, a checkpoint or a model card: a key in an endpoint URL is refused at
parse time (exit 2, the key never repeated), and a Hub token given to the trainer is never written to disk."""

import pytest

from rolellm.clients.config import ClientConfig, derive_client
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.scripts.cli import main


SECRET = "hunter2-not-a-real-key"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["evaluate", "--model", "m", "--base_url", f"https://me:{SECRET}@llm.example.com/v1"], "base_url"),
        (["evaluate", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--judge_model", "j",
          "--judge_base_url", f"https://me:{SECRET}@judge.example.com/v1"], "--judge_base_url"),
        (["evaluate", "--model", "m", "--base_url", f"https://llm.example.com/v1?api_key={SECRET}"], "base_url"),
        (["chat", "--model", "m", "--base_url", f"http://:{SECRET}@localhost:8000/v1", "--profiles", "p"], "base_url"),
    ],
)  # fmt: skip
def test_a_key_in_an_endpoint_url_is_refused_without_repeating_it(argv, flag, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([*argv, "--output_dir", str(tmp_path / "out")] if argv[0] == "evaluate" else argv)
    err = capsys.readouterr().err
    assert code == 2 and SECRET not in err and "Traceback" not in err
    assert f"{flag} holds" in err and "OPENAI_API_KEY" in err
    assert not (tmp_path / "out").exists()  # nothing written that could hold it


def test_the_environment_s_base_url_is_checked_too(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", f"https://me:{SECRET}@llm.example.com/v1")
    with pytest.raises(ValueError, match="OPENAI_BASE_URL holds credentials") as raised:
        OpenAIChatClient("m", progress=False)
    assert SECRET not in str(raised.value)


def test_a_plain_url_and_harmless_query_pass():
    assert ClientConfig("m", base_url="http://localhost:8000/v1?api-version=2024-06-01").backend == "openai"
    judge = derive_client(
        ClientConfig("m", base_url="http://a/v1"), "judge", {"judge_model": "j", "judge_base_url": "http://b/v1"}
    )
    assert judge.base_url == "http://b/v1"
