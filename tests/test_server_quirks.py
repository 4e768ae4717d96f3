"""What the endpoint client does about the servers role-players run (llama.cpp's `llama-server`, llama-cpp-python's
server, KoboldCpp), against the stand-in server imitating each: every request carries `max_tokens` and every sampling
setting (the servers' own defaults are not OpenAI's), `cache_prompt: false` for llama.cpp, reasoning kept apart from
the answer, a trailing assistant turn refused before anything is sent, and a base URL without `/v1` named."""

import io
import sys

import openai
import pytest

from rolellm.clients.base import ChatRequest
from rolellm.clients.openai_compatible import DIALECT_SETTINGS, SAMPLING_DEFAULTS, OpenAIChatClient
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import write_release_profiles
from rolellm.scripts import cli
from rolellm.testing.server import RUNAWAY_WORDS, SERVER_DEFAULTS, ChatCompletionsServer


QUESTION = [{"role": "system", "content": "You are Po."}, {"role": "user", "content": "What do you eat?"}]


def client_of(server, **settings) -> OpenAIChatClient:
    return OpenAIChatClient("model.gguf", base_url=server.base_url, progress=False, **settings)


@pytest.mark.parametrize("kind", sorted(SERVER_DEFAULTS))
def test_every_setting_is_sent_so_the_servers_own_defaults_never_apply(kind):
    with ChatCompletionsServer(lambda body: "Dumplings.", imitate=kind) as server:
        # what the server does with a request that leaves its settings out: its own sampling, no end to the answer
        raw = openai.OpenAI(api_key="EMPTY", base_url=server.base_url, max_retries=0)
        with raw:
            bare = raw.chat.completions.create(model="model.gguf", messages=QUESTION)
        client = client_of(server, max_new_tokens=64)
        [result] = client.generate([ChatRequest(QUESTION, params={"temperature": 0.0})])
        seen = server.requests[-1]["body"]
    if SERVER_DEFAULTS[kind]["max_tokens"] == -1:
        assert len(bare.choices[0].message.content.split()) >= RUNAWAY_WORDS // 2
        assert bare.choices[0].finish_reason == "length"
    assert result.text == "Dumplings." and client.dialect == kind
    sent = {"max_tokens": 64, "temperature": 0.0, "top_p": SAMPLING_DEFAULTS["top_p"], **DIALECT_SETTINGS[kind]}
    assert {key: seen[key] for key in sent} == sent
    for key, default in SERVER_DEFAULTS[kind].items():  # not one of the server's defaults was left to it
        assert seen[key] != default or sent.get(key) == default, key


def test_llama_cpp_answers_a_repeated_greedy_request_alike_without_its_prompt_cache():
    with ChatCompletionsServer(lambda body: "Dumplings.", imitate="llama.cpp") as server:
        raw = openai.OpenAI(api_key="EMPTY", base_url=server.base_url, max_retries=0)
        with raw:
            cached = [
                raw.chat.completions.create(model="m", messages=QUESTION, max_tokens=8, temperature=0)
                .choices[0]
                .message.content
                for _ in range(2)
            ]
        client = client_of(server)
        answers = [client.generate([ChatRequest(QUESTION[:1] + [{"role": "user", "content": "Again?"}])])[0].text
                   for _ in range(2)]  # fmt: skip
    assert cached[0] != cached[1]  # the imitation's prompt cache changes a repeated greedy answer
    assert answers == ["Dumplings.", "Dumplings."] and [r["body"]["cache_prompt"] for r in server.requests[-2:]] == [
        False,
        False,
    ]


def test_reasoning_content_is_not_the_answer_and_a_cut_in_thought_says_so():
    def answer(body):
        if body["messages"][-1]["content"] == "Think long.":
            choice = {"index": 0, "finish_reason": "length",
                      "message": {"role": "assistant", "content": None, "reasoning_content": "Hmm, dumplings or"}}  # fmt: skip
            return {"id": "x", "object": "chat.completion", "choices": [choice], "usage": {}}
        return "<think>Po likes dumplings.</think>Dumplings."

    with ChatCompletionsServer(answer, imitate="llama.cpp") as server:
        client = client_of(server)
        thought, cut = client.generate([QUESTION, [{"role": "user", "content": "Think long."}]])
    assert thought.text == "Dumplings." and thought.ok
    assert not cut.ok and "cut at max_tokens before any text" in cut.error and cut.attempts == 1


def test_a_trailing_assistant_turn_is_refused_before_anything_is_sent():
    with ChatCompletionsServer(lambda body: "Dumplings and tea.", imitate="llama.cpp") as server:
        prefilled = QUESTION + [{"role": "assistant", "content": "Dumplings"}]
        with pytest.raises(
            ValueError, match="request 0 ends with an assistant turn, which llama.cpp's server continues"
        ):
            client_of(server).generate([prefilled])
        assert server.requests == []
        # as the imitation shows, the server would have continued the turn, not answered it
        raw = openai.OpenAI(api_key="EMPTY", base_url=server.base_url, max_retries=0)
        with raw:
            continued = raw.chat.completions.create(model="m", messages=prefilled, max_tokens=8)
        assert continued.choices[0].message.content == " and tea."


def test_a_base_url_without_v1_is_named_with_the_url_to_try(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hi\n"))
    write_release_profiles({"Po": RoleProfile("Po", "en", "A kung fu panda.")}, tmp_path / "profiles")
    with ChatCompletionsServer(imitate="koboldcpp") as server:  # KoboldCpp serves the API at :5001/v1
        root = server.base_url.removesuffix("/v1")
        code = cli.main(
            ["chat", "--model", "model.gguf", "--base_url", root, "--profiles", str(tmp_path / "profiles")]
        )
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.strip()]
    assert code == 3 and "Traceback" not in err
    assert f"try --base_url {root}/v1" in said[-1], err
