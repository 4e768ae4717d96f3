"""`--backend llamacpp`: the embedded model's GGUF file run in-process by llama.cpp, fed rolellm's own token ids (the
local backend's, to the token), several prompts decoded together with their shared system text decoded once, the
next chat turn from what the cache holds, batches sized to the cache; and the command without llama-cpp-python, with
an endpoint or with too many sequences, is one line and exit 2. `rolellm generate`, `evaluate`, `chat`, `dialogue`
and `coser run` with `--backend llamacpp` are in `tests/test_real_servers.py` (its `in_process` kind)."""

import re

import pytest

from rolellm.clients.base import ChatRequest
from rolellm.clients.config import ClientConfig
from rolellm.clients.engines import engine_version
from rolellm.clients.gguf import GGUFError, embedded_model_file
from rolellm.scripts import cli


try:
    SMOLLM2 = embedded_model_file()
except GGUFError as error:
    pytest.skip(f"the embedded real model is not installed: {error}", allow_module_level=True)
pytest.importorskip("gguf", reason="reading the embedded model's .gguf file needs the gguf package: pip install gguf")
needs_llama_cpp = pytest.mark.skipif(
    engine_version("llamacpp") is None, reason='needs llama-cpp-python (pip install "rolellm[llamacpp]")'
)
MAX_NEW_TOKENS = "12"
QUESTION = [
    {"role": "system", "content": "You are Po, a kung fu panda."},
    {"role": "user", "content": "Hi, who are you?"},
]


@pytest.fixture(scope="module")
def llama_client(tmp_path_factory):
    from rolellm.clients.config import make_client

    cache = tmp_path_factory.mktemp("llamacpp") / "cache.sqlite"
    config = ClientConfig(str(SMOLLM2), backend="llamacpp", max_new_tokens=int(MAX_NEW_TOKENS), cache_path=str(cache))
    client = make_client(config)
    yield client
    client.close()


@needs_llama_cpp
def test_llama_cpp_is_fed_the_local_backend_s_token_ids_and_answers(llama_client):
    """The ids the local backend would give the same model (its dequantized folder's tokenizer and generation
    config), to the token; greedy answers that repeat, seeded samples a re-run repeats, and a new client on the same
    cache that sends nothing."""
    from transformers import AutoTokenizer, GenerationConfig

    from rolellm.clients.gguf import embedded_model
    from rolellm.clients.local import encode_prompt, stop_token_ids

    folder = embedded_model()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    prompt = llama_client.encode_prompt(QUESTION)
    assert prompt == encode_prompt(tokenizer, QUESTION, None, False)
    assert llama_client.stop_ids == stop_token_ids(
        tokenizer, None, False, GenerationConfig.from_pretrained(folder).eos_token_id
    )
    [result] = llama_client.generate([QUESTION])
    assert result.ok and result.text.strip() and result.usage["prompt_tokens"] == len(prompt)
    assert 1 <= result.usage["completion_tokens"] <= int(MAX_NEW_TOKENS)
    samples = [ChatRequest(QUESTION, params={"temperature": 1.0, "seed": 0}, sample_index=i) for i in range(2)]
    sampled = [r.text for r in llama_client.generate(samples)]
    assert all(text.strip() for text in sampled)
    # a new client (a re-run) on the same cache: every answer from it, nothing generated
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient

    again = LlamaCppChatClient(SMOLLM2, max_new_tokens=int(MAX_NEW_TOKENS), cache_path=llama_client.cache.path,
                               progress=False)  # fmt: skip
    try:
        assert [r.text for r in again.generate([QUESTION, *samples])] == [result.text, *sampled]
        assert (again.usage.requests, again.usage.cached) == (0, 3)
        # the same calls generated anew: greedy repeats, seeded samples repeat (a batch's answers are the same when
        # it is: which prompts share it changes the last bits of their logits, as in every batched backend)
        again.cache = None
        assert [r.text for r in again.generate([QUESTION])] == [result.text]
        assert [r.text for r in again.generate(samples)] == sampled
    finally:
        again.close()


ROLES = {"Po": "You are Po, a kung fu panda who loves dumplings.", "Jack": "You are Jack Sparrow, a pirate captain."}
ASKED = [[{"role": "system", "content": system}, {"role": "user", "content": question}]
         for system in ROLES.values() for question in ("Hi, who are you?", "What do you fear?")]  # fmt: skip


