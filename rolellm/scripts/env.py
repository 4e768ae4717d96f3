"""`rolellm env`: print the versions of rolellm and its stack, for bug reports."""

import argparse
import importlib.metadata
import platform

from rolellm import __version__


PACKAGES = [
    "torch", "transformers", "datasets", "trl", "peft", "accelerate", "evaluate",
    "huggingface-hub", "openai", "bitsandbytes",
]  # fmt: skip


def make_parser(subparsers=None):
    description = "Print the versions of rolellm and the libraries it runs on."
    if subparsers is not None:
        return subparsers.add_parser("env", help=description, description=description)
    return argparse.ArgumentParser(prog="rolellm env", description=description)


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
