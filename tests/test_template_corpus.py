"""Every real chat template of `../shared/data/chat-templates/*/`: exact masks, system text, injection safety.

Each folder's template is paired with the tiny BPE tokenizer plus the family's tokens
(`rolellm.testing.tiny_tokenizer_for_template`) and, where the folder has one, with the real `tokenizer.json`. A new
folder dropped into the corpus is tested without code changes.
"""

from pathlib import Path

import pytest

from rolellm import check_chat_template, encode_chat, encode_chat_turns
from rolellm.testing.data import ROLEBENCH_SLICE, find_test_data
from rolellm.testing.models import tiny_tokenizer_for_template


def _corpus() -> Path | None:
    data = find_test_data()  # the full data folder, else the slice (all but the largest folders)
    corpus = data / "chat-templates" if data is not None else None
    return corpus if corpus is not None and corpus.is_dir() else None


def _template_source(folder: Path) -> str:
    """The chat template text of a corpus folder: its tokenizer_config.json's, and any `.jinja` file's."""
    import json

    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template") or ""
    return json.dumps(config) + "".join(p.read_text(encoding="utf-8") for p in folder.glob("*.jinja"))


CORPUS = _corpus()
FOLDERS = sorted(p.name for p in CORPUS.iterdir() if (p / "tokenizer_config.json").exists()) if CORPUS else []
REAL = [name for name in FOLDERS if (CORPUS / name / "tokenizer.json").exists()]
# `keep_think` changes nothing for a template that writes no think block: the two are run for those that do
THINKING = [name for name in FOLDERS if "think" in _template_source(CORPUS / name)]
BOTH_WAYS = [(name, False) for name in FOLDERS] + [(name, True) for name in THINKING]
BOTH_WAYS_IDS = [f"{'keep_think' if keep else 'default'}-{name}" for name, keep in BOTH_WAYS]
SKIP = pytest.mark.skipif(CORPUS is None, reason="../shared/data/chat-templates not found (set ROLEBENCH_DATA_DIR)")
NO_REAL = pytest.param(
    "none",
    marks=pytest.mark.skip(
        reason="the real tokenizer.json files (18 MB) are only in the full data: set ROLEBENCH_DATA_DIR or place it at "
        "../shared/data"
    ),
)

SYSTEM = "You are Jack Sparrow."
CHAT = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Where is the rum?"},
    {"role": "assistant", "content": "Gone, mate."},
    {"role": "user", "content": "Who are you?"},
    {"role": "assistant", "content": "Captain Jack Sparrow."},
]


@pytest.fixture(scope="module")
def tokenizers():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = tiny_tokenizer_for_template(CORPUS / name)
        return cache[name]

    return get


def test_the_corpus_is_there():
    if CORPUS is None:
        pytest.skip("../shared/data/chat-templates not found (set ROLEBENCH_DATA_DIR)")
    # the slice leaves out gemma-3-it (a 1.2 MB config) and the real tokenizer.json files
    assert len(FOLDERS) >= (24 if CORPUS.parent == ROLEBENCH_SLICE else 25)


@SKIP
@pytest.mark.parametrize(("name", "keep_think"), BOTH_WAYS or [("none", False)], ids=BOTH_WAYS_IDS or None)
def test_template_passes_every_check(tokenizers, name, keep_think):
    report = check_chat_template(tokenizers(name), keep_think=keep_think)
    assert report.ok, f"{name}:\n{report}"


@SKIP
@pytest.mark.parametrize("name", REAL or [NO_REAL])
def test_real_tokenizer_passes_every_check(name, capsys):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(CORPUS / name)
    report = check_chat_template(tokenizer)
    assert report.ok, f"{name}:\n{report}"
    assert "injection: the text of all" in str(report) and len(tokenizer.added_tokens_decoder) >= 20
    # and `rolellm check-template` on the folder (`_run_cli`, below)
    assert _run_cli(CORPUS / name) == 0
    assert "the template is supported" in capsys.readouterr().out


def _control_ids(tokenizer, ids):
    added = set(tokenizer.added_tokens_decoder)
    return [i for i in ids if i in added]


