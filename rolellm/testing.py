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
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal, get_args


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
    import re

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


def find_rolebench_data() -> Path | None:
    """The folder of real RoleBench files: `$ROLEBENCH_DATA_DIR`, else `../shared/data` beside the project.

    Returns `None` when neither exists.
    """
    candidates = [os.environ.get("ROLEBENCH_DATA_DIR"), Path(__file__).resolve().parents[2] / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


# --- A real chat-completions server for tests of the LLM clients ------------------------------------------------------


FaultKind = Literal["rate_limit", "server_error", "slow", "garbled", "truncated", "empty"]


@dataclass
class Fault:
    """One injected failure of `ChatCompletionsServer`.

    Args:
        kind (`str`): `"rate_limit"` (HTTP 429 with a `Retry-After` header), `"server_error"` (HTTP `status`),
            `"slow"` (wait `delay` seconds, then answer normally: with a shorter client timeout this is a time-out),
            `"garbled"` (HTTP 200 with a body that is not JSON), `"truncated"` (the answer cut in half with
            `finish_reason="length"`) or `"empty"` (HTTP 200 with a completion that has no choices).
        retry_after (`float`, *optional*, defaults to 0.05): the `Retry-After` value of a 429, in seconds.
        delay (`float`, *optional*, defaults to 1.0): the wait of a `"slow"` answer, in seconds.
        status (`int`, *optional*, defaults to 500): the status code of a `"server_error"`.
        message (`str`, *optional*, defaults to `"The server had an error"`): the error message of a `"server_error"`.
        answer (`str`, *optional*): the text a `"slow"` or `"truncated"` fault answers with; defaults to the
            responder's answer (so a responder that returns such a fault must give it).
    """

    kind: FaultKind
    retry_after: float = 0.05
    delay: float = 1.0
    status: int = 500
    answer: str | None = None
    message: str = "The server had an error"

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
    ):
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

    def answered_counts(self, timeout: float = 10.0) -> Counter:
        """How many times each request content (see `content_key`) got a complete answer.

        Waits (up to `timeout` seconds) for requests still being handled: a client can read an answer a moment
        before the server has recorded it as answered.
        """
        with self._idle:
            self._idle.wait_for(lambda: self._handling == 0, timeout=timeout)
            return Counter(content_key(body) for body in self.answered)

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
                    return self._reply(404, {"error": {"message": f"no route {self.path}"}})
                if not self._authorized():
                    return self._reply(401, _UNAUTHORIZED)
                listed = [{"id": name, "object": "model", "owned_by": "test"} for name in server.models or []]
                return self._reply(200, {"object": "list", "data": listed})

            def _authorized(self) -> bool:
                return server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}"

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

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
                with server._lock:
                    fault = server._faults.popleft() if server._faults else None
                answer = server.responder(body) if fault is None else None
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
                    return self._send(fault.status, {"error": {"message": fault.message}}, body, fault)
                if fault.kind == "garbled":
                    return self._send(200, b'{"id": "chatcmpl-garbled", "choices": [{"mess', body, fault)
                return self._send(200, {**_completion(body, ""), "choices": []}, body, fault)  # "empty"

            def _send(self, status, payload, body, fault=None, headers=None):
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
                data = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
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
                with server._lock:
                    server.answered.append(body)

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # the default backlog of 5 resets connections when many arrive at once
            daemon_threads = True

            def handle_error(self, request, client_address):
                if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that hung up is no error
                    super().handle_error(request, client_address)

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
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
