"""A real chat-completions server on 127.0.0.1 for tests of the LLM clients, with fault injection."""

import json
import re
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal, get_args


FaultKind = Literal[
    "rate_limit",
    "server_error",
    "slow",
    "garbled",
    "truncated",
    "empty",
    "html",
    "no_choices",
    "null_content",
    "cut_empty",
]


Imitated = Literal["llama.cpp", "llama-cpp-python", "koboldcpp"]
# what each imitated server lists as its models' `owned_by`, and the sampling settings it uses where a request sets none
OWNED_BY = {"llama.cpp": "llamacpp", "llama-cpp-python": "me", "koboldcpp": "koboldcpp"}
SERVER_DEFAULTS = {
    "llama.cpp": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.0,
                  "max_tokens": -1, "cache_prompt": True},
    "llama-cpp-python": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "repeat_penalty": 1.1,
                         "max_tokens": -1},
    "koboldcpp": {"temperature": 0.75, "top_k": 100, "top_p": 0.92, "min_p": 0.0, "rep_pen": 1.07, "max_tokens": 512},
}  # fmt: skip
# how often a serving thread looks for `shutdown()`: socketserver's default, 0.5 s, is what closing a server waits on
# average half of, once per server a test starts (hundreds in the suite)
SHUTDOWN_POLL = 0.02
RUNAWAY_WORDS = 2048  # what an imitated llama.cpp server writes without `max_tokens`: until its context is full


@dataclass
class Fault:
    """One injected failure of `ChatCompletionsServer`.

    Args:
        kind (`str`): `"rate_limit"` (HTTP 429 with a `Retry-After` header), `"server_error"` (HTTP `status`),
            `"slow"` (wait `delay` seconds, then answer normally: with a shorter client timeout this is a time-out),
            `"garbled"` (HTTP 200 with a body that is not JSON), `"truncated"` (the answer cut in half with
            `finish_reason="length"`), `"empty"` (HTTP 200 with a completion whose `choices` is `[]`), `"html"` (HTTP
            `status` with an HTML error page, as from a proxy in front of the model), `"no_choices"` (HTTP 200 with a
            JSON body without `choices`), `"null_content"` (HTTP 200, `message.content` null) or `"cut_empty"`
            (HTTP 200, `finish_reason="length"` with an empty content).
        retry_after (`float`, *optional*, defaults to 0.05): the `Retry-After` value of a 429, in seconds.
        delay (`float`, *optional*, defaults to 1.0): the wait of a `"slow"` answer, in seconds.
        status (`int`, *optional*, defaults to 500): the status code of a `"server_error"`.
        message (`str`, *optional*, defaults to `"The server had an error"`): the error message of a `"server_error"`.
        code (`str`, *optional*): the `error.code` of a `"server_error"`'s OpenAI-style body (`"invalid_api_key"`,
            `"model_not_found"`); none by default.
        answer (`str`, *optional*): the text a `"slow"` or `"truncated"` fault answers with; defaults to the
            responder's answer (so a responder that returns such a fault must give it).
    """

    kind: FaultKind
    retry_after: float = 0.05
    delay: float = 1.0
    status: int = 500
    answer: str | None = None
    message: str = "The server had an error"
    code: str | None = None

    def __post_init__(self):
        kinds = get_args(FaultKind)
        if self.kind not in kinds:
            raise ValueError(f"Fault kind must be one of {kinds}, got {self.kind!r}")


def content_key(body: dict) -> str:
    """The identity of a chat-completions request body for counting: its messages and sampling parameters (streamed
    or not, it is the same request)."""
    transport = ("stream", "stream_options")
    return json.dumps({k: v for k, v in body.items() if k not in transport}, sort_keys=True, ensure_ascii=False)


