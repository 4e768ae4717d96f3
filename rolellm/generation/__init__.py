"""Data generation: chat clients (OpenAI-compatible endpoints and local `transformers` models), RoleGPT and
Context-Instruct.

The clients share one interface, `generate(requests, parse=None) -> list[ChatResult]`, an on-disk cache and usage
totals; see `rolellm.generation.client`.
"""

from rolellm.generation.cache import ChatCache, request_key
from rolellm.generation.client import (
    ChatClient,
    ChatRequest,
    ChatResult,
    OpenAIChatClient,
    RateLimiter,
    RunEstimate,
    Usage,
    estimate_tokens,
)
from rolellm.generation.local import LocalChatClient
