"""One description of a chat client, `ClientConfig`, and one way to build it, `make_client`.

Every command that talks to a model (`rolellm generate`, `evaluate`, `dialogue`, `chat`) takes `ClientConfig` itself
as one of its parser's dataclasses and builds the client here, so an option means the same everywhere; the other
endpoints of a run (a judge, a baseline, a user simulator) are derived from it by `derive_client`, from the
prefixed flags of `endpoint_options`.

>>> from rolellm.testing.server import ChatCompletionsServer
>>> with ChatCompletionsServer(lambda body: "Aye") as server:
...     client = make_client(ClientConfig("test-model", base_url=server.base_url, progress=False))
...     [result] = client.generate([[{"role": "user", "content": "Ahoy?"}]])
>>> type(client).__name__, result.text
('OpenAIChatClient', 'Aye')
"""

import logging
import os
from dataclasses import dataclass, field, fields, make_dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

from rolellm.clients.base import ChatClient, check_api_key_env, check_base_url, check_rate_limit
from rolellm.clients.gguf import is_gguf_source


logger = logging.getLogger(__name__)


# `ClientConfig.backend` -> the module and class of its client, imported when asked for (`backend_class`); a new
# backend is a `ChatClient` subclass with `from_config`, added here (or named by its dotted path, from outside)
BACKEND_CLASSES = {
    "openai": ("rolellm.clients.openai_compatible", "OpenAIChatClient"),
    "local": ("rolellm.clients.local", "LocalChatClient"),
    "vllm": ("rolellm.clients.vllm_backend", "VLLMChatClient"),
    "ray": ("rolellm.clients.ray_backend", "RayChatClient"),
    "llamacpp": ("rolellm.clients.llamacpp_backend", "LlamaCppChatClient"),
}
BACKENDS = tuple(BACKEND_CLASSES)
OPENAI_URL = "https://api.openai.com/v1"  # where an OpenAI client goes without base_url or $OPENAI_BASE_URL
DEFAULT_PORTS = {"http": 80, "https": 443}
# the fields a derived endpoint (`endpoint_options`) may set; the others are inherited from the main client
ENDPOINT_FIELDS = ("model", "base_url", "api_key_env", "max_concurrency", "requests_per_minute", "timeout",
                   "max_retries")  # fmt: skip


def flag_field(help: str):
    """A `bool | None` field, `None` until given (the value is decided later: what a checkpoint recorded, another
    field), whose flag alone means `True`, as for any other bool: `HfArgumentParser` does that only for a default
    that is not `None`.

    >>> from transformers import HfArgumentParser
    >>> @dataclass
    ... class Arguments:
    ...     keep_think: bool | None = flag_field("Keep think blocks.")
    >>> parser = HfArgumentParser(Arguments)
    >>> [parser.parse_args(args).keep_think for args in ([], ["--keep_think"], ["--keep_think", "no"])]
    [None, True, False]
    """
    return field(default=None, metadata={"help": help, "nargs": "?", "const": True})


