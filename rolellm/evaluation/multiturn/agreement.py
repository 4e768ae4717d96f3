"""Agreement between raters: of several judges with each other, and of a judge with people.

The statistics are small and exact (no scipy needed): `spearman` (Spearman's rho, average ranks for ties),
`kendall` (Kendall's tau-b), `cohen_kappa` (two raters' categorical choices), `krippendorff_alpha` (interval
metric, any number of raters, missing ratings allowed), each `None` when it is undefined (a constant rater, fewer
than two items) rather than NaN, and `bootstrap_ci` for a percentile interval over items. Nothing is rounded: tables
round when they print.

`compare_with_humans` matches a human-label file (`read_human_labels`, format in `docs/multi-turn.md`) with a
results folder: rubric scores (`scores.json` of `rolellm dialogue` / `judge_transcripts`) and pairwise verdicts
(`results.json` of `rolellm evaluate` with a judge), and reports, per dimension, Spearman and Kendall with bootstrap
intervals, and Cohen's kappa for pairwise choices.

>>> spearman([1, 2, 3, 4], [10, 20, 30, 40]), spearman([1, 2, 3, 4], [4, 3, 2, 1])
(1.0, -1.0)
>>> round(kendall([1, 2, 3], [1, 3, 2]), 6)
0.333333
>>> cohen_kappa(["win", "win", "loss", "loss"], ["win", "loss", "loss", "loss"])
0.5
"""

import json
import math
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import combinations
from pathlib import Path

import numpy as np

from rolellm.roles.profile import DataFormatError, parse_json_line, read_text


