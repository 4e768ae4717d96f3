"""`LlamaCppChatClient` (`--backend llamacpp`): a GGUF file run in-process by llama.cpp through llama-cpp-python
(`pip install "rolellm[llamacpp]"`), fed the token ids of rolellm's own encoder, so the prompt is the training
prompt token for token (not llama.cpp's rendering of the chat template).

The tokenizer is the GGUF file's own, read by transformers once and cached (`rolellm.clients.gguf.gguf_tokenizer`);
answers are decoded with it, go through the same cache, `parse` re-asks and usage totals as every backend, and are
made one prompt at a time, in the order of their token ids, so that llama.cpp keeps the prefix a prompt shares with
the one before (a role's system text) instead of computing it again.

A folder written by `rolellm export --gguf` holds the file beside the checkpoint's `rolellm_inference.json` and
`role_profiles.jsonl`: given the folder, the client takes the settings the model was trained with from it.
"""

import asyncio
import os
import weakref

from rolellm.clients.base import ChatRequest, ChatResult, as_request, refuse_unknown_params
from rolellm.clients.gguf import find_gguf_file, gguf_tokenizer
from rolellm.clients.local import TokenPromptClient, stop_token_ids
from rolellm.encoding.chat_template import read_chat_template


# chat-completions parameter -> llama-cpp-python's `Llama.generate` keyword
_PARAMS = {
    "max_tokens": None,  # the budget, counted here
    "max_new_tokens": None,
    "temperature": "temp",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
    "do_sample": None,
    "seed": None,  # seeds the sampler, see `_generate_one`
}
# llama.cpp's sampling at its neutral values: what a request does not set is not left to llama.cpp's own defaults
# (top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1 in llama-cpp-python)
NEUTRAL = {"temp": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0}


def default_threads() -> int:
    """`$OMP_NUM_THREADS` when set (the tests give each process one), else the cores this process may use."""
    return int(os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))


