"""The `rolellm` command line: a dispatcher over one script per command.

Each command lives in `rolellm/scripts/<name>.py` with `make_parser(subparsers=None)` and `main(args)`, the
shape of `trl/scripts/*.py`. Scripts are imported only when their command runs, so `rolellm --help` is fast.
"""

import argparse
import importlib
import sys

from rolellm import __version__


# command -> (module, one-line help). Add a command by adding its script and a line here.
COMMANDS = {
    "data": ("rolellm.scripts.data", "RoleBench statistics (paper Table 1), leakage checks, export/push to the Hub."),
    "generate": (
        "rolellm.scripts.generate",
        "Generate data with an LLM: RoleGPT, Context-Instruct, profile descriptions.",
    ),
    "train": ("rolellm.scripts.train", "Train a role-playing model with RoCIT on RoleBench (LoRA, QLoRA, full)."),
    "evaluate": ("rolellm.scripts.evaluate", "Answer a RoleBench config with a model, score RAW/CUS/SPE, report."),
    "push-metric": ("rolellm.scripts.push_metric", "Push the RoleBench ROUGE-L evaluate module as a Hub Space."),
    "env": ("rolellm.scripts.env", "Print the versions of rolellm and the libraries it runs on."),
}


def make_parser():
    parser = argparse.ArgumentParser(
        prog="rolellm",
        description="RoleLLM on the Hugging Face stack: build role data, train with RoCIT, evaluate like the paper.",
    )
    parser.add_argument("--version", action="version", version=f"rolellm {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>", title="commands")
    for name, (_, help_text) in COMMANDS.items():
        subparsers.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = make_parser()
    if not argv or argv[0] not in COMMANDS:
        args = parser.parse_args(argv)  # handles --help, --version and unknown commands
        parser.print_help()
        return 0 if args.command is None and not argv else 2
    script = importlib.import_module(COMMANDS[argv[0]][0])
    script_parser = script.make_parser()
    script_parser.prog = f"rolellm {argv[0]}"
    return script.main(script_parser.parse_args(argv[1:])) or 0


if __name__ == "__main__":
    sys.exit(main())
