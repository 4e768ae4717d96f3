"""Chat clients with one interface: `generate(requests, parse=None) -> list[ChatResult]`.

`OpenAIChatClient` talks to any OpenAI-compatible endpoint (OpenAI, vLLM, TGI, llama.cpp, Ollama) through
`openai.AsyncOpenAI`; `LocalChatClient` (in `rolellm.clients.local`) runs a `transformers` model in-process.
Both build on `rolellm.clients.base` (the request and result types, the `parse` re-ask loop, usage totals and the
progress bar) and `rolellm.clients.cache` (a re-run costs nothing, a crash loses nothing); their names are
importable from `rolellm.clients`.

Every request carries its answer budget (`max_tokens`) and its sampling settings, the OpenAI defaults where the request
sets none: servers differ in theirs (llama.cpp samples at temperature 0.8 with top-k 40, top-p 0.95 and min-p 0.05,
and writes until its context is full without `max_tokens`). A server of the llama.cpp family, known by the `owned_by`
of its model list (`server_dialect`), is also sent its own settings at their neutral values and `cache_prompt:
false` (its prompt cache can change a greedy answer on a repeated request); see `DIALECT_SETTINGS`.

Retries are rolellm's own loop rather than the `openai` client's (`max_retries=0` is passed to it): the loop
honours `Retry-After` without the `openai` client's 60-second cap, retries garbled and empty answers too, counts
every retry in `client.usage`, and sleeps outside the concurrency limit so a waiting request does not hold a slot.

>>> from rolellm.testing.server import ChatCompletionsServer
>>> with ChatCompletionsServer(lambda body: body["messages"][-1]["content"][::-1]) as server:
...     client = OpenAIChatClient("test-model", base_url=server.base_url, progress=False)
...     results = client.generate([ChatRequest([{"role": "user", "content": "Arr"}])])
>>> results[0].text, results[0].ok, client.usage.requests
('rrA', True, 1)
"""

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import random
import re
import socket
import time
from dataclasses import replace
from typing import Literal
from urllib.parse import urlsplit

from rolellm.clients.base import (
    DEFAULT_API_KEY_ENV,
    ChatClient,
    ChatRequest,
    ChatResult,
    EndpointError,
    Usage,
    as_request,
    check_base_url,
    error_chain,
    read_api_key,
)
from rolellm.clients.budget import RateLimiter, RunEstimate, estimate_tokens, parse_retry_after


__all__ = [
    "ChatClient",
    "ChatRequest",
    "ChatResult",
    "OpenAIChatClient",
    "RateLimiter",
    "RunEstimate",
    "Usage",
    "as_request",
    "estimate_tokens",
]


logger = logging.getLogger(__name__)

CONNECTIONS_PER_POOL = 8
# HTTP statuses that stop the run: the key, the model, the URL or the shape of every request is wrong. A 400 about the
# context length concerns one request and fails only that one.
STOP_STATUSES = (400, 401, 403, 404)
_CONTEXT_LENGTH = re.compile(r"context.length|maximum context|too many tokens|too long", re.I)
# the settings sent when a request does not set them: OpenAI's defaults, which other servers do not share
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0}
# what a server of a known kind is sent besides (its own sampling settings at their neutral values), by the
# `owned_by` its `GET /models` lists: llama.cpp's server (`llama-server`), llama-cpp-python's server and KoboldCpp
DIALECTS = {"llamacpp": "llama.cpp", "me": "llama-cpp-python", "koboldcpp": "koboldcpp"}
DIALECT_SETTINGS = {
    "llama.cpp": {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0, "cache_prompt": False},
    "llama-cpp-python": {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0},
    "koboldcpp": {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "rep_pen": 1.0},
}


