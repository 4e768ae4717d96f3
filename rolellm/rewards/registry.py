"""The rewards by name: what `rolellm train --stage grpo --rewards` accepts, and the one place a new one is added.

A name is either registered here (`REWARDS`) or a dotted path to a reward function in TRL's form,
`package.module.function` (as TRL's own GRPO script takes), imported as it is.

Add a reward to the command line with `register_reward`: a factory that gets the run's `RewardContext` (the role
profiles, the judge's client, the length and failure settings) and returns the reward function.

>>> sorted(REWARDS)
['catchphrase', 'language', 'length_penalty', 'reference_rouge_l', 'rubric_judge']
>>> build_reward("length_penalty", RewardContext(max_answer_words=2))(["p"], ["Rum, rum, rum!"])
[-0.5]
>>> build_reward("rolellm.rewards.reference.reference_rouge_l", RewardContext()).__name__
'reference_rouge_l'
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rolellm.clients.config import import_dotted


@dataclass(frozen=True)
class RewardContext:
    """What a reward factory may use: the role profiles, the judge's client, and the reward settings of the run."""

    profiles: Mapping | None = None
    judge: Any = None
    max_answer_words: int = 120
    judge_max_failure_share: float = 0.2


@dataclass(frozen=True)
class RegisteredReward:
    factory: Callable[[RewardContext], Callable]
    needs_judge: bool = False


REWARDS: dict[str, RegisteredReward] = {}


def register_reward(name: str, needs_judge: bool = False):
    """Register the decorated factory `factory(context) -> reward` under `name` (`needs_judge`: the command asks
    for `--judge_model` before anything is loaded)."""

    def register(factory):
        if name in REWARDS:
            raise ValueError(f"a reward named {name!r} is already registered")
        REWARDS[name] = RegisteredReward(factory, needs_judge)
        return factory

    return register


def needs_judge(name: str) -> bool:
    return name in REWARDS and REWARDS[name].needs_judge


def build_reward(name: str, context: RewardContext) -> Callable:
    """The reward function `name` gives: a registered reward built for `context`, or the function a dotted path
    names. Raises `ValueError` naming the reward when it is neither."""
    if name in REWARDS:
        return REWARDS[name].factory(context)
    if "." not in name:
        raise ValueError(
            f"unknown reward {name!r}: one of {', '.join(sorted(REWARDS))}, or a dotted path to a reward function "
            "(package.module.function)"
        )
    reward = import_dotted(name, f"reward {name!r}")
    if not callable(reward):
        raise ValueError(f"reward {name!r}: {name} is a {type(reward).__name__}, not a function")
    return reward


@register_reward("reference_rouge_l")
def _reference_rouge_l(context: RewardContext):
    from rolellm.rewards.reference import reference_rouge_l

    return reference_rouge_l


@register_reward("rubric_judge", needs_judge=True)
def _rubric_judge(context: RewardContext):
    from rolellm.rewards.judge import RubricJudgeReward

    return RubricJudgeReward(context.judge, context.profiles, max_failure_share=context.judge_max_failure_share)


@register_reward("catchphrase")
def _catchphrase(context: RewardContext):
    from rolellm.rewards.style import CatchphraseReward

    return CatchphraseReward(context.profiles)


@register_reward("language")
def _language(context: RewardContext):
    from rolellm.rewards.style import LanguageReward

    return LanguageReward(context.profiles)


@register_reward("length_penalty")
def _length_penalty(context: RewardContext):
    from rolellm.rewards.style import LengthPenalty

    return LengthPenalty(context.max_answer_words)
