"""`LocalChatClient`: the chat-client interface on a `transformers` model running in-process, batched.

Every generation stage works with no API key and no server: requests are rendered with the tokenizer's chat
template, grouped by their system text and sorted by length, and generated in left-padded batches, the first tokens
a batch's prompts share (a role's system text) computed once (`rolellm.clients.prefill`); answers go through the same
cache, `parse` re-asks and usage totals as `OpenAIChatClient`.

>>> import tempfile
>>> from rolellm.testing.models import build_tiny_llama
>>> path = build_tiny_llama(tempfile.mkdtemp())
>>> client = LocalChatClient(path, max_new_tokens=4, chat_template="chatml", progress=False)
>>> [result] = client.generate([[{"role": "user", "content": "Ahoy!"}]])
>>> result.ok, result.usage["completion_tokens"] <= 4
(True, True)
"""

import asyncio
import hashlib
import os
from typing import Any

from rolellm.clients.base import ChatClient, ChatRequest, ChatResult, as_request, refuse_unknown_params
from rolellm.clients.cache import request_key
from rolellm.clients.loading import check_model_source, load_model_and_tokenizer, warn_if_bfloat16_is_emulated
from rolellm.clients.prefill import decoder_to_prefill, plan_shared_prefixes, system_text
from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE, read_chat_template
from rolellm.encoding.encode import encode_chat
from rolellm.encoding.layout import added_token_ids


# prompt tokens a row that sharing the roles' first tokens must save (below, the extra forward costs about as much)
MIN_SHARED_TOKENS = 16
# chat-completions parameter -> `generate()` keyword
_PARAMS = {
    "max_tokens": "max_new_tokens",
    "max_new_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "repetition_penalty": "repetition_penalty",
    "do_sample": "do_sample",
    "seed": None,  # part of the batch seed, see `_generate_batch`
}


class TokenPromptClient(ChatClient):
    """What the clients that send token ids share (`LocalChatClient`, the vLLM client): prompts from the
    injection-safe encoder (`encode_prompt`), counted in real tokens, and the default budget `max_new_tokens` in the
    cache key, since it changes the answer. Subclasses set `tokenizer`, `chat_template`, `keep_think` and
    `max_new_tokens`."""

    @property
    def default_max_tokens(self) -> int:
        return self.max_new_tokens

    def key(self, request: ChatRequest, attempt: int = 0) -> str:
        params = {"max_tokens": self.max_new_tokens, **request.params}
        return request_key(self.model_name, request.messages, params, request.sample_index, attempt)

    def count_prompt_tokens(self, request: ChatRequest) -> int:
        return len(self.encode_prompt(request.messages))

    def encode_prompt(self, messages: list[dict]) -> list[int]:
        """The token ids the model answers `messages` from (`encode_prompt`, the module function)."""
        return encode_prompt(self.tokenizer, messages, self.chat_template, self.keep_think)