CHOICES = ("win", "tie", "loss")  # a pairwise verdict on the judged model against the baseline


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def rank(values: Sequence[float]) -> np.ndarray:
    """1-based ranks, ties sharing their average rank.

    >>> rank([10, 30, 20, 20]).tolist()
    [1.0, 4.0, 2.5, 2.5]
    """
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation (Pearson's r of the average ranks); `None` when a side is constant or n < 2."""
    if len(x) != len(y):
        raise ValueError(f"spearman needs paired values, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return None
    a, b = rank(x), rank(y)
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return _finite(float((a * b).sum()) / denominator) if denominator > 0 else None


def kendall(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b (ties on either side corrected); `None` when a side is constant or n < 2."""
    if len(x) != len(y):
        raise ValueError(f"kendall needs paired values, got {len(x)} and {len(y)}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    upper = np.triu_indices(len(x), k=1)  # every pair i < j once
    dx, dy = np.sign(x[:, None] - x[None, :])[upper], np.sign(y[:, None] - y[None, :])[upper]
    concordant, discordant = int(((dx * dy) > 0).sum()), int(((dx * dy) < 0).sum())
    ties_x, ties_y = int(((dx == 0) & (dy != 0)).sum()), int(((dy == 0) & (dx != 0)).sum())
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return _finite((concordant - discordant) / denominator) if denominator > 0 else None


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters' categorical labels; `None` when chance agreement is 1 (one label only)."""
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa needs paired labels, got {len(a)} and {len(b)}")
    if not a:
        return None
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[label] * count_b[label] for label in count_a) / (n * n)
    return _finite((observed - expected) / (1 - expected)) if expected < 1 else None


def krippendorff_alpha(ratings: Sequence[Sequence[float | None]]) -> float | None:
    """Krippendorff's alpha with the interval metric: `ratings[rater][item]`, `None` for a missing rating.

    Items rated by fewer than two raters are left out; `None` when fewer than two values remain or they do not vary.

    >>> krippendorff_alpha([[1, 2, 3, 4], [1, 2, 3, 4]])
    1.0
    >>> krippendorff_alpha([[1, 2, 3], [1, 2, None]])
    1.0
    """
    units = []
    for item in zip(*ratings):
        values = [float(v) for v in item if v is not None]
        if len(values) >= 2:
            units.append(values)
    pooled = np.array([v for values in units for v in values])
    n = len(pooled)
    if n < 2:
        return None
    observed = sum(
        sum((a - b) ** 2 for a in values for b in values) / (len(values) - 1) for values in units
    )  # ordered pairs within each unit
    expected = float(((pooled[:, None] - pooled[None, :]) ** 2).sum()) / (n - 1)
    return _finite(1 - observed / expected) if expected > 0 else None


def mean_pairwise_spearman(ratings: Sequence[Sequence[float | None]]) -> float | None:
    """The mean Spearman correlation over every pair of raters, on the items both rated (`None` if none defined)."""
    values = []
    for a, b in combinations(ratings, 2):
        both = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
        rho = spearman([x for x, _ in both], [y for _, y in both]) if both else None
        if rho is not None:
            values.append(rho)
    return _finite(float(np.mean(values))) if values else None


def bootstrap_ci(
    statistic: Callable[..., float | None],
    *columns: Sequence,
    num_samples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> list[float | None]:
    """Percentile bootstrap interval of `statistic(*columns)`, resampling items (rows of the columns) with replacement.

    Resamples where the statistic is undefined (a constant column) are left out; `[None, None]` when none is defined.

    >>> bootstrap_ci(spearman, [1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
    [1.0, 1.0]
    """
    n = len(columns[0])
    if n < 2:
        return [None, None]
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(num_samples):
        picks = rng.integers(0, n, n)
        value = statistic(*([column[i] for i in picks] for column in columns))
        if value is not None:
            values.append(value)
    if not values:
        return [None, None]
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return [_finite(low), _finite(high)]


# --- human labels ----------------------------------------------------------------------------------------------------


def read_human_labels(path: str | Path, scale: tuple[int, int] = (1, 5)) -> list[dict]:
    """Read a human-label JSONL file: one judgement of one item per line.

    Each line has `id` (the item: a transcript id of `scores.json`, or the row index of a pairwise `results.json`),
    an optional `annotator`, and `scores` (`{dimension: integer}` on the rubric's `scale`, 1-5 by default) and/or
    `choice` (`"win"`, `"tie"` or `"loss"`: the judged model's answer against the baseline's). Blank lines are
    skipped. A malformed line is a `DataFormatError` naming the file, line and field.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "human.jsonl")
    >>> _ = open(path, "w").write('{"id": "a", "scores": {"speaking_style": 4}}\\n\\n{"id": 3, "choice": "tie"}\\n')
    >>> [label["id"] for label in read_human_labels(path)]
    ['a', '3']
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--human {path}: no such file (a JSONL file of human labels, see docs/multi-turn.md)")
    if path.suffix.lower() in (".csv", ".tsv", ".xlsx"):
        raise DataFormatError(
            f"--human {path}: a {path.suffix[1:].upper()} file; human labels are JSONL, one object per line: "
            '{"id": ..., "scores": {dimension: integer}} and/or "choice" (see docs/multi-turn.md)'
        )
    labels = []
    for line_no, line in enumerate(read_text(path, allow_empty=True).splitlines(), start=1):
        if not line.strip():
            continue
        record = parse_json_line(line, path, line_no)
        where = f"{path}:{line_no}"
        if not isinstance(record.get("id"), (str, int)) or isinstance(record.get("id"), bool):
            raise DataFormatError(f"{where}: field 'id' must be a string or an integer, got {record.get('id')!r}")
        if "scores" not in record and "choice" not in record:
            raise DataFormatError(f"{where}: a label needs 'scores' ({{dimension: integer}}) or 'choice' {CHOICES}")
        scores = record.get("scores", {})
        if not isinstance(scores, dict):
            raise DataFormatError(f"{where}: field 'scores' must be an object, got {type(scores).__name__}")
        for dimension, score in scores.items():
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise DataFormatError(f"{where}: field 'scores.{dimension}' must be a number, got {score!r}")
            if score != int(score) or not scale[0] <= score <= scale[1]:
                raise DataFormatError(
                    f"{where}: field 'scores.{dimension}' must be a whole number from {scale[0]} to {scale[1]}, "
                    f"got {score!r}"
                )
        choice = record.get("choice")
        if choice is not None and choice not in CHOICES:
            raise DataFormatError(f"{where}: field 'choice' must be one of {CHOICES}, got {choice!r}")
        labels.append(
            {"id": str(record["id"]), "annotator": record.get("annotator"), "scores": scores, "choice": choice}
        )
    if not labels:
        raise DataFormatError(f"{path}: no labels (a JSONL file, one judgement per line)")
    return labels


def read_judge_results(results_dir: str | Path) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """The judge's verdicts in a results folder: `({item id: {dimension: mean score}}, {row index: choice})`.

    Reads `scores.json` (rubric scores, `judge_transcripts` / `judge_answers`) and `results.json` (`rolellm evaluate`
    with a pairwise judge: `win_rate.outcomes`, failed rows left out); at least one must be there.
    """
    folder = Path(results_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"--results {folder}: no such folder")
    scores_path, pairwise_path = folder / "scores.json", folder / "results.json"
    if not scores_path.is_file() and not pairwise_path.is_file():
        raise FileNotFoundError(
            f"--results {folder} has neither scores.json (rolellm dialogue) nor results.json (rolellm evaluate)"
        )
    scores, choices = {}, {}
    if scores_path.is_file():
        result = _read_json_object(scores_path)
        if "items" not in result:
            raise DataFormatError(f"{scores_path}: field 'items' is missing (fields found: {sorted(result)})")
        items = result["items"]
        if not isinstance(items, list):
            raise DataFormatError(f"{scores_path}: field 'items' must be a list, got {type(items).__name__}")
        first = {}
        for number, item in enumerate(items):
            where = f"{scores_path}: items[{number}]"
            if not isinstance(item, dict) or "id" not in item or not isinstance(item.get("scores", {}), dict):
                raise DataFormatError(f"{where} must be an object with 'id' and 'scores' ({{dimension: number}})")
            if str(item["id"]) in first:
                raise DataFormatError(f"{where}: id {item['id']!r} is also items[{first[str(item['id'])]}]")
            first[str(item["id"])] = number
            for dimension, value in item.get("scores", {}).items():
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise DataFormatError(f"{where}: field 'scores.{dimension}' must be a number, got {value!r}")
            # a failed verdict is None; NaN would sort above every score, so it counts as failed too
            kept = {dim: value for dim, value in item.get("scores", {}).items() if _finite(value) is not None}
            if kept:
                scores[str(item["id"])] = kept
    if pairwise_path.is_file():
        win_rate = _read_json_object(pairwise_path).get("win_rate") or {}
        outcomes = win_rate.get("outcomes", []) if isinstance(win_rate, dict) else None
        if not isinstance(outcomes, list):
            raise DataFormatError(f"{pairwise_path}: field 'win_rate.outcomes' must be a list")
        for index, outcome in enumerate(outcomes):  # a row the judge failed on is "failed"
            if outcome not in (*CHOICES, "failed", None):
                raise DataFormatError(
                    f"{pairwise_path}: win_rate.outcomes[{index}] must be one of {CHOICES} or 'failed', got {outcome!r}"
                )
        choices = {str(index): outcome for index, outcome in enumerate(outcomes) if outcome in CHOICES}
    return scores, choices


def _read_json_object(path: Path) -> dict:
    try:
        value = json.loads(read_text(path))
    except json.JSONDecodeError as error:
        raise DataFormatError(
            f"{path}: not valid JSON (line {error.lineno}: {error.msg}); was the run cut short?"
        ) from None
    if not isinstance(value, dict):
        raise DataFormatError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _majority(choices: list[str]) -> str:
    """The most frequent choice of the annotators of one item; a split vote is a tie."""
    counts = Counter(choices).most_common()
    return counts[0][0] if len(counts) == 1 or counts[0][1] > counts[1][1] else "tie"


def compare_with_humans(
    labels: list[dict],
    judge_scores: dict[str, dict[str, float]],
    judge_choices: dict[str, str],
    num_bootstrap: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """Agreement of a judge with people on the items both judged.

    Several annotators of one item are combined first: their scores averaged per dimension, their choices by
    majority (a split vote is a tie).

    Returns:
        `dict` (JSON-safe): `scores` = `{dimension: {"n", "spearman", "spearman_ci", "kendall", "kendall_ci"}}`,
        `choices` = `{"n", "kappa", "kappa_ci", "confusion": {human choice: {judge choice: count}}}` (when any
        choice was compared), `compared` (items compared), and `unmatched` (human item ids with no judge verdict).

    >>> labels = [{"id": i, "scores": {"style": s}, "choice": None} for i, s in zip("abc", [1, 2, 3])]
    >>> compare_with_humans(labels, {"a": {"style": 2}, "b": {"style": 4}, "c": {"style": 5}}, {})["scores"]["style"]
    {'n': 3, 'spearman': 1.0, 'spearman_ci': [1.0, 1.0], 'kendall': 1.0, 'kendall_ci': [1.0, 1.0]}
    """
    human_scores: dict[str, dict[str, list[float]]] = {}
    human_choices: dict[str, list[str]] = {}
    for label in labels:
        for dimension, score in label["scores"].items():
            human_scores.setdefault(dimension, {}).setdefault(label["id"], []).append(float(score))
        if label["choice"] is not None:
            human_choices.setdefault(label["id"], []).append(label["choice"])
    judged_dimensions = {dimension for by_dimension in judge_scores.values() for dimension in by_dimension}
    unknown = sorted(set(human_scores) - judged_dimensions)
    if judge_scores and unknown:
        raise ValueError(
            f"the human labels score dimensions {unknown} that the judge did not score; its dimensions are "
            f"{sorted(judged_dimensions)}"
        )
    result: dict = {"scores": {}, "unmatched": []}
    compared, unmatched = set(), set()
    ci = {"num_samples": num_bootstrap, "level": level, "seed": seed}
    for dimension, by_item in sorted(human_scores.items()):
        pairs = []
        for item, values in by_item.items():
            judged = judge_scores.get(item, {}).get(dimension)
            if judged is None:
                unmatched.add(item)
            else:
                pairs.append((float(np.mean(values)), judged))
                compared.add(item)
        humans, judge = [p[0] for p in pairs], [p[1] for p in pairs]
        result["scores"][dimension] = {
            "n": len(pairs),
            "spearman": spearman(humans, judge),
            "spearman_ci": bootstrap_ci(spearman, humans, judge, **ci),
            "kendall": kendall(humans, judge),
            "kendall_ci": bootstrap_ci(kendall, humans, judge, **ci),
        }
    pairs = []
    for item, choices in human_choices.items():
        if item in judge_choices:
            pairs.append((_majority(choices), judge_choices[item]))
            compared.add(item)
        else:
            unmatched.add(item)
    if human_choices:
        humans, judge = [p[0] for p in pairs], [p[1] for p in pairs]
        confusion = {h: {j: sum(p == (h, j) for p in pairs) for j in CHOICES} for h in CHOICES}
        result["choices"] = {
            "n": len(pairs),
            "kappa": cohen_kappa(humans, judge),
            "kappa_ci": bootstrap_ci(cohen_kappa, humans, judge, **ci),
            "confusion": confusion,
        }
    result["compared"] = len(compared)
    result["unmatched"] = sorted(unmatched - compared)
    return result
