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

In the terminal, answers stream as they are generated; `/help` lists the commands (`/reset`, `/role NAME`,
`/save FILE`, `/quit`). With stdin not a terminal, every line is a user message (or a command) and every answer is
printed on one line of stdout, its newlines written as `\\n`, carriage returns as `\\r`, backslashes as `\\\\` and the
other line breaks of `str.splitlines` as `\\uXXXX` (`unescape_line` gives the answer back); nothing else is written to
stdout. An empty line is answered by an empty
line without asking the model; a message that starts with `/` is written `//...`. Exit codes: 0 at the end of the
input, 2 a usage error (unknown role or command, missing model folder, an empty stdin: no message to answer), 3 the
endpoint cannot be reached.
"""

import contextlib
import itertools
import re
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
  /reset        forget the conversation (the role's greeting stays)
  /role NAME    talk to another role (the conversation starts again); /role alone lists the roles
  /save FILE    write the transcript as JSON (role, model, system text, messages with timestamps)
  /help         this list
  /quit         leave (Ctrl-D too)
a message starting with / is written //..."""
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
            `--max_new_tokens`).

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
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    ui: bool = field(default=False, metadata={"help": "Serve a Gradio chat on 127.0.0.1 instead."})
    port: int | None = field(default=None, metadata={"help": "The UI's port (default: a free one, printed)."})

    def __post_init__(self):
        check_minimums(self, temperature=0, top_p=0.001)
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


def run_command(session, line: str, out) -> bool:
    """Carry out a `/command` line, reporting to `out`; `False` for `/quit`. A bad command is a `ValueError`."""
    name, _, argument = line[1:].strip().partition(" ")
    argument = argument.strip()
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
        print(f"(transcript written to {session.save(argument)})", file=out)
    elif name == "save":
        raise ValueError("/save needs a file: /save chat.json")
    else:
        raise ValueError(f"unknown command {line.split()[0]!r}; {COMMANDS_HELP.splitlines()[0][:-1]}: /help")
    return True


def show_greeting(session, out) -> None:
    if session.greeting:
        print(f"{session.role}: {session.greeting}", file=out)


def chat_lines(session, lines, out=None, err=None) -> None:
    """Answer one message per line of `lines` with one line on `out` (stdout); commands report on `err` (stderr)."""
    out, err = out or sys.stdout, err or sys.stderr
    show_greeting(session, err)
    for line in lines:
        line = line.rstrip("\r\n")
        if line.startswith("/") and not line.startswith("//"):
            if not run_command(session, line, err):
                return
            continue
        text = line[1:] if line.startswith("//") else line
        answer = "".join(session.send(text)) if text.strip() else ""
        print(escape_line(answer), file=out, flush=True)


def chat_terminal(session) -> None:
    """The interactive chat: streamed answers, `/commands`, Ctrl-C stops an answer, Ctrl-D leaves."""
    from rolellm.clients.base import EndpointError
    from rolellm.clients.chat_session import EmptyAnswer

    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    print(f"Talking to {session.role} ({session.client.model_name}); /help for commands, /quit to leave.")
    show_greeting(session, sys.stdout)
    while True:
        try:
            line = input("you> ")
        except (EOFError, KeyboardInterrupt):
            print()
            return
        try:
            if line.startswith("/") and not line.startswith("//"):
                if not run_command(session, line, sys.stdout):
                    return
                continue
            if not line.strip():
                continue
            print(f"{session.role}: ", end="", flush=True)
            for piece in session.send(line[1:] if line.startswith("//") else line):
                print(piece, end="", flush=True)
            print()
        except KeyboardInterrupt:
            print(" [stopped; not kept in the conversation]")
        except (ValueError, EndpointError, EmptyAnswer) as error:
            print(f"error: {error}")


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
    lines = None
    if not (config.ui or sys.stdin.isatty()):  # a script reads stdout and stderr: no loading bars
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        if client.runs_weights:  # a missing model folder is named first, as when a message was read
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
        card_extras=resolve_card_extras(client),
    )  # fmt: skip
    if config.ui:
        from rolellm.scripts.chat_ui import build_chat_ui

        app = build_chat_ui(session)
        app.launch(
            server_name="127.0.0.1", server_port=config.port or free_port(), quiet=True, prevent_thread_lock=True
        )
        print(f"rolellm chat: serving {session.client.model_name} on {app.local_url} (Ctrl-C stops)", flush=True)
        app.block_thread()
    elif sys.stdin.isatty():
        chat_terminal(session)
    else:
        chat_lines(session, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
