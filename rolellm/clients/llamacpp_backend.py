"""`LlamaCppChatClient` (`--backend llamacpp`): a GGUF file run in-process by llama.cpp through llama-cpp-python
(`pip install "rolellm[llamacpp]"`), fed the token ids of rolellm's own encoder, so the prompt is the training
prompt token for token (not llama.cpp's rendering of the chat template).

The tokenizer is the GGUF file's own, read by transformers once and cached (`rolellm.clients.gguf.gguf_tokenizer`);
answers are decoded with it, go through the same cache, `parse` re-asks and usage totals as every backend, and are
made `batch_size` prompts at a time, in the order of their token ids, by `rolellm.clients.llamacpp_engine`: the
prompts of one role answered together, their shared system text decoded once.

A folder written by `rolellm export --gguf` holds the file beside the checkpoint's `rolellm_inference.json` and
`role_profiles.jsonl`: given the folder, the client takes the settings the model was trained with from it.
"""

import asyncio
import os
import weakref

from rolellm.clients.base import ChatRequest, ChatResult, as_request, refuse_unknown_params
from rolellm.clients.gguf import find_gguf_file, gguf_tokenizer
from rolellm.clients.llamacpp_engine import LlamaCppEngine, Sampling
from rolellm.clients.local import TokenPromptClient, stop_token_ids
from rolellm.encoding.chat_template import read_chat_template


# chat-completions parameter -> `Sampling` field; what a request does not set stays at `Sampling`'s neutral value,
# not llama.cpp's own defaults (top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1 in llama-cpp-python)
_PARAMS = {
    "max_tokens": None,  # the budget, counted here
    "max_new_tokens": None,
    "temperature": "temp",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
    "do_sample": None,
    "seed": None,  # seeds the sampler, see `_sampling`
}


def default_threads() -> int:
    """`$OMP_NUM_THREADS` when set (the tests give each process one), else the cores this process may use."""
    return int(os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))


