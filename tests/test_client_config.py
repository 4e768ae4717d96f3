"""`ClientConfig` + `make_client`: the one way every command builds its chat client."""

import pytest

from rolellm.clients.config import ClientConfig, make_client
from rolellm.clients.local import LocalChatClient
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.benchmark.config import EvaluateConfig
from rolellm.scripts.generate import GenerateArguments
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
    generate = GenerateArguments(output_dir=str(tmp_path), model="m", profiles="p", base_url="http://h/v1")
    assert generate.client_config() == ClientConfig(
        "m", backend="openai", base_url="http://h/v1", cache_path=str(tmp_path / "cache.sqlite")
    )
    evaluate = EvaluateConfig(model_name_or_path="m", output_dir=str(tmp_path), judge_model="judge",
                              judge_base_url="http://j/v1", judge_max_concurrency=2, max_concurrency=5)  # fmt: skip
    assert evaluate.client_config().backend == "local" and evaluate.client_config().max_new_tokens == 256
    assert evaluate.judge_client_config() == ClientConfig(
        "judge", base_url="http://j/v1", max_concurrency=2, cache_path=str(tmp_path / "judge_cache.sqlite")
    )


def test_keep_think_reaches_the_local_client_from_evaluate(tiny_model_path, tmp_path):
    """A model trained with `keep_think=True` is evaluated with the prompts it was trained on."""
    config = EvaluateConfig(str(tiny_model_path), str(tmp_path), chat_template="chatml", keep_think=True)
    assert config.client_config().keep_think is True
    client = make_client(config.client_config())
    assert isinstance(client, LocalChatClient) and client.keep_think is True
    default = EvaluateConfig(str(tiny_model_path), str(tmp_path), chat_template="chatml")
    assert make_client(default.client_config()).keep_think is False
