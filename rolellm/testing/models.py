"""Tiny local artefacts for tests, examples and the demo: no download, seconds to build.

`train_tiny_tokenizer` trains a byte-level BPE (so Chinese and any other text round-trips) on a few hundred
strings; `build_tiny_llama` saves a random two-layer `LlamaForCausalLM` and that tokenizer to a folder laid
out like a Hub model repository, so the real `from_pretrained(path)` code paths run on it.

>>> tokenizer = train_tiny_tokenizer()
>>> tokenizer.decode(tokenizer("孙悟空说：俺老孙来也！ Arr, matey.")["input_ids"])
'孙悟空说：俺老孙来也！ Arr, matey.'
"""

import json
import os
import re
from pathlib import Path


SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]

_SENTENCES = [
    "Arr, matey, the sea is a cruel mistress and I am her most devoted captain.",
    "Why is the rum always gone? Savvy?",
    "Carpe diem, boys. Seize the day and make your lives extraordinary.",
    "Get off my lawn. I fought in Korea and I do not need your help.",
    "Please explain the difference between a comet and an asteroid.",
    "Write a short poem about the ocean at night.",
    "What would you do if you found a treasure map in your attic?",
    "Translate the following sentence into French: the cat sleeps on the mat.",
    "Give three tips for staying healthy during the winter.",
    "I am the captain of this ship, and we sail at dawn.",
    "The answer is simple: trust no one, and keep your compass close.",
    "A good teacher opens the door; you must enter by yourself.",
    "Summarize the plot of the story in two sentences.",
    "How many legs does a spider have? Eight, of course.",
    "My father taught me that a man's word is his bond.",
    "俺老孙来也！师父莫慌，待俺去看看那妖怪。",
    "你是孙悟空，你的性格和背景是齐天大圣，桀骜不驯。",
    "请你回答我的一些问题，以准确展现你的人格特征。",
    "皇上万福金安，臣妾给皇上请安。",
    "本宫的东西，谁也拿不走。",
    "燕人张飞在此，谁敢与我决一死战！",
    "举头望明月，低头思故乡。",
    "请用三句话介绍一下长城的历史。",
    "如果你有一天可以飞，你最想去哪里？",
    "写一首关于春天的短诗。",
    "这个问题的答案很简单，只要用心去做就好。",
    "今天天气很好，我们一起去花园散步吧。",
    "问题：什么是人工智能？参考回答：让机器像人一样思考。",
]


def tiny_corpus(repeat: int = 12) -> list[str]:
    """A few hundred short English and Chinese strings (role-play lines and instructions) to train on."""
    corpus = []
    for i in range(repeat):
        for sentence in _SENTENCES:
            corpus.append(sentence if i % 2 == 0 else sentence.lower())
            corpus.append(f"{i} {sentence}")
    return corpus


def train_tiny_tokenizer(texts: list[str] | None = None, vocab_size: int = 1024):
    """Train a byte-level BPE tokenizer and wrap it as a `transformers.PreTrainedTokenizerFast`.

    Args:
        texts (`list[str]`, *optional*): training strings; defaults to `tiny_corpus()`.
        vocab_size (`int`, *optional*, defaults to 1024): the vocabulary size, special tokens included.

    Returns:
        `PreTrainedTokenizerFast` with `<|endoftext|>` as BOS/EOS, `<|pad|>` as padding, the ChatML markers
        `<|im_start|>` / `<|im_end|>` as special tokens, and no chat template (a base model's tokenizer).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts if texts is not None else tiny_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=2048,
    )


# strings of a chat template that look like control tokens: <|im_start|>, <｜User｜>, <start_of_turn>, [INST], <用户>
_CONTROL_RE = r"<\|[^|<>\s'\"]{1,40}\|>|<｜[^｜<>]{1,40}｜>|</?[A-Za-z_][A-Za-z0-9_]{0,30}>|<</?SYS>>|\[/?[A-Za-z_]{2,20}\]|<[^\x00-\x7f<>]{1,8}>"


def load_template_folder(folder: str | os.PathLike) -> tuple[str, dict]:
    """A model's chat template and its `tokenizer_config.json` (the template from `chat_template.jinja` if present)."""
    folder = Path(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    jinja = folder / "chat_template.jinja"
    template = jinja.read_text(encoding="utf-8") if jinja.exists() else config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = {t["name"]: t["template"] for t in template}["default"]
    if not template:
        raise ValueError(f"{folder}: no chat template in tokenizer_config.json or chat_template.jinja")
    return template, config


def tiny_tokenizer_for_template(folder: str | os.PathLike):
    """The tiny BPE tokenizer with a model family's tokens and chat template, read from a tokenizer folder.

    The added tokens are those of `tokenizer_config.json`'s `added_tokens_decoder` (with their special flag), its
    bos/eos/pad/unk tokens (special), and every string of the template that looks like a control token (`<|...|>`,
    `<｜...｜>`, `<tag>`, `[INST]`), added as ordinary (non-special) tokens when not listed.

    >>> import tempfile, json, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<end>",
    ...     "chat_template": "{% for m in messages %}<turn>{{ m.content }}<end>{% endfor %}"}))
    >>> tokenizer = tiny_tokenizer_for_template(folder)
    >>> tokens = tokenizer.convert_ids_to_tokens(tokenizer("<turn>hi<end>")["input_ids"])
    >>> tokens[0], tokens[-1], tokenizer.eos_token
    ('<turn>', '<end>', '<end>')
    """

    from tokenizers import AddedToken

    template, config = load_template_folder(folder)
    tokenizer = train_tiny_tokenizer()
    listed = [AddedToken(t["content"], special=t.get("special", False), normalized=False)
              for t in config.get("added_tokens_decoder", {}).values()]  # fmt: skip
    roles = {}
    for role in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = config.get(role)
        value = value.get("content") if isinstance(value, dict) else value
        if value:
            roles[role] = value
    known = {t.content for t in listed} | set(tokenizer.get_vocab())
    tokenizer.add_tokens(listed)
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in dict.fromkeys(roles.values())
                          if t not in known])  # fmt: skip
    known |= set(roles.values())
    found = re.findall(_CONTROL_RE, template)
    if "'<|' +" in template or "<|{{" in template:  # role markers built from the role name (ChatGLM3)
        found += [f"<|{role}|>" for role in ("system", "user", "assistant", "observation")]
    found = dict.fromkeys(t for t in found if t not in known)
    tokenizer.add_tokens([AddedToken(t, normalized=False) for t in found])
    tokenizer.add_special_tokens(roles)
    tokenizer.chat_template = template
    return tokenizer


