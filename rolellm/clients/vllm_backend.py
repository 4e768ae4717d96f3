"""`VLLMChatClient`: the chat-client interface on vLLM offline inference (`vllm.LLM`) on one node.

`rolellm generate --backend vllm`, `rolellm evaluate --backend vllm` and `rolellm dialogue --backend vllm` answer
with it. Prompts go to the engine as token ids from the same encoder as `LocalChatClient` (`encode_prompt`: the
prompt the model was trained on, message text that looks like a control token stays text), never as text for
vLLM's own chat template; an adapter checkpoint `rolellm train` wrote is served on its base model through a
`LoRARequest`; the JSON-answering generators pass their answer schema as vLLM structured outputs
(`StructuredOutputsParams(json=...)`, vLLM >= 0.12). Answers go through the same cache, `parse` re-asks and usage
totals as every other client, written after each chunk of `CHUNK_SIZE` prompts, so a killed run loses at most one
chunk and a re-run sends only what is missing.

`VLLMEngine` is the only part that touches vLLM; `VLLMChatClient(engine=...)` takes any object with its
`generate(prompts, settings)` method, which is how the CPU tests check what would reach the engine.
"""

import asyncio
import json
import logging
import os
from pathlib import Path

from rolellm.clients.base import ChatRequest, ChatResult, as_request
from rolellm.clients.loading import ADAPTER_CONFIG, check_adapter_base, is_adapter_checkpoint
from rolellm.clients.local import TokenPromptClient, stop_token_ids
from rolellm.encoding.chat_template import read_chat_template


logger = logging.getLogger(__name__)

CHUNK_SIZE = 512  # prompts per `LLM.generate` call: vLLM batches inside it; the cache is written after each
# chat-completions parameter -> `vllm.SamplingParams` field
SAMPLING_FIELDS = {
    "max_tokens": "max_tokens",
    "max_new_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "repetition_penalty": "repetition_penalty",
    "seed": "seed",
}


def sampling_settings(request: ChatRequest, max_tokens: int, stop_ids: list[int], json_schema=None) -> dict:
    """The `vllm.SamplingParams` keywords of a request (plus `structured_outputs`, the `StructuredOutputsParams`
    keywords, when a schema is given): greedy (`temperature=0`) unless the request samples, as `LocalChatClient`.

    >>> request = ChatRequest([{"role": "user", "content": "Hi"}], params={"temperature": 0.7, "seed": 3})
    >>> sampling_settings(request, 64, [2])
    {'max_tokens': 64, 'temperature': 0.7, 'seed': 3, 'stop_token_ids': [2]}
    """
    unknown = sorted(set(request.params) - set(SAMPLING_FIELDS) - {"do_sample"})
    if unknown:
        raise ValueError(f"the vLLM backend does not support params {unknown}; supported: {sorted(SAMPLING_FIELDS)}")
    settings = {"max_tokens": max_tokens, "temperature": 0.0}
    settings.update({SAMPLING_FIELDS[k]: v for k, v in request.params.items() if k in SAMPLING_FIELDS})
    if request.params.get("do_sample") is False:
        settings["temperature"] = 0.0
    settings["stop_token_ids"] = list(stop_ids)
    if json_schema is not None:
        settings["structured_outputs"] = {"json": json_schema}
    return settings