@SKIP
@pytest.mark.parametrize("name", FOLDERS or ["none"])
def test_every_added_token_in_every_message_is_plain_text(tokenizers, name):
    """Training (encode_chat_turns) and inference (encode_chat with the generation prompt, as LocalChatClient and
    the evaluation use it) keep the template's own control tokens and nothing more, for every added token."""
    tokenizer = tokenizers(name)
    texts = [t.content for t in tokenizer.added_tokens_decoder.values() if t.content.strip()]
    injected = [dict(m, content=m["content"] + " " + " ".join(texts)) for m in CHAT]
    for clean_seq, seq in zip(encode_chat_turns(tokenizer, CHAT), encode_chat_turns(tokenizer, injected), strict=True):
        assert _control_ids(tokenizer, seq["input_ids"]) == _control_ids(tokenizer, clean_seq["input_ids"])
    for end in (2, 4):
        clean = encode_chat(tokenizer, CHAT[:end], add_generation_prompt=True)["input_ids"]
        prompt = encode_chat(tokenizer, injected[:end], add_generation_prompt=True)["input_ids"]
        assert _control_ids(tokenizer, prompt) == _control_ids(tokenizer, clean)
        plain = tokenizer(" ".join(texts), add_special_tokens=False, split_special_tokens=True)["input_ids"]
        if not _control_ids(tokenizer, plain):  # every text encodes as ordinary tokens, and it is there
            assert any(prompt[i : i + len(plain)] == plain for i in range(len(prompt)))
        assert " ".join(texts) in tokenizer.decode(prompt)


@SKIP
@pytest.mark.parametrize(("name", "keep_think"), BOTH_WAYS or [("none", False)], ids=BOTH_WAYS_IDS or None)
def test_preference_samples_share_the_prompt_and_train_exactly_the_answer(tokenizers, name, keep_think):
    """DPO/KTO samples (`encode_preference`): chosen and rejected follow the prompt ids of inference, token for token,
    and each completion is exactly the tokens `encode_chat` trains for that answer (an injected control token's text
    included, as plain text)."""
    from rolellm.training.preference import encode_preference

    tokenizer = tokenizers(name)
    texts = " ".join(t.content for t in tokenizer.added_tokens_decoder.values() if t.content.strip())
    prompt, answers = CHAT[:2], ["Gone, mate.", f"Arr. {texts}"]
    prompt_ids, completions = encode_preference(tokenizer, prompt, answers, keep_think=keep_think)
    assert prompt_ids == encode_chat(tokenizer, prompt, add_generation_prompt=True, keep_think=keep_think)["input_ids"]
    for answer, ids in zip(answers, completions, strict=True):
        full = encode_chat(tokenizer, [*prompt, {"role": "assistant", "content": answer}], keep_think=keep_think)
        assert full["input_ids"][: len(prompt_ids) + len(ids)] == prompt_ids + ids
        assert [i for i, m in zip(full["input_ids"], full["assistant_masks"]) if m] == ids
        assert answer.split()[0] in tokenizer.decode(ids)
    assert _control_ids(tokenizer, completions[1]) == _control_ids(tokenizer, completions[0])


def _trained(tokenizer, encoded) -> list[str]:
    """The decoded text of each trained run."""
    runs, current = [], []
    for token, mask in zip(encoded["input_ids"], encoded["assistant_masks"]):
        if mask:
            current.append(token)
        elif current:
            runs.append(tokenizer.decode(current))
            current = []
    return runs + ([tokenizer.decode(current)] if current else [])


def _prompt(tokenizer, messages) -> str:
    return tokenizer.decode(encode_chat(tokenizer, messages, add_generation_prompt=True)["input_ids"])


