"""`rolellm chat`: talk to a role, in the terminal, from a script (stdin) or in a Gradio UI.

```bash
# a trained checkpoint (its profiles are read from the folder), or any transformers model with --profiles
rolellm chat --model runs/rolellama --role "Jack Sparrow"
rolellm chat --model Qwen/Qwen2.5-0.5B-Instruct --profiles my_card.png
# any OpenAI-compatible server (vLLM, TGI, llama.cpp, Ollama, OpenAI)
rolellm chat --base_url http://localhost:8000/v1 --model rolellama --profiles ../shared/data/rolebench --role 李白
# one message per line in, one answer per line out
printf 'Who are you?\\nWhere is the rum?\\n' | rolellm chat --model runs/rolellama --role "Jack Sparrow" --temperature 0
# a web UI with a role picker on 127.0.0.1
rolellm chat --model runs/rolellama --ui --port 7860
```

In the terminal, answers stream as they are generated; `/help` lists the commands (`/swipe`, `/edit`, `/continue`,
`/undo`, `/reset`, `/role NAME`, `/save FILE`, `/load FILE`, `/system`, `/quit`); lines pasted at once are one
message, and Ctrl-C at the prompt asks first when the conversation is not saved. With stdin not a terminal, every line is a user message (or a command) and every answer is
printed on one line of stdout, its newlines written as `\\n`, carriage returns as `\\r`, backslashes as `\\\\` and the
other line breaks of `str.splitlines` as `\\uXXXX` (`unescape_line` gives the answer back); nothing else is written to
stdout. An empty line is answered by an empty
line without asking the model; a message that starts with `/` is written `//...`. Exit codes: 0 at the end of the
input, 2 a usage error (unknown role or command, missing model folder, an empty stdin: no message to answer, a busy
`--port`), 3 the endpoint cannot be reached. The oldest turns are left out of a prompt past `--context_window`.
"""

import contextlib
import itertools
import re
import select
import socket
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from rolellm.clients.config import ClientConfig, check_minimums
from rolellm.clients.inference_settings import recorded_system_template, resolve_card_extras
from rolellm.roles.prompts import system_template_text
from rolellm.roles.resolve import PROFILES_HELP, profiles_field
from rolellm.scripts.cli import setup_logging
from rolellm.scripts.recipe import dataclasses_from, make_command_parser


COMMANDS_HELP = """commands:
  /swipe        another answer to your last message (the earlier ones are kept; on the greeting: the card's
                other greetings); /swipe left and /swipe right go back and forth between them
  /edit TEXT    replace your last message with TEXT and answer it again
  /continue     let the role go on with its last answer
  /undo         remove your last message and its answer
  /reset        forget the conversation (the role's greeting stays)
  /role NAME    talk to another role (the conversation starts again); /role alone lists the roles
  /save FILE    write the chat: a .jsonl FILE is SillyTavern's chat, any other a JSON transcript (role, model,
                system text, messages with timestamps)
  /load FILE    go on with a saved chat (a transcript /save wrote, or SillyTavern's .jsonl)
  /system       the system text the role gets for its next answer
  /help         this list
  /quit         leave (Ctrl-D too; Ctrl-C at the prompt asks first when the chat is not saved)
a message starting with / is written //...; lines pasted at once are one message"""
_UNESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
_ESCAPE = re.compile(r"\\(\\|n|r|u[0-9a-f]{4})")
_LINE_BREAKS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