class ChatCompletionsServer:
    """A real HTTP server on 127.0.0.1 speaking `POST /v1/chat/completions`, with fault injection.

    The answer of each request comes from `responder(body)`, so tests can make answers depend on the request (and
    really exercise parsing). It returns the assistant text (`str`), a full response body (`dict`), or a `Fault` to
    fail this request. Faults can also be queued with `add_faults()`; the next requests take them in order. A request
    with `"stream": true` is answered as a real server does: server-sent events (`chat.completion.chunk`, one content
    delta per word, then `data: [DONE]`) over chunked HTTP.

    Args:
        responder (`Callable[[dict], str | dict | Fault]`, *optional*): defaults to echoing the last user message.
        latency (`float`, *optional*, defaults to 0.0): seconds every answer waits before it is sent.
        api_key (`str`, *optional*): when set, a request without `Authorization: Bearer <api_key>` gets HTTP 401.
        models (`list[str]`, *optional*): the models `GET /v1/models` lists; when set, a chat completion for another
            model gets HTTP 404 as from OpenAI. By default the list is empty and every model is answered.
        imitate (`Literal["llama.cpp", "llama-cpp-python", "koboldcpp"]`, *optional*): behave as that server does
            where it differs from OpenAI: its model list names it (`owned_by`, one model `model.gguf` when `models` is
            not given); a setting the request leaves out takes the server's own default (`SERVER_DEFAULTS`), which the
            responder sees in the body and `requests` record; without `max_tokens` the answer runs on until the
            context is full (`RUNAWAY_WORDS`, `finish_reason="length"`); llama.cpp's prompt cache (unless
            `cache_prompt` is false) answers a repeated request differently; a request ending with an assistant turn
            is continued (the answer is the rest of that turn); a `<think>...</think>` block of the answer comes back
            in `reasoning_content`.

    Attributes:
        requests (`list[dict]`): every request, in the order answered, as `{"body", "status", "fault", "headers",
            "received"}`: header names lower-cased, `received` the `time.monotonic()` of its arrival.
        model_listings (`list[dict]`): the headers of every `GET /v1/models` (not chat completions, so not in
            `requests`).
        answered (`list[dict]`): the bodies of the requests whose HTTP 200 answer was fully written.

    >>> import openai
    >>> with ChatCompletionsServer(lambda body: body["messages"][-1]["content"].upper()) as server:
    ...     client = openai.OpenAI(api_key="test-key", base_url=server.base_url, max_retries=0)
    ...     reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "ahoy"}])
    >>> reply.choices[0].message.content, len(server.requests)
    ('AHOY', 1)
    """

    def __init__(
        self,
        responder: Callable[[dict], str | dict | Fault] | None = None,
        latency: float = 0.0,
        api_key: str | None = None,
        models: list[str] | None = None,
        imitate: Imitated | None = None,
    ):
        if imitate is not None and imitate not in OWNED_BY:
            raise ValueError(f"imitate must be one of {sorted(OWNED_BY)}, got {imitate!r}")
        self.imitate = imitate
        self._seen_prompts: set[str] = set()  # an imitated llama.cpp's prompt cache
        self.responder = responder if responder is not None else (lambda body: body["messages"][-1]["content"])
        self.latency = latency
        self.api_key = api_key
        self.models = models
        self.requests: list[dict] = []
        self.model_listings: list[dict] = []
        self.answered: list[dict] = []
        self._faults: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._handling = 0  # requests being handled right now
        self._httpd = None
        self._thread = None

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:<port>/v1`, the `base_url` of an OpenAI client."""
        return f"http://127.0.0.1:{self._httpd.server_port}/v1"

    def add_faults(self, *faults: Fault) -> None:
        """Queue faults; each of the next requests takes one, in order, before the responder is asked."""
        with self._lock:
            self._faults.extend(faults)

    def authorizations(self) -> Counter:
        """How many requests (chat completions and model listings alike) came with each `Authorization` header value
        (`None`: without one): which keys reached this server.

        >>> import openai
        >>> with ChatCompletionsServer() as server:
        ...     client = openai.OpenAI(api_key="test-key", base_url=server.base_url, max_retries=0)
        ...     _ = client.models.list()
        >>> server.authorizations()
        Counter({'Bearer test-key': 1})
        """
        with self._lock:
            seen = [entry["headers"] for entry in self.requests] + list(self.model_listings)
        return Counter(headers.get("authorization") for headers in seen)

    def answered_counts(self, timeout: float = 10.0, held: int = 0) -> Counter:
        """How many times each request content (see `content_key`) got a complete answer.

        Waits (up to `timeout` seconds) for requests still being handled: a client can read an answer a moment
        before the server has recorded it as answered. `held` requests that the responder keeps waiting on purpose
        (a test holding one while it kills the client) are not waited for.
        """
        with self._idle:
            self._idle.wait_for(lambda: self._handling <= held, timeout=timeout)
            return Counter(content_key(body) for body in self.answered)

    def _quirks(self, body: dict, answer: str) -> str | dict:
        """`answer` as the imitated server gives it (see `imitate`)."""
        messages = body.get("messages") or [{}]
        if messages[-1].get("role") == "assistant":  # continued, not answered
            answer = answer.removeprefix(messages[-1].get("content", ""))
        prompt = json.dumps(messages, sort_keys=True)
        with self._lock:
            cached = prompt in self._seen_prompts
            self._seen_prompts.add(prompt)
        if self.imitate == "llama.cpp" and body.get("cache_prompt") is not False and cached:
            answer += " (a different greedy answer: the prompt came from the cache)"
        finish = "stop"
        if body.get("max_tokens") in (None, -1):
            answer, finish = " ".join([answer] * (RUNAWAY_WORDS // max(1, len(answer.split())))), "length"
        reasoning = re.match(r"\s*<think>(.*?)</think>\s*(.*)", answer, re.S)
        if reasoning is None and finish == "stop":
            return answer
        completion = _completion(body, reasoning.group(2) if reasoning else answer)
        completion["choices"][0]["finish_reason"] = finish
        if reasoning:
            completion["choices"][0]["message"]["reasoning_content"] = reasoning.group(1)
        return completion

    def start(self) -> "ChatCompletionsServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections as they do with real APIs
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between the headers and the body

            def log_message(self, format, *args):  # noqa: A002 - silence the per-request stderr lines
                pass

            def do_GET(self):
                headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.model_listings.append(headers)
                if self.path.rstrip("/") != "/v1/models":
                    return _write_json(self, 404, {"error": {"message": f"no route {self.path}"}})
                if not self._authorized():
                    return _write_json(self, 401, _UNAUTHORIZED)
                owner = OWNED_BY.get(server.imitate, "test")
                names = server.models or (["model.gguf"] if server.imitate else [])
                listed = [{"id": name, "object": "model", "owned_by": owner} for name in names]
                return _write_json(self, 200, {"object": "list", "data": listed})

            def _authorized(self) -> bool:
                return server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}"

            def do_POST(self):
                with server._lock:
                    server._handling += 1
                try:
                    self._handle()
                finally:
                    with server._idle:
                        server._handling -= 1
                        server._idle.notify_all()

            def _handle(self):
                self.received = time.monotonic()
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}}, body)
                if not self._authorized():
                    return self._send(401, _UNAUTHORIZED, body)
                if server.models is not None and body.get("model") not in server.models:
                    missing = {"message": f"The model `{body.get('model')}` does not exist", "code": "model_not_found"}
                    return self._send(404, {"error": missing}, body)
                if server.imitate is not None:
                    body = {**SERVER_DEFAULTS[server.imitate], **body}
                with server._lock:
                    fault = server._faults.popleft() if server._faults else None
                answer = server.responder(body) if fault is None else None
                if server.imitate is not None and isinstance(answer, str):
                    answer = server._quirks(body, answer)
                if isinstance(answer, Fault):
                    fault, answer = answer, None
                if server.latency:
                    time.sleep(server.latency)
                if fault is None or fault.kind in ("slow", "truncated"):
                    if fault is not None:  # a slow or truncated fault still answers
                        time.sleep(fault.delay if fault.kind == "slow" else 0)
                        answer = fault.answer if fault.answer is not None else server.responder(body)
                        if isinstance(answer, Fault):
                            raise ValueError(f"{fault} returned by the responder needs answer='...'")
                    truncated = fault is not None and fault.kind == "truncated"
                    completion = _completion(body, answer, truncated=truncated)
                    if body.get("stream"):
                        return self._send_stream(completion, body, fault)
                    return self._send(200, completion, body, fault)
                if fault.kind == "rate_limit":
                    error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error"}}
                    return self._send(429, error, body, fault, {"Retry-After": f"{fault.retry_after:g}"})
                if fault.kind == "server_error":
                    error = {"message": fault.message, **({"code": fault.code} if fault.code else {})}
                    return self._send(fault.status, {"error": error}, body, fault)
                if fault.kind == "garbled":
                    return self._send(200, b'{"id": "chatcmpl-garbled", "choices": [{"mess', body, fault)
                if fault.kind == "html":
                    page = f"<html><head><title>{fault.status} Bad Gateway</title></head><body><h1>{fault.status}"
                    page += " Bad Gateway</h1><hr><center>nginx</center></body></html>"
                    return self._send(fault.status, page.encode(), body, fault, content_type="text/html")
                if fault.kind == "no_choices":
                    completion = {k: v for k, v in _completion(body, "").items() if k != "choices"}
                    return self._send(200, completion, body, fault)
                if fault.kind in ("null_content", "cut_empty"):
                    completion = _completion(body, "")
                    choice = completion["choices"][0]
                    if fault.kind == "null_content":
                        choice["message"]["content"] = None
                    else:
                        choice["finish_reason"] = "length"
                    if body.get("stream"):
                        return self._send_stream(completion, body, fault)
                    return self._send(200, completion, body, fault)
                return self._send(200, {**_completion(body, ""), "choices": []}, body, fault)  # "empty"

            def _send(self, status, payload, body, fault=None, headers=None, content_type="application/json"):
                with server._lock:
                    server.requests.append(
                        {
                            "body": body,
                            "status": status,
                            "fault": fault,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "received": self.received,
                        }
                    )
                try:
                    _write_json(self, status, payload, headers, content_type)
                except OSError:  # the client went away (a killed process, a time-out): not answered
                    return
                if status == 200 and (fault is None or fault.kind in ("slow", "truncated")):
                    with server._lock:
                        server.answered.append(body)

            def _send_stream(self, completion, body, fault):
                """Server-sent events, one chunk per word of the answer, as chunked HTTP (`stream=True`)."""
                with server._lock:
                    server.requests.append(
                        {
                            "body": body,
                            "status": 200,
                            "fault": fault,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "received": self.received,
                        }
                    )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for event in _stream_events(completion, body):
                        data = f"data: {event}\n\n".encode()
                        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:  # the client went away mid-stream: not answered
                    return
                if fault is None or fault.kind in ("slow", "truncated"):
                    with server._lock:
                        server.answered.append(body)

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the default backlog of 5 resets connections when many arrive at once
            daemon_threads = True

            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up is no error
                    super().handle_error(request, client_address)

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "ChatCompletionsServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _write_json(
    handler: BaseHTTPRequestHandler, status: int, payload: dict | bytes, headers=None, content_type="application/json"
) -> None:
    """Answer `handler`'s request with `payload` as `application/json` (bytes are sent as they are, with
    `content_type`)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()


_UNAUTHORIZED = {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}


def _completion(body: dict, answer: str | dict, truncated: bool = False) -> dict:
    """A chat-completions response body for `answer` (a `dict` answer is returned as it is)."""
    if isinstance(answer, dict):
        return answer
    prompt_tokens = sum(len(str(message.get("content", "")).split()) for message in body.get("messages", []))
    text = answer[: len(answer) // 2] if truncated else answer
    return {
        "id": f"chatcmpl-{abs(hash(content_key(body))) % 10**12}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length" if truncated else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(text.split()),
            "total_tokens": prompt_tokens + len(text.split()),
        },
    }


def _stream_events(completion: dict, body: dict) -> list[str]:
    """The `data:` payloads of a streamed `completion`: a role delta, one content delta per word (spaces kept), a
    final delta with the finish reason, the usage when `stream_options.include_usage` asks for it, and `[DONE]`."""
    choice = completion["choices"][0]
    pieces = re.findall(r"\S+\s*|\s+", choice["message"]["content"] or "")
    head = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"]}
    head["model"] = completion["model"]
    deltas = [{"role": "assistant", "content": ""}, *({"content": piece} for piece in pieces)]
    events = [{**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append({**head, "choices": [], "usage": completion["usage"]})
    return [json.dumps(event, ensure_ascii=False) for event in events] + ["[DONE]"]


@contextmanager
def json_server(respond: Callable[[str], tuple[int, dict]]) -> Iterator[str]:
    """A bare HTTP server on 127.0.0.1 for what `ChatCompletionsServer` is too well-behaved to do: every request
    (any method and path) gets `respond(method)` -> `(status, JSON body)` as a plain `application/json` answer, a
    streamed request included. Yields the base URL (`http://127.0.0.1:PORT/v1`).

    >>> import urllib.request
    >>> with json_server(lambda method: (200, {"method": method})) as url:
    ...     urllib.request.urlopen(url + "/models").read()
    b'{"method": "GET"}'
    """

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            _write_json(self, *respond(self.command))

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
