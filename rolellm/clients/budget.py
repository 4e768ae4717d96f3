"""Budgets of a chat run: token estimates before it starts, and a requests/tokens-per-minute limiter while it runs."""

import asyncio
import time
from collections import deque
from dataclasses import dataclass


@dataclass
class RunEstimate:
    """What a run will cost before it starts: requests to send and estimated tokens (cache hits excluded)."""

    requests: int
    cached: int
    prompt_tokens: int
    completion_tokens: int

    def __str__(self) -> str:
        return (
            f"{self.requests} requests ({self.cached} already cached, {self.requests - self.cached} to send), "
            f"about {self.prompt_tokens} prompt + at most {self.completion_tokens} completion tokens"
        )


def estimate_tokens(text: str) -> int:
    """A tokenizer-free token estimate: one per CJK character, one per four other characters.

    >>> estimate_tokens("Arr, matey!"), estimate_tokens("俺老孙来也")
    (3, 5)
    """
    cjk = sum(1 for ch in text if "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef")
    return cjk + -(-(len(text) - cjk) // 4)


def parse_retry_after(headers) -> float | None:
    """Seconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date), or `None`.

    >>> parse_retry_after({"retry-after": "2"}), parse_retry_after({"retry-after-ms": "250"}), parse_retry_after({})
    (2.0, 0.25, None)
    """
    from email.utils import parsedate_to_datetime

    if headers.get("retry-after-ms"):
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


class RateLimiter:
    """A sliding one-minute window on requests and tokens; `await acquire(tokens)` before each request.

    Args:
        requests_per_minute (`int`, *optional*): at most this many requests start in any 60 seconds.
        tokens_per_minute (`int`, *optional*): at most this many (estimated) tokens in any 60 seconds; a single
            request larger than the limit still goes, alone.
        window (`float`, *optional*, defaults to 60.0): the window in seconds.
    """

    def __init__(self, requests_per_minute=None, tokens_per_minute=None, window: float = 60.0):
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.window = window
        self._sent: deque[tuple[float, int]] = deque()
        self._tokens = 0
        self._lock = asyncio.Lock()

    async def acquire(self, tokens: int = 0) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                while self._sent and now - self._sent[0][0] >= self.window:
                    self._tokens -= self._sent.popleft()[1]
                fits_requests = self.requests_per_minute is None or len(self._sent) < self.requests_per_minute
                fits_tokens = self.tokens_per_minute is None or self._tokens + tokens <= self.tokens_per_minute
                if fits_requests and (fits_tokens or not self._sent):
                    self._sent.append((now, tokens))
                    self._tokens += tokens
                    return
                await asyncio.sleep(self.window - (now - self._sent[0][0]) + 1e-3)
