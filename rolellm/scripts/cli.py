"""The `rolellm` command line: a dispatcher over one script per command.

Each command lives in `rolellm/scripts/<name>.py` with `make_parser(subparsers=None)` and `main(args)`, the
shape of `trl/scripts/*.py`. Scripts are imported only when their command runs, so `rolellm --help` is fast.
"""

import argparse
import errno
import gc
import importlib
import importlib.abc
import logging
import os
import sys
from urllib.parse import urlsplit

from rolellm import __version__
from rolellm.scripts.exit_codes import EXIT_BUG, EXIT_FAILED, EXIT_OK, EXIT_USAGE


# command -> (module, one-line help). Add a command by adding its script and a line here.
COMMANDS = {
    "data": ("rolellm.scripts.data", "RoleBench statistics (paper Table 1), leakage checks, export/push to the Hub."),
    "generate": (
        "rolellm.scripts.generate",
        "Generate data with an LLM: RoleGPT, Context-Instruct, profile descriptions, preference pairs.",
    ),
    "train": (
        "rolellm.scripts.train",
        "Train a role-playing model: RoCIT on RoleBench, then DPO/KTO/GRPO (--stage; LoRA, QLoRA, full).",
    ),
    "export": ("rolellm.scripts.export", "Export a checkpoint: merge a LoRA/QLoRA adapter into a full model, push."),
    "evaluate": ("rolellm.scripts.evaluate", "Answer a RoleBench config with a model, score RAW/CUS/SPE, report."),
    "push-metric": ("rolellm.scripts.push_metric", "Push the RoleBench ROUGE-L evaluate module as a Hub Space."),
    "dialogue": ("rolellm.scripts.dialogue", "Multi-turn evaluation: a simulated user talks with the role model."),
    "coser": ("rolellm.scripts.coser", "CoSER's given-circumstance acting evaluation: simulate, judge, rescore."),
    "judge": ("rolellm.scripts.judge", "Judge tools: agreement of a judge's scores with human labels."),
    "template": (
        "rolellm.scripts.template",
        "Check a model's chat template: exact masks, system text, injection safety.",
    ),
    "chat": ("rolellm.scripts.chat", "Talk to a role: terminal chat, one answer per line on stdin, or a Gradio UI."),
    "env": ("rolellm.scripts.env", "Print the versions of rolellm and the libraries it runs on."),
}


def _not_a_library_notice(record: logging.LogRecord) -> bool:
    return "gemm_4bit_forward" not in str(record.msg)


def quiet_library_notices() -> None:
    """Keep notices that read like errors but change nothing off a command's output: bitsandbytes' "Failed to load
    CPU gemm_4bit_forward ... pip install kernels" on import (4-bit layers then run its own CPU code). Added once,
    however many commands one process runs."""
    logging.getLogger("bitsandbytes.backends.cpu.ops").addFilter(_not_a_library_notice)


# the libraries a command may import that build hundreds of thousands of objects when imported
HEAVY_LIBRARIES = frozenset({"torch", "transformers", "peft", "trl", "datasets", "accelerate", "bitsandbytes"})


class HeavyImportFinder(importlib.abc.MetaPathFinder):
    """Imports each of `names`, and each of their modules imported later (`transformers` imports most of its own on
    first use), with what they import, with the garbage collector off, then freezes what they built (`gc.freeze`): a
    full collection during those imports walks all they built so far, 7 to 10 times in a command that trains or loads
    a model (1 to 2 s of CPU). It finds no module itself: the finders after it do, and the module is the same."""

    def __init__(self, names=HEAVY_LIBRARIES):
        self.names = frozenset(names)
        self.depth = 0

    def find_spec(self, name, path=None, target=None):
        if self.depth or name.partition(".")[0] not in self.names:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self or not hasattr(finder, "find_spec") else finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            del loader.exec_module  # the loader's own method again
            collecting = gc.isenabled()
            gc.disable()
            self.depth += 1
            try:
                run(module)
            finally:
                self.depth -= 1
                if collecting:
                    gc.freeze()
                    gc.enable()

        loader.exec_module = exec_module
        return spec


