"""The interface every evaluation follows: a config holding its `ClientConfig`s (`EvaluationConfig`), a runner
`run_<name>(config)` returning a typed result (`EvaluationResult`), and a report writer `write_<name>_report(folder)`
that writes the report of an output folder again; `EVALUATIONS` names them (`Evaluation`).

The benchmark (`BenchmarkConfig`, `run_benchmark`), the multi-turn evaluation (`DialogueConfig`, `run_dialogue`) and
CoSER (`CoserConfig`, `run_coser`) follow it, and so can one of a user's own (`docs/development.md`, "Adding a
benchmark"). What they share is written here once: where each client caches its answers (`set_default_caches`),
whether a run that failed in part is accepted (`EvaluationConfig.accepts`), and how a result names what failed
(`EvaluationResult.describe_failures`). The exit code of a result is the commands' business
(`rolellm.scripts.exit_codes.evaluation_exit_code`).

>>> from dataclasses import dataclass
>>> from rolellm.clients.config import ClientConfig
>>> @dataclass
... class EchoConfig(EvaluationConfig):
...     output_dir: str
...     client: ClientConfig
...     judge: ClientConfig | None = None
...     allow_partial: bool = False
...     CACHE_FILES = {"judge": "judge_cache.sqlite"}
...
...     def __post_init__(self):
...         self.set_default_caches()
>>> config = EchoConfig("runs/echo", ClientConfig("m"), judge=ClientConfig("j"))
>>> config.client.cache_path, config.judge.cache_path
('runs/echo/cache.sqlite', 'runs/echo/judge_cache.sqlite')
>>> result = EvaluationResult(output_dir="runs/echo", failed={"answers": 2, "verdicts": 0})
>>> result.describe_failures(), config.accepts(result)
('2 answers failed', False)
"""

import importlib
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field, fields
from pathlib import Path
from typing import ClassVar

from rolellm.clients.config import ClientConfig, with_default_cache


DEFAULT_CACHE = "cache.sqlite"  # in `output_dir`: the cache of every client `CACHE_FILES` gives no file of its own


class EvaluationConfig:
    """The base of an evaluation's config (a dataclass): what every evaluation holds, and the rules they share.

    A subclass declares, besides its own fields, these ones with the help texts of its command (their order is its
    own: the fields of a base dataclass would all come first):

    Args:
        output_dir (`str`): where the run writes its files and its report.
        client (`ClientConfig`): the evaluated model. Other clients (a judge, a user simulator, a list of judges) are
            fields of type `ClientConfig`, `ClientConfig | None` or `list[ClientConfig]`.
        allow_partial (`bool`): accept a run where some requests failed (`accepts`).

    Each client answers from a cache in `output_dir` unless it names its own `cache_path` (`set_default_caches`,
    called by the subclass's `__post_init__`): `CACHE_FILES` maps a client field to its file (relative to
    `output_dir`); the others share `cache.sqlite`, whose keys hold the model's name.
    """

    output_dir: str
    client: ClientConfig
    allow_partial: bool
    CACHE_FILES: ClassVar[Mapping[str, str]] = {}

    def client_configs(self) -> dict[str, ClientConfig]:
        """Every `ClientConfig` the config holds, by field name (one of a list as `name[i]`), unset ones left out."""
        found = {}
        for each in fields(self):
            value = getattr(self, each.name)
            if isinstance(value, ClientConfig):
                found[each.name] = value
            elif isinstance(value, list):
                found.update({f"{each.name}[{i}]": c for i, c in enumerate(value) if isinstance(c, ClientConfig)})
        return found

    def set_default_caches(self) -> None:
        """Point each client without a `cache_path` of its own at its cache file in `output_dir` (`CACHE_FILES`, else
        `cache.sqlite`), so a run started again asks nothing twice."""
        for each in fields(self):
            value = getattr(self, each.name)
            path = os.path.join(self.output_dir, self.CACHE_FILES.get(each.name, DEFAULT_CACHE))
            if isinstance(value, ClientConfig):
                setattr(self, each.name, with_default_cache(value, path))
            elif isinstance(value, list) and any(isinstance(c, ClientConfig) for c in value):
                setattr(self, each.name, [with_default_cache(c, path) for c in value])

    def accepts(self, result: "EvaluationResult") -> bool:
        """Whether `result` counts as done: nothing failed, or `allow_partial` accepts what did."""
        return not result.failed_count or self.allow_partial