def cpu_model_dtype() -> str:
    """The dtype a real model runs fastest in on this CPU, as `from_pretrained` and `transformers serve` take it:
    `"bfloat16"` where the CPU has bfloat16 units (`cpu_has_bfloat16`: a third of float32's time for a 135M model),
    else `"float32"`."""
    from rolellm.clients.loading import cpu_has_bfloat16

    return "bfloat16" if cpu_has_bfloat16() else "float32"


def build_tiny_llama(path: str | os.PathLike, tokenizer=None, seed: int = 0, **config_overrides) -> Path:
    """Save a random tiny `LlamaForCausalLM` and its tokenizer to `path` and return the folder.

    The folder has the layout of a Hub model repository (`config.json`, `model.safetensors`, tokenizer files),
    so `AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)` load it.

    Args:
        path (`str` or `os.PathLike`): the folder to write.
        tokenizer (`PreTrainedTokenizerFast`, *optional*): defaults to `train_tiny_tokenizer()`.
        seed (`int`, *optional*, defaults to 0): seed of the random weights.
        config_overrides: `LlamaConfig` fields to change (`hidden_size=128`, `num_hidden_layers=4`, ...).
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer if tokenizer is not None else train_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    for key, value in config_overrides.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_gguf(
    path: str | os.PathLike, tokenizer_gguf: str | os.PathLike, vocab: int = 1024, seed: int = 0
) -> Path:
    """A random two-layer Llama as a GGUF file at `path`, with the first `vocab` tokens of the tokenizer of
    `tokenizer_gguf` (a real model's byte-level BPE GGUF file: its special tokens, bytes and first merges), its chat
    template, and weights quantized as llama.cpp quantizes a real model's (the embeddings `Q8_0`, the layers' matrices
    `Q4_1`): transformers' GGUF reader reads and dequantizes it as it does the real file, in a fraction of the time
    (most of which a real file spends on its 49,152 tokens and merges)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, quants

    hidden, ffn, heads, kv_heads, layers = 64, 128, 4, 2, 2
    source = GGUFReader(tokenizer_gguf)
    tokens = source.fields["tokenizer.ggml.tokens"].contents()[:vocab]
    kept = set(tokens)
    merges = [merge for merge in source.fields["tokenizer.ggml.merges"].contents()
              if merge.replace(" ", "", 1) in kept and set(merge.split(" ", 1)) <= kept]  # fmt: skip
    shortened = {
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": source.fields["tokenizer.ggml.token_type"].contents()[:vocab],
        "tokenizer.ggml.merges": merges,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(path), "llama")
    for name, field in source.fields.items():
        if name.startswith("tokenizer."):
            value = shortened[name] if name in shortened else field.contents()  # the long arrays read once
            sub_type = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
            writer.add_key_value(name, value, field.types[0], sub_type)
    writer.add_block_count(layers)
    writer.add_context_length(2048)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(hidden // heads)
    rng = np.random.default_rng(seed)

    def add(name: str, shape: tuple, kind=None) -> None:
        if kind is None:  # a norm's weight, float32
            writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
            return
        weight = (0.05 * rng.standard_normal(shape)).astype(np.float32)
        writer.add_tensor(name, quants.quantize(weight, kind), raw_dtype=kind)

    add("token_embd.weight", (vocab, hidden), GGMLQuantizationType.Q8_0)
    add("output_norm.weight", (hidden,))
    kv_width = hidden // heads * kv_heads
    for layer in range(layers):
        block = f"blk.{layer}"
        add(f"{block}.attn_norm.weight", (hidden,))
        add(f"{block}.ffn_norm.weight", (hidden,))
        for name, shape in (("attn_q", (hidden, hidden)), ("attn_k", (kv_width, hidden)), ("attn_v", (kv_width, hidden)),
                            ("attn_output", (hidden, hidden)), ("ffn_gate", (ffn, hidden)), ("ffn_up", (ffn, hidden)),
                            ("ffn_down", (hidden, ffn))):  # fmt: skip
            add(f"{block}.{name}.weight", shape, GGMLQuantizationType.Q4_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
