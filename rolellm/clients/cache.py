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
        path (`str` or `os.PathLike`): the database file; it and its folder are made when the first answer is stored
            (reading a cache that does not exist yet writes nothing).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._connection = None
        if self.path.exists():  # a file that is no cache stops the run now; a new one is made by the first answer
            self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            connection = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
            connection.execute("PRAGMA journal_mode=WAL")
            # WAL + NORMAL: a commit survives the process being killed (only an OS crash could lose the last ones)
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_SCHEMA)
            connection.commit()
        except sqlite3.DatabaseError as error:
            raise ValueError(
                f"cache_path={str(self.path)!r} is not a usable SQLite cache ({error}); pass another cache_path "
                "or delete the file"
            ) from error
        self._connection = connection
        return connection

    def _read(self, query: str, parameters=()):
        """The first row of a query, or `None` while no answer was ever stored (no file is made by reading)."""
        with self._lock:
            if self._connection is None and not self.path.exists():
                return None
            return self._connect().execute(query, parameters).fetchone()

    def get(self, key: str) -> tuple[str, dict] | None:
        """The cached `(text, usage)` of `key`, or `None`."""
        row = self._read("SELECT text, usage FROM completions WHERE key = ?", (key,))
        return None if row is None else (row[0], json.loads(row[1]))

    def __contains__(self, key: str) -> bool:
        return self._read("SELECT 1 FROM completions WHERE key = ?", (key,)) is not None

    def put(self, key: str, model: str, text: str, usage: dict) -> None:
        """Store one answer and commit at once."""
        with self._lock:
            self._connect().execute(
                "INSERT OR REPLACE INTO completions (key, model, text, usage, created) VALUES (?, ?, ?, ?, ?)",
                (key, model, text, json.dumps(usage), time.time()),
            )
            self._connection.commit()

    def delete(self, keys: list[str]) -> None:
        """Remove the answers of `keys` (those that are present) and commit."""
        with self._lock:
            if self._connection is None and not self.path.exists():
                return
            self._connect().executemany("DELETE FROM completions WHERE key = ?", [(key,) for key in keys])
            self._connection.commit()

    def __len__(self) -> int:
        row = self._read("SELECT COUNT(*) FROM completions")
        return 0 if row is None else row[0]

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def __repr__(self) -> str:
        return f"ChatCache({str(self.path)!r})"