@needs_llama_cpp
def test_a_batch_decodes_the_shared_system_text_once_and_keeps_its_sequences_apart():
    """Four prompts of two roles in one batch: each role's second prompt starts from a copy of its first prompt's
    cache (one at a time, the system text stays in the cache from the prompt before), and the answers of one role's
    prompts are the same, token for token, whatever the other role's prompts say (a batch of as many tokens, copied
    the same way: llama.cpp's kernels change with the number of tokens in a batch, and with them the last bits of
    every logit)."""
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient
    from rolellm.clients.llamacpp_engine import CELLS_PER_COPIED_TOKEN, Sampling, common_prefix, copy_sources

    together = LlamaCppChatClient(SMOLLM2, batch_size=4, max_new_tokens=8, progress=False)
    alone = LlamaCppChatClient(SMOLLM2, batch_size=1, max_new_tokens=8, progress=False)
    try:
        prompts = sorted(together.encode_prompt(messages) for messages in ASKED)
        batched, single = together.generate(ASKED), alone.generate(ASKED)
        assert all(r.ok and r.text.strip() for r in batched + single)
        min_gain = together.engine.window // CELLS_PER_COPIED_TOKEN
        assert copy_sources(prompts, [0] * 4, min_gain) == {1: 0, 3: 2}  # each role's second prompt, its first
        shared = [common_prefix(prompts[k - 1], prompts[k]) for k in (1, 2, 3)]
        assert min(shared[0], shared[2]) > 15 > shared[1]  # a role's system text, and what both roles begin with
        written = sum(map(len, prompts))
        assert together.engine.prompt_tokens_decoded == written - shared[0] - shared[2]
        assert alone.engine.prompt_tokens_decoded == written - sum(shared)  # the sequence keeps what begins alike
        assert [r.usage["prompt_tokens"] for r in batched] == [r.usage["prompt_tokens"] for r in single]

        # the second role's prompts with other words where they are its own, sharing as many tokens as before
        first, second = prompts[:2], prompts[2:]
        start, end = common_prefix(first[1], second[0]), common_prefix(*second)
        others = [p[:start] + [t + 1 for t in p[start:end]] + p[end:] for p in second]
        assert [common_prefix(others[0], p) for p in others] == [common_prefix(second[0], p) for p in second]
        assert copy_sources(first + others, [0] * 4, min_gain) == {1: 0, 3: 2} and others[0][start] != second[0][start]

        def answers(batch):
            made = [[] for _ in batch]
            for i, token in together.engine.generate(batch, [Sampling()] * 4, [8] * 4, together.stop_ids):
                made[i].append(token)
            together.engine.clear()
            return made

        together.engine.clear()
        original, changed = answers(first + second), answers(first + others)
        assert original[:2] == changed[:2] and all(original[:2])
        assert original[2:] != changed[2:]  # the other words are read
    finally:
        together.close()
        alone.close()


@needs_llama_cpp
def test_the_next_chat_turn_decodes_only_its_new_tokens(llama_client):
    from rolellm.clients.chat_answer import prompt_ids

    first = prompt_ids(llama_client, QUESTION)
    answer = "".join(llama_client.stream(first, 6, 0.0, 1.0, 0, {}))
    following = [*QUESTION, {"role": "assistant", "content": answer}, {"role": "user", "content": "And your master?"}]
    second = prompt_ids(llama_client, following)
    before = llama_client.engine.prompt_tokens_decoded
    assert "".join(llama_client.stream(second, 6, 0.0, 1.0, 0, {})).strip()
    new_tokens = llama_client.engine.prompt_tokens_decoded - before
    assert second[: len(first)] == first and new_tokens <= len(second) - len(first) + 1, (new_tokens, len(second))


@needs_llama_cpp
def test_the_example_answers_two_roles_in_one_batch_and_a_second_turn_from_the_cache():
    from fixtures.examples import run_example

    out = run_example("llamacpp_batches.py", "--max_new_tokens", "8")
    answers = [line for line in out.splitlines() if line.startswith(("Jack Sparrow:", "Sherlock Holmes:"))]
    assert len(answers) == 4 and all(len(line.split(":", 1)[1].strip()) > 2 for line in answers), out
    written, decoded = map(int, re.search(r"prompt tokens: (\d+), decoded: (\d+)", out).groups())
    assert decoded < written
    total, new = map(int, re.search(r"second turn: (\d+) prompt tokens, (\d+) decoded", out).groups())
    assert new < total / 2, out


