"""`RayChatClient`: the chat-client interface on a Ray cluster, for vLLM engines (Ray Data's LLM processors,
`ray.data.llm.build_processor`) or an endpoint (Ray tasks).

Two ways to spread a run over a Ray cluster, chosen by `base_url`:

- without it, `vLLMEngineProcessorConfig`: vLLM engines on the cluster's GPUs (`concurrency` engines of
  `tensor_parallel_size` GPUs each), fed token ids from the same encoder as `LocalChatClient` and `VLLMChatClient`
  (Ray's own chat-template and tokenize stages are off), JSON answers through structured outputs;
- with it, the requests fanned out to an OpenAI-compatible endpoint (a load balancer in front of many servers, or one
  server) by Ray tasks, each the built-in client (`OpenAIChatClient`) on its share of the requests, `max_concurrency`
  requests in flight in all, every answer streamed back to the driver as it comes (`docs/scale.md` says why these are
  Ray tasks and not Ray Data's `HttpRequestProcessorConfig`).

Either way the requests are the job's own (`ChatRequest`), cached requests are never submitted, and every answer is
written to the cache the moment it streams back to the driver: a run killed at any point resumes with what is
missing. Requests that get no answer are failures (`ChatResult.error`, the generators' `failures.jsonl`), never
dropped. The driver joins the cluster at `$RAY_ADDRESS`, else the one a `ray start` on this machine left running, else
starts a local one, unless `ray.init` already ran.

```python
import ray
ray.init(address="auto")  # or nothing: the client joins $RAY_ADDRESS or a running `ray start`, else starts one
client = RayChatClient("my-model", base_url="http://llm-lb.internal:8000/v1", max_concurrency=256)
results = client.generate(requests, parse=...)  # the `ChatClient` interface; tests/test_ray_backend.py runs it
```
"""

import asyncio
import json
import logging
import math

from rolellm.clients.base import (
    ChatClient,
    ChatRequest,
    ChatResult,
    EndpointError,
    as_request,
    check_base_url,
    check_rate_limit,
)
from rolellm.clients.openai_compatible import MalformedResponse, OpenAIChatClient


logger = logging.getLogger(__name__)

# How `max_concurrency` requests in flight spread over a cluster: Ray tasks of up to `REQUESTS_PER_TASK` requests in
# flight each, every task the built-in client (`OpenAIChatClient`: its connection pools, retries and back-off) on its
# share of the job, streaming each answer back as it comes. A task waits on the network: a quarter CPU each, so that a
# laptop holds several.
REQUESTS_PER_TASK = 16
HTTP_TASK_CPUS = 0.25


