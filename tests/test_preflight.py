"""The pre-flight request: before a run sends its requests, one cheap request checks the endpoint, the key and the
model, so a dead endpoint, a refused key or an unknown model stops `rolellm generate` / `evaluate` / `dialogue` in
seconds with the server's message and exit code 3, and nothing is written."""

import json
import socket

import pytest
from fixtures.mini_release import write_mini_release

from rolellm.clients.base import EndpointError
from rolellm.clients.config import check_endpoints
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.release import write_release_profiles
from rolellm.scripts.cli import main
from rolellm.testing.server import ChatCompletionsServer, json_server


KEY = "sk-test-preflight"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def generate_job(tmp_path):
    dialogue = [Utterance(0, 0, "Gibbs", "The Pearl is gone!"), Utterance(0, 0, "Jack Sparrow", "Savvy?")]
    profile = RoleProfile("Jack Sparrow", "en", "A witty pirate captain.", ["Savvy?"], dialogue=dialogue)
    write_release_profiles({"Jack Sparrow": profile}, tmp_path / "release")
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text(json.dumps({"instruction": "Where is the rum?"}) + "\n", encoding="utf-8")
    return [
        "generate", "rolegpt", "--profiles", str(tmp_path / "release"), "--instructions", str(instructions),
        "--prompt_mode", "zero_shot", "--num_samples", "2", "--output_dir", str(tmp_path / "out"),
        "--model", "test-model", "--max_retries", "1",
    ]  # fmt: skip


def rolellm_lines(err: str) -> list[str]:
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith("rolellm ")]


def test_generate_runs_after_a_passing_preflight(generate_job, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ChatCompletionsServer(lambda body: "Arr!", api_key=KEY, models=["test-model"]) as server:
        url = server.base_url
        assert main([*generate_job, "--base_url", url]) == 0
        assert len(server.model_listings) == 1 and len(server.requests) == 2  # the check was the model list only
    out = capsys.readouterr().out
    assert f"{url} serves 'test-model'. RoleGPT will send 2 requests (0 already cached, 2 to send)" in out
    rows = [
        path for path in (tmp_path / "out").glob("rolebench-*/**/general/*.jsonl") if path.stem != "rolegpt_baseline"
    ]
    assert sum(path.read_text().count("\n") for path in rows) == 1


@pytest.mark.parametrize(
    ("server_kwargs", "key", "expected"),
    [
        ({"api_key": KEY}, "sk-wrong", "HTTP 401 Incorrect API key provided (the key sent is $OPENAI_API_KEY)"),
        ({"models": ["gpt-4o"]}, KEY, "HTTP 404 The model `test-model` does not exist (the endpoint lists: gpt-4o)"),
    ],
    ids=["401", "unknown-model"],
)
def test_generate_stops_on_the_preflight_with_the_servers_message(
    generate_job, tmp_path, monkeypatch, capsys, server_kwargs, key, expected
):
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with ChatCompletionsServer(lambda body: "Arr!", **server_kwargs) as server:
        code = main([*generate_job, "--base_url", server.base_url])
        sent = [entry["body"] for entry in server.requests]
    [message] = rolellm_lines(capsys.readouterr().err)
    assert code == 3 and message.startswith("rolellm generate: http://127.0.0.1:") and message.endswith(expected)
    assert all(body.get("max_tokens") == 1 for body in sent)  # no real request was sent
    assert not (tmp_path / "out" / "general").exists()


def test_generate_against_a_dead_port_stops_in_the_preflight(generate_job, tmp_path, capsys):
    code = main([*generate_job, "--base_url", f"http://127.0.0.1:{closed_port()}/v1"])
    [message] = rolellm_lines(capsys.readouterr().err)
    assert code == 3 and message.endswith("connection refused (2 tries)") and "cannot reach" in message
    assert not (tmp_path / "out" / "generation_config.json").exists()


def test_an_endpoint_without_a_model_list_is_asked_for_one_token():
    with ChatCompletionsServer(lambda body: "Aye") as server:
        client = OpenAIChatClient("m", base_url=f"{server.base_url}/nolist", progress=False, max_retries=0)
        with pytest.raises(EndpointError, match="HTTP 404 no route /v1/nolist/chat/completions"):
            client.check_endpoint()  # GET /models 404s too, so the one-token completion tells
        note = OpenAIChatClient("m", base_url=server.base_url, progress=False).check_endpoint()
    assert note.endswith("answers and takes the key (it lists no models)")


def test_each_endpoint_and_model_is_checked_once():
    with ChatCompletionsServer(lambda body: "Aye", models=["listed"]) as server:
        client = OpenAIChatClient("listed", base_url=server.base_url, progress=False)
        assert check_endpoints(client, client) == [f"{server.base_url} serves 'listed'"]
        assert len(server.model_listings) == 1 and server.requests == []


def test_evaluate_checks_the_judge_before_generating(tmp_path, monkeypatch, capsys):
    data = write_mini_release(tmp_path / "release")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with ChatCompletionsServer(lambda body: "An answer.", models=["answerer"]) as server:
        code = main([
            "evaluate", "--model_name_or_path", "answerer", "--base_url", server.base_url,
            "--dataset_name", "zh-general", "--data_dir", str(data), "--split", "test",
            "--output_dir", str(tmp_path / "run"), "--judge_model", "no-such-judge",
            "--judge_base_url", server.base_url, "--roles", "铁匠老周",
        ])  # fmt: skip
        answered = [entry["body"]["model"] for entry in server.requests]
    err = capsys.readouterr().err
    assert code == 3 and "HTTP 404 The model `no-such-judge` does not exist" in err, err
    assert answered == ["no-such-judge"]  # only the one-token check: no answer was generated
    assert not (tmp_path / "run" / "results.json").exists()


def test_dialogue_checks_every_endpoint_before_the_first_turn(tmp_path, capsys):
    profile = RoleProfile("Po", "en", "A cheerful panda.")
    write_release_profiles({"Po": profile}, tmp_path / "profiles")
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(
        "- role: Po\n  situation: A quiet evening.\n  opening_line: Hello Po!\n  user_persona: A curious visitor.\n  num_turns: 2\n"
    )
    code = main([
        "dialogue", "--profiles", str(tmp_path / "profiles"), "--scenarios", str(scenarios),
        "--model", "role-model", "--user_model", "user-sim", "--base_url", f"http://127.0.0.1:{closed_port()}/v1",
        "--output_dir", str(tmp_path / "run"), "--max_retries", "0",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and "connection refused (1 try)" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "transcripts.jsonl").exists()


def test_an_endpoint_answering_503_is_reached_but_failing_not_unreachable():
    loading = {"error": {"message": "Loading model", "type": "server_error"}}
    with json_server(lambda method: (503, loading)) as url:
        client = OpenAIChatClient("m", base_url=url, max_retries=1, initial_backoff=0.01, progress=False)
        with pytest.raises(EndpointError) as raised:
            client.check_endpoint()
    assert str(raised.value) == f"{url} answers with errors: HTTP 503: Loading model (2 tries)"