@dataclass
class EvaluationResult:
    """The base of what an evaluation's runner returns; each evaluation adds its own fields (its scores).

    Args:
        output_dir (`str`): where the run wrote its files.
        report (`dict[str, Path]`, *optional*): the report's files by name (the report writer's answer); `None` when
            no report was written.
        error (`str`, *optional*): why nothing was evaluated (then no scores and no report were written: what was
            done is kept for a run started again); `None` when something was.
        failed (`dict[str, int]`, *optional*): what failed, counted by kind (`{"generations": 2, "verdicts": 0}`).
    """

    _: KW_ONLY
    output_dir: str
    report: dict[str, Path] | None = None
    error: str | None = None
    failed: dict[str, int] = field(default_factory=dict)

    @property
    def failed_count(self) -> int:
        """How many things failed, all kinds together."""
        return sum(self.failed.values())

    def describe_failures(self) -> str:
        """What failed, in words: `"2 generations, 1 verdicts failed"` (the kinds with a count)."""
        return ", ".join(f"{n} {kind}" for kind, n in self.failed.items() if n) + " failed"

    def to_dict(self) -> dict:
        """The result as a plain `dict`, field by field (not copied deeply)."""
        return {each.name: getattr(self, each.name) for each in fields(self)}


@dataclass(frozen=True)
class Evaluation:
    """One evaluation as `EVALUATIONS` names it: its config class, its runner and its report writer."""

    config_class: type
    run: Callable[..., EvaluationResult]  # `run(config) -> EvaluationResult`
    write_report: Callable[[str | os.PathLike], dict[str, Path]]  # the report of an output folder, written again


# name -> (module, attribute) of its `Evaluation`, imported when asked for; a user's own is added with one line,
# `EVALUATIONS["name"] = ("my_package.my_module", "MY_EVALUATION")`
EVALUATIONS: dict[str, tuple[str, str]] = {
    "benchmark": ("rolellm.evaluation.benchmark.runner", "BENCHMARK"),
    "dialogue": ("rolellm.evaluation.multiturn.run", "DIALOGUE"),
    "coser": ("rolellm.evaluation.coser.run", "COSER"),
}


def get_evaluation(name: str) -> Evaluation:
    """The `Evaluation` registered as `name` in `EVALUATIONS`; a `ValueError` naming the registered ones for any
    other name."""
    if name not in EVALUATIONS:
        raise ValueError(f"evaluation={name!r} is not one of {sorted(EVALUATIONS)}")
    module, attribute = EVALUATIONS[name]
    return getattr(importlib.import_module(module), attribute)


def run_evaluation(name: str, config: EvaluationConfig) -> EvaluationResult:
    """Run the evaluation `name` (`get_evaluation`) with `config`, which must be an instance of its config class."""
    evaluation = get_evaluation(name)
    if not isinstance(config, evaluation.config_class):
        raise ValueError(
            f"evaluation {name!r} takes a {evaluation.config_class.__name__}, got a {type(config).__name__}"
        )
    return evaluation.run(config)


def deprecated_names(module_globals: dict, renamed: Mapping[str, str]) -> Callable[[str], object]:
    """A module's `__getattr__` that still answers the names a release renamed (`renamed`: old -> new), with a
    `DeprecationWarning`, for one more release."""

    def __getattr__(name: str):
        if name not in renamed:
            raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")
        warnings.warn(
            f"{name} is renamed {renamed[name]}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return module_globals[renamed[name]]

    return __getattr__
