"""`rolellm env`: print the versions of rolellm and its stack, for bug reports."""

import importlib.metadata
import platform
from dataclasses import dataclass

from rolellm import __version__
from rolellm.scripts.recipe import make_command_parser


PACKAGES = [
    "torch", "transformers", "datasets", "trl", "peft", "accelerate", "evaluate",
    "huggingface-hub", "openai", "bitsandbytes",
]  # fmt: skip


@dataclass
class EnvArguments:
    """`rolellm env` has no fields: it prints what is installed."""


def make_parser(subparsers=None):
    description = "Print the versions of rolellm and the libraries it runs on."
    return make_command_parser("env", [EnvArguments], description, subparsers)


def collect_versions():
    """Return `{name: version}` for rolellm, Python and each stack package (`"not installed"` when absent).

    >>> collect_versions()["rolellm"] == __version__
    True
    """
    versions = {"rolellm": __version__, "python": platform.python_version(), "platform": platform.platform()}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def main(args=None):
    for name, version in collect_versions().items():
        print(f"- {name}: {version}")


if __name__ == "__main__":
    main(make_parser().parse_args())
