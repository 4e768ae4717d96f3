"""`ClientConfig` + `make_client`: the one way every command builds its chat client."""

from dataclasses import fields

import pytest

from rolellm.clients.config import ClientConfig, derive_client, endpoint_options, make_client
from rolellm.clients.local import LocalChatClient
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.testing.server import ChatCompletionsServer


def test_an_endpoint_config_builds_an_openai_client_that_answers(tmp_path):
    with ChatCompletionsServer(lambda body: body["messages"][-1]["content"].upper()) as server:
        config = ClientConfig("test-model", base_url=server.base_url, max_concurrency=3, timeout=9.0, max_retries=1,
                              cache_path=str(tmp_path / "cache.sqlite"), progress=False)  # fmt: skip
        client = make_client(config)
        [result] = client.generate([[{"role": "user", "content": "arr"}]])
    assert isinstance(client, OpenAIChatClient) and config.backend == "openai"
    assert (client.max_concurrency, client.timeout, client.max_retries) == (3, 9.0, 1)
    assert result.text == "ARR" and len(client.cache) == 1


def test_a_local_config_builds_a_local_client_that_answers(tiny_model_path):
    config = ClientConfig(str(tiny_model_path), max_new_tokens=3, chat_template="chatml", batch_size=2, progress=False)
    client = make_client(config)
    [result] = client.generate([[{"role": "user", "content": "Ahoy"}]])
    assert isinstance(client, LocalChatClient) and config.backend == "local"
    assert (client.batch_size, client.max_new_tokens) == (2, 3) and result.ok
    assert result.usage["completion_tokens"] <= 3


def test_a_local_backend_with_an_endpoint_is_refused():
    with pytest.raises(ValueError, match="backend='local' runs the model in-process: drop base_url="):
        ClientConfig("m", backend="local", base_url="http://localhost:8000/v1")


def test_every_command_describes_its_clients_with_the_one_config(tmp_path):
    from rolellm.scripts import dialogue, evaluate, generate

    parsed = generate.make_parser().parse_args(
        ["rolegpt", "--output_dir", str(tmp_path), "--model", "m", "--profiles", "p", "--base_url", "http://h/v1",
         "--instructions", "i.jsonl"]
    )  # fmt: skip
    client, job = generate.dataclasses_from(parsed, generate.SUBCOMMANDS["rolegpt"][0])[:2]
    assert generate.client_config(client, job) == ClientConfig(
        "m", backend="openai", base_url="http://h/v1", cache_path=str(tmp_path / "cache.sqlite")
    )
    evaluate_config = evaluate.evaluate_config(evaluate.make_parser().parse_args(
        ["--model_name_or_path", "m", "--output_dir", str(tmp_path), "--judge_model", "judge", "--judge_base_url",
         "http://j/v1", "--judge_max_concurrency", "2", "--max_concurrency", "5"]
    ))  # fmt: skip
    assert evaluate_config.client.backend == "local" and evaluate_config.client.max_new_tokens == 256
    assert evaluate_config.judge == ClientConfig(
        "judge", base_url="http://j/v1", max_concurrency=2, cache_path=str(tmp_path / "judge_cache.sqlite"),
        api_key_env="",  # not OpenAI's host, where OPENAI_API_KEY goes when the model runs in-process
    )  # fmt: skip
    dialogue_config = dialogue.dialogue_config(dialogue.make_parser().parse_args(
        ["--profiles", "p", "--model", "m", "--base_url", "http://m/v1", "--user_model", "u", "--judge_model", "a",
         "b", "--judge_base_url", "http://j/v1", "--output_dir", str(tmp_path)]
    ))  # fmt: skip
    cache = str(tmp_path / "cache.sqlite")
    assert dialogue_config.user == ClientConfig("u", base_url="http://m/v1", cache_path=cache)  # the model's endpoint
    # the judges' host is not the model's: they get no key of its
    assert dialogue_config.judges == [
        ClientConfig(n, base_url="http://j/v1", api_key_env="", cache_path=cache) for n in "ab"
    ]


def test_a_derived_endpoint_inherits_from_the_main_client_by_one_rule(tiny_model_path, monkeypatch):
    served = ClientConfig("m", base_url="http://m/v1", max_retries=2, chat_template="chatml", keep_think=True)
    judge = derive_client(served, "judge", {"judge_model": "j", "judge_max_retries": 1})
    assert (judge.backend, judge.base_url, judge.max_retries, judge.keep_think) == ("openai", "http://m/v1", 1, None)
    local = derive_client(ClientConfig(str(tiny_model_path)), "user", {"user_model": "u"})
    assert (local.backend, local.base_url) == ("openai", None)  # OpenAIChatClient then reads $OPENAI_BASE_URL
    folder = derive_client(served, "user", {"user_model": str(tiny_model_path), "user_base_url": None})
    assert (folder.backend, folder.base_url) == ("local", None)
    with pytest.raises(ValueError, match="--baseline_base_url needs --baseline_model"):
        derive_client(served, "baseline", {"baseline_model": None, "baseline_base_url": "http://b/v1"})
    options = endpoint_options("judge", many=True)
    assert [f.name for f in fields(options)][:2] == ["judge_model", "judge_base_url"]
    assert options(judge_model=["a", "b"]).judge_model == ["a", "b"]


def test_keep_think_reaches_the_local_client_from_evaluate(tiny_model_path, tmp_path):
    """A model trained with `keep_think=True` is evaluated with the prompts it was trained on."""
    client = ClientConfig(str(tiny_model_path), chat_template="chatml", keep_think=True)
    config = BenchmarkConfig(str(tmp_path), client)
    assert config.client.keep_think is True
    local = make_client(config.client)
    assert isinstance(local, LocalChatClient) and local.keep_think is True
    default = BenchmarkConfig(str(tmp_path), ClientConfig(str(tiny_model_path), chat_template="chatml"))
    assert make_client(default.client).keep_think is False


def test_every_backend_names_a_client_class_that_maps_the_config():
    """`BACKEND_CLASSES` is the one table of backends: each names a `ChatClient` (built with `from_config`), importable
    without its engine (vLLM, Ray, llama.cpp are imported when a client is built)."""
    from rolellm.clients.base import ChatClient
    from rolellm.clients.config import BACKEND_CLASSES, BACKENDS, backend_class

    assert BACKENDS == tuple(BACKEND_CLASSES) == ("openai", "local", "vllm", "ray", "llamacpp")
    for backend in BACKENDS:
        client = backend_class(backend)
        assert issubclass(client, ChatClient) and callable(client.from_config), backend
