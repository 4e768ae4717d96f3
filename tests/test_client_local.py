"""LocalChatClient on the tiny Llama: batched greedy equals one-by-one (a role's system turn computed once), seeded
sampling, cache and parse re-asks."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rolellm.clients.base import ChatRequest
from rolellm.clients.local import MIN_SHARED_TOKENS, LocalChatClient
from rolellm.clients.prefill import decoder_to_prefill
from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE as CHATML_TEMPLATE


QUESTIONS = [
    "Why is the rum always gone?",
    "俺老孙来也！",
    "Give three tips for staying healthy during the winter, matey.",
    "Hi",
    "请用三句话介绍一下长城的历史。",
]


def ask(text, **kwargs):
    return ChatRequest(
        [{"role": "system", "content": "You are Jack Sparrow."}, {"role": "user", "content": text}], **kwargs
    )


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(tiny_model_path)


def make_client(model_and_tokenizer, **kwargs):
    model, tokenizer = model_and_tokenizer
    kwargs.setdefault("chat_template", "chatml")
    kwargs.setdefault("max_new_tokens", 8)
    return LocalChatClient(model=model, tokenizer=tokenizer, progress=False, **kwargs)


def test_greedy_answers_equal_plain_generate_and_do_not_depend_on_batching(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    batched = make_client(model_and_tokenizer, batch_size=4).generate([ask(q) for q in QUESTIONS])
    single = make_client(model_and_tokenizer, batch_size=1).generate([ask(q) for q in QUESTIONS])
    assert [r.text for r in batched] == [r.text for r in single]
    # the reference: transformers' own greedy generate on the ChatML prompt, one prompt at a time
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    for question, result in zip(QUESTIONS, batched):
        messages = ask(question).messages
        ids = tokenizer.apply_chat_template(
            messages, chat_template=CHATML_TEMPLATE, add_generation_prompt=True, return_dict=False
        )
        output = model.generate(
            torch.tensor([ids]), max_new_tokens=8, do_sample=False, eos_token_id=[tokenizer.eos_token_id, im_end]
        )[0, len(ids) :].tolist()
        stop = next((i + 1 for i, t in enumerate(output) if t in (tokenizer.eos_token_id, im_end)), len(output))
        assert result.text == tokenizer.decode(output[:stop], skip_special_tokens=True)
        assert result.usage == {"prompt_tokens": len(ids), "completion_tokens": stop}


ROLES = {  # system texts of more than MIN_SHARED_TOKENS tokens: computed once for a batch of the role's questions
    "Jack": "You are Jack Sparrow, captain of the Black Pearl, a pirate who trusts his compass more than any map.",
    "Po": "You are Po, the Dragon Warrior of the Valley of Peace, a kung fu panda who loves dumplings and his friends.",
}


@pytest.mark.parametrize("batch_size", [5, 8])  # one role a batch (Jack's first); both roles in one batch
def test_a_roles_system_text_is_computed_once_for_its_batch_and_changes_no_answer(model_and_tokenizer, batch_size):
    model, _ = model_and_tokenizer
    requests = [
        ChatRequest([{"role": "system", "content": ROLES[name]}, {"role": "user", "content": question}])
        for name, questions in (("Po", QUESTIONS[:3]), ("Jack", QUESTIONS))
        for question in questions
    ]
    forwards = []  # (rows, tokens, tokens already in the cache) of each forward of the model's body

    def record(_, args, kwargs):
        cache = kwargs.get("cache")
        forwards.append((*kwargs["input_ids"].shape, cache.get_seq_length() if cache is not None else 0))

    hook = model.get_decoder().register_forward_pre_hook(record, with_kwargs=True)
    try:
        batched = make_client(model_and_tokenizer, batch_size=batch_size).generate(requests)
    finally:
        hook.remove()
    single = make_client(model_and_tokenizer, batch_size=1).generate(requests)  # one prompt: nothing shared
    assert [(r.text, r.usage) for r in batched] == [(r.text, r.usage) for r in single]
    # each batch: its roles' shared first tokens in one forward, a row a role; then every row's own tokens only
    longest = max(r.usage["prompt_tokens"] for r in batched)
    starts = [i for i, (_, _, cached) in enumerate(forwards) if cached == 0]
    expected = {5: [(1, 5), (1, 3)], 8: [(2, 8)]}[batch_size]  # (roles, rows) of each batch
    assert [(forwards[i][0], forwards[i + 1][0]) for i in starts] == expected
    for i in starts:
        (_, shared, _), (_, own, cached) = forwards[i], forwards[i + 1]
        assert cached == shared >= MIN_SHARED_TOKENS and own <= longest - MIN_SHARED_TOKENS


def test_samples_of_one_prompt_differ_and_are_reproducible(model_and_tokenizer):
    requests = [ask("Hi", params={"temperature": 1.0, "max_tokens": 12}, sample_index=i) for i in range(4)]
    first = make_client(model_and_tokenizer, batch_size=4).generate(requests)
    again = make_client(model_and_tokenizer, batch_size=4).generate(requests)
    assert [r.text for r in first] == [r.text for r in again]
    assert len({r.text for r in first}) > 1
    greedy = make_client(model_and_tokenizer).generate([ask("Hi", sample_index=i) for i in range(2)])
    assert greedy[0].text == greedy[1].text


def test_cache_rerun_generates_nothing(model_and_tokenizer, tmp_path):
    requests = [ask(q) for q in QUESTIONS]
    first = make_client(model_and_tokenizer, cache_path=tmp_path / "local.sqlite").generate(requests)
    client = make_client(model_and_tokenizer, cache_path=tmp_path / "local.sqlite")
    second = client.generate(requests)
    assert [r.text for r in second] == [r.text for r in first] and all(r.cached for r in second)
    assert (client.usage.requests, client.usage.cached) == (0, 5)
    # a different default budget is a different answer: not served from the cache
    other = make_client(model_and_tokenizer, cache_path=tmp_path / "local.sqlite", max_new_tokens=3)
    other.generate(requests[:1])
    assert other.usage.requests == 1


def test_parse_rejections_are_re_asked_then_counted(model_and_tokenizer):
    calls = []

    def parse(text):
        calls.append(text)
        if len(calls) == 1:
            raise ValueError("not the answer I wanted")
        return len(text)

    client = make_client(model_and_tokenizer, max_parse_attempts=2)
    [accepted] = client.generate([ask("Hi")], parse=parse)
    assert accepted.ok and accepted.attempts == 2 and accepted.parsed == len(accepted.text)

    def reject(text):
        raise ValueError("never good enough")

    [rejected] = client.generate([ask("Hi", params={"temperature": 1.0})], parse=reject)
    assert rejected.error == "unparseable answer after 2 attempts: never good enough"
    assert rejected.text is not None
    assert (client.usage.requests, client.usage.reasks, client.usage.failures) == (4, 2, 1)


def test_loading_by_path_and_bad_arguments(tiny_model_path, model_and_tokenizer):
    client = LocalChatClient(tiny_model_path, chat_template="chatml", max_new_tokens=2, progress=False)
    assert client.model_name == str(tiny_model_path)
    assert client.generate([ask("Hi")])[0].usage["completion_tokens"] <= 2
    with pytest.raises(ValueError, match="has no chat template: pass chat_template='chatml'"):
        LocalChatClient(tiny_model_path)
    with pytest.raises(ValueError, match=r"does not support params \['frequency_penalty'\]"):
        client.generate([ask("Hi", params={"frequency_penalty": 0.5})])
    with pytest.raises(ValueError, match="model_name_or_path, or model and tokenizer"):
        LocalChatClient()
    estimate = client.estimate([ask("Hi"), ask("Hi", params={"max_tokens": 5})])
    prompt = client.tokenizer.apply_chat_template(
        ask("Hi").messages, chat_template=CHATML_TEMPLATE, add_generation_prompt=True, return_dict=False
    )
    assert (estimate.prompt_tokens, estimate.completion_tokens) == (2 * len(prompt), 2 + 5)


def test_sampling_leaves_the_callers_random_state_alone(model_and_tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    make_client(model_and_tokenizer).generate([ask("Hi", params={"temperature": 1.0})])
    assert torch.equal(torch.rand(3), expected)


def test_every_configured_end_token_stops_generation(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    end_tokens = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|pad|>")]
    model.generation_config.eos_token_id = list(end_tokens)
    try:
        client = make_client(model_and_tokenizer)
    finally:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert client.stop_ids == [*end_tokens, im_end]


def test_a_loaded_model_s_output_layer_gets_a_contiguous_input(tiny_model_path):
    """`generate` slices the last position for the output layer; a loaded model's layer sees it contiguous (a frozen
    weight times a non-contiguous slice copies the weight once per row on a CPU), with the same logits."""
    from rolellm.clients.loading import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(tiny_model_path)
    head = model.get_output_embeddings()
    seen = []
    head.register_forward_hook(lambda module, args, output: seen.append(args[0].is_contiguous()))
    hidden = torch.randn(3, 5, head.in_features)[:, -1:, :]
    assert not hidden.is_contiguous()
    with torch.no_grad():
        logits = head(hidden)
    assert seen == [True]
    torch.testing.assert_close(logits, hidden @ head.weight.T, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("native", [False, True])
def test_bfloat16_on_a_cpu_that_emulates_it_warns(tiny_model_path, monkeypatch, caplog, native):
    """A model put in bfloat16 on the CPU, or `bf16=True` training on the CPU, logs that float32 is faster where the CPU
    has no bfloat16 units (PyTorch emulates them), and nothing where it has them or the dtype is float32."""
    from rolellm.clients import loading
    from rolellm.training.config import RoCITConfig

    monkeypatch.setattr(loading, "cpu_has_bfloat16", lambda: native)
    with caplog.at_level("WARNING", logger="rolellm.clients.loading"):
        LocalChatClient(tiny_model_path, chat_template="chatml", dtype="float32", progress=False)
        assert caplog.records == []
        client = LocalChatClient(tiny_model_path, chat_template="chatml", dtype="bfloat16", progress=False)
        assert client.model.dtype == torch.bfloat16
        assert RoCITConfig(output_dir="out", use_cpu=True).bf16 is False  # unset: float32 on a CPU, no warning
        RoCITConfig(output_dir="out", use_cpu=True, bf16=True)
    expected = [] if native else [
        f"{tiny_model_path} in bfloat16 on a CPU without bfloat16 units (AMX, AVX512-BF16): PyTorch emulates bfloat16 "
        "at about six times float32's time, so float32 is faster here",
        "--bf16 true on a CPU without bfloat16 units (AMX, AVX512-BF16): PyTorch emulates bfloat16 at about six times "
        "float32's time, so float32 is faster here",
    ]  # fmt: skip
    assert [record.getMessage() for record in caplog.records] == expected


def test_only_a_model_whose_generate_takes_a_computed_prefix_is_prefilled(model_and_tokenizer):
    from peft import LoraConfig, PromptTuningConfig, get_peft_model

    model, _ = model_and_tokenizer
    assert decoder_to_prefill(model) is model.get_decoder()
    assert decoder_to_prefill(model, {"num_beams": 2}) is None  # beams reorder the cache
    assert decoder_to_prefill(model, {"num_return_sequences": 2}) is None
    assert decoder_to_prefill(model, {"cache_implementation": "static"}) is None
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM"))
    assert decoder_to_prefill(lora) is lora.get_decoder()  # the adapter's layers are inside the decoder
    prompt_tuning = get_peft_model(
        copy.deepcopy(model), PromptTuningConfig(num_virtual_tokens=2, task_type="CAUSAL_LM")
    )
    assert decoder_to_prefill(prompt_tuning) is None  # its virtual tokens are added by its own forward only
