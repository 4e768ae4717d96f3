"""What every chat client shares: the request and result types, usage totals, and `ChatClient`, the base class
with the cache lookups, the `parse` re-ask logic, the progress bar and `generate()` over `agenerate()`.

The backends are `OpenAIChatClient` (`rolellm.clients.openai_compatible`), `LocalChatClient` (`rolellm.clients.local`),
`VLLMChatClient` (`rolellm.clients.vllm_backend`) and `RayChatClient` (`rolellm.clients.ray_backend`).

>>> request = ChatRequest([{"role": "user", "content": "Ahoy"}], params={"temperature": 0.7}, sample_index=1)
>>> ChatResult(request, text="Arr").ok, ChatResult(request, error="HTTP 400: bad request").ok
(True, False)
>>> str(Usage(requests=2, prompt_tokens=10, completion_tokens=5) - Usage(requests=1, prompt_tokens=4))
'requests=1, cached=0, retries=0, reasks=0, failures=0, prompt_tokens=6, completion_tokens=5, total_tokens=11'
"""

import asyncio
import concurrent.futures
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tqdm.auto import tqdm

from rolellm.clients.budget import RunEstimate, estimate_tokens
from rolellm.clients.cache import ChatCache, request_key


logger = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant")
# A re-ask's seed is the request's plus this much per attempt: far from the seeds of the other samples of a prompt.
REASK_SEED_STRIDE = 1_000_000
# How many answers a request gets when `parse` rejects them (the first and two re-asks), unless a client says otherwise.
MAX_PARSE_ATTEMPTS = 3
# The user turn that follows an answer `parse` rejected.
REASK_REMINDER = "Your answer could not be used ({error}). Answer again, exactly in the form asked for."


_SECRET_PARAMETER = re.compile(r"key|token|secret|password|passwd|auth|signature|sig$", re.IGNORECASE)
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"  # the main endpoint's key, and that of every endpoint on its host
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_rate_limit(backend: str | None, requests_per_minute: int | None) -> None:
    """A `ValueError` for a requests-per-minute limit a backend cannot keep: Ray Data's HTTP stage limits each batch
    while queuing it, not the requests it sends.

    >>> check_rate_limit("openai", 60)
    >>> check_rate_limit("ray", 60)
    Traceback (most recent call last):
    ...
    ValueError: requests_per_minute=60 cannot be kept with backend ray: Ray Data's HTTP stage limits each batch while queuing it, not the requests sent. Leave it unset, or use backend openai
    """
    if backend == "ray" and requests_per_minute:
        raise ValueError(
            f"requests_per_minute={requests_per_minute} cannot be kept with backend ray: Ray Data's HTTP stage "
            "limits each batch while queuing it, not the requests sent. Leave it unset, or use backend openai"
        )