@needs_llama_cpp
def test_a_prompt_beyond_n_ctx_fails_alone_and_the_cache_grows_for_a_longer_one():
    """n_ctx 1024: a request whose prompt and budget exceed it fails on its own, the others stand; each sequence's
    cache starts at 512 cells and grows, forgetting what it held, when a prompt and its budget need more."""
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient
    from rolellm.clients.llamacpp_engine import FIRST_WINDOW, Sampling

    client = LlamaCppChatClient(SMOLLM2, batch_size=4, max_new_tokens=16, n_ctx=1024, progress=False)
    try:
        too_long = ChatRequest(QUESTION, params={"max_tokens": 1000})
        results = client.generate([*ASKED, too_long])
        assert [r.ok for r in results] == [True] * 4 + [False]
        assert all(r.text.strip() and r.usage["completion_tokens"] <= 16 for r in results[:4])
        prompt = client.encode_prompt(QUESTION)
        assert results[4].error == f"prompt of {len(prompt)} tokens + max_tokens 1000 exceed n_ctx 1024"

        engine = client.engine
        assert engine.window == FIRST_WINDOW and any(engine.held)
        before = engine.prompt_tokens_decoded
        everything = range(engine.lib.llama_vocab_n_tokens(engine.lib.llama_model_get_vocab(engine.model)))
        assert list(engine.generate([prompt], [Sampling()], [600], everything)) == []  # every token stops it
        assert engine.window == 1024 and engine.prompt_tokens_decoded - before == len(prompt)
        assert [len(held) for held in engine.held] == [len(prompt), 0, 0, 0]
        with pytest.raises(ValueError, match="exceed n_ctx 1024"):
            list(engine.generate([prompt], [Sampling()], [1000], everything))
    finally:
        client.close()


@needs_llama_cpp
def test_a_batch_llama_cpp_cannot_decode_fails_its_requests_and_the_next_batch_is_answered(monkeypatch):
    """Fault injection: the cache kept at its first 512 cells whatever a batch needs, so llama.cpp finds no room for
    a prompt of 600 tokens; its request fails with llama.cpp's code, and the next batch is answered."""
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient
    from rolellm.clients.llamacpp_engine import LlamaCppEngine

    monkeypatch.setattr(LlamaCppEngine, "_reserve", lambda engine, cells: None)
    client = LlamaCppChatClient(SMOLLM2, batch_size=1, max_new_tokens=8, progress=False)
    try:
        long = [QUESTION[0], {"role": "user", "content": "Tell me a story, please. " * 100}]
        assert len(client.encode_prompt(long)) > 600
        failed, answered = client.generate([long, QUESTION])
        assert not failed.ok and client.usage.failures == 1
        assert re.fullmatch(r"llama\.cpp's decode failed \(code 1\) on a batch of \d+ tokens", failed.error)
        assert answered.ok and answered.text.strip()
    finally:
        client.close()


@needs_llama_cpp
def test_a_batch_size_beyond_llama_cpp_s_sequences_is_one_line_exit_2(slice_data_dir, tmp_path, capsys):
    code = cli.main([
        "evaluate", "--backend", "llamacpp", "--model", str(SMOLLM2), "--dataset_name", "zh-role_specific",
        "--data_dir", str(slice_data_dir / "rolebench"), "--batch_size", "300", "--output_dir", str(tmp_path / "out"),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--batch_size 300: llama.cpp decodes at most 256 sequences together" in err, err
    assert "Traceback" not in err and not (tmp_path / "out" / "results.json").exists()


def test_llamacpp_with_a_base_url_is_refused():
    with pytest.raises(ValueError, match="backend='llamacpp' runs the model in-process: drop base_url"):
        ClientConfig("m.gguf", backend="llamacpp", base_url="http://localhost:8080/v1")


def test_without_llama_cpp_python_the_command_names_the_extra(slice_data_dir, tmp_path, monkeypatch, capsys):
    """A llama-cpp-python of an unsupported version stands for a missing one, whether or not it is installed:
    `require_engine` checks the version (the first distribution on `sys.path`) before importing it
    (`rolellm.clients.engines`)."""
    fake = tmp_path / "site"
    (fake / "llama_cpp_python-0.1.0.dist-info").mkdir(parents=True)
    (fake / "llama_cpp_python-0.1.0.dist-info" / "METADATA").write_text("Name: llama-cpp-python\nVersion: 0.1.0\n")
    monkeypatch.syspath_prepend(str(fake))
    code = cli.main([
        "evaluate", "--backend", "llamacpp", "--model", str(SMOLLM2), "--dataset_name", "zh-role_specific",
        "--data_dir", str(slice_data_dir / "rolebench"), "--output_dir", str(tmp_path / "out"),
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 2 and out == "", err
    [line] = [line for line in err.splitlines() if line.startswith("rolellm evaluate")]  # besides datasets'
    assert line.startswith("rolellm evaluate: --backend llamacpp needs llama-cpp-python<0.4,>=0.3.36 (pip install "
                           '"rolellm[llamacpp]"); llama-cpp-python 0.1.0 is installed'), line  # fmt: skip
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.skipif(engine_version("llamacpp") is not None, reason="llama-cpp-python is installed")
def test_without_llama_cpp_python_installed(tmp_path, capsys):
    code = cli.main(["evaluate", "--backend", "llamacpp", "--model", str(SMOLLM2), "--output_dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and 'pip install "rolellm[llamacpp]"); it is not installed' in err