def http_shares(max_concurrency: int, requests: int) -> list[int]:
    """The requests in flight of each Ray task of a job of `requests` requests: `max_concurrency` over
    `ceil(max_concurrency / REQUESTS_PER_TASK)` tasks (no more tasks than requests), as evenly as it goes.

    >>> http_shares(16, 360), http_shares(40, 360), http_shares(40, 2)
    ([16], [14, 13, 13], [20, 20])
    """
    tasks = max(1, min(requests, math.ceil(max_concurrency / REQUESTS_PER_TASK)))
    return [max_concurrency // tasks + (i < max_concurrency % tasks) for i in range(tasks)]


class RayChatClient(ChatClient):
    """A chat client on Ray Data, with the same `generate()` as every other client.

    Args:
        model (`str`): the endpoint's model name (with `base_url`), else a model folder or Hub id every vLLM worker
            can read (a shared path or the Hub).
        base_url (`str`, *optional*): an OpenAI-compatible endpoint: requests go out from Ray tasks (`http_shares`);
            without it, through `vLLMEngineProcessorConfig`.
        api_key_env (`str`, *optional*): the environment variable holding the endpoint's key, as `OpenAIChatClient`'s
            (defaults to `OPENAI_API_KEY` when that is set).

        > Parameters of the HTTP fan-out

        max_concurrency (`int`, *optional*, defaults to 16): requests in flight at once: Ray tasks of up to 16
            requests each (`http_shares`).
        requests_per_minute (`int`, *optional*): not available here: the requests go out from tasks on many
            machines, and no limit is kept over all of them. A value is refused; use the built-in client
            (`backend="openai"`) against a rate-limited endpoint.
        timeout (`float`, *optional*, defaults to 120.0): seconds before a request is abandoned (then retried).
        max_retries (`int`, *optional*, defaults to 6): retries of a request, as `OpenAIChatClient`'s; a request
            that fails past them is a failure (`ChatResult.error`), and an endpoint that refuses the run (a 401, an
            unknown model) or cannot be reached stops the job.

        batch_size (`int`, *optional*, defaults to 8): engines: prompts per Ray Data batch, handed to an engine at once.

        > Parameters of the vLLM engines

        tensor_parallel_size (`int`, *optional*, defaults to 1): GPUs one engine spans.
        engines (`int`, *optional*, defaults to 1): vLLM engines (replicas) on the cluster.
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request without `max_tokens`.
        chat_template (`str`, *optional*), keep_think (`bool`, *optional*): as `LocalChatClient`.
        dtype (`str`, *optional*): the weights' dtype.

        > Parameters that control bookkeeping

        cache_path (`str`, *optional*), max_parse_attempts (`int`, *optional*, defaults to 3), progress (`bool`,
            *optional*, defaults to `True`): as every client.
    """

    config_fields = ("base_url", "api_key_env", "max_concurrency", "requests_per_minute", "timeout", "max_retries",
                     "batch_size", "tensor_parallel_size", "max_new_tokens", "chat_template", "dtype", "cache_path",
                     "progress")  # fmt: skip

    @classmethod
    def from_config(cls, config) -> "RayChatClient":
        """The client a `ClientConfig` describes (`engine_arguments`: the engine, the model folder, `keep_think`)."""
        from rolellm.clients.engines import engine_arguments

        model, arguments = engine_arguments(config, cls.config_fields)
        return cls(model, **arguments)

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        api_key_env: str | None = None,
        max_concurrency: int = 16,
        requests_per_minute: int | None = None,
        timeout: float = 120.0,
        max_retries: int = 6,
        batch_size: int = 8,
        tensor_parallel_size: int = 1,
        engines: int = 1,
        max_new_tokens: int = 256,
        chat_template: str | None = None,
        keep_think: bool = False,
        dtype: str | None = None,
        cache_path=None,
        max_parse_attempts: int = 3,
        progress: bool = True,
    ):
        from rolellm.clients.engines import require_engine

        require_engine("ray", module=None if base_url is None else "ray")  # HTTP: no Ray Data
        super().__init__(model, cache_path, max_parse_attempts, progress)
        self.base_url = check_base_url(base_url)
        self.max_new_tokens = max_new_tokens
        check_rate_limit("ray", requests_per_minute)
        if self.base_url is not None:
            # the pre-flight and the key are the endpoint client's own
            self.endpoint = OpenAIChatClient(
                model, base_url, api_key_env=api_key_env, max_retries=max_retries, timeout=timeout, max_concurrency=1,
                progress=False,
            )  # fmt: skip
            self.max_concurrency = max_concurrency
        else:
            from rolellm.clients.vllm_backend import VLLMChatClient

            # the prompt encoder, stop ids and sampling settings of `VLLMChatClient`, whose engines run on the cluster
            self.prompts = VLLMChatClient(
                model, max_new_tokens=max_new_tokens, chat_template=chat_template, keep_think=keep_think,
                progress=False, engine=_NoEngine(),
            )  # fmt: skip
            self.settings = {"batch_size": batch_size, "tensor_parallel_size": tensor_parallel_size,
                             "engines": engines, "dtype": dtype}  # fmt: skip

    def __repr__(self) -> str:
        where = f"base_url={self.base_url!r}" if self.base_url else "vLLM engines"
        return f"RayChatClient(model={self.model_name!r}, {where}, cache={self.cache!r})"

    @property
    def default_max_tokens(self) -> int:
        return self.max_new_tokens if self.base_url is None else 512

    def key(self, request: ChatRequest, attempt: int = 0) -> str:
        # an endpoint's key is `OpenAIChatClient`'s, an engine's `VLLMChatClient`'s: a run can switch to Ray and
        # keep its cache
        return (self.endpoint if self.base_url else self.prompts).key(request, attempt)

    def check_endpoint(self) -> str | None:
        return self.endpoint.check_endpoint() if self.base_url else None

    def _processor(self):
        """The Ray Data processor of the vLLM engines, with the postprocess that runs on the workers."""
        import ray
        from ray.data.llm import build_processor, vLLMEngineProcessorConfig

        ray.data.DataContext.get_current().enable_progress_bars = False  # rolellm's bar counts the answers
        s = self.settings
        engine_kwargs = {"tensor_parallel_size": s["tensor_parallel_size"], "dtype": s["dtype"] or "auto"}
        config = vLLMEngineProcessorConfig(
            model_source=self.model_name,
            engine_kwargs=engine_kwargs,
            batch_size=s["batch_size"],
            concurrency=s["engines"],
            chat_template_stage=False,  # the prompts are token ids from rolellm's encoder
            tokenize_stage=False,
            detokenize_stage=False,  # the engine returns the text
            should_continue_on_error=True,  # a failed prompt is a failure row, not a failed run
        )
        return build_processor(config, postprocess=_engine_answer)

    def _rows(self, request: ChatRequest, index: int, json_schema) -> dict:
        settings = _vllm_settings(request, self.prompts, None)
        if json_schema is not None:  # as JSON text: one Arrow type whatever the schema holds
            settings["structured_outputs"] = {"json": json.dumps(json_schema)}
        return {
            "index": index,
            "tokenized_prompt": self.prompts.encode_prompt(request.messages),
            "sampling_params": settings,
        }

    def _read(self, row: dict) -> tuple[str, dict]:
        """`(text, usage)` of an engine's processed row; raises `MalformedResponse` with the reason for a row with no
        answer."""
        error = row.get("error") or row.get("__inference_error__")  # an error row skips the postprocess
        if error:
            raise MalformedResponse(f"the vLLM engine failed: {error}")
        return row["text"], {"prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"]}

    async def agenerate(self, requests, parse=None, desc=None, remind=False, json_schema=None) -> list[ChatResult]:
        """The async form of `generate`; the Ray job runs in a worker thread and its answers stream back."""
        requests = [as_request(r) for r in requests]
        if self.base_url is None:
            for request in requests:  # every unsupported parameter is named before the cluster is asked
                _vllm_settings(request, self.prompts, None)

        async def answer(todo, asked, settle, fail):  # one Ray job per attempt round
            answered = set()

            def receive(n: int, text: str | None, usage: dict | None, error: str | None):  # as each answer arrives
                i, attempt = todo[n]
                answered.add(n)
                if error is not None:
                    fail(i, attempt, error)
                    return
                settle(i, attempt, text, usage)

            run = self._send if self.base_url is not None else self._run
            try:
                await asyncio.to_thread(run, [asked[i] for i, _ in todo], json_schema, receive)
            except Exception as error:  # the job stopped (the endpoint refused the run, a worker died)
                reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise EndpointError(
                    f"the Ray job stopped after {len(answered)} of {len(todo)} answers ({reason}); the answers "
                    "are cached, a re-run sends only the rest"
                ) from error

        return await self.answer_in_rounds(requests, parse, desc, remind, answer)

    def _send(self, requests: list[ChatRequest], json_schema, receive) -> None:
        """Send `requests` to the endpoint from Ray tasks (`http_shares`), each answering its share with the built-in
        client (`_answer_share`), and hand each answer to `receive` as it streams back. A task that stops (the
        endpoint refused the run, its worker died) stops the job: the other tasks are ended, their requests unsent."""
        import ray

        start_ray()
        shares = http_shares(self.max_concurrency, len(requests))
        endpoint = self.endpoint
        client = {"model": endpoint.model, "base_url": endpoint.base_url, "api_key": endpoint._api_key,
                  "timeout": endpoint.timeout, "max_retries": endpoint.max_retries}  # fmt: skip
        task = ray.remote(_answer_share).options(num_cpus=HTTP_TASK_CPUS, max_retries=0)
        numbered = list(enumerate(requests))
        generators = [task.remote(client, numbered[k :: len(shares)], share) for k, share in enumerate(shares)]
        pending, finished = list(generators), False
        try:
            while pending:
                [ready], _ = ray.wait(pending, num_returns=1)
                try:
                    answers = ray.get(next(ready))
                except StopIteration:
                    pending.remove(ready)
                    continue
                except ray.exceptions.RayTaskError as error:
                    raise error.cause from None
                for n, text, usage, error in answers:
                    receive(n, text, usage, error)
            finished = True
        finally:
            if not finished:  # a task stopped, or the driver is interrupted: nothing more is sent
                for generator in pending:
                    ray.cancel(generator, force=True)

    def _run(self, requests: list[ChatRequest], json_schema, receive) -> None:
        """Run `requests` through the vLLM engines' processor and hand each answer to `receive` as it arrives.

        Rows of one shape (the same parameter names and types) go through one dataset: Ray Data stores a column in
        one Arrow type, so a parameter missing from some rows would reach the others as `null`."""
        import ray

        start_ray()
        shapes: dict[str, list[dict]] = {}
        for n, request in enumerate(requests):
            row = self._rows(request, n, json_schema)
            shapes.setdefault(_shape(row), []).append(row)
        batch_size = self.settings["batch_size"]
        for group in shapes.values():
            dataset = ray.data.from_items(group, override_num_blocks=math.ceil(len(group) / batch_size))
            for row in self._processor()(dataset).iter_rows():
                try:
                    text, usage = self._read(row)
                except MalformedResponse as error:
                    receive(row["index"], None, None, str(error))
                    continue
                receive(row["index"], text, usage, None)


