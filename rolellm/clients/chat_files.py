"""A chat on disk: the transcript `rolellm chat` writes (`/save chat.json`), and SillyTavern's chat JSONL both ways.

A turn of a conversation is `{"role": "user" | "assistant", "content", "timestamp"}`; an assistant turn may hold
its `swipes` (every answer drawn for it, `content` being `swipes[swipe]`) and `cut: true` when the answer stopped
at the token budget (`swipe_cuts`: that of each swipe). SillyTavern's chat file (`chats/<character>/<date>.jsonl`) is one JSON object a line: a header
(`user_name`, `character_name`, `create_date`, `chat_metadata`), then one message a line (`name`, `is_user`,
`is_system`, `send_date`, `mes`, `swipes`, `swipe_id`, `extra`).

>>> import tempfile
>>> turns = [{"role": "assistant", "content": "Hi!", "swipes": ["Hi!", "Yo!"], "swipe": 0},
...          {"role": "user", "content": "Who are you?"}]
>>> path = Path(tempfile.mkdtemp()) / "po.jsonl"
>>> _ = write_sillytavern_chat(path, "Po", turns, user_name="Tigress")
>>> chat = read_chat(path)
>>> chat["role"], chat["user_name"], [(t["role"], t["content"], t.get("swipes")) for t in chat["turns"]]
('Po', 'Tigress', [('assistant', 'Hi!', ['Hi!', 'Yo!']), ('user', 'Who are you?', None)])
"""

import json
from datetime import datetime, timezone
from pathlib import Path


def now() -> str:
    """The time now, ISO 8601 in UTC to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def make_turn(role: str, content: str, **extra) -> dict:
    """A turn of a conversation, stamped with the time it was made."""
    return {"role": role, "content": content, "timestamp": now(), **extra}


def show_swipe(turn: dict, index: int) -> None:
    """Make swipe `index` an assistant turn's text (and its cut mark)."""
    turn.update(swipe=index, content=turn["swipes"][index])
    turn.pop("cut", None)
    if (turn.get("swipe_cuts") or [False] * len(turn["swipes"]))[index]:
        turn["cut"] = True


def set_turn_text(turn: dict, text: str, cut: bool) -> None:
    """Replace a turn's text (that of its shown swipe) and its cut mark.

    >>> turn = {"role": "assistant", "content": "Hi!", "swipes": ["Hi!", "Yo!"], "swipe": 1}
    >>> set_turn_text(turn, "Yo, dude!", cut=True)
    >>> turn["content"], turn["swipes"], turn["cut"]
    ('Yo, dude!', ['Hi!', 'Yo, dude!'], True)
    >>> show_swipe(turn, 0)
    >>> turn["content"], "cut" in turn
    ('Hi!', False)
    """
    turn["content"] = text
    turn.pop("cut", None)
    if cut:
        turn["cut"] = True
    if "swipes" in turn:
        turn["swipes"][turn.get("swipe", 0)] = text
    if "swipe_cuts" in turn:
        turn["swipe_cuts"][turn.get("swipe", 0)] = cut


def write_json_chat(path: str | Path, transcript: dict) -> Path:
    """Write a transcript (`ChatSession.transcript()`) as indented JSON to `path` (folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(transcript, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def write_sillytavern_chat(path: str | Path, role: str, turns: list[dict], user_name: str | None = None) -> Path:
    """Write `turns` as SillyTavern's chat JSONL (a header line, then one message a line) to `path`."""
    user = user_name or "User"
    lines = [{"user_name": user, "character_name": role, "create_date": now(), "chat_metadata": {}}]
    for turn in turns:
        is_user = turn["role"] == "user"
        message = {
            "name": user if is_user else role, "is_user": is_user, "is_system": False,
            "send_date": turn.get("timestamp") or now(), "mes": turn["content"], "extra": {},
        }  # fmt: skip
        if not is_user:
            swipes = turn.get("swipes") or [turn["content"]]
            message.update(swipes=swipes, swipe_id=turn.get("swipe", 0), swipe_info=[{} for _ in swipes])
        lines.append(message)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    return path


def read_chat(path: str | Path) -> dict:
    """A saved chat: `{"role", "user_name", "turns", "skipped"}`, from a transcript `/save` wrote (`.json`) or a
    SillyTavern chat (JSONL). `role` is `None` when the file does not say; `skipped` counts SillyTavern's system
    notes (`is_system`), which are not part of the conversation.

    Raises:
        `ValueError`: the file is neither, or a line or field is not what it should be (the message names them).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "messages" in whole:
        return _read_transcript(path, whole)
    return _read_sillytavern(path, text)


def _read_transcript(path: Path, transcript: dict) -> dict:
    messages = transcript["messages"]
    if not isinstance(messages, list):
        raise ValueError(f"{path}: 'messages' must be a list of {{'role', 'content'}} objects")
    turns = []
    for number, message in enumerate(messages, 1):
        where = f"{path}: message {number}"
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise ValueError(f"{where}: 'role' must be 'user' or 'assistant'")
        if not isinstance(message.get("content"), str):
            raise ValueError(f"{where}: 'content' must be a string")
        swipes = message.get("swipes")
        if swipes is not None and not (isinstance(swipes, list) and all(isinstance(s, str) for s in swipes)):
            raise ValueError(f"{where}: 'swipes' must be a list of strings")
        turns.append({key: message[key] for key in ("role", "content", "timestamp", "swipes", "swipe", "swipe_cuts", "cut")
                      if key in message})  # fmt: skip
    return {"role": transcript.get("role"), "user_name": transcript.get("user_name"), "turns": turns, "skipped": 0}


def _read_sillytavern(path: Path, text: str) -> dict:
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    records = []
    for number, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path}:{number}: not JSON ({error.msg}); a chat is rolellm's transcript (.json) or SillyTavern's "
                "chat JSONL (a header line, then one message a line)"
            ) from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: a line of a SillyTavern chat must be a JSON object")
        records.append((number, record))
    if not records or "mes" in records[0][1]:
        raise ValueError(f"{path}: no SillyTavern header line (user_name, character_name) before the messages")
    header = records[0][1]
    turns, skipped = [], 0
    for number, record in records[1:]:
        if not isinstance(record.get("mes"), str):
            raise ValueError(f"{path}:{number}: 'mes' (the message text) must be a string")
        if record.get("is_system"):
            skipped += 1
            continue
        turn = {"role": "user" if record.get("is_user") else "assistant", "content": record["mes"]}
        if isinstance(record.get("send_date"), str):
            turn["timestamp"] = record["send_date"]
        swipes = record.get("swipes")
        if turn["role"] == "assistant" and isinstance(swipes, list) and len(swipes) > 1:
            if not all(isinstance(swipe, str) for swipe in swipes):
                raise ValueError(f"{path}:{number}: 'swipes' must be a list of strings")
            index = record.get("swipe_id", 0)
            index = index if isinstance(index, int) and 0 <= index < len(swipes) else 0
            turn.update(swipes=swipes, swipe=index, content=swipes[index])
        turns.append(turn)
    role = header.get("character_name")
    role = role if isinstance(role, str) and role.strip() else None
    user = header.get("user_name")
    return {"role": role, "user_name": user if isinstance(user, str) else None, "turns": turns, "skipped": skipped}
