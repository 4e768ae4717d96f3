"""One description of a chat client, `ClientConfig`, and one way to build it, `make_client`.

Every command that talks to a model (`rolellm generate`, the answers and the judge of `rolellm evaluate`) describes
its client as a `ClientConfig` and builds it here, so an option means the same everywhere.

>>> from rolellm.testing.server import ChatCompletionsServer
>>> with ChatCompletionsServer(lambda body: "Aye") as server:
...     client = make_client(ClientConfig("test-model", base_url=server.base_url, progress=False))
...     [result] = client.generate([[{"role": "user", "content": "Ahoy?"}]])
>>> type(client).__name__, result.text
('OpenAIChatClient', 'Aye')
"""

import logging
from dataclasses import dataclass, field
from typing import Literal

from rolellm.clients.base import ChatClient


logger = logging.getLogger(__name__)


@dataclass
class ClientConfig:
    """Which model answers, where, and how hard to push it.

    API keys are never part of the config (it ends up in logs and run files): an endpoint's key is read from
    `OPENAI_API_KEY`.

    > Parameters that control the model

    Args:
        model (`str`): the endpoint's model name, or the local model's folder / Hub id.
        backend (`Literal["openai", "local"]`, *optional*): an OpenAI-compatible endpoint, or a `transformers` model
            run in-process; defaults to `"openai"` when `base_url` is set, else `"local"`.
        base_url (`str`, *optional*): the endpoint (`http://localhost:8000/v1`); defaults to `$OPENAI_BASE_URL`,
            else OpenAI.

    > Parameters that control endpoints

        max_concurrency (`int`, *optional*, defaults to 16): requests in flight at once.
        requests_per_minute (`int`, *optional*): a limit on requests sent per minute.
        timeout (`float`, *optional*, defaults to 120.0): seconds before a request is retried.
        max_retries (`int`, *optional*, defaults to 6): retries of a request before it counts as failed.

    > Parameters that control local models

        batch_size (`int`, *optional*, defaults to 8): prompts per `generate()` call.
        max_new_tokens (`int`, *optional*, defaults to 256): the answer budget of a request that sets none.
        chat_template (`str`, *optional*): a Jinja chat template or `"chatml"` for a tokenizer without one.
        keep_think (`bool`, *optional*, defaults to `False`): keep a thinking template's own think blocks and prefill
            (`encode_chat`); set it for a model trained with `RoCITConfig(keep_think=True)`.
        dtype (`str`, *optional*): the `dtype` to load the weights in (`"bfloat16"`, ...).
        device (`str`, *optional*): where to run (`"cuda"`, `"cpu"`); defaults to the first GPU when there is one.

    > Parameters that control bookkeeping

        cache_path (`str`, *optional*): the SQLite answer cache; `None` disables it.
        progress (`bool`, *optional*, defaults to `True`): show a progress bar.
    """

    model: str = field(metadata={"help": "Endpoint model name, or the local model's folder / Hub id."})
    backend: Literal["openai", "local"] | None = field(
        default=None, metadata={"help": "openai (an endpoint) or local (transformers); default: openai with base_url."}
    )
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint (key: OPENAI_API_KEY)."})
    max_concurrency: int = field(default=16, metadata={"help": "Endpoints: requests in flight at once."})
    requests_per_minute: int | None = field(default=None, metadata={"help": "Endpoints: request rate limit."})
    timeout: float = field(default=120.0, metadata={"help": "Endpoints: seconds before a request is retried."})
    max_retries: int = field(default=6, metadata={"help": "Endpoints: retries before a request counts as failed."})
    batch_size: int = field(default=8, metadata={"help": "Local models: prompts per forward pass."})
    max_new_tokens: int = field(default=256, metadata={"help": "Local models: answer budget of a request."})
    chat_template: str | None = field(default=None, metadata={"help": "Local models: chat template or 'chatml'."})
    keep_think: bool = field(default=False, metadata={"help": "Local models: keep the template's think blocks."})
    dtype: str | None = field(default=None, metadata={"help": "Local models: dtype to load in (bfloat16, ...)."})
    device: str | None = field(default=None, metadata={"help": "Local models: cuda, cpu, ... (default: cuda if any)."})
    cache_path: str | None = field(default=None, metadata={"help": "SQLite answer cache."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})

    def __post_init__(self):
        if self.backend is None:
            self.backend = "openai" if self.base_url is not None else "local"
        if self.backend == "local" and self.base_url is not None:
            raise ValueError(f"backend='local' runs the model in-process: drop base_url={self.base_url!r}")


def make_client(config: ClientConfig) -> ChatClient:
    """The chat client `config` describes: `OpenAIChatClient` for an endpoint, `LocalChatClient` for a local model."""
    if config.backend == "openai":
        from rolellm.clients.openai_compatible import OpenAIChatClient

        return OpenAIChatClient(
            config.model,
            base_url=config.base_url,
            max_concurrency=config.max_concurrency,
            requests_per_minute=config.requests_per_minute,
            timeout=config.timeout,
            max_retries=config.max_retries,
            cache_path=config.cache_path,
            progress=config.progress,
        )
    import torch

    from rolellm.clients.local import LocalChatClient

    device = config.device or ("cuda" if torch.cuda.is_available() else None)
    return LocalChatClient(
        config.model,
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        chat_template=config.chat_template,
        keep_think=config.keep_think,
        device=device,
        dtype=config.dtype,
        cache_path=config.cache_path,
        progress=config.progress,
    )


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
