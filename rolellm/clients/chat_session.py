"""A chat with a role, streamed: `ChatSession` keeps the role, its greeting and the history; `stream_answer` streams
one answer from a local `transformers` model or an OpenAI-compatible endpoint.

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

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from rolellm.clients.base import ChatClient, EndpointError
from rolellm.clients.openai_compatible import OpenAIChatClient, server_message
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import build_chat_messages, role_greeting
from rolellm.roles.resolve import select_roles


class ChatSession:
    """A multi-turn chat with one role of `profiles`, which can be reset, switched to another role and saved.

    The history holds the conversation without the system text: the role's greeting (a Character Card's
    `first_mes`) as the first assistant turn when it has one, then user and assistant turns, each with the time it
    was made (`timestamp`, ISO 8601 UTC).

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
        seed (`int`, *optional*, defaults to 0): the sampling seed; answer `i` of a conversation is sampled with
            `seed + i`, so the same conversation replays the same way.
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
    ):
        self.client = client
        self.card_extras = card_extras
        self.profiles = Profiles(profiles)
        self.lang = lang
        self.system_template = system_template
        self.sampling = {"max_new_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p, "seed": seed}
        self.started = _now()
        self.switch_role(role)

    @property
    def greeting(self) -> str | None:
        """The role's opening line, or `None` (and always `None` without `card_extras`: a model trained without
        greetings is not shown one as its own first turn)."""
        return role_greeting(self.profile) if self.card_extras else None

    def switch_role(self, role: str) -> None:
        """Talk to `role` from now on, with a fresh history (its greeting only)."""
        [(self.role, self.profile)] = select_roles(self.profiles, [role], where="the profiles").items()
        self.reset()

    def reset(self) -> None:
        """Forget the conversation: the history is the greeting again."""
        greeting = self.greeting
        self.history = [_turn("assistant", greeting)] if greeting else []

    def messages(self) -> list[dict]:
        """The messages the model is sent for the next answer (system text and history, no timestamps)."""
        history = [{"role": turn["role"], "content": turn["content"]} for turn in self.history]
        return build_chat_messages(
            self.profile, history, lang=self.lang, system_template=self.system_template, card_extras=self.card_extras
        )

    def send(self, text: str) -> Iterator[str]:
        """Add the user's `text` to the history and stream the role's answer, piece by piece.

        The answer joins the history when the stream ends; an answer that fails (an endpoint that cannot be reached,
        say) or is stopped raises and leaves the history as it was before `text`.
        """
        pieces = []
        for piece in self.reply([*self.history, _turn("user", text)]):
            pieces.append(piece)
            yield piece
        if not "".join(pieces).strip():  # nothing to show and nothing a next turn should build on
            raise EmptyAnswer(f"{self.client.model_name} gave an empty answer; the message was not kept")
        self.history += [_turn("user", text), _turn("assistant", "".join(pieces))]

    def reply(self, turns: list[dict], role: str | None = None) -> Iterator[str]:
        """Stream the answer of `role` (defaults to the session's) to a conversation kept elsewhere (a UI's), ending
        with the user's turn; the session's own history is left alone.

        Answer `i` of a conversation is sampled with seed `seed + i`.
        """
        profile = self.profile if role is None else self.profiles[role]
        turns = [{"role": turn["role"], "content": turn["content"]} for turn in turns]
        messages = build_chat_messages(
            profile, turns, lang=self.lang, system_template=self.system_template, card_extras=self.card_extras
        )
        answered = sum(turn["role"] == "assistant" for turn in turns[1:])  # a greeting does not count
        yield from stream_answer(self.client, messages, **{**self.sampling, "seed": self.sampling["seed"] + answered})

    def transcript(self) -> dict:
        """The conversation as a JSON-ready dict: role, model, system text, messages with timestamps."""
        return {
            "role": self.role,
            "model": self.client.model_name,
            "base_url": self.client.base_url if isinstance(self.client, OpenAIChatClient) else None,
            "sampling": dict(self.sampling),
            "started": self.started,
            "saved": _now(),
            "system": self.messages()[0]["content"],
            "messages": list(self.history),
        }

    def save(self, path: str | Path) -> Path:
        """Write `transcript()` as JSON to `path` (folders created) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.transcript(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


class EmptyAnswer(RuntimeError):
    """The model's answer was empty (or only whitespace): shown as an error, never added to the history."""


def stream_answer(
    client: ChatClient,
    messages: list[dict],
    max_new_tokens: int = 256,
    temperature: float = 0.7,
    top_p: float = 1.0,
    seed: int = 0,
) -> Iterator[str]:
    """Stream the answer to `messages` as text pieces: from a local model (`TextIteratorStreamer`, generation in a
    thread) or an endpoint (`stream=True`). Nothing is cached: a chat is not a benchmark run.

    Raises:
        `EndpointError`: the endpoint cannot be reached or refuses the request (the message says which and why).
    """
    if isinstance(client, OpenAIChatClient):
        yield from _stream_endpoint(client, messages, max_new_tokens, temperature, top_p, seed)
    else:
        yield from _stream_local(client, messages, max_new_tokens, temperature, top_p, seed)


def _stream_endpoint(client, messages, max_new_tokens, temperature, top_p, seed) -> Iterator[str]:
    import openai

    api = openai.OpenAI(api_key=client._api_key, base_url=client.base_url, timeout=client.timeout, max_retries=2)
    try:
        raw = api.chat.completions.with_raw_response.create(
            model=client.model, messages=messages, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
            seed=seed, stream=True,
        )  # fmt: skip
        if "text/event-stream" not in raw.headers.get("content-type", ""):
            # a server that ignores `stream=True` answers once, as a plain completion
            yield _plain_answer(client, raw.http_response)
            return
        for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content
    except openai.APIConnectionError as error:
        raise EndpointError(f"{client.base_url} cannot be reached ({error.__cause__ or error})") from error
    except openai.APIStatusError as error:  # in the words of the batch client's errors, the server's message
        what = "refused the request for" if error.status_code < 500 else "answered with an error to"
        raise EndpointError(
            f"{client.base_url} {what} model {client.model!r}: HTTP {error.status_code} {server_message(error)}"
        ) from error


def _plain_answer(client, response) -> str:
    response.read()  # the body of a response opened as a stream
    try:
        return response.json()["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise EndpointError(
            f"{client.base_url} answered a streamed request with neither events nor a completion: "
            f"{response.text[:200]!r}"
        ) from error


def _stream_local(client, messages, max_new_tokens, temperature, top_p, seed) -> Iterator[str]:
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

    model, tokenizer = client.model, client.tokenizer
    input_ids = torch.tensor([client.encode_prompt(messages)], device=model.device)
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    stop = threading.Event()  # set when the reader stops early (Ctrl-C, a closed UI stream): generation stops too

    class StopWhenAsked(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool, device=input_ids.device)

    sampling = (
        {"do_sample": True, "temperature": temperature, "top_p": top_p} if temperature > 0 else {"do_sample": False}
    )
    failure = []
    devices = [model.device.index or 0] if model.device.type != "cpu" else []

    def generate():
        try:  # seeded in a private random stream: the caller's global RNG state is left as it was
            with torch.no_grad(), torch.random.fork_rng(devices=devices, device_type=model.device.type):
                torch.manual_seed(seed)
                model.generate(
                    input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                    eos_token_id=client.stop_ids, pad_token_id=client.pad_id, streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([StopWhenAsked()]), **sampling,
                )  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - handed to the reading thread, which raises it
            failure.append(error)
            streamer.end()

    thread = threading.Thread(target=generate, daemon=True)
    thread.start()
    try:
        yield from streamer
    finally:
        stop.set()
        thread.join()
    if failure:
        raise failure[0]


def _turn(role: str, content: str) -> dict:
    return {"role": role, "content": content, "timestamp": _now()}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
