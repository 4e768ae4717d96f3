"""A chat with a role, streamed: `ChatSession` keeps the role, its greeting and the history, and the commands on them
(send, regenerate as swipes, browse, edit, continue, undo, save, load); each answer's prompt is fitted to the context
window and streamed by `rolellm.clients.chat_answer` (`fit_to_window`, `stream_answer`).

`rolellm chat` (terminal, stdin and Gradio) is a thin shell over these. The messages sent each turn come from
`build_chat_messages` (the role's system text, the history, a card's lorebook entries and post-history
instructions); a local model's prompt is tokenized by `LocalChatClient.encode_prompt` (`encode_chat`), so text typed
by the user that looks like a control token (`<|im_end|>`) stays plain text.

>>> from rolellm import RoleProfile
>>> from rolellm.testing.server import ChatCompletionsServer
>>> profiles = {"Po": RoleProfile("Po", "en", "A kung fu panda.")}
>>> with ChatCompletionsServer(lambda body: "Skadoosh!") as server:
...     client = OpenAIChatClient("test-model", base_url=server.base_url, progress=False)
...     session = ChatSession(client, profiles, "po", temperature=0.0)
...     "".join(session.send("Who are you?"))
'Skadoosh!'
>>> [(m["role"], m["content"]) for m in session.history]
[('user', 'Who are you?'), ('assistant', 'Skadoosh!')]
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.clients.base import ChatClient
from rolellm.clients.chat_answer import count_prompt_tokens, fit_to_window, model_window, stream_answer
from rolellm.clients.chat_files import (
    make_turn,
    now,
    read_chat,
    set_turn_text,
    show_swipe,
    write_json_chat,
    write_sillytavern_chat,
)
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.roles.card_prompts import USER_NAMES
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import build_chat_messages, role_greetings
from rolellm.roles.resolve import select_roles


@dataclass
class Chat:
    """One conversation with a role: its turns (the role's greeting first, when it has one, with the card's other
    greetings as its swipes) and how many answers have been drawn in it (answer `n` is sampled with `seed + n`, so
    a regenerated answer differs and the same conversation replays the same way).

    Attributes:
        role (`str`): the role, as the profiles spell it.
        turns (`list[dict]`): `{"role", "content", "timestamp"}` turns; an assistant turn may hold `swipes` (every
            answer drawn for it; `content` is `swipes[swipe]`) and `cut: True` (it stopped at the token budget).
        draws (`int`): answers drawn so far.
        dropped (`int`): the oldest turns the last answer's prompt left out to fit the context window.
    """

    role: str
    turns: list[dict] = field(default_factory=list)
    draws: int = 0
    dropped: int = 0


class ChatSession:
    """A multi-turn chat with one role of `profiles`: answers streamed, regenerated as swipes, edited, continued,
    within the model's context window; the chat can be reset, switched to another role, saved and loaded.

    The conversation is `chat` (a `Chat`; `history` is its turns): the role's greeting (a Character Card's
    `first_mes`, its `alternate_greetings` as swipes) as the first assistant turn when it has one, then user and
    assistant turns, each with the time it was made (`timestamp`, ISO 8601 UTC). Every operation takes another
    `Chat` too (`chat=`), which is how the web UI keeps one conversation per browser tab over one session.

    Args:
        client (`LocalChatClient` or `OpenAIChatClient`): who answers (`make_client(ClientConfig(...))`).
        profiles (`Mapping[str, RoleProfile]`): the roles that can be talked to (`load_profiles(...)`).
        role (`str`): the role to start with, found by the rule of `rolellm.roles.lookup`; an unknown role is a
            `ValueError` listing the known ones.
        lang (`str`, *optional*): language of the system text; defaults to each profile's.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction.
        max_new_tokens (`int`, *optional*, defaults to 256): the budget of one answer.
        temperature (`float`, *optional*, defaults to 0.7): 0 decodes greedily.
        top_p (`float`, *optional*, defaults to 1.0): nucleus sampling.
        seed (`int`, *optional*, defaults to 0): the sampling seed; the `n`-th answer drawn in a conversation
            (regenerated ones included) is sampled with `seed + n`.
        card_extras (`bool`, *optional*, defaults to `True`): a card's greeting, example dialogue and post-history
            text (`build_chat_messages`).
        user_name (`str`, *optional*): the user's name: `{{user}}` in a card, and one sentence of the default system
            instruction; by default none (a card says "User").
        context_window (`int`, *optional*): the tokens a prompt and its answer may take together; the oldest turns
            (never the system text or the greeting) are left out of a prompt that would not fit. Defaults to a
            local model's `max_position_embeddings`; an endpoint's is unknown unless given (its prompt length is
            then estimated, `approx_tokens`).
    """

    def __init__(
        self,
        client: ChatClient,
        profiles: dict[str, RoleProfile],
        role: str,
        lang: str | None = None,
        system_template: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.7,
        top_p: float = 1.0,
        seed: int = 0,
        card_extras: bool = True,
        user_name: str | None = None,
        context_window: int | None = None,
    ):
        self.client = client
        self.card_extras = card_extras
        self.profiles = Profiles(profiles)
        self.lang = lang
        self.system_template = system_template
        self.user_name = user_name
        self.sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "seed": seed}
        self.context_window = context_window or model_window(client)
        self.started = now()
        self.chat = Chat(role)
        self.switch_role(role)

    @property
    def role(self) -> str:
        return self.chat.role

    @property
    def profile(self) -> RoleProfile:
        return self.profiles[self.chat.role]

    @property
    def history(self) -> list[dict]:
        return self.chat.turns

    @property
    def greeting(self) -> str | None:
        """The role's opening line, or `None` (and always `None` without `card_extras`: a model trained without
        greetings is not shown one as its own first turn)."""
        return next(iter(self.greetings()), None)

    def greetings(self, role: str | None = None, user_name: str | None = None) -> list[str]:
        """The opening lines of `role` (defaults to the session's): `first_mes`, then the alternate greetings."""
        profile = self.profiles[role or self.role]
        return role_greetings(profile, user_name or self.user_name) if self.card_extras else []

    def resolve_role(self, role: str) -> str:
        """The profiles' spelling of `role`; an unknown one is a `ValueError` listing the roles."""
        [name] = select_roles(self.profiles, [role], where="the profiles")
        return name

    def new_chat(self, role: str | None = None, user_name: str | None = None) -> Chat:
        """A conversation with `role` (defaults to the session's) that opens with its greetings (as swipes)."""
        role = self.resolve_role(role or self.role)
        greetings = self.greetings(role, user_name)
        extra = {"swipes": greetings, "swipe": 0} if len(greetings) > 1 else {}
        return Chat(role, [make_turn("assistant", greetings[0], **extra)] if greetings else [])

    def switch_role(self, role: str) -> None:
        """Talk to `role` from now on, with a fresh history (its greeting only)."""
        draws = self.chat.draws
        self.chat = self.new_chat(role)
        self.chat.draws = draws
        self._saved = _contents(self.chat.turns)

    def reset(self) -> None:
        """Forget the conversation: the history is the greeting again."""
        self.switch_role(self.role)

    @property
    def unsaved(self) -> int:
        """How many turns the conversation holds that were neither saved nor loaded (0 for its opening only)."""
        return 0 if _contents(self.chat.turns) == self._saved else len(self.chat.turns)

    def messages(self, turns: list[dict] | None = None, role: str | None = None, user_name: str | None = None):
        """The messages the model is sent for `turns` (defaults to the history): system text and turns."""
        turns = self.chat.turns if turns is None else turns
        history = [{"role": turn["role"], "content": turn["content"]} for turn in turns]
        return build_chat_messages(
            self.profiles[role or self.role], history, lang=self.lang, system_template=self.system_template,
            card_extras=self.card_extras, user_name=user_name or self.user_name,
        )  # fmt: skip

    def count_tokens(self, messages: list[dict]) -> int:
        """The prompt length of `messages` in tokens: exact for a local model, estimated for an endpoint."""
        return count_prompt_tokens(self.client, messages)

    def fit(self, turns: list[dict], role=None, max_new_tokens=None, user_name=None, context_window=None):
        """The messages for the answer to `turns` within the context window, and how many of the oldest turns they
        leave out (two at a time, a message and its answer; never the system text, the greeting or the turns
        being answered).

        Raises:
            `ContextWindowError`: even with every earlier turn left out, the prompt and the answer do not fit.
        """
        budget = self.sampling["max_new_tokens"] if max_new_tokens is None else max_new_tokens
        window = context_window or self.context_window
        return fit_to_window(
            turns, lambda kept: self.messages(kept, role, user_name), self.count_tokens, budget, window
        )

    def answer(self, turns: list[dict], chat: Chat | None = None, settings: dict | None = None, info=None):
        """Stream the answer of `chat`'s role to `turns` (ending with the user's turn, or with an assistant turn to
        continue it), fitted to the window, sampled with the chat's next seed. `settings` override the session's
        sampling (`max_new_tokens`, `temperature`, `top_p`) and may set `user_name` and `context_window`; `info`
        (a dict) receives `dropped`, `window`, `seed` and `cut` (the answer stopped at the token budget)."""
        chat = chat or self.chat
        settings = {**self.sampling, **(settings or {})}
        user_name, window = settings.pop("user_name", None), settings.pop("context_window", None)
        info = {} if info is None else info
        messages, chat.dropped = self.fit(turns, chat.role, settings["max_new_tokens"], user_name, window)
        seed = settings["seed"] + chat.draws
        chat.draws += 1
        finish = {}
        info.update(dropped=chat.dropped, window=window or self.context_window, seed=seed)
        yield from stream_answer(self.client, messages, **{**settings, "seed": seed}, finish=finish)
        info["cut"] = finish.get("reason") == "length"

    def reply(self, turns: list[dict], role: str | None = None) -> Iterator[str]:
        """Stream the answer of `role` (defaults to the session's) to a conversation kept elsewhere, ending with the
        user's turn; the session's history is left alone (its draw count moves on)."""
        chat = Chat(self.resolve_role(role or self.role), draws=self.chat.draws)
        yield from self.answer(turns, chat)
        self.chat.draws = chat.draws

    def send(self, text: str, chat: Chat | None = None, settings: dict | None = None, info=None) -> Iterator[str]:
        """Add the user's `text` to the conversation and stream the role's answer, piece by piece.

        The answer joins the history when the stream ends; an answer that fails (an endpoint that cannot be reached,
        say), is empty or is stopped raises and leaves the history as it was before `text`.
        """
        chat, info = chat or self.chat, {} if info is None else info
        if not text.strip():
            raise ValueError("an empty message is not sent")
        user = make_turn("user", text)
        answer = yield from _collect(self.answer([*chat.turns, user], chat, settings, info))
        self._check(answer, "the message was not kept")
        chat.turns += [user, make_turn("assistant", answer, **_cut(info))]

    def regenerate(self, chat: Chat | None = None, settings: dict | None = None, info=None) -> Iterator[str]:
        """Stream another answer to the last message, kept as a new swipe of the last answer (the earlier answers
        stay: `browse` goes back to them); a last message without an answer is answered."""
        chat, info = chat or self.chat, {} if info is None else info
        last = _last_user(chat)
        if last is None:
            raise ValueError("there is no message to answer yet (the greeting's swipes are the card's greetings)")
        answer = yield from _collect(self.answer(chat.turns[: last + 1], chat, settings, info))
        self._check(answer, "the earlier answers are kept")
        if last + 1 == len(chat.turns):
            chat.turns.append(make_turn("assistant", answer, **_cut(info)))
            return
        turn = chat.turns[last + 1]
        del chat.turns[last + 2 :]
        swipes, cuts = turn.get("swipes") or [turn["content"]], turn.get("swipe_cuts") or [bool(turn.get("cut"))]
        turn.update(swipes=[*swipes, answer], swipe_cuts=[*cuts, bool(info.get("cut"))], timestamp=now())
        show_swipe(turn, len(swipes))

    def browse(self, step: int, chat: Chat | None = None) -> str | None:
        """Show the previous (`step=-1`) or next (`+1`) swipe of the last answer (the greeting's: the card's other
        greetings); `None`, nothing changed, when there is none that way."""
        chat = chat or self.chat
        if not chat.turns or chat.turns[-1]["role"] != "assistant":
            return None
        turn = chat.turns[-1]
        swipes, index = turn.get("swipes") or [turn["content"]], turn.get("swipe", 0) + step
        if not 0 <= index < len(swipes):
            return None
        show_swipe(turn, index)
        return swipes[index]

    def can_swipe(self, step: int, chat: Chat | None = None) -> bool:
        """Whether `browse(step)` has a swipe to show."""
        chat = chat or self.chat
        if not chat.turns or chat.turns[-1]["role"] != "assistant":
            return False
        turn = chat.turns[-1]
        return 0 <= turn.get("swipe", 0) + step < len(turn.get("swipes") or [turn["content"]])

    def last_message(self, chat: Chat | None = None) -> int | None:
        """The index of your last message in the conversation, or `None` when it holds only its opening."""
        return _last_user(chat or self.chat)

    def edit(self, index: int, text: str, chat: Chat | None = None) -> bool:
        """Replace the text of turn `index` (negative counts from the end). A user message drops the turns after it
        (answer it again with `regenerate`: `True` is returned); an answer is edited in place (its shown swipe).
        """
        chat = chat or self.chat
        if not -len(chat.turns) <= index < len(chat.turns):
            raise ValueError(f"there is no message {index} to edit (the conversation has {len(chat.turns)})")
        if not text.strip():
            raise ValueError("a message cannot be edited to nothing: /undo removes your last message")
        turn = chat.turns[index]
        set_turn_text(turn, text, cut=False)
        if turn["role"] == "user":
            del chat.turns[index % len(chat.turns) + 1 :]
            return True
        return False

    def continue_answer(self, chat: Chat | None = None, settings: dict | None = None, info=None) -> Iterator[str]:
        """Stream the rest of the last answer (the model goes on from where it stopped) and add it to the answer."""
        chat, info = chat or self.chat, {} if info is None else info
        if not chat.turns or chat.turns[-1]["role"] != "assistant":
            raise ValueError("there is no answer to continue")
        turn = chat.turns[-1]
        more = yield from _collect(self.answer(chat.turns, chat, settings, info))
        self._check(more, "the answer is as it was", what="added nothing")
        set_turn_text(turn, turn["content"] + more, cut=bool(info.get("cut")))

    def undo(self, chat: Chat | None = None) -> str:
        """Remove your last message and its answer (never the greeting); returns the message's text."""
        chat = chat or self.chat
        last = _last_user(chat)
        if last is None:
            raise ValueError("there is nothing to undo: the conversation holds only its opening")
        text = chat.turns[last]["content"]
        del chat.turns[last:]
        return text

    def _check(self, answer: str, kept: str, what: str = "gave an empty answer") -> None:
        if not answer.strip():  # nothing to show and nothing a next turn should build on
            raise EmptyAnswer(f"{self.client.model_name} {what}; {kept}")

    def transcript(self, chat: Chat | None = None) -> dict:
        """The conversation as a JSON-ready dict: role, model, system text, messages with timestamps."""
        chat = chat or self.chat
        return {
            "role": chat.role,
            "model": self.client.model_name,
            "base_url": self.client.base_url if isinstance(self.client, OpenAIChatClient) else None,
            "sampling": dict(self.sampling),
            "user_name": self.user_name,
            "started": self.started,
            "saved": now(),
            "system": self.messages(chat.turns, chat.role)[0]["content"],
            "messages": list(chat.turns),
        }

    def save(self, path: str | Path, chat: Chat | None = None) -> Path:
        """Write the conversation to `path` (folders created): SillyTavern's chat JSONL for a `.jsonl` file, else
        `transcript()` as JSON. Returns the path."""
        chat = chat or self.chat
        if Path(path).suffix == ".jsonl":
            path = write_sillytavern_chat(path, chat.role, chat.turns, self.user_name)
        else:
            path = write_json_chat(path, self.transcript(chat))
        if chat is self.chat:
            self._saved = _contents(chat.turns)
        return path

    def read(self, path: str | Path) -> tuple[Chat, dict]:
        """The conversation saved in `path` (`read_chat`: a transcript or a SillyTavern chat) as a `Chat` with its
        role, and what else the file holds (`user_name`, `skipped` system notes)."""
        saved = read_chat(path)
        role = saved["role"] or self.role
        if self.profiles.find(role) is None:
            raise ValueError(f"{path}: the chat is with {role!r}, not one of the roles: {', '.join(self.profiles)}")
        user_name = saved["user_name"] if saved["user_name"] not in (None, *USER_NAMES.values()) else None
        return Chat(self.resolve_role(role), saved["turns"]), {"user_name": user_name, "skipped": saved["skipped"]}

    def load(self, path: str | Path) -> dict:
        """Go on with the conversation saved in `path` (its role and user's name too); returns `read`'s extras."""
        chat, extras = self.read(path)
        chat.draws = self.chat.draws
        self.chat, self._saved = chat, _contents(chat.turns)
        if extras["user_name"]:
            self.user_name = extras["user_name"]
        return extras


def _collect(stream: Iterator[str]):
    """Yield `stream`'s pieces and return their text (`text = yield from _collect(...)`)."""
    pieces = []
    for piece in stream:
        pieces.append(piece)
        yield piece
    return "".join(pieces)


def _last_user(chat: Chat) -> int | None:
    return max((i for i, turn in enumerate(chat.turns) if turn["role"] == "user"), default=None)


def _cut(info: dict) -> dict:
    return {"cut": True} if info.get("cut") else {}


def _contents(turns: list[dict]) -> list[tuple]:
    return [(turn["role"], turn["content"]) for turn in turns]


class EmptyAnswer(RuntimeError):
    """The model's answer was empty (or only whitespace): shown as an error, never added to the history."""