class LlamaCppChatClient(TokenPromptClient):
    """A chat client on a GGUF file run by llama.cpp in-process, with the same `generate()` as every backend.

    Greedy decoding unless a request's `params` set `temperature > 0`; a sampled answer is seeded from its request
    key (which includes `sample_index`), so a re-run gives the same samples and the samples of one prompt differ.

    Args:
        model (`str` or `os.PathLike`): a `.gguf` file, or a folder holding one (`rolellm export --gguf`'s).
        batch_size (`int`, *optional*, defaults to 8): prompts answered together, one llama.cpp sequence each.
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request without `max_tokens`.
        chat_template (`str`, *optional*): `"chatml"`, a Jinja template or its file; defaults to the file's own.
        keep_think (`bool`, *optional*, defaults to `False`): keep a thinking template's think blocks.
        n_ctx (`int`, *optional*, defaults to 4096): the longest prompt and answer budget together; each of the
            `batch_size` sequences has a llama.cpp cache of its own, sized for its batch's longest, up to this.
        n_threads (`int`, *optional*): CPU threads, for the prompt and the answer alike; defaults to
            `$OMP_NUM_THREADS`, else the usable cores.
        cache_path (`str`, *optional*): a SQLite file caching answers by request content.
        max_parse_attempts (`int`, *optional*, defaults to 3): answers asked for when `parse` rejects them.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar.

    The llama.cpp model is freed by `close()`, and at the latest when the interpreter exits.
    """

    config_fields = ("batch_size", "max_new_tokens", "chat_template", "cache_path", "progress")

    @classmethod
    def from_config(cls, config) -> "LlamaCppChatClient":
        """The client a `ClientConfig` describes: llama-cpp-python is checked first (`EngineUnavailable` naming the
        extra), then the GGUF file; `keep_think` defaults to what the export folder recorded."""
        from rolellm.clients.engines import require_engine
        from rolellm.clients.inference_settings import resolve_keep_think

        require_engine("llamacpp")
        client = cls(config.model, keep_think=resolve_keep_think(config),
                     **{name: getattr(config, name) for name in cls.config_fields})  # fmt: skip
        client.model_name = str(config.model)
        return client

    def __init__(
        self,
        model: str | os.PathLike,
        *,
        batch_size: int = 8,
        max_new_tokens: int = 256,
        chat_template: str | None = None,
        keep_think: bool = False,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        cache_path: str | os.PathLike | None = None,
        max_parse_attempts: int = 3,
        progress: bool = True,
    ):
        from rolellm.clients.engines import require_engine

        require_engine("llamacpp")
        self.gguf_file = find_gguf_file(model, "--model")
        super().__init__(str(model), cache_path, max_parse_attempts, progress)
        self.tokenizer = gguf_tokenizer(self.gguf_file)
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.chat_template = read_chat_template(chat_template)
        self.keep_think = keep_think
        if self.chat_template is None and self.tokenizer.chat_template is None:
            raise ValueError(f"{self.gguf_file} carries no chat template: pass chat_template='chatml' or a template")
        # the prompt's threads too: llama.cpp's own default for them is every core of the machine
        self.engine = LlamaCppEngine(self.gguf_file, n_ctx=n_ctx, n_seq=batch_size,
                                     n_threads=n_threads or default_threads())  # fmt: skip
        self._finalizer = weakref.finalize(self, self.engine.close)
        self.stop_ids = stop_token_ids(self.tokenizer, self.chat_template, keep_think, self.engine.eos)

    @property
    def n_ctx(self) -> int:
        """The longest prompt and answer together, in tokens."""
        return self.engine.n_ctx

    def close(self) -> None:
        """Free the llama.cpp model now."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"LlamaCppChatClient({self.model_name!r}, batch_size={self.batch_size}, cache={self.cache!r})"

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        """The async form of `generate`; decoding runs in a worker thread, `batch_size` prompts at a time (a
        `json_schema` is left to `parse`)."""
        requests = [as_request(r) for r in requests]
        refuse_unknown_params(requests, _PARAMS, "LlamaCppChatClient")

        async def answer(todo, asked, settle, fail):
            prompts = {i: self.encode_prompt(asked[i].messages) for i, _ in todo}
            budgets = {i: self._budget(asked[i]) for i, _ in todo}
            fitting = []
            # in the order of their ids: prompts of one role share a batch, their system text decoded once
            for i, attempt in sorted(todo, key=lambda item: prompts[item[0]]):
                if len(prompts[i]) + budgets[i] > self.n_ctx:
                    fail(i, attempt, f"prompt of {len(prompts[i])} tokens + max_tokens {budgets[i]} exceed n_ctx "
                                     f"{self.n_ctx}")  # fmt: skip
                else:
                    fitting.append((i, attempt))
            for start in range(0, len(fitting), self.batch_size):
                batch = fitting[start : start + self.batch_size]
                await self._answer_batch(batch, asked, prompts, budgets, settle, fail)

        return await self.answer_in_rounds(requests, parse, desc, remind, answer)

    def _budget(self, request: ChatRequest) -> int:
        return request.params.get("max_tokens", request.params.get("max_new_tokens", self.max_new_tokens))

    async def _answer_batch(self, batch, asked, prompts, budgets, settle, fail) -> None:
        try:
            outputs = await asyncio.to_thread(
                self._generate_batch, [asked[i] for i, _ in batch], [prompts[i] for i, _ in batch],
                [budgets[i] for i, _ in batch],
            )  # fmt: skip
        except RuntimeError as error:  # llama.cpp could not decode the batch: its requests fail, the others go on
            for i, attempt in batch:
                fail(i, attempt, str(error))
            return
        for (i, attempt), (text, usage) in zip(batch, outputs):
            settle(i, attempt, text, usage)

    def _sampling(self, request: ChatRequest) -> Sampling:
        """The request's sampling settings: greedy unless it samples, then seeded from its key and `seed`."""
        settings = {_PARAMS[k]: v for k, v in request.params.items() if _PARAMS.get(k)}
        if not request.params.get("do_sample", settings.get("temp", 0.0) > 0):
            return Sampling(repeat_penalty=settings.get("repeat_penalty", 1.0))
        seed = (int(self.key(request)[:8], 16) ^ int(request.params.get("seed", 0))) & 0xFFFFFFFF
        return Sampling(**settings, seed=seed)

    def _generate_batch(self, requests: list[ChatRequest], prompts: list[list[int]], budgets: list[int]):
        """The answers to `prompts`, decoded together: `(text, usage)` each."""
        answers = [[] for _ in prompts]
        samplings = [self._sampling(request) for request in requests]
        for i, token in self.engine.generate(prompts, samplings, budgets, self.stop_ids):
            answers[i].append(token)
        outputs = []
        for prompt, answer, budget in zip(prompts, answers, budgets):
            stopped = len(answer) + (len(answer) < budget)  # the end token counts, as in the other backends
            text = self.tokenizer.decode(answer, skip_special_tokens=True)
            outputs.append((text, {"prompt_tokens": len(prompt), "completion_tokens": stopped}))
        return outputs

    def stream(
        self, prompt: list[int], max_new_tokens: int, temperature: float, top_p: float, seed: int, finish: dict
    ):
        """The answer to the token ids `prompt` as text pieces, as llama.cpp makes it (a chat; nothing is cached);
        `finish["reason"]` is `"length"` when it stopped at `max_new_tokens`, else `"stop"`. The next turn's prompt
        goes on from this one: only its new tokens are decoded."""
        request = ChatRequest([{"role": "user", "content": ""}], params={"temperature": temperature, "top_p": top_p,
                                                                          "seed": seed})  # fmt: skip
        answer, shown = [], ""
        for _, token in self.engine.generate([prompt], [self._sampling(request)], [max_new_tokens], self.stop_ids):
            answer.append(token)
            text = self.tokenizer.decode(answer, skip_special_tokens=True)
            if not text.endswith("\ufffd"):  # a character cut between tokens waits for its next token
                yield text[len(shown) :]
                shown = text
        finish["reason"] = "length" if len(answer) >= max_new_tokens else "stop"