@SKIP
def test_mistral_keeps_the_system_text_in_every_turn_as_at_inference(tokenizers):
    """Mistral v0.3/Nemo put the system text into the last user turn: one sequence per answer, none without it."""
    for name in ("mistral-7b-instruct-v0.3", "mistral-nemo-instruct-2407"):
        tokenizer = tokenizers(name)
        first, second = encode_chat_turns(tokenizer, CHAT)
        assert tokenizer.decode(first["input_ids"]).startswith(_prompt(tokenizer, CHAT[:2]))
        assert tokenizer.decode(second["input_ids"]).startswith(_prompt(tokenizer, CHAT[:4]))
        assert SYSTEM in _prompt(tokenizer, CHAT[:2]) and SYSTEM in _prompt(tokenizer, CHAT[:4])
        assert [r.strip() for r in _trained(tokenizer, first)] == ["Gone, mate.</s>"]
        assert [r.strip() for r in _trained(tokenizer, second)] == ["Captain Jack Sparrow.</s>"]
        with pytest.raises(ValueError, match="encode_chat_turns"):
            encode_chat(tokenizer, CHAT)


@SKIP
def test_gemma2_gets_the_system_text_folded_into_the_first_user_turn(tokenizers):
    tokenizer = tokenizers("gemma-2-it")
    [encoded] = encode_chat_turns(tokenizer, CHAT)
    assert tokenizer.decode(encoded["input_ids"]).startswith(
        f"<bos><start_of_turn>user\n{SYSTEM}\n\nWhere is the rum?<end_of_turn>\n<start_of_turn>model\n"
    )
    assert _prompt(tokenizer, CHAT[:2]).endswith(f"{SYSTEM}\n\nWhere is the rum?<end_of_turn>\n<start_of_turn>model\n")
    assert _trained(tokenizer, encoded) == ["Gone, mate.<end_of_turn>\n", "Captain Jack Sparrow.<end_of_turn>\n"]


@SKIP
def test_thinking_templates_train_without_an_empty_think_block(tokenizers):
    for name in ("qwen3", "qwen3-rev2"):
        tokenizer = tokenizers(name)
        [encoded] = encode_chat_turns(tokenizer, CHAT)
        assert _trained(tokenizer, encoded) == ["Gone, mate.<|im_end|>\n", "Captain Jack Sparrow.<|im_end|>\n"]
        kept = encode_chat_turns(tokenizer, CHAT, keep_think=True)  # the template's own: an empty block, last turn
        assert _trained(tokenizer, kept[-1]) == ["<think>\n\n</think>\n\nCaptain Jack Sparrow.<|im_end|>\n"]
    tokenizer = tokenizers("deepseek-r1")
    assert _prompt(tokenizer, CHAT[:2]).endswith("<｜Assistant｜>")  # no prefilled <think>
    kept = encode_chat(tokenizer, CHAT[:2], add_generation_prompt=True, keep_think=True)
    assert tokenizer.decode(kept["input_ids"]).endswith("<｜Assistant｜><think>\n")
    tokenizer = tokenizers("glm-4.5")  # no end of turn in the template: the next turn's <|user|> is trained
    [encoded] = encode_chat_turns(tokenizer, CHAT)
    assert _trained(tokenizer, encoded) == ["\nGone, mate.<|user|>", "\nCaptain Jack Sparrow.<|user|>"]


@SKIP
def test_phi35_trains_its_end_of_text_only_where_the_template_writes_it(tokenizers):
    tokenizer = tokenizers("phi-3.5-mini-instruct")
    [encoded] = encode_chat_turns(tokenizer, CHAT)
    assert _trained(tokenizer, encoded) == ["Gone, mate.<|end|>\n", "Captain Jack Sparrow.<|end|>\n<|endoftext|>"]


@SKIP
def test_trimming_templates_get_stripped_contents(tokenizers):
    tokenizer = tokenizers("llama-3.1-instruct")
    padded = [dict(m, content=f"  {m['content']}\n") for m in CHAT]
    assert encode_chat(tokenizer, padded) == encode_chat(tokenizer, CHAT)
    assert tokenizer.decode(encode_chat(tokenizer, padded)["input_ids"]) == tokenizer.apply_chat_template(
        CHAT, tokenize=False
    )


def _run_cli(*argv):
    from rolellm.scripts.cli import main

    return main(["template", "check", *map(str, argv)])