class LlamaCppChatClient(TokenPromptClient):
    """A chat client on a GGUF file run by llama.cpp in-process, with the same `generate()` as every backend.

    Greedy decoding unless a request's `params` set `temperature > 0`; a sampled answer is seeded from its request
    key (which includes `sample_index`), so a re-run gives the same samples and the samples of one prompt differ.

    Args:
        model (`str` or `os.PathLike`): a `.gguf` file, or a folder holding one (`rolellm export --gguf`'s).
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request without `max_tokens`.
        chat_template (`str`, *optional*): `"chatml"`, a Jinja template or its file; defaults to the file's own.
        keep_think (`bool`, *optional*, defaults to `False`): keep a thinking template's think blocks.
        n_ctx (`int`, *optional*, defaults to 4096): llama.cpp's context, prompt and answer together.
        n_threads (`int`, *optional*): CPU threads, for the prompt and the answer alike; defaults to
            `$OMP_NUM_THREADS`, else the usable cores.
        cache_path (`str`, *optional*): a SQLite file caching answers by request content.
        max_parse_attempts (`int`, *optional*, defaults to 3): answers asked for when `parse` rejects them.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar.

    The llama.cpp model is freed by `close()`, and at the latest when the interpreter exits (a `Llama` left to the
    garbage collector then fails in its own clean-up).
    """

    config_fields = ("max_new_tokens", "chat_template", "cache_path", "progress")

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

        llama_cpp = require_engine("llamacpp")
        self.gguf_file = find_gguf_file(model, "--model")
        super().__init__(str(model), cache_path, max_parse_attempts, progress)
        self.tokenizer = gguf_tokenizer(self.gguf_file)
        self.max_new_tokens = max_new_tokens
        self.chat_template = read_chat_template(chat_template)
        self.keep_think = keep_think
        if self.chat_template is None and self.tokenizer.chat_template is None:
            raise ValueError(f"{self.gguf_file} carries no chat template: pass chat_template='chatml' or a template")
        # the prompt's threads too: llama-cpp-python's own default for them (`n_threads_batch`) is every core of the
        # machine, whatever `n_threads` says (a 340-token prompt: 9 s of CPU on 2 busy cores, 2 s on one thread)
        n_threads = n_threads or default_threads()
        self.llama = llama_cpp.Llama(
            str(self.gguf_file), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads, verbose=False
        )
        self._finalizer = weakref.finalize(self, self.llama.close)
        self.stop_ids = stop_token_ids(self.tokenizer, self.chat_template, keep_think, self.llama.token_eos())

    def close(self) -> None:
        """Free the llama.cpp model now."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"LlamaCppChatClient({self.model_name!r}, cache={self.cache!r})"

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        """The async form of `generate`; decoding runs in a worker thread, one prompt at a time (a `json_schema` is
        left to `parse`)."""
        requests = [as_request(r) for r in requests]
        refuse_unknown_params(requests, _PARAMS, "LlamaCppChatClient")

        async def answer(todo, asked, settle, fail):
            prompts = {i: self.encode_prompt(asked[i].messages) for i, _ in todo}
            # in the order of their ids: prompts of one role follow each other, and llama.cpp keeps the prefix a
            # prompt shares with the one before (the role's system text) instead of computing it again
            for i, attempt in sorted(todo, key=lambda item: prompts[item[0]]):
                prompt = prompts[i]
                budget = asked[i].params.get("max_tokens", asked[i].params.get("max_new_tokens", self.max_new_tokens))
                if len(prompt) + budget > self.llama.n_ctx():
                    fail(
                        i,
                        attempt,
                        f"prompt of {len(prompt)} tokens + max_tokens {budget} exceed n_ctx {self.llama.n_ctx()}",
                    )
                    continue
                text, usage = await asyncio.to_thread(self._generate_one, asked[i], prompt, budget)
                settle(i, attempt, text, usage)

        return await self.answer_in_rounds(requests, parse, desc, remind, answer)

    def _tokens(self, request: ChatRequest, prompt: list[int], budget: int):
        """The answer's token ids as llama.cpp makes them, up to an end token or `budget`."""
        settings = {**NEUTRAL, **{_PARAMS[k]: v for k, v in request.params.items() if _PARAMS.get(k)}}
        if not request.params.get("do_sample", settings["temp"] > 0):
            settings["temp"] = 0.0  # greedy
        else:
            self.llama.set_seed(int(self.key(request)[:8], 16) ^ int(request.params.get("seed", 0)))
        for made, token in enumerate(self.llama.generate(prompt, reset=True, **settings)):
            if token in self.stop_ids or made == budget:
                return
            yield token

    def _generate_one(self, request: ChatRequest, prompt: list[int], budget: int) -> tuple[str, dict]:
        answer = list(self._tokens(request, prompt, budget))
        stopped = len(answer) + (len(answer) < budget)  # the end token counts, as in the other backends
        text = self.tokenizer.decode(answer, skip_special_tokens=True)
        return text, {"prompt_tokens": len(prompt), "completion_tokens": stopped}

    def stream(
        self, prompt: list[int], max_new_tokens: int, temperature: float, top_p: float, seed: int, finish: dict
    ):
        """The answer to the token ids `prompt` as text pieces, as llama.cpp makes it (a chat; nothing is cached);
        `finish["reason"]` is `"length"` when it stopped at `max_new_tokens`, else `"stop"`."""
        request = ChatRequest([{"role": "user", "content": ""}], params={"temperature": temperature, "top_p": top_p,
                                                                          "seed": seed})  # fmt: skip
        answer, shown = [], ""
        for token in self._tokens(request, prompt, max_new_tokens):
            answer.append(token)
            text = self.tokenizer.decode(answer, skip_special_tokens=True)
            if not text.endswith("\ufffd"):  # a character cut between tokens waits for its next token
                yield text[len(shown) :]
                shown = text
        finish["reason"] = "length" if len(answer) >= max_new_tokens else "stop"