class OpenAIChatClient(ChatClient):
    """A chat client for any OpenAI-compatible endpoint, with concurrency, retries, rate limits and a cache.

    Args:
        model (`str`): the model name the endpoint serves (`"gpt-4"`, a vLLM model id, ...).
        base_url (`str`, *optional*): the endpoint, e.g. `"http://localhost:8000/v1"`; defaults to
            `$OPENAI_BASE_URL`, else OpenAI.
        api_key (`str`, *optional*): defaults to the value of `api_key_env`. With a `base_url` and no key, the
            placeholder `"EMPTY"` is sent (local servers need none). Kept only on this object: never written to the
            cache, logs or outputs, and not shown by `repr`.
        api_key_env (`str`, *optional*): the environment variable holding the key, which must be set
            (`ClientConfig.api_key_env`); `""` sends no key; defaults to `OPENAI_API_KEY` when that is set.

        > Parameters that control throughput

        max_concurrency (`int`, *optional*, defaults to 16): requests in flight at once.
        requests_per_minute (`int`, *optional*): a sliding-window limit on requests sent per minute.
        tokens_per_minute (`int`, *optional*): a sliding-window limit on estimated prompt + `max_tokens` per minute.

        > Parameters that control failures

        timeout (`float`, *optional*, defaults to 120.0): seconds before a request times out (then it is retried).
        max_retries (`int`, *optional*, defaults to 6): retries of one request after a 429, 408/409, 5xx,
            time-out, connection error or garbled answer, before it is counted as failed.
        initial_backoff (`float`, *optional*, defaults to 0.5): the first wait in seconds when the server sends no
            `Retry-After`; doubled on every retry (with jitter) up to `max_backoff` (defaults to 30.0).
        max_parse_attempts (`int`, *optional*, defaults to 3): answers asked for when `parse` rejects them.

        > Parameters that control the answers

        max_new_tokens (`int`, *optional*, defaults to 256): the `max_tokens` of a request that sets none.

        > Parameters that control bookkeeping

        cache_path (`str`, *optional*): a SQLite file caching answers by request content; `None` disables it.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar with requests, tokens and failures.
        http_backend (`Literal["aiohttp", "httpx"]`, *optional*): the `openai` client's HTTP transport:
            `openai.DefaultAioHttpClient` (the default when `aiohttp` is installed: about a third less CPU per
            request) or `openai.DefaultAsyncHttpxClient`.
    """

    config_fields = ("base_url", "api_key_env", "max_concurrency", "requests_per_minute", "timeout", "max_retries",
                     "max_new_tokens", "cache_path", "progress")  # fmt: skip

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        api_key_env: str | None = None,
        max_concurrency: int = 16,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 6,
        initial_backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_parse_attempts: int = 3,
        max_new_tokens: int = 256,
        cache_path: str | os.PathLike | None = None,
        progress: bool = True,
        http_backend: Literal["aiohttp", "httpx"] | None = None,
    ):
        super().__init__(model, cache_path, max_parse_attempts, progress)
        self.model = model
        if http_backend is None:
            http_backend = "aiohttp" if importlib.util.find_spec("aiohttp") is not None else "httpx"
        if http_backend not in ("aiohttp", "httpx"):
            raise ValueError(f"http_backend must be 'aiohttp' or 'httpx', got {http_backend!r}")
        self.http_backend = http_backend
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.base_url = check_base_url(base_url) or check_base_url(
            os.environ.get("OPENAI_BASE_URL"), "OPENAI_BASE_URL"
        )
        self.api_key_env = api_key_env  # a name, never the key: it may be shown
        # where the key comes from, in words, for the message of a refused key
        if api_key:
            self._key_source = "the key sent is the one passed as api_key"
        else:
            api_key = read_api_key(api_key_env)
            self._key_source = (
                f"the key sent is ${api_key_env or DEFAULT_API_KEY_ENV}" if api_key else
                "no key was sent: name the variable holding this endpoint's key with its api_key_env option"
            )  # fmt: skip
        self._api_key = api_key or ("EMPTY" if self.base_url else None)
        if self._api_key is None and api_key_env == "":
            raise ValueError(
                f"No API key for OpenAI (model {model!r}, no base_url): api_key_env is empty, as for an endpoint on "
                "another host than the run's main one; name the variable holding its key with its api_key_env option"
            )
        if self._api_key is None:
            raise ValueError(
                f"No API key: set the {DEFAULT_API_KEY_ENV} environment variable or pass api_key=...; for a local "
                "OpenAI-compatible server that needs no key, pass its base_url (e.g. 'http://localhost:8000/v1')."
            )
        self.max_concurrency = max_concurrency
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.timeout = timeout
        self.max_retries = max_retries
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_new_tokens = max_new_tokens
        self.dialect: str | None = None  # the server's kind (`server_dialect`), learnt from its model list

    def __repr__(self) -> str:
        return (
            f"OpenAIChatClient(model={self.model!r}, base_url={self.base_url!r}, "
            f"max_concurrency={self.max_concurrency}, cache={self.cache!r})"
        )

    def check_endpoint(self, max_tries: int = 3) -> str:
        """One cheap request before a long run: `GET /models` shows that the endpoint answers and takes the key, and
        whether it lists the model. A model missing from a non-empty list (or any model of an endpoint without
        `/models`) is asked for a one-token completion, so an unknown model is told by the server's own message.

        Args:
            max_tries (`int`, *optional*, defaults to 3): tries of a request that gets no connection, a time-out (at
                most 30 s each), a 429 or a 5xx; at most `max_retries + 1`.

        Returns:
            `str`: what was checked, e.g. `"http://localhost:8000/v1 serves 'my-model'"`.

        Raises:
            `EndpointError`: unreachable, key refused (401/403), model unknown (404/400); the message is the server's.

        >>> from rolellm.testing.server import ChatCompletionsServer
        >>> with ChatCompletionsServer(models=["other-model"]) as server:
        ...     client = OpenAIChatClient("my-model", base_url=server.base_url, progress=False)
        ...     client.check_endpoint()
        Traceback (most recent call last):
        ...
        rolellm.clients.base.EndpointError: http://127.0.0.1:.../v1 refused the request for model 'my-model': HTTP 404 The model `my-model` does not exist (the endpoint lists: other-model)
        """
        import httpx2
        import openai

        where = self.base_url or "OpenAI"
        tries = max(1, min(max_tries, self.max_retries + 1))
        api = openai.OpenAI(
            api_key=self._api_key,
            base_url=self.base_url,
            max_retries=0,
            timeout=min(self.timeout, 30.0),
            http_client=openai.DefaultHttpxClient(verify=ssl_context()),
        )
        listed: list[str] = []

        def call(send):
            reached = False  # an HTTP status came back: the endpoint is reachable but failing
            for attempt in range(tries):
                try:
                    return send().json()
                except openai.APIStatusError as error:
                    message = server_message(error)
                    if error.status_code in STOP_STATUSES:
                        suffix = f" (the endpoint lists: {', '.join(listed)})" if listed else ""
                        if error.status_code in (401, 403):
                            suffix += f" ({self._key_source})"
                        raise EndpointError(
                            f"{where} refused the request for model {self.model!r}: HTTP {error.status_code} "
                            f"{message}{suffix}{route_hint(self.base_url, error.status_code)}"
                        ) from None
                    reason, reached = f"HTTP {error.status_code}: {message}", True
                except openai.APIConnectionError as error:
                    reason = connection_failure(error) or (
                        "timed out" if isinstance(error, openai.APITimeoutError) else f"connection error: {error}"
                    )
                except ValueError as error:  # a body that is not JSON
                    reason = f"malformed response: {error}"
                if attempt + 1 < tries:
                    time.sleep(min(self.max_backoff, self.initial_backoff * 2**attempt))
            if reached:
                raise EndpointError(f"{where} answers with errors: {reason} ({tries_text(tries)})")
            raise EndpointError(f"cannot reach {where}: {reason} ({tries_text(tries)})")

        with api:
            try:
                listing = call(lambda: api.get("/models", cast_to=httpx2.Response))
            except EndpointError as error:
                if not re.search(r"HTTP (404|405) ", str(error)):
                    raise
                listing = None  # no model list on this endpoint: the completion below tells
            self.dialect = server_dialect(listing)
            if isinstance(listing, dict) and isinstance(listing.get("data"), list):
                listed = [str(entry.get("id")) for entry in listing["data"] if isinstance(entry, dict)]
            if self.model in listed:
                return f"{where} serves {self.model!r}"
            if listing is not None and not listed:  # an empty list tells nothing about the model
                return f"{where} answers and takes the key (it lists no models)"
            body = {"model": self.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
            call(lambda: api.post("/chat/completions", cast_to=httpx2.Response, body=body))
        return f"{where} answered a one-token request for {self.model!r}"

    def _http_client(self):
        """The `openai` client's own HTTP client for the chosen backend, with the process's shared SSL context."""
        import openai

        if self.http_backend == "aiohttp":
            return openai.DefaultAioHttpClient(verify=ssl_context())
        return openai.DefaultAsyncHttpxClient(verify=ssl_context())

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        """The async form of `generate` (same arguments): await it inside your own event loop. A `json_schema` is
        not sent (endpoints differ in how they take one): `parse` checks the answers."""
        requests = [as_request(r) for r in requests]
        if self.dialect is None:
            self.dialect = await self._learn_dialect()
        if self.dialect in DIALECT_SETTINGS:
            for i, request in enumerate(requests):
                if request.messages[-1]["role"] == "assistant":
                    raise ValueError(
                        f"request {i} ends with an assistant turn, which {self.dialect}'s server continues instead of "
                        "answering: end the messages with a user turn"
                    )
        limiter = None
        if self.requests_per_minute or self.tokens_per_minute:
            limiter = RateLimiter(self.requests_per_minute, self.tokens_per_minute)
        bar = self._progress(len(requests), desc)
        async with self.open_slots() as slots:
            tasks = [asyncio.ensure_future(self._answer(slots, r, parse, limiter, bar, remind)) for r in requests]
            try:
                results = await asyncio.gather(*tasks)
            except EndpointError:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                bar.close()
                raise
        self._report(bar, desc)
        return list(results)

    @contextlib.asynccontextmanager
    async def open_slots(self):
        """`Slots` of `max_concurrency` requests in flight over fresh `AsyncOpenAI` clients, whose connection pools
        belong to the running event loop; `complete` sends through them."""
        import openai

        async with contextlib.AsyncExitStack() as stack:
            pools = []
            for _ in range(-(-self.max_concurrency // CONNECTIONS_PER_POOL)):
                api = openai.AsyncOpenAI(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    max_retries=0,
                    timeout=self.timeout,
                    http_client=self._http_client(),
                )
                pools.append(await stack.enter_async_context(api))
            yield Slots(pools, self.max_concurrency)

    async def _learn_dialect(self) -> str:
        """The server's kind from its `GET /models` (one request per client; `check_endpoint` learns it first when
        it runs), `"openai"` when it lists none of a known kind or cannot be asked."""
        import httpx2
        import openai

        api = openai.AsyncOpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0,
                                 timeout=min(self.timeout, 10.0), http_client=self._http_client())  # fmt: skip
        async with api:
            try:
                response = await api.get("/models", cast_to=httpx2.Response)
                return server_dialect(response.json())
            except (openai.OpenAIError, ValueError):
                return "openai"

    def learn_dialect(self) -> str:
        """`_learn_dialect` outside an event loop (a chat's streamed answers)."""
        import httpx2
        import openai

        api = openai.OpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0,
                            timeout=min(self.timeout, 10.0), http_client=openai.DefaultHttpxClient(verify=ssl_context()))  # fmt: skip
        with api:
            try:
                return server_dialect(api.get("/models", cast_to=httpx2.Response).json())
            except (openai.OpenAIError, ValueError):
                return "openai"

    def request_body(self, request: ChatRequest) -> dict:
        """The body sent for `request`: the model, the messages, `max_tokens` and the sampling settings
        (`SAMPLING_DEFAULTS` and the server's own, `DIALECT_SETTINGS`) where the request sets none, and its params.

        >>> client = OpenAIChatClient("m", base_url="http://localhost:8080/v1", max_new_tokens=64)
        >>> client.dialect = "llama.cpp"
        >>> body = client.request_body(ChatRequest([{"role": "user", "content": "Hi"}], params={"temperature": 0.0}))
        >>> {k: body[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "min_p", "cache_prompt")}
        {'max_tokens': 64, 'temperature': 0.0, 'top_p': 1.0, 'top_k': 0, 'min_p': 0.0, 'cache_prompt': False}
        """
        settings = {"max_tokens": self.max_new_tokens, **SAMPLING_DEFAULTS, **DIALECT_SETTINGS.get(self.dialect, {})}
        if "max_completion_tokens" in request.params:
            del settings["max_tokens"]
        return {"model": self.model, "messages": request.messages, **settings, **request.params}

    async def _answer(self, slots, request, parse, limiter, bar, remind) -> ChatResult:
        asked = request
        for attempt in range(self.max_parse_attempts):
            hit = self._cached(request, attempt)
            if hit is None:
                try:
                    text, usage = await self.complete(slots, asked, limiter)
                except RequestFailed as error:
                    self.usage.failures += 1
                    self._forget(request, attempt - 1)
                    self._update(bar)
                    return ChatResult(request, error=str(error), attempts=attempt + 1)
                self._record(request, attempt, text, usage)
            else:
                text, usage = hit
            result = self._finish(request, attempt, text, usage, hit is not None, parse)
            if result.ok or attempt + 1 == self.max_parse_attempts:
                break
            asked = self.reask(request, attempt + 1, replace(result, request=asked), remind)
        self._update(bar)
        return result

    async def complete(self, slots, request, limiter=None) -> tuple[str, dict]:
        """One answer, retried on transient failures; raises `RequestFailed` when it cannot be had, and
        `EndpointError` when the endpoint refuses the run (then `slots` send nothing more)."""
        import httpx2
        import openai

        for retry in range(self.max_retries + 1):
            unreachable = None
            if limiter is not None:
                await limiter.acquire(
                    self.count_prompt_tokens(request) + request.params.get("max_tokens", self.max_new_tokens)
                )
            wait = None
            api = await slots.take()
            try:
                # `post` is the openai client's documented way to send a raw body: any server-specific
                # parameter (vLLM's `top_k`, ...) passes through, and the JSON is read without pydantic models,
                # which at high concurrency costs more CPU than the rest of a request.
                body = self.request_body(request)
                response = await api.post("/chat/completions", cast_to=httpx2.Response, body=body)
                return read_completion(response.json())
            except openai.APIStatusError as error:
                message = server_message(error)
                if error.status_code in STOP_STATUSES and not _CONTEXT_LENGTH.search(message):
                    # Wrong key, model, URL or request shape: every request would fail the same way, so stop.
                    slots.stop = EndpointError(
                        f"{self.base_url or 'OpenAI'} refused the request for model {self.model!r}: "
                        f"HTTP {error.status_code} {message}{route_hint(self.base_url, error.status_code)}"
                    )
                    raise slots.stop from None
                reason = f"HTTP {error.status_code}: {message}"
                if error.status_code not in (408, 409, 429) and error.status_code < 500:
                    raise RequestFailed(reason) from None
                wait = parse_retry_after(error.response.headers)
            except openai.APIConnectionError as error:  # APITimeoutError included
                unreachable = connection_failure(error)
                reason = unreachable or f"timed out after {self.timeout:g} s"
                if not unreachable and not isinstance(error, openai.APITimeoutError):
                    reason = f"connection error: {error}"
            except CutBeforeAnswer as error:
                raise RequestFailed(str(error)) from None
            except (ValueError, MalformedResponse) as error:  # a body that is not JSON, or has no answer
                reason = f"malformed response: {error}"
            finally:
                slots.give(api)
            if retry == self.max_retries and unreachable:
                slots.stop = EndpointError(
                    f"cannot reach {self.base_url or 'OpenAI'}: {reason} ({tries_text(retry + 1)})"
                )
                raise slots.stop
            if retry == self.max_retries:
                raise RequestFailed(f"gave up after {tries_text(retry + 1)}; last: {reason}")
            self.usage.retries += 1
            if wait is None:
                wait = min(self.max_backoff, self.initial_backoff * 2**retry) * random.uniform(0.5, 1.0)
            (logger.warning if wait > 60 else logger.debug)("retrying in %.2f s (%s)", wait, reason)
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")


class Slots:
    """The concurrency limit: `n` slots, each bound to one of `pools` (`AsyncOpenAI` clients), taken in turn.

    httpcore checks every connection of a pool for expiry (a `poll` per connection) each time it hands one out,
    so one pool of 64 connections costs 64 system calls per request; pools of `CONNECTIONS_PER_POOL` bring the
    client's CPU time per request down by about a quarter at 64 requests in flight.
    """

    def __init__(self, pools: list, n: int):
        self._free: asyncio.Queue = asyncio.Queue()
        for i in range(n):
            self._free.put_nowait(pools[i % len(pools)])
        self.stop: EndpointError | None = None  # set when the endpoint refused the run: nothing more is sent

    async def take(self):
        """Wait for a free slot and return its client; hand it back with `give`."""
        api = await self._free.get()
        if self.stop is not None:
            self._free.put_nowait(api)
            raise self.stop
        return api

    def give(self, api) -> None:
        self._free.put_nowait(api)


def tries_text(count: int) -> str:
    """`"1 try"`, `"3 tries"`: how many requests a failure took, in its message."""
    return "1 try" if count == 1 else f"{count} tries"


@functools.cache
def ssl_context():
    """One SSL context per process: loading the CA bundle takes tens of milliseconds per connection pool."""
    import httpx2

    return httpx2.create_ssl_context()


def server_message(error) -> str:
    """The message the server wrote in its error body (`{"error": {"message": ...}}`), else the `openai` client's."""
    body = error.body
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"].strip():
        return body["message"].strip()
    return error.message


def connection_failure(error: BaseException) -> str | None:
    """`"connection refused"` or `"host not found"` when that is what lies under `error`, else `None`.

    The `openai` client reports a refused connection as a time-out with the aiohttp transport; the cause says what
    happened.
    """
    for cause in error_chain(error):
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "host not found"
    return None


def route_hint(base_url: str | None, status: int) -> str:
    """For a 404 from a `base_url` whose path does not end in `/v1`, where OpenAI-compatible servers (llama.cpp,
    KoboldCpp on port 5001, vLLM, `transformers serve`) serve the API: the URL to try.

    >>> route_hint("http://localhost:5001", 404)
    '; the API is usually under /v1: try --base_url http://localhost:5001/v1'
    """
    if status != 404 or base_url is None or urlsplit(base_url).path.rstrip("/").endswith("/v1"):
        return ""
    return f"; the API is usually under /v1: try --base_url {base_url.rstrip('/')}/v1"


def server_dialect(listing) -> str:
    """The kind of server a `GET /models` body comes from, by the `owned_by` of its models (`DIALECTS`):
    `"llama.cpp"`, `"llama-cpp-python"`, `"koboldcpp"`, else `"openai"` (any other OpenAI-compatible server).

    >>> server_dialect({"data": [{"id": "smollm2.gguf", "owned_by": "llamacpp"}]}), server_dialect(None)
    ('llama.cpp', 'openai')
    """
    entries = listing.get("data") if isinstance(listing, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("owned_by") in DIALECTS:
            return DIALECTS[entry["owned_by"]]
    return "openai"


class RequestFailed(Exception):
    """A request that got no usable answer after all retries (counted, reported in `ChatResult.error`)."""


class MalformedResponse(Exception):
    """A chat-completions response with no usable answer (no choices, no content)."""


class CutBeforeAnswer(MalformedResponse):
    """A response cut at `max_tokens` before any text (`finish_reason="length"`, an empty content; a reasoning model
    spends them thinking): the same request would be cut the same way, so it is not retried."""


def read_completion(completion: dict) -> tuple[str, dict]:
    """`(text, usage)` of a chat-completions response body; raises `MalformedResponse` when it has no answer. The
    answer is `content`: a reasoning model's thinking, which llama.cpp and vLLM send apart in `reasoning_content`, is
    not part of it.

    >>> read_completion({"choices": [{"message": {"content": "Aye"}}], "usage": {"prompt_tokens": 5}})
    ('Aye', {'prompt_tokens': 5, 'completion_tokens': 0})
    """
    try:
        message = completion["choices"][0]["message"]
        text = message["content"]
    except (KeyError, IndexError, TypeError):
        raise MalformedResponse(f"no answer in the response {str(completion)[:200]!r}") from None
    if text is None and isinstance(message.get("reasoning_content"), str):
        text = ""  # llama.cpp, vLLM: all of it was reasoning (kept apart), no answer after it
    if not isinstance(text, str):
        raise MalformedResponse(f"message content is {text!r}")
    if not text.strip() and completion["choices"][0].get("finish_reason") == "length":
        raise CutBeforeAnswer(
            "the answer was cut at max_tokens before any text (finish_reason 'length', an empty content): raise "
            "max_new_tokens"
        )
    usage = completion.get("usage") or {}
    return text, {
        "prompt_tokens": usage.get("prompt_tokens") or 0,
        "completion_tokens": usage.get("completion_tokens") or 0,
    }