@dataclass
class ChatArguments:
    """Who answers, as whom, and how.

    The role profiles come from `--profiles` (repeatable; any source `rolellm.load_profiles` reads), with
    `--roles` and `--lang`; without `--profiles`, from the model folder.

    The model is `ClientConfig` (`--model`, `--base_url`, `--chat_template`, `--dtype`, `--device`, `--timeout`,
    `--max_new_tokens`, ...): a model folder or Hub id runs in-process with transformers, an endpoint's model name
    needs `--base_url` (key: `OPENAI_API_KEY`, or the variable `--api_key_env` names; none needed locally).

    > Parameters that control the conversation

    Args:
        role (`str`, *optional*): the role to talk to; defaults to the only role of the profiles.
        profiles (`list[str]`, *optional*): role profile sources (`--profiles`, repeatable); defaults to the
            profiles saved in the model folder.
        roles (`list[str]`, *optional*), lang (`str`, *optional*): only these roles, in this language.
        system_template (`str`, *optional*): a Jinja file replacing the paper's system instruction.
        temperature (`float`, *optional*, defaults to 0.7), top_p (`float`, *optional*, defaults to 1.0), seed
            (`int`, *optional*, defaults to 0): sampling; `--temperature 0` decodes greedily (the answer budget is
            `--max_new_tokens`). The `n`-th answer drawn (a regenerated one too) is sampled with `seed + n`.
        user_name (`str`, *optional*): your name: what `{{user}}` in a card stands for, and one sentence of the
            default system instruction; by default none ("User" in a card).
        context_window (`int`, *optional*): the tokens a prompt and its answer may take; the oldest turns are left
            out beyond it (never the system text or the greeting). Defaults to a local model's
            `max_position_embeddings`; give an endpoint's (its max model length) to have the same there.

    > Parameters that control the UI

        ui (`bool`, *optional*, defaults to `False`): serve a Gradio chat with a role picker instead.
        port (`int`, *optional*): the UI's port on 127.0.0.1; defaults to a free one (printed).
    """

    role: str | None = field(default=None, metadata={"help": "The role to talk to (default: the only one)."})
    system_template: str | None = field(
        default=None, metadata={"help": "Jinja file (or Jinja source) replacing the system text."}
    )
    profiles: list[str] | None = profiles_field(help=f"{PROFILES_HELP} Default: the model folder's own profiles.")
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles of the profiles."})
    lang: Literal["en", "zh"] | None = field(default=None, metadata={"help": "The profiles' language."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature; 0 decodes greedily."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling."})
    seed: int = field(default=0, metadata={"help": "Sampling seed (answer n is sampled with seed + n)."})
    user_name: str | None = field(default=None, metadata={"help": "Your name ({{user}} in a card)."})
    context_window: int | None = field(
        default=None,
        metadata={"help": "Prompt + answer tokens; older turns are dropped beyond it (default: a local model's)."},
    )
    ui: bool = field(default=False, metadata={"help": "Serve a Gradio chat on 127.0.0.1 instead."})
    port: int | None = field(default=None, metadata={"help": "The UI's port (default: a free one, printed)."})

    def __post_init__(self):
        check_minimums(self, temperature=0, top_p=0.001, context_window=1, port=1)
        if self.top_p > 1:
            raise ValueError(f"top_p={self.top_p} must be at most 1")


def make_parser(subparsers=None):
    description = "Talk to a role: terminal chat with streaming, one answer per line on stdin, or a Gradio UI."
    return make_command_parser("chat", [ClientConfig, ChatArguments], description, subparsers)


def load_client(config: ClientConfig):
    """The chat client of `config` (no progress bars): an endpoint, or the model loaded in-process."""
    from rolellm.clients.config import make_client

    if config.backend == "openai":
        return make_client(replace(config, progress=False))
    path = Path(config.model).expanduser()  # a missing folder is named by `make_client`, before anything loads
    try:
        return make_client(replace(config, model=str(path) if path.exists() else config.model, progress=False))
    except FileNotFoundError:  # a local path that is not there: `make_client` names it
        raise
    except OSError as error:
        first = str(error).strip().splitlines()[0]
        raise ValueError(
            f"--model {config.model}: not a model folder, and not loadable as a Hub id ({first})"
        ) from error  # the Hub's answer under it decides the exit code (`cli.hub_error`)


