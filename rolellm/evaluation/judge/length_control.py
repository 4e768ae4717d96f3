"""The length-controlled win rate: what a judge's preference would be if both answers had the same length.

LLM judges favour longer answers, so a model can raise its raw win rate by talking more. Following AlpacaEval 2's
length-controlled win rate (Dubois et al., 2024), the judge's preference `y` of each sample (1 a win, 0.5 a tie, 0 a
loss) is fitted with a logistic regression on the normalized length difference of the two answers,

    P(y = 1) = sigmoid(a + b * tanh((len_model - len_baseline) / std)),

where `std` is the standard deviation of the length differences (characters; 1 when they are all equal). The
length-controlled win rate is `sigmoid(a)`: the predicted preference when both answers have the same length. `b`
says how much the judge rewards length. Ties enter as `y = 0.5` (the log loss accepts fractional targets). A small
L2 penalty on `b` keeps the fit finite when the preferences follow the lengths perfectly (then the intercept, and
so the length-controlled rate, stays at what is left once length explains the verdicts). Unlike AlpacaEval, which
fits one regression over many models with an instruction-difficulty term, rolellm compares one model with one
baseline, so the regression has only the intercept and the length term. The confidence interval is a percentile
bootstrap over samples, refitting each resample. numpy only.

>>> scores = np.array([1.0, 1.0, 1.0, 1.0, 0.0, 0.0])  # the judge picks the longer answer: a raw win rate of 0.67
>>> lengths, baseline_lengths = np.array([60, 70, 80, 90, 10, 40]), np.full(6, 50)
>>> result = length_controlled_win_rate(scores, lengths, baseline_lengths)
>>> round(result.win_rate, 2), result.length_coefficient > 5
(0.51, True)
"""

from dataclasses import dataclass

import numpy as np


@dataclass
class LengthControlled:
    """A length-controlled win rate.

    Args:
        win_rate (`float`): `sigmoid(a)`, the predicted preference at equal lengths.
        ci_low, ci_high (`float`): its bootstrap confidence interval.
        length_coefficient (`float`): `b`, the weight of the normalized length difference (0: length does not matter).
    """

    win_rate: float
    ci_low: float
    ci_high: float
    length_coefficient: float


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


def fit_length_logistic(
    scores: np.ndarray, features: np.ndarray, l2: float = 1e-3, iterations: int = 100
) -> tuple[float, float]:
    """Fit `sigmoid(a + b * features)` to `scores` in [0, 1] by Newton's method with an L2 penalty `l2` on `b` (and a
    touch on `a`, so all-win or all-loss samples stay finite).

    Returns:
        `tuple[float, float]`: `(a, b)`.

    >>> a, b = fit_length_logistic(np.array([1.0, 0.0, 1.0, 0.0]), np.zeros(4))
    >>> round(a, 6), round(b, 6)
    (0.0, 0.0)
    """
    a, b = fit_length_logistics(np.asarray(scores)[None], np.asarray(features)[None], l2, iterations)[0]
    return float(a), float(b)


def fit_length_logistics(scores: np.ndarray, features: np.ndarray, l2: float = 1e-3, iterations: int = 100):
    """`fit_length_logistic` on each row of `scores` and `features` (`(k, n)`: the bootstrap's resamples) at once:
    the same Newton steps for every row, each row stopped after its own last step. Returns the `(k, 2)` fits `(a, b)`.

    >>> fits = fit_length_logistics(np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]), np.zeros((2, 4)))
    >>> bool(abs(fits[0]).max() < 1e-6 and fits[1, 0] > 5)  # even odds; all wins: large, finite
    True
    """
    theta = np.zeros((len(scores), 2))
    active = np.ones(len(scores), dtype=bool)
    for _ in range(iterations):
        rows = np.flatnonzero(active)
        if len(rows) == 0:
            break
        f, a, b = features[rows], theta[rows, 0], theta[rows, 1]
        p = _sigmoid(a[:, None] + b[:, None] * f)
        r, w = p - scores[rows], p * (1 - p)
        # the gradient and the 2 x 2 Hessian of each row, and Newton's step by Cramer's rule
        g0, g1 = r.sum(1) + 1e-6 * a, (r * f).sum(1) + l2 * b
        h00, h01, h11 = w.sum(1) + 1e-6, (w * f).sum(1), (w * f * f).sum(1) + l2
        det = h00 * h11 - h01 * h01
        step = np.stack([(h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det], axis=1)
        theta[rows] -= step
        active[rows] = np.abs(step).max(axis=1) >= 1e-8
    return theta


def normalized_length_difference(lengths: np.ndarray, baseline_lengths: np.ndarray) -> np.ndarray:
    """`tanh((lengths - baseline_lengths) / std)` of the differences (std 1 when they are all equal)."""
    difference = np.asarray(lengths, dtype=float) - np.asarray(baseline_lengths, dtype=float)
    scale = difference.std() or 1.0
    return np.tanh(difference / scale)


def length_controlled_win_rate(
    scores: np.ndarray,
    lengths: np.ndarray,
    baseline_lengths: np.ndarray,
    num_bootstrap: int = 1000,
    confidence_level: float = 0.95,
    seed: int = 0,
) -> LengthControlled:
    """The length-controlled win rate of judged samples (see the module docstring).

    Args:
        scores (`np.ndarray`): 1 (win), 0.5 (tie) or 0 (loss) per judged sample.
        lengths, baseline_lengths (`np.ndarray`): the characters of the model's and of the baseline's answer.
        num_bootstrap (`int`, *optional*, defaults to 1000), confidence_level (`float`, *optional*, defaults to
            0.95), seed (`int`, *optional*, defaults to 0): the bootstrap interval.

    Returns:
        `LengthControlled`; every value NaN when `scores` is empty.
    """
    scores = np.asarray(scores, dtype=float)
    if len(scores) == 0:
        return LengthControlled(*(float("nan"),) * 4)
    features = normalized_length_difference(lengths, baseline_lengths)
    a, b = fit_length_logistic(scores, features)
    picks = np.random.default_rng(seed).integers(0, len(scores), (num_bootstrap, len(scores)))
    block = max(1, 20_000 // len(scores))  # resamples fitted at once: small arrays stay in the CPU's cache
    fits = [
        fit_length_logistics(scores[part], features[part]) for part in np.split(picks, range(block, len(picks), block))
    ]
    resampled = _sigmoid(np.concatenate(fits)[:, 0])
    low, high = np.quantile(resampled, [(1 - confidence_level) / 2, (1 + confidence_level) / 2])
    return LengthControlled(float(_sigmoid(a)), float(low), float(high), b)