@dataclass
class ClientConfig:
    """Which model answers, where, and how hard to push it: the one client description of every command that talks
    to a model (`rolellm generate`, `evaluate`, `dialogue`, `chat`), whose flags are these fields.

    API keys are never part of the config (it ends up in logs and run files): an endpoint's key is read from the
    environment variable `api_key_env` names, by default `OPENAI_API_KEY`. The other endpoints of a run (a judge, a
    baseline, a user simulator) are derived from this one with `endpoint_options` and `derive_client`, each with its
    own key: a key goes only to the host it was given for.

    > Parameters that control the model

    Args:
        model (`str`): the endpoint's model name, or the local model's folder / Hub id (`--model`, also
            `--model_name_or_path`).
        backend (`str`, *optional*): `"openai"`, `"local"`, `"vllm"`, `"ray"`, `"llamacpp"`: an OpenAI-compatible
            endpoint, a `transformers` model run in-process, vLLM offline on this node (`rolellm[vllm]`), Ray Data
            across a cluster (`rolellm[ray]`: vLLM engines on its GPUs, or with `base_url` the endpoint fanned out
            to), a GGUF file run in-process by llama.cpp (`rolellm[llamacpp]`), or the dotted path of a `ChatClient`
            subclass of one's own (`my_backends.EchoClient`, see `docs/development.md`); defaults to `"openai"`
            when `base_url` is set, else `"local"` (so an endpoint without `base_url`, OpenAI itself or
            `$OPENAI_BASE_URL`, needs `backend="openai"`). See `docs/scale.md`.
        base_url (`str`, *optional*): the endpoint (`http://localhost:8000/v1`); defaults to `$OPENAI_BASE_URL`,
            else OpenAI.
        api_key_env (`str`, *optional*): the environment variable holding the endpoint's API key (`MY_LLM_KEY`),
            which must be set; `""` sends no key. Defaults to `OPENAI_API_KEY` when that is set (else no key); an
            endpoint derived from this one (`derive_client`) inherits it only on the same host.

    > Parameters that control endpoints

        max_concurrency (`int`, *optional*, defaults to 16): requests in flight at once.
        requests_per_minute (`int`, *optional*): a limit on requests sent per minute.
        timeout (`float`, *optional*, defaults to 120.0): seconds before a request is retried.
        max_retries (`int`, *optional*, defaults to 6): retries of a request before it counts as failed.

    > Parameters that control local models

        batch_size (`int`, *optional*, defaults to 8): prompts per `generate()` call.
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request (the commands send it as
            every request's `max_tokens`).
        chat_template (`str`, *optional*): `"chatml"`, a Jinja chat template or the path of a template file, for a
            tokenizer without one (`rolellm.encoding.chat_template.read_chat_template`).
        card_extras (`bool`, *optional*): in a multi-turn chat with a Character Card's role, add what SillyTavern adds
            around the system text (the example dialogue, the greeting as a first turn, the post-history text);
            defaults to `False` for a checkpoint `rolellm train` wrote (its samples had none of them:
            `resolve_card_extras`) and `True` for any other model.
        keep_think (`bool`, *optional*): keep a thinking template's own think blocks and prefill (`encode_chat`);
            defaults to what the checkpoint recorded (`rolellm_inference.json`, written by `rolellm train`), else
            `False`.
        dtype (`str`, *optional*): the `dtype` to load the weights in (`"bfloat16"`, ...).
        device (`str`, *optional*): where to run (`"cuda"`, `"cpu"`); defaults to the first GPU when there is one.
        tensor_parallel_size (`int`, *optional*, defaults to 1): vLLM (`backend="vllm"`, or `"ray"` without
            `base_url`): the GPUs one engine spans, as vLLM's `tensor_parallel_size`.

    > Parameters that control bookkeeping

        cache_path (`str`, *optional*): the SQLite answer cache; `None` disables it (the commands default it to a
            file in their `output_dir`).
        progress (`bool`, *optional*, defaults to `True`): show a progress bar.
    """

    model: str = field(
        metadata={
            "help": "Endpoint model name, or the local model's folder / Hub id.",
            "aliases": ["--model_name_or_path", "--model-name-or-path"],
        }
    )
    backend: str | None = field(
        default=None,
        metadata={
            "help": "openai (an endpoint), local (transformers), vllm (offline vLLM), ray (Ray Data: vLLM engines, "
            "or the base_url endpoint), llamacpp (a GGUF file in llama.cpp), or the dotted path of a ChatClient "
            "class of your own (package.module.Class); default: openai with base_url, else local."
        },
    )
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint."})
    api_key_env: str | None = field(
        default=None,
        metadata={
            "help": "Environment variable holding the endpoint's API key (default: the main endpoint's, "
            "OPENAI_API_KEY, and only on its host; '' sends none)."
        },
    )
    max_concurrency: int = field(default=16, metadata={"help": "Endpoints: requests in flight at once."})
    requests_per_minute: int | None = field(default=None, metadata={"help": "Endpoints: request rate limit."})
    timeout: float = field(default=120.0, metadata={"help": "Endpoints: seconds before a request is retried."})
    max_retries: int = field(default=6, metadata={"help": "Endpoints: retries before a request counts as failed."})
    batch_size: int = field(default=8, metadata={"help": "Local models, llama.cpp: prompts answered together."})
    max_new_tokens: int = field(default=256, metadata={"help": "Answer budget of a request, in tokens."})
    chat_template: str | None = field(
        default=None, metadata={"help": "Local models: 'chatml', a Jinja template or its file."}
    )
    keep_think: bool | None = flag_field(
        "Local models: keep the template's think blocks (default: the checkpoint's, else no)."
    )
    card_extras: bool | None = flag_field(
        "Chats: add a Character Card's example dialogue, greeting and post-history text (default: not for a model "
        "rolellm trained, which never saw them; yes for any other)."
    )
    dtype: str | None = field(default=None, metadata={"help": "Local models: dtype to load in (bfloat16, ...)."})
    device: str | None = field(default=None, metadata={"help": "Local models: cuda, cpu, ... (default: cuda if any)."})
    tensor_parallel_size: int = field(default=1, metadata={"help": "vLLM: GPUs one engine spans (tensor parallel)."})
    cache_path: str | None = field(default=None, metadata={"help": "SQLite answer cache."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def __post_init__(self):
        check_base_url(self.base_url)
        check_api_key_env(self.api_key_env)
        check_minimums(self, max_concurrency=1, requests_per_minute=1, timeout=0.001, max_retries=0, batch_size=1,
                       max_new_tokens=1, tensor_parallel_size=1)  # fmt: skip
        if self.backend is None:
            self.backend = "openai" if self.base_url is not None else "local"
        if self.backend not in BACKENDS:
            backend_class(self.backend)  # a dotted path that names no client class stops here, before any work
        check_rate_limit(self.backend, self.requests_per_minute)
        if self.backend in ("local", "vllm", "llamacpp") and self.base_url is not None:
            where = "on this node" if self.backend == "vllm" else "in-process"
            raise ValueError(f"backend={self.backend!r} runs the model {where}: drop base_url={self.base_url!r}")

    @property
    def runs_weights(self) -> bool:
        """Whether rolellm runs the model's own weights (`local`, `vllm`, `llamacpp`, `ray` without `base_url`), so
        that a checkpoint folder's recorded settings and profiles apply; `False` for an endpoint."""
        return self.backend in ("local", "vllm", "llamacpp") or (self.backend == "ray" and self.base_url is None)


def check_minimums(config, **minimums) -> None:
    """A `ValueError` naming the first field of `config` below its least value, before anything runs.

    >>> check_minimums(ClientConfig("m"), max_new_tokens=1)
    >>> ClientConfig("m", max_new_tokens=0)
    Traceback (most recent call last):
    ...
    ValueError: max_new_tokens=0 must be at least 1
    """
    for name, least in minimums.items():
        value = getattr(config, name)
        if value is not None and not value >= least:  # NaN too: it compares as nothing
            raise ValueError(f"{name}={value} must be at least {least}")


def endpoint_options(prefix: str, names=ENDPOINT_FIELDS, many: bool = False, model_help: str | None = None) -> type:
    """A dataclass of the optional `{prefix}_{name}` fields of another endpoint of a run (a judge, a baseline, a
    user simulator), built from `ClientConfig`'s own fields and help: a command adds it to its parser, and
    `derive_client` turns it into that endpoint's `ClientConfig`. Every field defaults to `None`, "inherit".

    Args:
        prefix (`str`): `"judge"` gives `--judge_model`, `--judge_base_url`, ...
        names (`tuple[str]`, *optional*): the `ClientConfig` fields to offer (`model` always); defaults to the
            model, the endpoint and its request limits (`ENDPOINT_FIELDS`).
        many (`bool`, *optional*, defaults to `False`): `{prefix}_model` is a list (several judges).
        model_help (`str`, *optional*): the help of `{prefix}_model`.

    >>> JudgeOptions = endpoint_options("judge", ("model", "base_url"))
    >>> JudgeOptions(judge_model="gpt-4o")
    JudgeOptions(judge_model='gpt-4o', judge_base_url=None)
    """
    own = {f.name: f for f in fields(ClientConfig)}
    options = []
    for name in dict.fromkeys(("model", *names)):
        kind = own[name].type if name != "model" else (list[str] if many else str)
        help_text = model_help if name == "model" and model_help else own[name].metadata["help"]
        options.append((f"{prefix}_{name}", kind | None, field(default=None, metadata={"help": help_text})))
    return make_dataclass(f"{prefix.title().replace('_', '')}Options", options)


def client_options(*names: str) -> type:
    """A dataclass of some of `ClientConfig`'s own fields (type, default, help), for a command that reads a model's
    files without talking to it (`rolellm template check` takes `--chat_template` and `--keep_think`).

    >>> client_options("chat_template", "keep_think")()
    ClientOptions(chat_template=None, keep_think=None)
    """
    own = {f.name: f for f in fields(ClientConfig)}
    options = [(name, own[name].type, field(default=own[name].default, metadata=own[name].metadata)) for name in names]
    return make_dataclass("ClientOptions", options)


def with_default_cache(client: ClientConfig | None, path: str) -> ClientConfig | None:
    """`client` answering from the cache at `path` unless it names a cache of its own (`None` stays `None`): how an
    evaluation keeps its endpoints' answers in its output folder.

    >>> with_default_cache(ClientConfig("m", base_url="http://h/v1"), "run/cache.sqlite").cache_path
    'run/cache.sqlite'
    >>> with_default_cache(ClientConfig("m", base_url="http://h/v1", cache_path="mine.sqlite"), "run/c.sqlite").cache_path
    'mine.sqlite'
    """
    return replace(client, cache_path=path) if client is not None and client.cache_path is None else client


def derive_client(base: ClientConfig, prefix: str, values, model: str | None = None, cache_path: str | None = None):
    """The `ClientConfig` of another endpoint of a run, from its `{prefix}_*` options (`endpoint_options`) and the
    run's main client `base`; `None` when no `{prefix}_model` is set.

    One rule decides where the endpoint is: a `{prefix}_model` that is an existing folder or a GGUF file
    (`rolellm.clients.gguf.is_gguf_source`) runs locally; any other name is asked at `{prefix}_base_url`, else at
    `base.base_url` when the main client is an endpoint, else at `$OPENAI_BASE_URL` (else OpenAI). The other options
    are the prefixed ones when set, else `base`'s, except `keep_think` (another model's own: from its checkpoint),
    `cache_path` (`cache_path`: each endpoint keeps its own cache file) and `api_key_env`: a key goes only to the host
    it was given for, so without `{prefix}_api_key_env` the endpoint gets the main endpoint's key when it is on the
    same host (scheme, host and port: `same_host`), else none (`""`).

    Args:
        base (`ClientConfig`): the run's main client.
        prefix (`str`): the options' prefix (`"judge"`).
        values: the options, an instance of `endpoint_options(prefix)` or a mapping of its fields.
        model (`str`, *optional*): the model, for one of several (`endpoint_options(..., many=True)`).
        cache_path (`str`, *optional*): the endpoint's answer cache.

    >>> main = ClientConfig("rolellama", base_url="http://localhost:8000/v1", max_concurrency=4)
    >>> judge = derive_client(main, "judge", {"judge_model": "gpt-4o"}, cache_path="runs/judge_cache.sqlite")
    >>> judge.model, judge.backend, judge.base_url, judge.max_concurrency, judge.cache_path
    ('gpt-4o', 'openai', 'http://localhost:8000/v1', 4, 'runs/judge_cache.sqlite')
    >>> derive_client(ClientConfig("./rolellama"), "judge", {"judge_model": "gpt-4o"}).base_url is None
    True
    >>> derive_client(main, "baseline", {"baseline_model": None}) is None
    True
    >>> judge.api_key_env, derive_client(main, "judge", {"judge_model": "j", "judge_base_url": "http://a/v1"}).api_key_env
    (None, '')
    """
    values = {
        k.removeprefix(f"{prefix}_"): v for k, v in (values if isinstance(values, dict) else vars(values)).items()
    }
    check_base_url(values.get("base_url"), f"--{prefix}_base_url")
    check_api_key_env(values.get("api_key_env"), f"--{prefix}_api_key_env")
    model = model if model is not None else values.get("model")
    if model is None:
        given = [f"--{prefix}_{name}" for name, value in values.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} needs --{prefix}_model, the model that endpoint serves")
        return None
    inherited = {f.name: getattr(base, f.name) for f in fields(ClientConfig) if f.init}
    settings = {**inherited, **{k: v for k, v in values.items() if v is not None and k in inherited}}
    settings.update(model=model, keep_think=None, cache_path=cache_path)
    if Path(model).is_dir() or is_gguf_source(model):
        settings.update(backend="local", base_url=None, api_key_env=None)
    else:
        own_url = values.get("base_url")
        settings.update(backend="openai", base_url=own_url or (base.base_url if base.backend == "openai" else None))
        if values.get("api_key_env") is None:
            settings["api_key_env"] = base.api_key_env if same_host(settings["base_url"], base.base_url) else ""
    return ClientConfig(**settings)


def same_host(url: str | None, other: str | None) -> bool:
    """Whether two endpoint URLs are on one host: the same scheme, host name and port (two servers on one machine are
    two hosts). `None` is where an OpenAI client goes without one: `$OPENAI_BASE_URL`, else OpenAI.

    >>> same_host("http://localhost:8000/v1", "http://localhost:8000/other/v1"), same_host(None, "https://api.openai.com/v1")
    (True, True)
    >>> same_host("http://localhost:8000/v1", "http://localhost:8001/v1")
    False
    """
    places = []
    for where in (url, other):
        parts = urlsplit(where or os.environ.get("OPENAI_BASE_URL") or OPENAI_URL)
        try:
            port = parts.port or DEFAULT_PORTS.get(parts.scheme)
        except ValueError:  # out of range: no server is there, as the pre-flight says
            port = parts.netloc
        places.append((parts.scheme, (parts.hostname or "").lower(), port))
    return places[0] == places[1]


def backend_class(backend: str) -> type[ChatClient]:
    """The client class of a backend (`ClientConfig.backend`), imported when asked for: a name of `BACKEND_CLASSES`,
    or the dotted path of a `ChatClient` subclass (`package.module.Class`, as `--rewards` takes a reward function).
    Each class maps the config to its own arguments (`ChatClient.from_config`).

    >>> backend_class("rolellm.clients.openai_compatible.OpenAIChatClient") is backend_class("openai")
    True
    >>> backend_class("rolellm.clients.config.ClientConfig")
    Traceback (most recent call last):
    ...
    ValueError: backend='rolellm.clients.config.ClientConfig': ClientConfig is no ChatClient subclass
    """
    import importlib

    check_backend(backend)
    if backend in BACKEND_CLASSES:
        module_name, name = BACKEND_CLASSES[backend]
        return getattr(importlib.import_module(module_name), name)
    found = import_dotted(backend, f"backend={backend!r}")
    if not (isinstance(found, type) and issubclass(found, ChatClient)):
        raise ValueError(f"backend={backend!r}: {backend.rpartition('.')[2]} is no ChatClient subclass")
    return found


def import_dotted(path: str, label: str):
    """What the dotted path `package.module.name` names, imported: a user's own backend or reward. A `ValueError`
    that starts with `label` (`"backend='x.Y'"`) when the module does not import or holds no such name."""
    import importlib

    module_name, _, name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{label}: cannot import {module_name} ({error})") from None
    found = getattr(module, name, None)
    if found is None:
        raise ValueError(f"{label}: {module_name} has no {name}")
    return found


def check_backend(backend: str) -> None:
    """A `ValueError` for a backend that is neither one of `BACKENDS` nor a dotted path (`package.module.Class`)."""
    if backend not in BACKENDS and not is_dotted_path(backend):
        raise ValueError(
            f"backend={backend!r} is not one of {list(BACKENDS)}, nor the dotted path of a ChatClient class "
            "(package.module.Class)"
        )


def is_dotted_path(name: str) -> bool:
    """Whether `name` reads as `package.module.Class`: identifiers joined by dots.

    >>> is_dotted_path("my_backends.EchoClient"), is_dotted_path("vlm"), is_dotted_path("my-backends.Echo")
    (True, False, False)
    """
    parts = name.split(".")
    return len(parts) > 1 and all(part.isidentifier() for part in parts)


def make_client(config: ClientConfig) -> ChatClient:
    """The chat client `config` describes: `OpenAIChatClient` for an endpoint, `LocalChatClient` for a local model,
    `VLLMChatClient` for vLLM on this node, `RayChatClient` for Ray Data, `LlamaCppChatClient` for llama.cpp.

    An engine that is missing or at an unsupported version stops here (`EngineUnavailable`, naming the extra), before
    anything is loaded. A local checkpoint's recorded inference settings (`rolellm_inference.json`) apply where
    `config` leaves them unset (`keep_think`); an explicit setting that differs is logged.
    """
    return backend_class(config.backend).from_config(config)


def check_endpoints(*clients: ChatClient) -> list[str]:
    """The pre-flight of a run: `check_endpoint()` once per distinct endpoint and model among `clients`, before any
    real request, so a dead endpoint, a refused key or an unknown model stops the run in seconds (`EndpointError`,
    exit code 3 in the CLI) instead of after the first batch. Local models have nothing to check.

    Returns:
        `list[str]`: what was checked (also logged).

    >>> from rolellm.testing.server import ChatCompletionsServer
    >>> with ChatCompletionsServer(models=["judge", "answerer"]) as server:
    ...     clients = [make_client(ClientConfig(name, base_url=server.base_url)) for name in ("answerer", "judge")]
    ...     check_endpoints(*clients, clients[0])
    ["http://127.0.0.1:.../v1 serves 'answerer'", "http://127.0.0.1:.../v1 serves 'judge'"]
    """
    notes, seen = [], set()
    for client in clients:
        key = (type(client).__name__, getattr(client, "base_url", None), client.model_name)
        if key in seen:
            continue
        seen.add(key)
        note = client.check_endpoint()
        if note:
            logger.info("pre-flight: %s", note)
            notes.append(note)
    return notes