def escape_line(text: str) -> str:
    r"""One answer as one line: `\` -> `\\`, newline -> `\n`, carriage return -> `\r`, and the other characters
    `str.splitlines` breaks on (`\x0b`, `\x0c`, `\x1c`-`\x1e`, `\x85`, `\u2028`, `\u2029`) -> `\uXXXX`.

    >>> print(escape_line("Arr!\nA path: C:\\rum"))
    Arr!\nA path: C:\\rum
    >>> text = "a\\nb\r\n\u2028c"
    >>> len(escape_line(text).splitlines()), unescape_line(escape_line(text)) == text
    (1, True)
    """
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return _LINE_BREAKS.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def unescape_line(line: str) -> str:
    """The answer `escape_line` wrote on `line`."""
    return _ESCAPE.sub(lambda match: _UNESCAPES.get(match.group(1)) or chr(int(match.group(1)[1:], 16)), line)


class Speaker:
    """How answers are shown: streamed into a terminal (`stream=True`, notes on `out` too), or one escaped line on
    `out` per answer for a script (notes on `notes`, stderr)."""

    def __init__(self, session, out, notes, stream: bool):
        self.session, self.out, self.notes, self.stream = session, out, notes, stream
        self.noted = 0  # the dropped turns last reported

    def answer(self, pieces, info: dict, before: str = "") -> None:
        """Show an answer as it streams (`before`: the text it continues), then what to know about it."""
        if self.stream:
            print(f"{self.session.role}: {before}", end="", file=self.out, flush=True)
            for piece in pieces:
                print(piece, end="", file=self.out, flush=True)
            print(" [cut at the token budget: /continue goes on]" if info.get("cut") else "", file=self.out)
        else:
            text = before + "".join(pieces)
            print(escape_line(text), file=self.out, flush=True)
            if info.get("cut"):
                print(f"({self.session.role}'s answer is cut at the token budget: /continue goes on)", file=self.notes)
        if info.get("dropped", 0) != self.noted:
            self.noted = info["dropped"]
            print(window_note(self.session, self.noted), file=self.notes)

    def show(self, text: str, position: str = "") -> None:
        """Show an answer already made (a swipe browsed to)."""
        if self.stream:
            print(f"{self.session.role}: {text}{position}", file=self.out)
        else:
            print(escape_line(text), file=self.out, flush=True)


def window_note(session, dropped: int) -> str:
    """The one line saying how many of the oldest turns the prompt leaves out for the context window."""
    if not dropped:
        return "(the whole conversation fits the context window again)"
    return (
        f"(the {dropped} oldest turns are not sent: the conversation is past the {session.context_window}-token "
        "context window; the system text and the greeting always are)"
    )


def swipe_position(turn: dict) -> str:
    swipes = turn.get("swipes") or []
    return f"  [{turn.get('swipe', 0) + 1}/{len(swipes)}]" if len(swipes) > 1 else ""


