"""The one recipe parser of every command built on dataclasses: `--config recipe.yaml` sets the fields, flags
override them, and `dataclasses_from` turns the parsed namespace into the command's dataclasses.

>>> import tempfile
>>> from rolellm.clients.config import ClientConfig
>>> from rolellm.evaluation.benchmark.config import BenchmarkConfig
>>> path = tempfile.mkdtemp() + "/recipe.yaml"
>>> _ = open(path, "w").write("model_name_or_path: rolegpt\\noutput_dir: runs/rolegpt\\n")
>>> parser = recipe_parser_class()([ClientConfig, BenchmarkConfig])
>>> args = parser.parse_args(["--config", path, "--output_dir", "runs/other"])
>>> args.model, args.output_dir
('rolegpt', 'runs/other')
"""

import argparse
import dataclasses
import hashlib
import math
import os
import shutil
import sys
import types
import typing
from dataclasses import fields
from pathlib import Path

import yaml


def read_recipe(path: str, dataclass_types) -> dict:
    """Read a YAML recipe; a key that no dataclass of the command knows is an error naming the file and the key.

    The file is UTF-8 with or without BOM; anything else, invalid YAML, an empty file and a file of only comments
    are errors naming the file (and the line).
    """
    from rolellm.roles.profile import read_text, unique_key_yaml_loader

    try:
        recipe = yaml.load(read_text(path), Loader=unique_key_yaml_loader())
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    if recipe is None:  # only comments: a recipe that sets nothing is a wrong or truncated file
        raise ValueError(f"{path}: the recipe sets no field (only comments)")
    if not isinstance(recipe, dict):
        raise ValueError(f"{path}: a recipe must be a YAML mapping of fields, got {type(recipe).__name__}")
    if "api_key" in recipe:
        raise ValueError(f"{path}: never put an API key in a recipe; set OPENAI_API_KEY")
    flags = [f for cls in dataclass_types for f in fields(cls) if is_flag(f)]
    names = {alias.removeprefix("--"): f.name for f in flags for alias in f.metadata.get("aliases", [])}
    names.update({f.name: f.name for f in flags})
    unknown = sorted(set(recipe) - set(names))
    if unknown:
        raise ValueError(f"{path}: unknown keys {unknown}; this command's fields are {sorted(names)}")
    given = {}
    for key, value in recipe.items():
        if names[key] in given:
            raise ValueError(f"{path}: {key} and {given[names[key]][0]} are the same field: keep one")
        given[names[key]] = (key, value)
    return {name: value for name, (_, value) in given.items()}


def is_flag(field) -> bool:
    """Whether the recipe parser makes a flag of a dataclass field: not when its metadata says `"flag": False` or
    its value is a dataclass (`BenchmarkConfig.client`: the script assembles it from flags of its own)."""
    kinds = typing.get_args(field.type) if isinstance(field.type, types.UnionType) else (field.type,)
    return field.init and field.metadata.get("flag", True) and not any(dataclasses.is_dataclass(k) for k in kinds)


def dataclasses_from(namespace, dataclass_types, **values) -> tuple:
    """One instance of each of `dataclass_types` from a parsed namespace (each takes the fields it declares), with
    `values` for the fields that are no flags (`is_flag`), such as `BenchmarkConfig(client=...)`.

    >>> from argparse import Namespace
    >>> from rolellm.clients.config import ClientConfig
    >>> dataclasses_from(Namespace(model="m", base_url="http://h/v1", other=1), [ClientConfig])[0].backend
    'openai'
    """
    values = {**vars(namespace), **values}
    return tuple(
        cls(**{f.name: values[f.name] for f in fields(cls) if f.init and f.name in values}) for cls in dataclass_types
    )


def make_command_parser(name: str, dataclass_types, description: str, subparsers=None):
    """The parser of `rolellm {name}` over `dataclass_types`, with `--config recipe.yaml`.

    With `subparsers` (made with `parser_class=recipe_parser_class()`, e.g. by `make_command_group`) it is added as
    the sub-command `name`.
    """
    if subparsers is not None:
        parser = subparsers.add_parser(
            name, help=description, description=description, dataclass_types=dataclass_types
        )
    else:
        parser = recipe_parser_class()(dataclass_types, prog=f"rolellm {name}", description=description)
    parser.add_argument("--config", help="YAML recipe of the fields below (flags given here override it).")
    return parser


