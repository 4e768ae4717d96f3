"""Rewards put together: per-role normalisation, and the `GRPOConfig` settings that weigh several rewards.

Roles differ in how easy a reward is for them (a role whose references are long gets a lower ROUGE-L recall; a role
with five catchphrases hits one more often than a role with one). `per_role_normalized(reward)` rescales a reward
per role, Character-R1's per-category normalisation: each role's rewards are z-scored, `(r - mean) / (std + eps)`,
by the running mean and standard deviation of that role's rewards so far (the batch being scored included), so every
role's reward has the same scale whatever its level. `None` rewards stay `None` and are not counted.

`reward_settings` turns `[(reward, weight), ...]` into the `reward_funcs` list and the `GRPOConfig` fields that
weigh them: `reward_weights`, and `multi_objective_aggregation`: TRL's `"sum_then_normalize"` adds the weighted
rewards and normalises the sum per group; `"normalize_then_sum"` normalises each reward per group first, so a reward
with a small spread (a style reward next to a task reward) still moves the policy, the remedy CRPO proposes for
the style collapse of plain GRPO.

>>> from rolellm.rewards.reference import reference_rouge_l
>>> from rolellm.rewards.style import LengthPenalty
>>> funcs, settings = reward_settings([(reference_rouge_l, 1.0), (LengthPenalty(60), 0.5)], "normalize_then_sum")
>>> [getattr(f, "__name__") for f in funcs], settings
(['reference_rouge_l', 'length_penalty'], {'reward_weights': [1.0, 0.5], 'multi_objective_aggregation': 'normalize_then_sum'})
>>> normalized = per_role_normalized(lambda prompts, completions, **kw: [1.0, 3.0, None, 5.0])
>>> [r if r is None else round(r, 3) for r in normalized(["p"] * 4, ["c"] * 4, role=["Po", "Po", "Po", "Shifu"])]
[-1.0, 1.0, None, 0.0]
"""

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Literal


AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


def _name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


class RoleStats:
    """The running count, mean and variance (Welford's update) of each role's rewards."""

    def __init__(self):
        self.count: dict[str, int] = {}
        self.mean: dict[str, float] = {}
        self._m2: dict[str, float] = {}

    def update(self, roles: Sequence[str], rewards: Sequence[float | None]) -> None:
        for role, reward in zip(roles, rewards, strict=True):
            if reward is None or math.isnan(reward):
                continue
            n = self.count.get(role, 0) + 1
            delta = reward - self.mean.get(role, 0.0)
            self.count[role] = n
            self.mean[role] = self.mean.get(role, 0.0) + delta / n
            self._m2[role] = self._m2.get(role, 0.0) + delta * (reward - self.mean[role])

    def std(self, role: str) -> float:
        """The population standard deviation of the role's rewards so far (0 for a role seen once)."""
        return math.sqrt(self._m2.get(role, 0.0) / self.count[role]) if self.count.get(role) else 0.0

    def normalize(self, roles: Sequence[str], rewards: Sequence[float | None], eps: float) -> list[float | None]:
        return [
            None if r is None or math.isnan(r) else (r - self.mean[role]) / (self.std(role) + eps)
            for role, r in zip(roles, rewards, strict=True)
        ]


def per_role_normalized(reward_func: Callable, eps: float = 1e-4) -> Callable:
    """`reward_func` with each role's rewards z-scored by that role's running statistics (see the module docstring).

    Args:
        reward_func (`Callable`): a TRL reward function (sync or async); the rows need a `role` column.
        eps (`float`, *optional*, defaults to 1e-4): added to the standard deviation (TRL's own epsilon).

    Returns:
        `Callable`: a reward function of the same kind, named `"<name>_per_role"`, with its `RoleStats` as `.stats`.
    """
    stats = RoleStats()

    def finish(rewards, role):
        if role is None:
            raise ValueError(f"{_name(reward_func)}_per_role needs the dataset's 'role' column")
        stats.update(role, rewards)
        return stats.normalize(role, rewards, eps)

    if inspect.iscoroutinefunction(reward_func) or inspect.iscoroutinefunction(type(reward_func).__call__):

        async def normalized(prompts, completions, role=None, **kwargs):
            return finish(await reward_func(prompts, completions, role=role, **kwargs), role)

    else:

        def normalized(prompts, completions, role=None, **kwargs):
            return finish(reward_func(prompts, completions, role=role, **kwargs), role)

    normalized.__name__ = f"{_name(reward_func)}_per_role"
    normalized.stats = stats
    return normalized


def reward_settings(
    weighted: Sequence[tuple[Callable, float]],
    aggregation: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize",
) -> tuple[list[Callable], dict]:
    """Rewards and weights -> `(reward_funcs, settings)`: pass `reward_funcs` to `GRPOTrainer` and `**settings` to
    `GRPOConfig` (`reward_weights`, `multi_objective_aggregation`).

    Args:
        weighted (`Sequence[tuple[Callable, float]]`): `(reward function, weight)` pairs.
        aggregation (`str`, *optional*, defaults to `"sum_then_normalize"`): TRL's `multi_objective_aggregation`.
    """
    if not weighted or isinstance(weighted, (dict, str)):
        raise ValueError(f"reward_settings needs a list of (reward function, weight) pairs, got {weighted!r}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation={aggregation!r} is not one of {AGGREGATIONS}")
    for index, pair in enumerate(weighted):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"weighted[{index}] must be a (reward function, weight) pair, got {pair!r}")
        func, weight = pair
        if not callable(func):
            raise ValueError(
                f"weighted[{index}]: {func!r} is not a reward function; pass the function itself "
                "(rolellm.rewards.reference.reference_rouge_l, rolellm.rewards.style.LengthPenalty(60), ...)"
            )
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ValueError(f"the weight of {_name(func)} is {weight!r}: give a finite number")
    if all(weight == 0 for _, weight in weighted):
        raise ValueError("every reward's weight is 0: nothing would reward the policy")
    return [func for func, _ in weighted], {
        "reward_weights": [float(weight) for _, weight in weighted],
        "multi_objective_aggregation": aggregation,
    }
