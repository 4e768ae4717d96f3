"""`RayChatClient`: the chat-client interface on Ray Data's LLM processors (`ray.data.llm.build_processor`).

Two ways to spread a run over a Ray cluster, chosen by `base_url`:

- without it, `vLLMEngineProcessorConfig`: vLLM engines on the cluster's GPUs (`concurrency` engines of
  `tensor_parallel_size` GPUs each), fed token ids from the same encoder as `LocalChatClient` and `VLLMChatClient`
  (Ray's own chat-template and tokenize stages are off), JSON answers through structured outputs;
- with it, `HttpRequestProcessorConfig`: the requests fanned out to an OpenAI-compatible endpoint (a load balancer in
  front of many servers, or one server) by Ray workers, `max_concurrency` requests in flight.

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
import functools
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
from rolellm.clients.openai_compatible import MalformedResponse, OpenAIChatClient, read_completion


logger = logging.getLogger(__name__)

# How Ray Data's HTTP stage keeps requests in flight: it sends the requests of one batch one after the other, and one
# actor task runs up to `BATCHES_PER_TASK` batches of its block at once (Ray Data's
# `DEFAULT_ASYNC_BATCH_UDF_MAX_CONCURRENCY`), so a block of that many batches holds that many requests in flight; a
# worker (an actor, one Python process) runs up to `TASKS_PER_WORKER` tasks at once (`max_concurrent_calls_per_actor`).
# `max_concurrency` requests in flight take `max_concurrency / 16` workers: on a small machine every worker process costs
# seconds of start-up, on a cluster a worker is cheap either way.
BATCHES_PER_TASK = 4
TASKS_PER_WORKER = 4
HTTP_WORKER_CPUS = 0.25  # an HTTP worker waits on the network: a quarter CPU each, so that a laptop holds several
# Ray Data hands each output block of the HTTP workers to a Ray task that unwraps its rows (the processor's
# postprocess): one at a time per worker. More start more Python processes than a small machine keeps (Ray keeps about
# one idle worker process per CPU and starts the others anew, a second of CPU each); on a 2-core machine one postprocess
# task per worker saves a job about 2 s of CPU and serves more requests per second than two.
POSTPROCESS_TASKS_PER_WORKER = 1


def http_fan_out(max_concurrency: int) -> dict:
    """`{"workers", "tasks_per_worker", "batches_per_task"}`: the HTTP workers of `max_concurrency` requests in flight.

    Their product is the requests in flight: at most `max_concurrency`, a multiple of `BATCHES_PER_TASK` above it, and
    as many workers of `TASKS_PER_WORKER` tasks as that takes, all with the same number of tasks (so 20 gives 16)."""
    batches = min(BATCHES_PER_TASK, max_concurrency)
    tasks = max_concurrency // batches  # actor tasks in flight over all workers
    workers = math.ceil(tasks / TASKS_PER_WORKER)
    return {"workers": workers, "tasks_per_worker": tasks // workers, "batches_per_task": batches}


class RayChatClient(ChatClient):
    """A chat client on Ray Data, with the same `generate()` as every other client.

    Args:
        model (`str`): the endpoint's model name (with `base_url`), else a model folder or Hub id every vLLM worker
            can read (a shared path or the Hub).
        base_url (`str`, *optional*): an OpenAI-compatible endpoint: requests go through `HttpRequestProcessorConfig`;
            without it, through `vLLMEngineProcessorConfig`.
        api_key_env (`str`, *optional*): the environment variable holding the endpoint's key, as `OpenAIChatClient`'s
            (defaults to `OPENAI_API_KEY` when that is set).

        > Parameters of the HTTP fan-out

        max_concurrency (`int`, *optional*, defaults to 16): requests in flight at once, at most: Ray workers of up
            to 16 requests each (`http_fan_out`: above 4 a multiple of 4, so 20 gives 16).
        requests_per_minute (`int`, *optional*): not available here: Ray's HTTP stage applies its `qps` to each
            batch while it queues the requests, so a limit would not hold. A value is refused; use the built-in client
            (`backend="openai"`) against a rate-limited endpoint.
        timeout (`float`, *optional*, defaults to 120.0): seconds before a request is abandoned (then retried).
        max_retries (`int`, *optional*, defaults to 6): Ray's retries of a request after a 429, 408 or 502-504.

        batch_size (`int`, *optional*, defaults to 8): requests per Ray Data batch: prompts handed to an engine at once,
            or requests an HTTP worker sends one after the other (4 batches at once per Ray task; a job too small to
            fill every task with 4 batches gets smaller ones). The answers of a Ray task reach the driver (and the
            cache) together when it ends, and every task costs Ray scheduling time.

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

        require_engine("ray")
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
            self.settings = {
                **http_fan_out(max_concurrency),
                "batch_size": batch_size,
                "timeout": timeout,
                "max_retries": max_retries,
            }
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

    def _processor(self, json_schema, batch_size: int, blocks: int):
        """The Ray Data processor of this client, with the preprocess and postprocess that run on the workers."""
        import ray
        from ray.data.llm import build_processor

        if not ray.is_initialized():
            ray.init(log_to_driver=False)  # joins $RAY_ADDRESS, else a running `ray start` cluster, else starts one
        ray.data.DataContext.get_current().enable_progress_bars = False  # rolellm's bar counts the answers
        if self.base_url is not None:
            import aiohttp
            from ray.data import ActorPoolStrategy, TaskPoolStrategy
            from ray.data.llm import HttpRequestProcessorConfig

            s = self.settings
            key = self.endpoint._api_key
            config = HttpRequestProcessorConfig(
                url=f"{self.base_url.rstrip('/')}/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                max_retries=s["max_retries"],
                base_retry_wait_time_in_s=0.5,
                batch_size=batch_size,
                concurrency=(s["workers"], s["workers"]),  # all of them from the start: the run is short
                session_factory=functools.partial(
                    aiohttp.ClientSession, timeout=aiohttp.ClientTimeout(total=s["timeout"])
                ),
                http_request_stage={"num_cpus": HTTP_WORKER_CPUS},
            )
            processor = build_processor(
                config,
                postprocess=_http_answer,
                # the same resources as the HTTP stage: Ray Data fuses the preprocess (which moves each row into
                # the processor's data column) into the HTTP workers instead of running a Ray task per block
                preprocess_map_kwargs={"num_cpus": HTTP_WORKER_CPUS},
                postprocess_map_kwargs={
                    "num_cpus": HTTP_WORKER_CPUS,
                    "compute": TaskPoolStrategy(size=max(1, min(blocks, POSTPROCESS_TASKS_PER_WORKER * s["workers"]))),
                },
            )
            # the config has no setting for the tasks one worker runs at once: the stage's actor pool gets it here
            stage = processor.get_stage_by_name("HttpRequestStage")
            stage.map_batches_kwargs = {
                **stage.map_batches_kwargs,
                "compute": ActorPoolStrategy(size=s["workers"], max_concurrent_calls_per_actor=s["tasks_per_worker"]),
            }
            return processor
        from ray.data.llm import vLLMEngineProcessorConfig

        s = self.settings
        engine_kwargs = {"tensor_parallel_size": s["tensor_parallel_size"], "dtype": s["dtype"] or "auto"}
        config = vLLMEngineProcessorConfig(
            model_source=self.model_name,
            engine_kwargs=engine_kwargs,
            batch_size=batch_size,
            concurrency=s["engines"],
            chat_template_stage=False,  # the prompts are token ids from rolellm's encoder
            tokenize_stage=False,
            detokenize_stage=False,  # the engine returns the text
            should_continue_on_error=True,  # a failed prompt is a failure row, not a failed run
        )
        return build_processor(config, postprocess=_engine_answer)

    def _rows(self, request: ChatRequest, index: int, json_schema) -> dict:
        if self.base_url is not None:
            return {
                "index": index,
                "payload": {"model": self.model_name, "messages": request.messages, **request.params},
            }
        settings = _vllm_settings(request, self.prompts, None)
        if json_schema is not None:  # as JSON text: one Arrow type whatever the schema holds
            settings["structured_outputs"] = {"json": json.dumps(json_schema)}
        return {
            "index": index,
            "tokenized_prompt": self.prompts.encode_prompt(request.messages),
            "sampling_params": settings,
        }

    def _read(self, row: dict) -> tuple[str, dict]:
        """`(text, usage)` of a processed row; raises `MalformedResponse` with the reason for a row with no answer."""
        if self.base_url is not None:
            completion = json.loads(row["response"])
            error = completion.get("error") if isinstance(completion, dict) else None
            if error is not None:
                message = error.get("message", error) if isinstance(error, dict) else error
                raise MalformedResponse(f"the endpoint answered with an error: {message}")
            return read_completion(completion)
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
            rows = [self._rows(asked[i], n, json_schema) for n, (i, _) in enumerate(todo)]
            answered = set()

            def receive(row):  # `_run` calls it as each answer arrives
                n = row["index"]
                i, attempt = todo[n]
                answered.add(n)
                try:
                    text, usage = self._read(row)
                except MalformedResponse as error:
                    fail(i, attempt, str(error))
                    return
                self._record(requests[i], attempt, text, usage)
                settle(i, attempt, text, usage)

            try:
                await asyncio.to_thread(self._run, rows, json_schema, receive)
            except Exception as error:  # the job stopped (a request failed past its retries, a worker died)
                reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                raise EndpointError(
                    f"the Ray job stopped after {len(answered)} of {len(rows)} answers ({reason}); the answers "
                    "are cached, a re-run sends only the rest"
                ) from error

        return await self._answer_in_rounds(requests, parse, desc, remind, answer)

    def _run(self, rows: list[dict], json_schema, receive) -> None:
        """Run `rows` through the processor and hand each answer to `receive` as it arrives.

        The rows are the stages' own inputs (`payload`, or `tokenized_prompt` and `sampling_params`). Rows of one
        shape (the same parameter names and types) go through one dataset: Ray Data stores a column in one Arrow
        type, so a parameter missing from some rows would reach the others as `null`. A dataset's blocks are what
        one Ray task takes: `batches_per_task` batches for the HTTP workers, which send them at once."""
        import ray

        shapes: dict[str, list[dict]] = {}
        for row in rows:
            shapes.setdefault(_shape(row), []).append(row)
        for group in shapes.values():
            batch_size, blocks = self._blocks(len(group))
            processor = self._processor(json_schema, batch_size, blocks)
            for row in processor(ray.data.from_items(group, override_num_blocks=blocks)).iter_rows():
                receive(row)

    def _blocks(self, rows: int) -> tuple[int, int]:
        """`(batch_size, blocks)` of a dataset of `rows` rows.

        An engine takes blocks of one batch. An HTTP task sends the `batches_per_task` batches of its block at once;
        a job too small to give every task in flight (`workers * tasks_per_worker`) such a block gets smaller
        batches, down to one request each, rather than fewer requests in flight, and the blocks come in whole rounds
        of the tasks in flight, so that the last round keeps them all busy."""
        s = self.settings
        if self.base_url is None:
            return s["batch_size"], math.ceil(rows / s["batch_size"])
        tasks = s["workers"] * s["tasks_per_worker"]
        batch_size = max(1, min(s["batch_size"], rows // (tasks * s["batches_per_task"])))
        blocks = math.ceil(rows / (batch_size * s["batches_per_task"]))
        return batch_size, min(rows, math.ceil(blocks / tasks) * tasks)


def _shape(row: dict) -> str:
    """The parameter names and value types of a row's request body or sampling settings."""
    body = row.get("payload") or row["sampling_params"]
    return repr(sorted((name, type(value).__name__) for name, value in body.items()))


def _vllm_settings(request: ChatRequest, prompts, json_schema) -> dict:
    from rolellm.clients.vllm_backend import sampling_settings

    return sampling_settings(request, prompts.max_new_tokens, prompts.stop_ids, json_schema)


def _http_answer(row: dict) -> dict:
    return {"index": row["index"], "response": json.dumps(row["http_response"])}


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