def make_command_group(name: str, description: str, subparsers=None, dest: str = "action", metavar: str = "<action>"):
    """The parser of `rolellm {name} <action>` and its sub-commands, whose parsers are recipe parsers: add each with
    `make_command_parser(action, dataclass_types, help, actions)`. Returns `(parser, actions)`.

    >>> from dataclasses import dataclass, field
    >>> @dataclass
    ... class StatsArguments:
    ...     data_dir: str = field(default=None, metadata={"help": "A release folder."})
    >>> parser, actions = make_command_group("data", "RoleBench data.")
    >>> _ = make_command_parser("stats", [StatsArguments], "Statistics.", actions)
    >>> args = parser.parse_args(["stats", "--data-dir", "RoleBench"])
    >>> args.action, args.data_dir
    ('stats', 'RoleBench')
    """
    if subparsers is not None:
        parser = subparsers.add_parser(name, help=description, description=description)
    else:
        parser = argparse.ArgumentParser(prog=f"rolellm {name}", description=description)
    actions = parser.add_subparsers(dest=dest, metavar=metavar, required=True, parser_class=recipe_parser_class())
    return parser, actions


def check_recipe_values(path: str, recipe: dict, actions, dict_fields=()) -> dict:
    """Check recipe values as the command line checks flags, and return them as the flags would give them.

    A choice outside the field's choices, a value its type cannot read (`max_new_tokens: lots`, `allow_partial:
    maybe`), a list or mapping for a field of one value, or an empty value (`output_dir:`) for a field that needs
    one is an error naming the file and the field (argparse checks only what it parses itself). A single value for
    a field of several (`roles: Po`) becomes a list of one, and a number for a text field (`revision: 2024`) text.
    A mapping is kept for the fields in `dict_fields` (typed `dict`, e.g. `gradient_checkpointing_kwargs`).
    """
    by_dest = {action.dest: action for action in actions}
    checked = {}
    for key, value in recipe.items():
        action = by_dest.get(key)
        if action is None:
            checked[key] = value
            continue
        if value is None:
            if action.required or action.default is not None:
                raise ValueError(f"{path}: {key} is empty: give it a value or remove the line")
            checked[key] = value
            continue
        if isinstance(value, dict) and key in dict_fields:
            checked[key] = value
            continue
        several = action.nargs in ("+", "*") or isinstance(action.nargs, int)
        if isinstance(value, dict) or (isinstance(value, list) and not several):
            raise ValueError(f"{path}: {key} takes one value, got a {type(value).__name__}: {value!r}")
        values = value if isinstance(value, list) else [value]
        if action.choices is not None:
            wrong = [v for v in values if v not in action.choices and str(v) not in map(str, action.choices)]
            if wrong:
                raise ValueError(f"{path}: {key}: {wrong[0]!r} is not one of {list(action.choices)}")
        if action.type in (int, float):
            for v in values:
                try:
                    ok = not isinstance(v, bool) and action.type(v) == float(v) and math.isfinite(float(v))
                except (TypeError, ValueError, OverflowError):  # int(inf), int("1e400"), ...
                    ok = False
                if not ok:
                    raise ValueError(f"{path}: {key} must be {action.type.__name__}, got {v!r}")
        elif getattr(action.type, "__name__", "") == "string_to_bool":
            for v in values:
                try:
                    ok = isinstance(v, bool) or (isinstance(v, str) and isinstance(action.type(v), bool))
                except (TypeError, ValueError, argparse.ArgumentTypeError):
                    ok = False
                if not ok:
                    raise ValueError(f"{path}: {key} must be true or false, got {v!r}")
        elif action.type is str:
            wrong = [v for v in values if isinstance(v, (bool, list, dict))]
            if wrong:
                raise ValueError(f"{path}: {key} must be text, got {wrong[0]!r}")
            values = [v if isinstance(v, str) else str(v) for v in values]
        checked[key] = values if several else values[0]
    return checked


def require_hub_token(flag: str) -> None:
    """A command that pushes to the Hub (`flag`) stops before any work when no token is set (`hf auth login` or
    `$HF_TOKEN`); the token itself is never printed."""
    from huggingface_hub import get_token

    if not get_token():
        raise ValueError(f"{flag} needs a Hugging Face token: run `hf auth login` or set HF_TOKEN; nothing was done")


def dict_fields(dataclass_types) -> set[str]:
    """The fields typed `dict` (alone or in a union: `gradient_checkpointing_kwargs`), from the classes' annotations
    (`HfArgumentParser` turns such a field's `type` into `str`)."""
    found = set()
    for cls in dataclass_types:
        try:
            hints = {name: str(hint) for name, hint in typing.get_type_hints(cls).items()}
        except Exception:  # noqa: BLE001  (an annotation that cannot be resolved: the fields' own types)
            hints = {f.name: str(f.type) for f in fields(cls)}
        found |= {name for name, hint in hints.items() if "dict" in hint}
    return found


