"""Chat clients with one interface, `generate(requests, parse=None) -> list[ChatResult]`: `OpenAIChatClient` for
any OpenAI-compatible endpoint, `LocalChatClient` for a `transformers` model in-process. Both share an on-disk cache
(a re-run costs nothing, a crash loses nothing), usage totals and a progress bar.

`LocalChatClient` loads torch and transformers on first use, so importing this package stays light.
"""

import importlib

from rolellm.clients.base import ChatClient, ChatRequest, ChatResult, EndpointError, Usage
from rolellm.clients.budget import RateLimiter, RunEstimate, estimate_tokens
from rolellm.clients.cache import ChatCache, request_key
from rolellm.clients.config import ClientConfig, make_client
from rolellm.clients.openai_compatible import OpenAIChatClient


__all__ = [
    "ChatCache",
    "ChatClient",
    "ChatRequest",
    "ChatResult",
    "ClientConfig",
    "EndpointError",
    "LocalChatClient",
    "OpenAIChatClient",
    "RateLimiter",
    "RunEstimate",
    "Usage",
    "estimate_tokens",
    "make_client",
    "request_key",
]


def __getattr__(name):
    if name == "LocalChatClient":
        return importlib.import_module("rolellm.clients.local").LocalChatClient
    raise AttributeError(f"module 'rolellm.clients' has no attribute {name!r}")