def lighten_imports() -> None:
    """Start a command without the garbage collector's walks over the heavy libraries it imports: a
    `HeavyImportFinder` first on `sys.meta_path`, once per process (by `main`, and by `rolellm train`'s parser for
    `examples/train_rolellama.py` and `torchrun`)."""
    if not any(isinstance(finder, HeavyImportFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, HeavyImportFinder())


def setup_logging(level: int = logging.INFO) -> None:
    """The logging of every command: `LEVEL name: message` lines on stderr (what a run will send, resumptions,
    failures, settings that override a checkpoint's), without the HTTP clients' line per request."""
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=level)
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def make_parser():
    parser = argparse.ArgumentParser(
        prog="rolellm",
        description="RoleLLM on the Hugging Face stack: build role data, train with RoCIT, evaluate like the paper.",
    )
    parser.add_argument("--version", action="version", version=f"rolellm {__version__}")
    parser.add_argument("--debug", action="store_true", help="Show the traceback of an error (or ROLELLM_DEBUG=1).")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    for name, (_, help_text) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv=None):
    """Run one command; returns its exit code (`rolellm.scripts.exit_codes`).

    A mistake in the input (a flag, a file, a recipe value) or a run that could not be done is reported in a few
    lines naming the command and the cause, without a traceback; `--debug` anywhere on the line (or
    `ROLELLM_DEBUG=1`) shows it.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("ROLELLM_DEBUG", "") not in ("", "0")
    argv = [arg for arg in argv if arg != "--debug"]
    parser = make_parser()
    if not argv or argv[0] not in COMMANDS:
        args = parser.parse_args(argv)  # handles --help, --version and unknown commands
        parser.print_help()
        return 0 if args.command is None and not argv else EXIT_USAGE
    quiet_library_notices()
    lighten_imports()
    script = importlib.import_module(COMMANDS[argv[0]][0])
    script_parser = script.make_parser()
    script_parser.prog = f"rolellm {argv[0]}"
    try:
        return script.main(script_parser.parse_args(argv[1:])) or EXIT_OK
    except KeyboardInterrupt:
        print(
            f"rolellm {argv[0]}: interrupted; what was answered is in the cache, run again to go on", file=sys.stderr
        )
        return 130
    except Exception as error:  # noqa: BLE001  (the user gets the cause in a few lines; --debug shows the rest)
        if debug:
            raise
        code, message = describe_error(error)
        print(f"rolellm {argv[0]}: {message}", file=sys.stderr)
        if code == EXIT_BUG:
            print("This is a bug in rolellm: run again with --debug and report the traceback.", file=sys.stderr)
        return code


def describe_error(error: BaseException) -> tuple[int, str]:
    """The exit code of an error and its message in at most five lines.

    >>> describe_error(ValueError("--roles ['Shifu'] not found"))
    (2, "--roles ['Shifu'] not found")
    """
    from rolellm.clients.base import EndpointError, error_chain
    from rolellm.clients.engines import EngineUnavailable

    wrapped = (e for e in error_chain(error) if type(e).__name__ != "DatasetGenerationError" or e.__cause__ is None)
    error = next(wrapped, error)  # `datasets` wraps the builder's own errors
    user_os_error = isinstance(error, _USER_OS_ERRORS) or (isinstance(error, OSError) and error.errno == errno.ELOOP)
    if user_os_error and error.filename is not None and error.strerror:  # the system's words
        return EXIT_USAGE, os_error_message(error)
    lines = str(error).strip().splitlines() or [type(error).__name__]
    message = "\n".join(lines[:5]) + (f"\n... ({len(lines) - 5} more lines)" if len(lines) > 5 else "")
    if isinstance(error, EndpointError) or type(error).__name__ in (
        "NothingGenerated",
        "NothingEvaluated",
        "EmptyAnswer",
        "ModelNotAvailable",  # a Hub id neither cached nor downloadable: nothing could be done
    ):
        return EXIT_FAILED, message
    if isinstance(error, EngineUnavailable):  # `--backend vllm` or `ray` without the engine: install the extra
        return EXIT_USAGE, message
    hub = hub_error(error)
    if hub is not None:
        return hub[0], message if hub[1] is None else hub[1]
    if isinstance(error, (ValueError, LookupError, FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return EXIT_USAGE, message
    if isinstance(error, PermissionError) or type(error).__name__ == "YAMLError" or "yaml" in type(error).__module__:
        return EXIT_USAGE, message
    if type(error).__name__ == "PackageNotFoundError":  # a package the run needs is not installed (`require_version`)
        return EXIT_USAGE, f"a package is missing: {message}"
    return EXIT_BUG, f"unexpected {type(error).__name__}: {message}"


def hub_error(error: BaseException) -> tuple[int, str | None] | None:
    """The exit code (and a message, or None to keep the error's own) of an error of the Hugging Face Hub or of a
    model id loaded from it, or None for any other error: the Hub unreachable is 3 (nothing could be done), a
    repository or file that is not there, or a token refused, is 2 (the id or the login is wrong).

    >>> hub_error(OSError("We couldn't connect to 'https://huggingface.co' to load the files"))[0]
    3
    """
    name, module = type(error).__name__, type(error).__module__
    connect = name in ("ConnectError", "ConnectTimeout", "ConnectionError", "OfflineModeIsEnabled")
    if connect and module.split(".")[0].rstrip("0123456789") in (
        "httpx",
        "httpcore",
        "requests",
        "huggingface_hub",
        "urllib3",
    ):
        return EXIT_FAILED, f"cannot reach the Hugging Face Hub ({name}: {error}); check the network, or the cache"
    if _hub_http_error(error):
        response = getattr(error, "response", None)
        status, url = getattr(response, "status_code", None), getattr(response, "url", None)
        on = f" on {urlsplit(str(url)).path}" if url is not None else ""  # the repository, never a token
        if status in (401, 403):
            return EXIT_USAGE, f"the Hub refused the request ({status}{on}): log in (`hf auth login`) or set HF_TOKEN"
        if status == 404:  # in one line: the Hub's own text is five, and its first says only "404 Client Error."
            return (
                EXIT_USAGE,
                f"the Hub has no such repository or file (404{on}): check the id, and that the token may see it",
            )
        if status is not None and status >= 500:
            return (
                EXIT_FAILED,
                f"the Hub answered with an error ({status}{on}): try again later",
            )
        return EXIT_USAGE if status == 409 else EXIT_FAILED, None
    from rolellm.clients.base import error_chain

    for cause in list(error_chain(error))[1:]:  # an error that wraps the Hub's answer (transformers' OSError, ...)
        status = getattr(getattr(cause, "response", None), "status_code", None)
        if _hub_http_error(cause) and status is not None:  # a refused token in the Hub's words, else the error's
            return hub_error(cause) if status in (401, 403) else (EXIT_USAGE if status < 500 else EXIT_FAILED, None)
    if type(error) is OSError and error.errno is None:  # transformers' words for a model id it cannot load
        text = str(error)
        if "couldn't connect to" in text:
            return EXIT_FAILED, None
        if "huggingface.co" in text or "valid model identifier" in text or "does not appear to have" in text:
            return EXIT_USAGE, None
    return None


def _hub_http_error(error: BaseException) -> bool:
    """Whether `error` is an HTTP error of `huggingface_hub` (its `response` holds the status)."""
    module = type(error).__module__
    return module.startswith("huggingface_hub") and "HTTPError" in "".join(c.__name__ for c in type(error).__mro__)


# errors of the file system that come from a path the user gave: a missing file, a folder given for a file or the
# other way round, a file where a folder is to be made (an --output_dir), a file that cannot be read
_USER_OS_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, FileExistsError, PermissionError)


def os_error_message(error: OSError) -> str:
    """An error of the file system in words naming the path: `[Errno 17] File exists: 'out'` from making the folder
    `out` where a file is reads `out exists and is a file, not a folder`.

    >>> os_error_message(IsADirectoryError(21, "Is a directory", "runs"))
    'runs is a folder, not a file'
    """
    path = error.filename
    if isinstance(error, FileExistsError) and os.path.isfile(path):
        return f"{path} exists and is a file, not a folder"
    if isinstance(error, IsADirectoryError):
        return f"{path} is a folder, not a file"
    if isinstance(error, NotADirectoryError):
        return f"{path}: a part of this path is a file, not a folder"
    if isinstance(error, FileNotFoundError):
        return f"{path}: no such file or folder"
    if isinstance(error, PermissionError):
        return f"{path}: permission denied (cannot read or write it)"
    if error.errno == errno.ELOOP:
        return f"{path} is a link that leads nowhere (a loop of links)"
    return f"{path}: {error.strerror}"  # a file where a folder is to be made, and the path is no file


if __name__ == "__main__":
    sys.exit(main())