class LocalChatClient(TokenPromptClient):
    """A chat client on a local `transformers` causal LM, with the same `generate()` as `OpenAIChatClient`.

    Greedy decoding unless a request's `params` set `temperature > 0` (or `do_sample=True`); sampled batches are
    seeded from the batch's request keys (which include `sample_index`), so the same batch gives the same samples
    and the `n` samples of one prompt differ.

    Args:
        model_name_or_path (`str` or `os.PathLike`, *optional*): a Hub id, a local model folder or a LoRA/QLoRA
            adapter checkpoint, loaded with `rolellm.clients.loading.load_model_and_tokenizer`. Give it, or `model`
            and `tokenizer`.
        model (`PreTrainedModel`, *optional*): an already loaded model.
        tokenizer (`PreTrainedTokenizerBase`, *optional*): its tokenizer.
        batch_size (`int`, *optional*, defaults to 8): prompts per `generate()` call.
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request without `max_tokens`.
        chat_template (`str`, *optional*): `"chatml"`, a Jinja chat template or the path of one
            (`rolellm.encoding.chat_template.read_chat_template`); defaults to the tokenizer's own.
            A tokenizer with no template and no `chat_template` given is an error. Prompts are encoded with
            `rolellm.encode_chat`, exactly as `RoCITTrainer` trains them, and message text that looks like a
            control token stays plain text.
        keep_think (`bool`, *optional*, defaults to `False`): keep a thinking template's think blocks in the prompt
            (see `rolellm.encode_chat`).
        device (`str`, *optional*): where to run (`"cpu"`, `"cuda"`); defaults to the model's device.
        dtype (`str`, *optional*): the `dtype` passed to `from_pretrained` (`"bfloat16"`, ...).
        cache_path (`str`, *optional*): a SQLite file caching answers by request content.
        max_parse_attempts (`int`, *optional*, defaults to 3): answers asked for when `parse` rejects them.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar.
    """

    config_fields = ("batch_size", "max_new_tokens", "chat_template", "dtype", "cache_path", "progress")

    @classmethod
    def from_config(cls, config) -> "LocalChatClient":
        """The client a `ClientConfig` describes: the model folder is checked before anything loads (a GGUF file is
        loaded from its cached folder, `check_model_source`, and keeps its own path as `model_name`), `keep_think`
        defaults to what the checkpoint recorded (a `chat_template` other than the one it was trained with is logged:
        `resolve_keep_think`), and the device defaults to the first GPU when there is one."""
        import torch

        from rolellm.clients.inference_settings import resolve_keep_think

        model = check_model_source(config.model, "--model")
        device = config.device or ("cuda" if torch.cuda.is_available() else None)
        settings = {name: getattr(config, name) for name in cls.config_fields}
        client = cls(model, keep_think=resolve_keep_think(config), device=device, **settings)
        # the name keys the answer cache and the run a resumed `rolellm dialogue` must match, and transcripts show it:
        # the cache folder's path would change with ROLELLM_CACHE (or the machine) and name no file the user gave
        client.model_name = str(config.model)
        return client

    def __init__(
        self,
        model_name_or_path: str | os.PathLike | None = None,
        *,
        model=None,
        tokenizer=None,
        batch_size: int = 8,
        max_new_tokens: int = 256,
        chat_template: str | None = None,
        keep_think: bool = False,
        device: str | None = None,
        dtype: str | None = None,
        cache_path: str | os.PathLike | None = None,
        max_parse_attempts: int = 3,
        progress: bool = True,
    ):
        if (model_name_or_path is None) == (model is None):
            raise ValueError("LocalChatClient needs model_name_or_path, or model and tokenizer (not both)")
        if model is not None and tokenizer is None:
            raise ValueError("LocalChatClient(model=...) also needs tokenizer=...")
        import torch

        if model is None:  # a full model or an adapter checkpoint, with the tokenizer saved beside it
            model, tokenizer = load_model_and_tokenizer(model_name_or_path, dtype=dtype)
        name = str(model_name_or_path) if model_name_or_path is not None else model.config.name_or_path
        super().__init__(name, cache_path, max_parse_attempts, progress)
        self.model = model.to(device) if device is not None else model
        self.model.eval()
        if self.model.device.type == "cpu" and self.model.dtype == torch.bfloat16:
            warn_if_bfloat16_is_emulated(f"{name} in bfloat16")
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.chat_template = read_chat_template(chat_template)
        self.keep_think = keep_think
        if self.chat_template is None and tokenizer.chat_template is None:
            raise ValueError(
                f"the tokenizer of {name!r} has no chat template: pass chat_template='chatml' or a Jinja template"
            )
        self.stop_ids = stop_token_ids(
            tokenizer, self.chat_template, keep_think, self.model.generation_config.eos_token_id
        )
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def __repr__(self) -> str:
        return f"LocalChatClient({self.model_name!r}, batch_size={self.batch_size}, cache={self.cache!r})"

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        """The async form of `generate`; generation runs in a worker thread so the event loop stays free (a
        `json_schema` is left to `parse`: transformers has no constrained decoding here)."""
        requests = [as_request(r) for r in requests]
        refuse_unknown_params(requests, _PARAMS, "LocalChatClient")

        async def answer(todo, asked, settle, fail):
            prompts = {i: self.encode_prompt(asked[i].messages) for i, _ in todo}
            # a role's prompts share a batch (their system text computed once), similar lengths too (less padding)
            todo.sort(key=lambda item: (system_text(asked[item[0]].messages), -len(prompts[item[0]])))
            for batch in _batches(todo, self.batch_size, key=lambda item: _generation_kwargs(requests[item[0]])):
                outputs = await asyncio.to_thread(
                    self._generate_batch, [asked[i] for i, _ in batch], [prompts[i] for i, _ in batch]
                )
                for (i, attempt), (text, usage) in zip(batch, outputs):
                    settle(i, attempt, text, usage)

        return await self.answer_in_rounds(requests, parse, desc, remind, answer)

    def _generate_batch(self, requests: list[ChatRequest], prompts: list[list[int]]) -> list[tuple[str, dict]]:
        """One `generate()` call: the prompts left-padded, or, when it saves `MIN_SHARED_TOKENS` a row, each role's
        shared first tokens computed once into a cache `generate` goes on from (`rolellm.clients.prefill`)."""
        import torch

        kwargs = _generation_kwargs(requests[0])
        kwargs.setdefault("max_new_tokens", self.max_new_tokens)
        # the tokens a role's prompts start with (its system text) computed once: rows [prefix][padding][own]
        decoder = decoder_to_prefill(self.model, kwargs) if len(prompts) > 1 else None
        plan = None
        if decoder is not None:
            groups = [system_text(request.messages) for request in requests]
            plan = plan_shared_prefixes(prompts, groups, self.pad_id, MIN_SHARED_TOKENS)
        if plan is None:
            width = max(len(p) for p in prompts)
            input_ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts])  # left padding
            attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        else:
            input_ids, attention_mask = torch.tensor(plan.input_ids), torch.tensor(plan.attention_mask)
            with torch.no_grad():
                cache = decoder(
                    input_ids=torch.tensor(plan.prefix_ids).to(self.model.device),
                    attention_mask=torch.tensor(plan.prefix_mask).to(self.model.device),
                    use_cache=True,
                ).cache
            cache.batch_select_indices(torch.tensor(plan.owners).to(self.model.device))
            kwargs["cache"] = cache
        width = input_ids.shape[1]
        seed_text = "".join(self.key(r) for r in requests) + str(requests[0].params.get("seed", ""))
        devices = [self.model.device.index or 0] if self.model.device.type != "cpu" else []
        # a private random stream: seeded per batch, and the caller's global RNG state is left as it was
        with torch.no_grad(), torch.random.fork_rng(devices=devices, device_type=self.model.device.type):
            torch.manual_seed(int(hashlib.sha256(seed_text.encode()).hexdigest()[:8], 16))
            output = self.model.generate(
                input_ids=input_ids.to(self.model.device),
                attention_mask=attention_mask.to(self.model.device),
                eos_token_id=self.stop_ids,
                pad_token_id=self.pad_id,
                **kwargs,
            )
        answers = []
        for prompt, row in zip(prompts, output[:, width:].tolist()):
            stop = next((j + 1 for j, token in enumerate(row) if token in self.stop_ids), len(row))
            text = self.tokenizer.decode(row[:stop], skip_special_tokens=True)
            answers.append((text, {"prompt_tokens": len(prompt), "completion_tokens": stop}))
        return answers


