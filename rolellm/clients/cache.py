"""An on-disk cache of chat completions: SQLite, keyed by a content hash of the request.

Every answer is written (and committed) the moment it arrives, so re-running a job costs nothing and a crash loses
nothing that was answered. The key covers the model, the messages, the sampling parameters, the sample index and
the attempt number (a re-ask after an unparseable answer is a new attempt); it never covers credentials, and the
cache stores no credentials.

>>> import tempfile, os
>>> cache = ChatCache(os.path.join(tempfile.mkdtemp(), "cache.sqlite"))
>>> key = request_key("gpt-4", [{"role": "user", "content": "Hi"}], {"temperature": 0.7}, sample_index=0)
>>> cache.get(key) is None
True
>>> cache.put(key, "gpt-4", "Hello!", {"prompt_tokens": 3, "completion_tokens": 2})
>>> cache.get(key)
('Hello!', {'prompt_tokens': 3, 'completion_tokens': 2})
>>> len(cache)
1
"""

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path


_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    usage TEXT NOT NULL,
    created REAL NOT NULL
)
"""


def request_key(model: str, messages: list[dict], params: dict, sample_index: int = 0, attempt: int = 0) -> str:
    """The SHA-256 content hash identifying one completion.

    Args:
        model (`str`): the model name (or path) that answers.
        messages (`list[dict]`): the chat messages, `{"role": ..., "content": ...}`.
        params (`dict`): the sampling parameters (`temperature`, `max_tokens`, ...).
        sample_index (`int`, *optional*, defaults to 0): which of several samples of the same prompt.
        attempt (`int`, *optional*, defaults to 0): which re-ask of the same sample (after an unparseable answer).

    Returns:
        `str`: 64 hexadecimal characters; equal requests give equal keys whatever the order of dictionary keys.
    """
    payload = {"model": model, "messages": messages, "params": params, "sample_index": sample_index}
    if attempt:
        payload["attempt"] = attempt  # attempt 0 keeps the key of a request that was never re-asked
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ChatCache:
    """A SQLite table of completions by `request_key`, safe to share between threads of one process.

    The database runs in WAL mode and every `put` commits, so a process killed at any moment leaves every
    answer it had received on disk.

    Args:
        path (`str` or `os.PathLike`): the database file; its folder is created when missing.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            self._connection.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit survives the process being killed (only an OS crash could lose the last ones)
            self._connection.execute("PRAGMA synchronous=NORMAL")
            self._connection.execute(_SCHEMA)
            self._connection.commit()
        except sqlite3.DatabaseError as error:
            raise ValueError(
                f"cache_path={str(self.path)!r} is not a usable SQLite cache ({error}); pass another cache_path "
                "or delete the file"
            ) from error

    def get(self, key: str) -> tuple[str, dict] | None:
        """The cached `(text, usage)` of `key`, or `None`."""
        with self._lock:
            row = self._connection.execute("SELECT text, usage FROM completions WHERE key = ?", (key,)).fetchone()
        return None if row is None else (row[0], json.loads(row[1]))

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._connection.execute("SELECT 1 FROM completions WHERE key = ?", (key,)).fetchone() is not None

    def put(self, key: str, model: str, text: str, usage: dict) -> None:
        """Store one answer and commit at once."""
        with self._lock:
            self._connection.execute(
                "INSERT OR REPLACE INTO completions (key, model, text, usage, created) VALUES (?, ?, ?, ?, ?)",
                (key, model, text, json.dumps(usage), time.time()),
            )
            self._connection.commit()

    def delete(self, keys: list[str]) -> None:
        """Remove the answers of `keys` (those that are present) and commit."""
        with self._lock:
            self._connection.executemany("DELETE FROM completions WHERE key = ?", [(key,) for key in keys])
            self._connection.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._connection.execute("SELECT COUNT(*) FROM completions").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def __repr__(self) -> str:
        return f"ChatCache({str(self.path)!r})"