def recipe_parser_class():
    """`HfArgumentParser` that reads `--config recipe.yaml` first (like `trl.TrlParser`, but `parse_args` returns a
    namespace and the recipe is checked by `read_recipe`); flags given on the command line override the recipe.

    Every field is a flag spelled with underscores or dashes (`--max_new_tokens`, `--max-new-tokens`: `HfArgumentParser`
    adds the dashed alias itself); a field with `metadata={"positional": True}` is a positional argument instead
    (`rolellm export CHECKPOINT`), which a recipe may also set.

    Built on call, so that importing a script does not import `transformers`.
    """
    from transformers import HfArgumentParser

    class RecipeParser(HfArgumentParser):
        @staticmethod
        def _parse_dataclass_field(parser, field):
            if not is_flag(field):
                return None
            metadata = dict(field.metadata)
            if not metadata.pop("positional", False):
                HfArgumentParser._parse_dataclass_field(parser, field)
                negative = parser._option_string_actions.get(f"--no_{field.name}")
                if negative is not None and negative.dest == field.name:  # its own words, not the field's
                    negative.help, negative.default = f"Same as --{field.name} false.", argparse.SUPPRESS
                return None
            parser.add_argument(field.name, type=str, **metadata)

        def parse_known_args(self, args=None, namespace=None):
            args = list(sys.argv[1:] if args is None else args)
            if "--config" in args:
                index = args.index("--config")
                if index + 1 >= len(args):
                    self.error("--config needs the path of a YAML file")
                recipe = read_recipe(args[index + 1], self.dataclass_types)
                recipe = check_recipe_values(args[index + 1], recipe, self._actions, dict_fields(self.dataclass_types))
                self.set_defaults(**recipe)
                del args[index : index + 2]
                # fields given in the recipe are no longer required on the command line
                for action in self._actions:
                    if action.dest in self._defaults:
                        action.required = False
            self.check_no_contradiction(args)
            namespace, extras = super().parse_known_args(args, namespace)
            self.check_finite(namespace)
            return namespace, extras

        def check_finite(self, namespace):
            """`--timeout inf` or `--learning_rate nan` on the command line is a usage error (a recipe's values are
            checked by `check_recipe_values`); a field's own default is left as it is."""
            for action in self._actions:
                value = getattr(namespace, action.dest, None)
                if action.type is not float or value is action.default:
                    continue
                if any(
                    isinstance(v, float) and not math.isfinite(v)
                    for v in (value if isinstance(value, list) else [value])
                ):
                    self.error(f"{action.option_strings[0]} {value}: give a finite number")

        def check_no_contradiction(self, args):
            """`--clean` and `--no_clean` on one command line is a usage error, not the last one winning."""
            given = {}
            for arg in args:
                if arg == "--":
                    break
                action = self._option_string_actions.get(arg.split("=", 1)[0])
                if action is not None and action.option_strings[0].startswith("--"):
                    given.setdefault(action.dest, {})[isinstance(action, argparse._StoreFalseAction)] = arg
            for flags in given.values():
                if len(flags) == 2:
                    self.error(f"{flags[False]} and {flags[True]} contradict each other: give one of them")

        def parse_args_into_dataclasses(self, args=None, **kwargs) -> tuple:
            """One instance of each dataclass of the command, from the recipe and the flags."""
            return dataclasses_from(self.parse_args(args), self.dataclass_types)

    return RecipeParser


def help_cache_dir() -> Path:
    """Where the help texts of slow parsers are kept: `help` in rolellm's cache (`rolellm_cache_dir`)."""
    from rolellm.clients.gguf import rolellm_cache_dir

    return rolellm_cache_dir() / "help"


def help_key(name: str, packages=("rolellm", "transformers", "trl", "peft")) -> str:
    """The cache key of a help text: the command, the versions of `packages` (read from their metadata, not their
    source), the time rolellm's own modules last changed (an editable install's edits) and the terminal's width.

    >>> help_key("train-sft").startswith("train-sft-")
    True
    """
    from importlib.metadata import PackageNotFoundError, version

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "none"

    newest = max(path.stat().st_mtime_ns for path in Path(__file__).parents[1].rglob("*.py"))
    parts = [name, *map(installed, packages), str(newest), str(shutil.get_terminal_size().columns)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16].join([f"{name}-", ".txt"])


def cached_help(name: str, make_parser) -> str:
    """The `--help` text of the parser `make_parser()` builds, printed once from the real parser and then from a cache
    file (`help_cache_dir`), so that a command whose parser imports torch (`rolellm train`: every field of
    `transformers.TrainingArguments` and TRL's configs) answers `--help` at once from the second call on. The key
    (`help_key`) changes with the installed versions, rolellm's modules and the terminal's width; a cache that
    cannot be written only costs the next call the time of the real parser.

    >>> import os, tempfile
    >>> os.environ["ROLELLM_CACHE"] = tempfile.mkdtemp()
    >>> first = cached_help("demo", lambda: argparse.ArgumentParser(prog="demo"))
    >>> first == cached_help("demo", None), first.splitlines()[0]
    (True, 'usage: demo [-h]')
    >>> del os.environ["ROLELLM_CACHE"]
    """
    path = help_cache_dir() / help_key(name)
    if path.is_file():
        return path.read_text(encoding="utf-8")
    text = make_parser().format_help()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)  # whole or absent: a concurrent call never reads half a text
    except OSError:
        pass  # a read-only or full disk: the text is printed all the same, and built again next time
    return text