def start_ray() -> None:
    """Join `$RAY_ADDRESS`, else a running `ray start` cluster, else start a local one, unless `ray.init` already
    ran."""
    import ray

    if not ray.is_initialized():
        ray.init(log_to_driver=False)


def _answer_share(client: dict, requests: list[tuple[int, ChatRequest]], max_concurrency: int):
    """A Ray task: `requests` (numbered) answered by `OpenAIChatClient` (`client`: its model, endpoint, key, time-out
    and retries) with `max_concurrency` in flight, yielding lists of `(n, text, usage, error)` as the answers come (a
    request that failed past its retries has its `error`). An endpoint that refuses the run stops the task with its
    `EndpointError`.

    The event loop runs in this thread between the yields (Ray runs a generator task to its end without waiting for
    the driver), so nothing is left running when the task ends or is cancelled."""
    from rolellm.clients.openai_compatible import RequestFailed

    endpoint = OpenAIChatClient(client["model"], client["base_url"], api_key=client["api_key"],
                                max_concurrency=max_concurrency, timeout=client["timeout"],
                                max_retries=client["max_retries"], progress=False)  # fmt: skip
    loop = asyncio.new_event_loop()
    answers: asyncio.Queue = asyncio.Queue()

    async def answer(slots, n: int, request: ChatRequest) -> None:
        try:
            text, usage = await endpoint.complete(slots, request)
        except RequestFailed as error:
            answers.put_nowait((n, None, None, str(error)))
            return
        answers.put_nowait((n, text, usage, None))

    async def answer_all() -> None:
        async with endpoint.open_slots() as slots:
            tasks = [asyncio.ensure_future(answer(slots, n, request)) for n, request in requests]
            try:
                await asyncio.gather(*tasks)
            except EndpointError:  # the endpoint refused the run: nothing more is sent
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

    async def arrived() -> list:  # the answers come so far, at least one unless the share is done
        if answers.empty() and not done.done():
            waiting = asyncio.ensure_future(answers.get())
            await asyncio.wait({waiting, done}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                waiting.cancel()
            elif not waiting.cancelled():
                answers.put_nowait(waiting.result())  # (order within a list does not matter)
        ready = []
        while not answers.empty():
            ready.append(answers.get_nowait())
        return ready

    done = loop.create_task(answer_all())
    try:
        while not done.done() or not answers.empty():
            ready = loop.run_until_complete(arrived())
            if ready:
                yield ready
        done.result()  # the endpoint refused the run: the task's error
    finally:
        loop.close()


def _shape(row: dict) -> str:
    """The parameter names and value types of a row's request body or sampling settings."""
    body = row.get("payload") or row["sampling_params"]
    return repr(sorted((name, type(value).__name__) for name, value in body.items()))


def _vllm_settings(request: ChatRequest, prompts, json_schema) -> dict:
    from rolellm.clients.vllm_backend import sampling_settings

    return sampling_settings(request, prompts.max_new_tokens, prompts.stop_ids, json_schema)


def _engine_answer(row: dict) -> dict:
    return {
        "index": row["index"],
        "text": row.get("generated_text") or "",
        "prompt_tokens": int(row.get("num_input_tokens") or 0),
        "completion_tokens": int(row.get("num_generated_tokens") or 0),
        "error": row.get("__inference_error__") or "",
    }


class _NoEngine:
    """The engine of the `VLLMChatClient` a `RayChatClient` borrows its prompt encoder from: the cluster answers."""

    def generate(self, prompts, settings):
        raise RuntimeError("RayChatClient sends its prompts to the Ray cluster's engines")