def run_command(session, line: str, out, speaker: Speaker | None = None) -> bool:
    """Carry out a `/command` line, reporting to `out` and showing answers with `speaker`; `False` for `/quit`.
    A bad command is a `ValueError`."""
    speaker = speaker or Speaker(session, out, out, stream=True)
    name, _, argument = line[1:].strip().partition(" ")
    argument = argument.strip()
    info = {}
    if name in ("quit", "exit"):
        return False
    if name == "help":
        print(COMMANDS_HELP, file=out)
    elif name == "reset":
        session.reset()
        print(f"(conversation with {session.role} reset)", file=out)
        show_greeting(session, out)
    elif name == "role" and not argument:
        print("roles: " + ", ".join(session.profiles), file=out)
    elif name == "role":
        session.switch_role(argument)
        print(f"(now talking to {session.role})", file=out)
        show_greeting(session, out)
    elif name == "save" and argument:
        print(f"(chat written to {session.save(argument)})", file=out)
    elif name == "load" and argument:
        extras = session.load(argument)
        skipped = f"; {extras['skipped']} system notes left out" if extras["skipped"] else ""
        print(f"(loaded {len(session.history)} messages with {session.role} from {argument}{skipped})", file=out)
        for turn in session.history[-2:]:
            who = session.role if turn["role"] == "assistant" else session.user_name or "you"
            print(f"{who}: {turn['content']}", file=out)
    elif name in ("save", "load", "edit") and not argument:
        raise ValueError(f"/{name} needs {'a file' if name != 'edit' else 'the new text'}: /{name} {_EXAMPLE[name]}")
    elif name == "swipe" and argument in ("left", "right"):
        step = -1 if argument == "left" else 1
        text = session.browse(step)
        if text is not None:
            speaker.show(text, swipe_position(session.history[-1]))
        elif step == 1 and session.last_message() is not None:
            speaker.answer(session.regenerate(info=info), info)  # past the last swipe: a new one, as SillyTavern
        else:
            raise ValueError(f"no answer further {argument}: /swipe makes another")
    elif name == "swipe" and not argument:
        if session.last_message() is not None:
            speaker.answer(session.regenerate(info=info), info)
        else:  # only the greeting: the card's greetings, round and round
            turn = session.history[0] if session.history else {}
            if len(turn.get("swipes") or []) < 2:
                raise ValueError("there is no message to answer again, and the greeting has no other version")
            text = session.browse(1) if session.can_swipe(1) else session.browse(-turn["swipe"])
            speaker.show(text, swipe_position(turn))
    elif name == "edit":
        last = session.last_message()
        if last is None:
            raise ValueError("there is no message of yours to edit yet")
        session.edit(last, argument)
        speaker.answer(session.regenerate(info=info), info)
    elif name == "continue":
        before = session.history[-1]["content"] if session.history else ""
        speaker.answer(session.continue_answer(info=info), info, before=before)
    elif name == "undo":
        print(f"(removed your message {session.undo()!r} and its answer)", file=out)
    elif name == "system":
        print(session.messages()[0]["content"], file=out)
    else:
        raise ValueError(f"unknown command {line.split()[0]!r}; {COMMANDS_HELP.splitlines()[0][:-1]}: /help")
    return True


_EXAMPLE = {"save": "chat.json", "load": "chat.json", "edit": "What do you eat?"}


def show_greeting(session, out) -> None:
    if session.greeting:
        print(f"{session.role}: {session.greeting}", file=out)


def chat_lines(session, lines, out=None, err=None) -> None:
    """Answer one message per line of `lines` with one line on `out` (stdout); commands report on `err` (stderr),
    and the answers of `/swipe`, `/edit` and `/continue` are lines of `out` too."""
    out, err = out or sys.stdout, err or sys.stderr
    speaker = Speaker(session, out, err, stream=False)
    show_greeting(session, err)
    for line in lines:
        line = line.rstrip("\r\n")
        if line.startswith("/") and not line.startswith("//"):
            if not run_command(session, line, err, speaker):
                return
            continue
        text = line[1:] if line.startswith("//") else line
        if not text.strip():
            print("", file=out, flush=True)
            continue
        info = {}
        speaker.answer(session.send(text, info=info), info)


def read_inputs(prompt: str = "you> ") -> list[str]:
    """What was typed at the prompt: the lines of a paste (already waiting when the first is read) are one message;
    lines of commands (the first a `/command`) are taken one by one."""
    lines = [input(prompt)]
    while select.select([sys.stdin], [], [], 0.05)[0]:
        try:
            lines.append(input(""))
        except EOFError:
            break
    if lines[0].startswith("/") and not lines[0].startswith("//"):
        return lines
    return ["\n".join(lines)]


def chat_terminal(session) -> None:
    """The interactive chat: streamed answers, `/commands`, Ctrl-C stops an answer (at the prompt it asks first when
    the chat is not saved), Ctrl-D leaves."""
    from rolellm.clients.base import EndpointError
    from rolellm.clients.chat_session import EmptyAnswer

    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    print(f"Talking to {session.role} ({session.client.model_name}); /help for commands, /quit to leave.")
    show_greeting(session, sys.stdout)
    speaker = Speaker(session, sys.stdout, sys.stdout, stream=True)
    warned, waiting = False, []
    while True:
        try:
            line = waiting.pop(0) if waiting else None
            if line is None:
                line, *waiting = read_inputs()
        except EOFError:
            print()
            return
        except KeyboardInterrupt:
            if session.unsaved and not warned:
                print("\n(the conversation is not saved: /save FILE keeps it; Ctrl-C again or /quit leaves)")
                warned = True
                continue
            print()
            return
        warned = False
        try:
            if line.startswith("/") and not line.startswith("//") and "\n" not in line:
                if not run_command(session, line, sys.stdout, speaker):
                    return
                continue
            if not line.strip():
                continue
            info = {}
            speaker.answer(session.send(line[1:] if line.startswith("//") else line, info=info), info)
        except KeyboardInterrupt:
            print(" [stopped; not kept in the conversation]")
        except (ValueError, EndpointError, EmptyAnswer) as error:
            print(f"error: {error}")