def check_base_url(url: str | None, where: str = "base_url") -> str | None:
    """An endpoint URL that carries no secret, or a `ValueError` naming where it came from and never the secret.

    A key in the URL (`https://user:password@host/v1`, `?api_key=...`) would reach logs, progress lines, run files
    and model cards; the key belongs in an environment variable (`OPENAI_API_KEY`, or the one `api_key_env` names).

    >>> check_base_url("http://localhost:8000/v1")
    'http://localhost:8000/v1'
    >>> check_base_url("https://me:hunter2@llm.example.com/v1", "--judge_base_url")
    Traceback (most recent call last):
    ...
    ValueError: --judge_base_url holds credentials (user:password@llm.example.com): give the URL without them and put the key in OPENAI_API_KEY (or the variable api_key_env names)
    >>> check_base_url("localhost:8000/v1")
    Traceback (most recent call last):
    ...
    ValueError: base_url is not an http:// or https:// URL with a host, e.g. http://localhost:8000/v1
    """
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:  # an invalid port or IPv6 literal: the message must not repeat the URL
        raise ValueError(f"{where} is not a valid URL") from None
    if userinfo:
        raise ValueError(
            f"{where} holds credentials (user:password@{parts.hostname}): give the URL without them and put the key "
            f"in {_KEY_HOME}"
        )
    secrets = sorted(
        {name for name, _ in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAMETER.search(name)}
    )
    if secrets:
        raise ValueError(
            f"{where} holds a secret in its query ({', '.join(secrets)}): give the URL without it and put the key in "
            f"{_KEY_HOME}"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:  # named without its text: it may hold a key
        raise ValueError(f"{where} is not an http:// or https:// URL with a host, e.g. http://localhost:8000/v1")
    return url


_KEY_HOME = f"{DEFAULT_API_KEY_ENV} (or the variable api_key_env names)"


def check_api_key_env(name: str | None, where: str = "api_key_env") -> None:
    """A `ValueError` for an `api_key_env` that names no environment variable set here, naming the variable (a value
    that is not a variable's name, perhaps a key itself, is not repeated). `None` (the default key) and `""` (no key)
    pass.

    >>> check_api_key_env("PATH")
    >>> check_api_key_env("ROLELLM_NO_SUCH_KEY", "--judge_api_key_env")
    Traceback (most recent call last):
    ...
    ValueError: --judge_api_key_env names the environment variable ROLELLM_NO_SUCH_KEY, which is not set: export ROLELLM_NO_SUCH_KEY=<that endpoint's key>
    >>> check_api_key_env("sk-proj-0123")
    Traceback (most recent call last):
    ...
    ValueError: api_key_env takes the name of an environment variable holding the key (e.g. JUDGE_API_KEY), never the key itself
    """
    if not name:
        return
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(
            f"{where} takes the name of an environment variable holding the key (e.g. JUDGE_API_KEY), never the key "
            "itself"
        )
    if name not in os.environ:
        raise ValueError(
            f"{where} names the environment variable {name}, which is not set: export {name}=<that endpoint's key>"
        )


def read_api_key(name: str | None, where: str = "api_key_env") -> str | None:
    """The API key in the environment variable `name` (`check_api_key_env`); `None` reads `OPENAI_API_KEY` when it
    is set, and `""` is no key (`None`)."""
    if name is None:
        return os.environ.get(DEFAULT_API_KEY_ENV) or None
    check_api_key_env(name, where)
    return os.environ[name] if name else None


def refuse_unknown_params(requests: Sequence["ChatRequest"], supported, client: str) -> None:
    """A `ValueError` naming the sampling params of `requests` that `client` cannot honour, before anything runs."""
    for request in requests:
        unknown = sorted(set(request.params) - set(supported))
        if unknown:
            raise ValueError(f"{client} does not support params {unknown}; supported: {sorted(supported)}")


def error_chain(error: BaseException | None) -> Iterator[BaseException]:
    """`error`, then the errors under it (each one's `__cause__`, else its `__context__`), each once: a chain may come
    back on itself (an error re-raised from inside the handler of the error that wraps it).

    >>> try:
    ...     try:
    ...         raise KeyError("field")
    ...     except KeyError as inner:
    ...         raise ValueError("row 3") from inner
    ... except ValueError as outer:
    ...     outer.__cause__.__context__ = outer  # a loop
    ...     [type(e).__name__ for e in error_chain(outer)]
    ['ValueError', 'KeyError']
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


class EndpointError(RuntimeError):
    """The endpoint cannot answer any request (unreachable, wrong key, unknown model, rejected request shape): the run
    stops at once with the server's message instead of failing every request the same way. Answers received before
    are in the cache, so a re-run after the fix sends only what is missing."""


@dataclass
class ChatRequest:
    """One chat completion to make.

    Args:
        messages (`list[dict[str, str]]`): `{"role": "system" | "user" | "assistant", "content": str}` turns.
        params (`dict`, *optional*): sampling parameters in the chat-completions names (`temperature`, `top_p`,
            `max_tokens`, `seed`, ...); part of the cache key.
        sample_index (`int`, *optional*, defaults to 0): which of several samples of the same prompt; part of the
            cache key, so `n` samples of one prompt are `n` requests with indices `0..n-1`.
        metadata (`dict`, *optional*): anything to carry through to the result (row ids, role names); not sent,
            not part of the cache key.
    """

    messages: list[dict[str, str]]
    params: dict[str, Any] = field(default_factory=dict)
    sample_index: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        reserved = sorted(set(self.params) & {"model", "messages", "stream", "n"})
        if reserved:
            raise ValueError(
                f"ChatRequest.params may not set {reserved}: the client sets the model and messages, answers are not "
                "streamed, and several samples of one prompt are requests with sample_index=0..n-1"
            )
        if not isinstance(self.messages, list) or not self.messages:
            raise ValueError(f"ChatRequest.messages must be a non-empty list of dicts, got {self.messages!r}")
        for i, message in enumerate(self.messages):
            if not isinstance(message, dict) or message.get("role") not in ROLES:
                raise ValueError(f"ChatRequest.messages[{i}] needs a 'role' in {ROLES}, got {message!r}")
            if not isinstance(message.get("content"), str):
                raise ValueError(f"ChatRequest.messages[{i}]['content'] must be a string, got {message!r}")


@dataclass
class ChatResult:
    """The outcome of one `ChatRequest`.

    Args:
        request (`ChatRequest`): the request answered.
        text (`str` or `None`): the answer's text; for an answer that never parsed, the last raw text.
        error (`str` or `None`): why the request failed (after all retries or re-asks); `None` on success.
        parsed (`Any`): what `parse(text)` returned, when a `parse` callable was given.
        usage (`dict`): `prompt_tokens` and `completion_tokens` of the answer.
        cached (`bool`): whether the answer came from the cache (no request sent).
        attempts (`int`): how many answers were asked for (1 + re-asks after unparseable answers).
    """

    request: ChatRequest
    text: str | None = None
    error: str | None = None
    parsed: Any = None
    usage: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Usage:
    """Running totals of a client: what was sent, served from the cache, retried, failed, and the tokens spent."""

    requests: int = 0  # answers received from the backend (billable calls)
    cached: int = 0  # answers served from the cache
    retries: int = 0  # re-sent requests after a 429, 5xx, time-out or garbled answer
    reasks: int = 0  # new attempts after an answer `parse` rejected
    failures: int = 0  # results with an error
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in asdict(self).items()) + f", total_tokens={self.total_tokens}"

    def __sub__(self, other: "Usage") -> "Usage":
        """The totals of one run: the usage after it minus the usage before it."""
        return Usage(**{k: v - getattr(other, k) for k, v in asdict(self).items()})


def as_request(request: "ChatRequest | list[dict]") -> ChatRequest:
    """Accept a `ChatRequest` or a bare list of messages."""
    return request if isinstance(request, ChatRequest) else ChatRequest(messages=request)


class ChatClient:
    """What every chat client shares: cache, `parse` re-asks, usage totals, `generate()` over `agenerate()`.

    Subclasses implement `agenerate`; `model_name` names the answering model in the cache key.
    """

    default_max_tokens = 512  # the completion budget `estimate` assumes for a request without `max_tokens`
    config_fields: tuple[str, ...] = ()  # the `ClientConfig` fields this backend takes as they are (`from_config`)

    @classmethod
    def from_config(cls, config) -> "ChatClient":
        """The client a `ClientConfig` describes (`rolellm.clients.config.make_client`): `config.model` and the
        fields named in `config_fields`; a backend that decides more (a device, a checkpoint's recorded settings)
        overrides this."""
        return cls(config.model, **{name: getattr(config, name) for name in cls.config_fields})

    def __init__(
        self, model_name: str, cache_path=None, max_parse_attempts: int = MAX_PARSE_ATTEMPTS, progress: bool = True
    ):
        if max_parse_attempts < 1:
            raise ValueError(f"max_parse_attempts must be at least 1, got {max_parse_attempts}")
        self.model_name = model_name
        self.cache = ChatCache(cache_path) if cache_path is not None else None
        self.max_parse_attempts = max_parse_attempts
        self.progress = progress
        self.usage = Usage()

    def generate(
        self,
        requests: Sequence,
        parse: Callable[[str], Any] | None = None,
        desc: str | None = None,
        remind: bool = False,
        json_schema: dict | None = None,
    ):
        """Answer `requests` and return one `ChatResult` per request, in order.

        Runs `agenerate` on a fresh event loop; inside a running loop (a Jupyter notebook) it runs that loop in a
        worker thread, so the call works the same everywhere.

        Args:
            requests (`Sequence[ChatRequest | list[dict]]`): the requests (a bare list of messages is accepted).
            parse (`Callable[[str], Any]`, *optional*): turns an answer's text into `ChatResult.parsed`; raising
                `ValueError` rejects the answer, which is asked again (a new attempt, its own cache entry) up to
                `max_parse_attempts` times, then counted as a failure with the last text kept. A re-ask is sent
                with another seed; an answer that never parsed is not kept in the cache, so a re-run asks again.
            desc (`str`, *optional*): the progress bar's label.
            remind (`bool`, *optional*, defaults to `False`): a re-ask also shows the model its rejected answer and
                a user turn naming what was wrong (for answers in a format, such as a judge's ranking).
            json_schema (`dict`, *optional*): the JSON schema every answer must fit; a backend that can constrain
                decoding to it does (vLLM's structured outputs: `VLLMChatClient`, `RayChatClient` on vLLM engines),
                the others leave it to `parse`.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.agenerate(requests, parse, desc, remind, json_schema))
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self.agenerate(requests, parse, desc, remind, json_schema)).result()

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        raise NotImplementedError

    def check_endpoint(self) -> str | None:
        """Check, before a long run, that the backend can answer at all (for an endpoint: reachable, key accepted,
        model served); raises `EndpointError` with the cause when it cannot. A local model has nothing to check.

        Returns:
            `str` or `None`: what was checked, for the log.
        """
        return None

    def estimate(self, requests: Sequence, max_tokens: int | None = None) -> RunEstimate:
        """Count the requests a run would send and estimate their tokens, before sending anything.

        Args:
            requests (`Sequence[ChatRequest | list[dict]]`): the requests of the run.
            max_tokens (`int`, *optional*): the completion budget of a request whose `params` set no
                `max_tokens`; defaults to the client's (512 for an endpoint, `max_new_tokens` for a local model).
        """
        requests = [as_request(r) for r in requests]
        todo = [r for r in requests if self.cache is None or self.key(r) not in self.cache]
        budget = max_tokens if max_tokens is not None else self.default_max_tokens
        prompt = sum(self.count_prompt_tokens(r) for r in todo)
        completion = sum(r.params.get("max_tokens", budget) for r in todo)
        return RunEstimate(len(requests), len(requests) - len(todo), prompt, completion)

    def count_prompt_tokens(self, request: ChatRequest) -> int:
        """Estimated prompt tokens of a request: its messages plus a few formatting tokens per message."""
        return sum(estimate_tokens(m["content"]) + 4 for m in request.messages)

    def key(self, request: ChatRequest, attempt: int = 0) -> str:
        return request_key(self.model_name, request.messages, request.params, request.sample_index, attempt)

    def _cached(self, request: ChatRequest, attempt: int) -> tuple[str, dict] | None:
        hit = self.cache.get(self.key(request, attempt)) if self.cache is not None else None
        if hit is not None:
            self.usage.cached += 1
        return hit

    def _record(self, request: ChatRequest, attempt: int, text: str, usage: dict) -> None:
        """Count a fresh answer and write it to the cache at once (a crash after this line loses nothing)."""
        self.usage.requests += 1
        self.usage.prompt_tokens += usage.get("prompt_tokens", 0)
        self.usage.completion_tokens += usage.get("completion_tokens", 0)
        if self.cache is not None:
            self.cache.put(self.key(request, attempt), self.model_name, text, usage)

    def _finish(self, request, attempt, text, usage, cached, parse) -> ChatResult:
        """The result of an answer. An answer `parse` rejected comes back with `error` set: final when no attempt is
        left, otherwise the caller asks `reask(request, attempt + 1, result)` next."""
        result = ChatResult(request, text, usage=usage, cached=cached, attempts=attempt + 1)
        if parse is None:
            return result
        try:
            result.parsed = parse(text)
            return result
        except ValueError as error:
            result.error = str(error)
        if attempt + 1 < self.max_parse_attempts:
            self.usage.reasks += 1
            logger.debug("answer rejected by parse (attempt %d): %s", attempt + 1, result.error)
            return result
        result.error = f"unparseable answer after {attempt + 1} attempts: {result.error}"
        self.usage.failures += 1
        self._forget(request, attempt)
        return result

    async def answer_in_rounds(self, requests: list[ChatRequest], parse, desc, remind, answer) -> list[ChatResult]:
        """The attempt rounds of a batch backend (local, vLLM, Ray, llama.cpp, a backend of one's own): each round
        takes what the cache holds, hands the rest to `await answer(todo, asked, settle, fail)` and asks again in the
        next round what `parse` rejected. A backend's `agenerate` is this call with its own `answer`.

        `todo` is a list of `(request index, attempt)`, `asked[i]` what is sent for request `i`'s attempt (the
        request, or its re-ask); `answer` calls `settle(i, attempt, text, usage)` for each answer as it comes (which
        writes it to the cache at once), or `fail(i, attempt, error)` for a request that failed for good."""
        results: list[ChatResult | None] = [None] * len(requests)
        bar = self._progress(len(requests), desc)
        pending = [(i, 0) for i in range(len(requests))]
        asked = list(requests)
        while pending:
            next_pending, todo = [], []

            def settle(i, attempt, text, usage, cached=False, next_pending=next_pending):
                if not cached:
                    self._record(requests[i], attempt, text, usage)  # on disk before the next answer comes
                result = self._finish(requests[i], attempt, text, usage, cached, parse)
                if result.ok or attempt + 1 == self.max_parse_attempts:
                    results[i] = result
                    self._update(bar)
                else:
                    asked[i] = self.reask(requests[i], attempt + 1, replace(result, request=asked[i]), remind)
                    next_pending.append((i, attempt + 1))

            def fail(i, attempt, error: str):
                self.usage.failures += 1
                self._forget(requests[i], attempt - 1)
                results[i] = ChatResult(requests[i], error=error, attempts=attempt + 1)
                self._update(bar)

            for i, attempt in pending:
                hit = self._cached(requests[i], attempt)
                if hit is None:
                    todo.append((i, attempt))
                else:
                    settle(i, attempt, *hit, cached=True)
            if todo:
                try:
                    await answer(todo, asked, settle, fail)
                except BaseException:
                    bar.close()
                    raise
            pending = next_pending
        self._report(bar, desc)
        return results

    def _forget(self, request: ChatRequest, last_attempt: int) -> None:
        """Drop the cached answers of a request that never parsed, so that a re-run asks again instead of failing
        from the cache."""
        if self.cache is not None:
            self.cache.delete([self.key(request, attempt) for attempt in range(last_attempt + 1)])

    def reask(self, request: ChatRequest, attempt: int, rejected: ChatResult, remind: bool) -> ChatRequest:
        """What is sent for attempt `attempt` after `rejected` did not parse: `request` with another seed, and with
        `remind` the conversation so far, the rejected answer and a user turn naming what was wrong.

        The cache key stays that of `request` and `attempt`: the rejected answer is cached too while attempts are
        left, so a re-run sends the same re-asks.
        """
        params = {**request.params, "seed": request.params.get("seed", 0) + attempt * REASK_SEED_STRIDE}
        if not remind:
            return replace(request, params=params)
        reminder = REASK_REMINDER.format(error=rejected.error[:300])
        messages = [*rejected.request.messages, {"role": "assistant", "content": rejected.text or ""}]
        messages.append({"role": "user", "content": reminder})
        return replace(request, messages=messages, params=params)

    def _progress(self, total: int, desc: str | None):
        bar = tqdm(
            total=total, desc=desc or self.model_name, unit="req", disable=not self.progress, dynamic_ncols=True
        )
        bar.usage_before = replace(self.usage)  # the bar and the summary show this run's totals
        return bar

    def _update(self, bar, n: int = 1) -> None:
        if bar.disable:
            return
        u = self.usage - bar.usage_before
        postfix = {"sent": u.requests, "cached": u.cached, "tokens": u.total_tokens, "retries": u.retries}
        bar.set_postfix({**postfix, "failed": u.failures}, refresh=False)
        bar.update(n)

    def _report(self, bar, desc: str | None) -> None:
        bar.close()
        run = self.usage - bar.usage_before
        logger.info("%s: %s", desc or self.model_name, run)
        if self.progress and not logger.isEnabledFor(logging.INFO):  # else the log line above says it
            tqdm.write(f"{desc or self.model_name}: {run}", file=sys.stderr)
        if run.failures:
            logger.warning("%s: %d requests failed; see ChatResult.error", desc or self.model_name, run.failures)