def encode_prompt(tokenizer, messages: list[dict], chat_template: str | None, keep_think: bool) -> list[int]:
    """The token ids a model answers `messages` from: `encode_chat` with the generation prompt (not
    `apply_chat_template`: the prompt the model was trained on, and message text that looks like a control token
    stays plain text). The one prompt encoder of every backend that runs weights (`LocalChatClient`,
    `VLLMChatClient`, `RayChatClient` on vLLM engines)."""
    return encode_chat(tokenizer, messages, True, chat_template, keep_think)["input_ids"]


def stop_token_ids(tokenizer, chat_template: str | None, keep_think: bool, configured=None) -> list[int]:
    """The token ids that end an answer: any end token the model's generation config knows (`configured`, its
    `eos_token_id`: Llama 3 has several), the tokenizer's, ChatML's end of turn when that template is used, and the
    control token after an answer in the template (`<|user|>` for GLM, which writes no end of turn)."""
    stops = list(configured) if isinstance(configured, list) else [configured]
    stops.append(tokenizer.eos_token_id)
    if chat_template is ROLE_CHAT_TEMPLATE and "<|im_end|>" in tokenizer.get_vocab():
        stops.append(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    probe = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "!"}]
    try:
        encoded = encode_chat(tokenizer, probe, False, chat_template, keep_think)
    except ValueError:  # the template's problem is reported by the first request, with its messages
        encoded = None
    if encoded is not None:
        trained = [i for i, m in zip(encoded["input_ids"], encoded["assistant_masks"]) if m]
        answer = tokenizer("!", add_special_tokens=False)["input_ids"]
        after = next((k + len(answer) for k in range(len(trained)) if trained[k : k + len(answer)] == answer), 0)
        added = added_token_ids(tokenizer)
        stops.append(next((i for i in trained[after:] if i in added), None))
    return list(dict.fromkeys(t for t in stops if t is not None))


def _generation_kwargs(request: ChatRequest) -> dict[str, Any]:
    """`generate()` keywords of a request: greedy unless it samples."""
    kwargs = {_PARAMS[k]: v for k, v in request.params.items() if _PARAMS.get(k)}
    if "do_sample" not in kwargs:
        kwargs["do_sample"] = kwargs.get("temperature", 0) > 0
    if not kwargs["do_sample"]:
        for name in ("temperature", "top_p", "top_k"):
            kwargs.pop(name, None)
    return kwargs


def _batches(items: list, size: int, key):
    """Consecutive chunks of at most `size` items with equal `key(item)` (one `generate()` call each)."""
    groups: dict[str, list] = {}
    for item in items:
        groups.setdefault(repr(sorted(key(item).items())), []).append(item)
    for group in groups.values():
        for start in range(0, len(group), size):
            yield group[start : start + size]