def check_port(port: int) -> None:
    """A `ValueError` naming `port` when something already listens on it at 127.0.0.1."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise ValueError(
                f"--port {port}: the port is in use on 127.0.0.1 ({error.strerror}); pick another, or leave --port "
                "out for a free one"
            ) from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    from rolellm.clients.chat_session import ChatSession
    from rolellm.roles.resolve import profiles_for, select_roles

    setup_logging()
    client, config = dataclasses_from(args, [ClientConfig, ChatArguments])
    model_dir = client.model if client.runs_weights else None  # a local checkpoint holds its profiles
    if not config.profiles and (model_dir is None or not Path(model_dir).is_dir()):
        raise ValueError(f"--model {client.model} is not a folder holding role profiles: pass --profiles SRC")
    profiles = profiles_for(config.profiles, model_dir=model_dir, lang=config.lang, roles=config.roles)
    if not profiles:
        raise ValueError(f"the model folder {client.model} holds no role profiles: pass --profiles SRC")
    if config.role is None and len(profiles) > 1 and not config.ui:
        raise ValueError(f"--role is needed: the profiles hold {len(profiles)} roles: {', '.join(profiles)}")
    role = config.role or next(iter(profiles))
    select_roles(profiles, [role], where="the profiles")  # an unknown role fails before the model is loaded
    if config.ui and config.port:
        check_port(config.port)  # a busy port fails before the model is loaded too
    lines = None
    if not (config.ui or sys.stdin.isatty()):  # a script reads stdout and stderr: no loading bars
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        if client.backend == "llamacpp":  # a missing GGUF file is named first (llama.cpp reads the file itself)
            from rolellm.clients.gguf import find_gguf_file

            find_gguf_file(client.model, "--model")
        elif client.runs_weights:  # a missing model folder is named first, as when a message was read
            from rolellm.clients.loading import check_model_source

            check_model_source(client.model, "--model")
        first = sys.stdin.readline()  # before the model is loaded: an empty input has nothing to answer
        if not first:
            raise ValueError(
                "no message was read: stdin is empty; give one message per line (printf 'Hi\\n' | rolellm chat ...) "
                "or run it in a terminal"
            )
        lines = itertools.chain([first], sys.stdin)
    # the conversation the model was trained on, unless the user asks for another (then one line says so)
    template = system_template_text(config.system_template) or recorded_system_template(client)
    session = ChatSession(
        load_client(client), profiles, role, lang=args.lang, system_template=template,
        max_new_tokens=client.max_new_tokens, temperature=config.temperature, top_p=config.top_p, seed=config.seed,
        card_extras=resolve_card_extras(client), user_name=config.user_name, context_window=config.context_window,
    )  # fmt: skip
    if config.ui:
        from rolellm.scripts.chat_ui import build_chat_ui

        app = build_chat_ui(session)
        port = config.port or free_port()
        try:
            app.launch(server_name="127.0.0.1", server_port=port, quiet=True, prevent_thread_lock=True)
        except OSError:  # taken while the model loaded
            check_port(port)
            raise
        print(f"rolellm chat: serving {session.client.model_name} on {app.local_url} (Ctrl-C stops)", flush=True)
        app.block_thread()
    elif sys.stdin.isatty():
        chat_terminal(session)
    else:
        chat_lines(session, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