def test_cli_check_exit_codes(tmp_path, tiny_tokenizer, capsys):
    from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE

    good, bad, base = tmp_path / "good", tmp_path / "bad", tmp_path / "base"
    tiny_tokenizer.save_pretrained(base)  # no chat template
    tiny_tokenizer.chat_template = ROLE_CHAT_TEMPLATE
    tiny_tokenizer.save_pretrained(good)
    tiny_tokenizer.chat_template = "{{ raise_exception('Only user and assistant roles are supported!') }}"
    tiny_tokenizer.save_pretrained(bad)
    tiny_tokenizer.chat_template = None
    assert _run_cli(good) == 0
    out = capsys.readouterr().out
    assert "PASS  injection" in out and "the template is supported" in out
    assert _run_cli(bad) == 3
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Only user and assistant roles are supported" in err
    assert _run_cli(base) == 2 and "has no chat template" in capsys.readouterr().err
    assert _run_cli(tmp_path / "missing") == 2 and "cannot load the tokenizer" in capsys.readouterr().err
    assert _run_cli(good, "--chat_template", tmp_path / "none.jinja") == 2


@pytest.mark.parametrize(
    ("template", "failed", "cause"),
    [
        ("{{ raise_exception('No roles here') }}", "renders", "No roles here"),
        (  # the generation prompt opens an answer differently from how answers are rendered
            "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>bot\n{% endif %}",
            "renders",
            "generation prompt ends with",
        ),
        (  # nothing ends an answer: no end of turn, and the next turn starts with plain text
            "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}assistant: {% endif %}",
            "single-turn mask",
            "trains no end of turn",
        ),
    ],
)
def test_check_names_what_is_wrong(tiny_tokenizer, template, failed, cause):
    report = check_chat_template(tiny_tokenizer, chat_template=template)
    assert not report.ok
    assert report.cause.startswith(f"{failed}:") and cause in report.cause
    assert f"FAIL  {failed}" in str(report) and "NOT supported" in str(report)


def test_check_without_a_template(tiny_tokenizer):
    assert check_chat_template(tiny_tokenizer).cause == "tokenizer: the tokenizer has no chat template"


@SKIP
@pytest.mark.parametrize("name", FOLDERS or ["none"])
def test_local_chat_client_prompt_keeps_injected_tokens_plain(tokenizers, name):
    """`LocalChatClient` (the path of `rolellm evaluate` and `rolellm dialogue` with a local model) prompts with
    exactly `encode_chat`'s tokens, so added tokens' text in the messages stays plain text there too (the first
    100 added tokens: the model reads the whole prompt; every token is tried on `encode_chat` above)."""
    import torch
    from jinja2.exceptions import TemplateError
    from transformers import LlamaConfig, LlamaForCausalLM

    from rolellm import LocalChatClient

    tokenizer = tokenizers(name)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)  # fmt: skip
    client = LocalChatClient(model=LlamaForCausalLM(config), tokenizer=tokenizer, max_new_tokens=1, progress=False)
    texts = " ".join([t.content for t in tokenizer.added_tokens_decoder.values() if t.content.strip()][:100])
    injected = [dict(m, content=f"{m['content']} {texts}") for m in CHAT[:4]]
    [result] = client.generate([injected])
    prompt = encode_chat(tokenizer, injected, add_generation_prompt=True)["input_ids"]
    assert result.ok and result.usage["prompt_tokens"] == len(prompt)
    ends = {
        "glm-4.5": "<|user|>",
        "chatglm3-6b": "<|user|>",
        "phi-3.5-mini-instruct": "<|end|>",
        "qwen3": "<|im_end|>",
    }
    if name in ends:  # generation stops on the template's end of turn, even one the template never writes
        assert tokenizer.convert_tokens_to_ids(ends[name]) in client.stop_ids
    try:
        raw = tokenizer.apply_chat_template(injected, add_generation_prompt=True)  # forges the tokens: fewer of them
    except TemplateError:  # a template without a system role
        raw = tokenizer.apply_chat_template(injected[1:], add_generation_prompt=True)
    assert len(raw) < len(prompt)