def read_adapter(path) -> tuple[str, int] | None:
    """`(base model, LoRA rank)` of an adapter checkpoint folder, else `None` (a full model)."""
    if not is_adapter_checkpoint(path):
        return None
    check_adapter_base(path)
    config = json.loads((Path(path) / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    if config.get("modules_to_save"):
        raise ValueError(
            f"{path}: the adapter also trains {config['modules_to_save']} (new embedding rows), which vLLM's LoRA does "
            "not load; merge it first (rolellm export --merge) and serve the merged folder"
        )
    return config["base_model_name_or_path"], int(config.get("r", 16))


class VLLMEngine:
    """`vllm.LLM` on this node, fed token ids; the one place rolellm calls vLLM.

    Args:
        model (`str`): a model folder or Hub id, or an adapter checkpoint (its base is loaded, the adapter applied to
            every request through a `LoRARequest`).
        tensor_parallel_size (`int`, *optional*, defaults to 1): GPUs the engine spans.
        dtype (`str`, *optional*): the weights' dtype (vLLM's `"auto"` when `None`).
        seed (`int`, *optional*, defaults to 0): the engine's seed (a request's own `seed` takes precedence).
    """

    def __init__(self, model: str, tensor_parallel_size: int = 1, dtype: str | None = None, seed: int = 0):
        from rolellm.clients.engines import require_engine

        vllm = require_engine("vllm")
        adapter = read_adapter(model)
        base = adapter[0] if adapter else model
        options = {"tensor_parallel_size": tensor_parallel_size, "dtype": dtype or "auto", "seed": seed}
        if adapter:
            options.update(enable_lora=True, max_lora_rank=max(8, adapter[1]), max_loras=1)
        # the tokenizer of `model` (an adapter folder holds the one it was trained with, the role template's tokens
        # included): the engine detokenizes the answers with it
        self.llm = vllm.LLM(model=base, tokenizer=str(model), **options)
        self.lora = None
        if adapter:
            from vllm.lora.request import LoRARequest

            self.lora = LoRARequest(lora_name=Path(model).name or "adapter", lora_int_id=1, lora_path=str(model))

    def generate(self, prompts: list[list[int]], settings: list[dict]) -> list[tuple[str, int]]:
        """`(text, completion tokens)` of each prompt (token ids) under its sampling settings (`sampling_settings`)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import StructuredOutputsParams

        params = []
        for setting in settings:
            structured = setting.get("structured_outputs")
            setting = {k: v for k, v in setting.items() if k != "structured_outputs"}
            structured = StructuredOutputsParams(**structured) if structured else None
            params.append(SamplingParams(**setting, structured_outputs=structured))
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=ids) for ids in prompts], params, use_tqdm=False, lora_request=self.lora
        )
        return [(output.outputs[0].text, len(output.outputs[0].token_ids)) for output in outputs]


class VLLMChatClient(TokenPromptClient):
    """A chat client on vLLM offline inference, with the same `generate()` as every other client.

    Args:
        model_name_or_path (`str` or `os.PathLike`): a model folder, a Hub id or an adapter checkpoint.
        tensor_parallel_size (`int`, *optional*, defaults to 1): GPUs one engine spans.
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request without `max_tokens`.
        chat_template (`str`, *optional*): `"chatml"`, a Jinja chat template or its file; defaults to the tokenizer's.
        keep_think (`bool`, *optional*, defaults to `False`): keep a thinking template's think blocks in the prompt.
        dtype (`str`, *optional*): the weights' dtype.
        cache_path (`str`, *optional*): a SQLite file caching answers by request content.
        max_parse_attempts (`int`, *optional*, defaults to 3): answers asked for when `parse` rejects them.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar.
        engine (*optional*): what answers (an object with `VLLMEngine.generate`); defaults to a `VLLMEngine` on
            `model_name_or_path`, built here.
    """

    config_fields = ("tensor_parallel_size", "max_new_tokens", "chat_template", "dtype", "cache_path", "progress")

    @classmethod
    def from_config(cls, config) -> "VLLMChatClient":
        """The client a `ClientConfig` describes (`engine_arguments`: the engine, the model folder, `keep_think`)."""
        from rolellm.clients.engines import engine_arguments

        model, arguments = engine_arguments(config, cls.config_fields)
        return cls(model, **arguments)

    def __init__(
        self,
        model_name_or_path: str | os.PathLike,
        *,
        tensor_parallel_size: int = 1,
        max_new_tokens: int = 256,
        chat_template: str | None = None,
        keep_think: bool = False,
        dtype: str | None = None,
        cache_path: str | os.PathLike | None = None,
        max_parse_attempts: int = 3,
        progress: bool = True,
        engine=None,
    ):
        from transformers import AutoTokenizer, GenerationConfig

        if engine is None:  # a missing vLLM is named before anything is loaded
            from rolellm.clients.engines import require_engine

            require_engine("vllm")
        super().__init__(str(model_name_or_path), cache_path, max_parse_attempts, progress)
        self.tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        self.chat_template = read_chat_template(chat_template)
        self.keep_think = keep_think
        self.max_new_tokens = max_new_tokens
        if self.chat_template is None and self.tokenizer.chat_template is None:
            raise ValueError(
                f"the tokenizer of {self.model_name!r} has no chat template: pass chat_template='chatml' or a Jinja "
                "template"
            )
        try:  # the end-of-turn ids the checkpoint was trained to stop at (`rolellm train` writes them)
            configured = GenerationConfig.from_pretrained(model_name_or_path).eos_token_id
        except OSError:
            configured = None
        self.stop_ids = stop_token_ids(self.tokenizer, self.chat_template, keep_think, configured)
        self.engine = (
            engine if engine is not None else VLLMEngine(str(model_name_or_path), tensor_parallel_size, dtype)
        )

    def __repr__(self) -> str:
        return f"VLLMChatClient({self.model_name!r}, cache={self.cache!r})"

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        """The async form of `generate`; the engine runs in a worker thread, one chunk of prompts at a time."""
        requests = [as_request(r) for r in requests]
        for request in requests:  # every unsupported parameter is named before anything runs
            sampling_settings(request, self.max_new_tokens, self.stop_ids)

        async def answer(todo, asked, settle, fail):
            for start in range(0, len(todo), CHUNK_SIZE):
                chunk = todo[start : start + CHUNK_SIZE]
                prompts = [self.encode_prompt(asked[i].messages) for i, _ in chunk]
                settings = [
                    sampling_settings(asked[i], self.max_new_tokens, self.stop_ids, json_schema) for i, _ in chunk
                ]
                answers = await asyncio.to_thread(self.engine.generate, prompts, settings)
                for (i, attempt), prompt, (text, completion_tokens) in zip(chunk, prompts, answers):
                    usage = {"prompt_tokens": len(prompt), "completion_tokens": completion_tokens}
                    settle(i, attempt, text, usage)

        return await self.answer_in_rounds(requests, parse, desc, remind, answer)


def smoke(model: str, requests: int = 256, max_new_tokens: int = 128, **client_options) -> dict:
    """A timed run of the vLLM backend on `model`: `requests` chat requests, then an eighth as many with a JSON schema
    (structured outputs), each answer checked. The figures `bench/gpu_check.sh` prints in its vLLM row.

    Returns:
        `dict`: `requests`, `seconds`, `requests_per_s`, `completion_tokens`, `tokens_per_s` (of the plain requests;
        the engine's start-up excluded), `json_requests` and `json_ok` (answers that parse and fit the schema).
    """
    import time

    client = VLLMChatClient(model, max_new_tokens=max_new_tokens, progress=False, **client_options)
    asked = [
        ChatRequest([{"role": "user", "content": f"Tell me about sea shanty number {i}."}]) for i in range(requests)
    ]
    start = time.perf_counter()
    results = client.generate(asked)
    seconds = time.perf_counter() - start
    tokens = sum(r.usage.get("completion_tokens", 0) for r in results if r.ok)
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "verses": {"type": "integer"}},
              "required": ["name", "verses"]}  # fmt: skip
    questions = [ChatRequest([{"role": "user", "content": f"Shanty {i} as JSON: name, verses."}]) for i in range(max(1, requests // 8))]  # fmt: skip
    fits = client.generate(questions, parse=_fits(schema), json_schema=schema)
    return {
        "requests": requests, "seconds": round(seconds, 2), "requests_per_s": round(requests / seconds, 1),
        "completion_tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
        "json_requests": len(questions), "json_ok": sum(r.ok for r in fits),
    }  # fmt: skip


def _fits(schema: dict):
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)

    def parse(text: str):
        value = json.loads(text)
        errors = list(validator.iter_errors(value))
        if errors:
            raise ValueError(errors[0].message)
        return value

    return parse


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Time the vLLM backend on a model folder; prints one JSON line.")
    parser.add_argument("model", help="a model folder (or Hub id) vLLM can load")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max_new_tokens", type=int, default=128)
    parser.add_argument("--tensor_parallel_size", type=int, default=1)
    parser.add_argument("--chat_template", default=None, help="'chatml' for a tokenizer without a template")
    options = parser.parse_args()
    print(json.dumps(smoke(options.model, options.requests, options.max_new_tokens,
                           tensor_parallel_size=options.tensor_parallel_size, chat_template=options.chat_template)))  # fmt: skip
