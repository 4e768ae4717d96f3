"""RAW / CUS / SPE from answers and RoleBench rows: overall, per role and per question type.

- **CUS** (speaking style): general rows, against their RoleGPT references (`generated`).
- **RAW** (answering accuracy): general rows, against the raw answer of the instruction (`target` of
  `instructions-*/instructions-general.jsonl`). Without that file RAW is *unavailable* (`None` with the reason),
  never zero.
- **SPE** (role-specific knowledge): role-specific rows, against the Context-Instruct answers (`generated`).

Each is the paper's ROUGE-L (recall, best reference of a sample, mean over samples); `avg` is the mean of the
available ones and `avg_over` says which.

>>> rows = [{"role": "李白", "question": "你好", "generated": ["举杯邀明月"], "type": [], "subset": "general",
...          "lang": "zh"}]
>>> result = score_predictions(rows, ["举杯邀明月"])
>>> result["metrics"]["CUS"], result["metrics"]["RAW"], result["unavailable"]["RAW"][:20]
(1.0, None, 'no raw targets given')
"""

import math


METRICS = ("CUS", "RAW", "SPE")


def sample_scores(predictions: list[str], references: list[list[str]], lang: str | None = None) -> list[float]:
    """The paper's ROUGE-L recall of each prediction against its best reference."""
    from rolellm.rouge.score import rouge_l_scores

    if not predictions:
        return []
    return rouge_l_scores(predictions, references, lang=lang, measure="recall")


def _mean(values):
    return sum(values) / len(values) if values else None


def _row_type(row) -> str:
    types = sorted(set(row["type"]))
    return types[0] if len(types) == 1 else "mixed" if types else "unknown"


def score_predictions(
    rows: list[dict], predictions: list[str | None], raw_targets: dict[str, str] | None = None
) -> dict:
    """Score answers to RoleBench rows: RAW / CUS / SPE overall, per role and per question type.

    Args:
        rows (`list[dict]`): RoleBench rows (`role`, `question`, `generated`, `type`, `subset`, `lang`); the
            references are scored as the rows hold them, which the readers keep as released (the paper's scorer
            counts a trailing space after a final period as one more word).
        predictions (`list[str | None]`): one answer per row; `None` is a failed generation, scored as an empty
            answer and counted in `counts["failed"]`.
        raw_targets (`dict[str, str]`, *optional*): `rolellm.data.readers.read_raw_targets(...)`; without it RAW is
            unavailable. General rows whose question has no raw target are counted in `counts["RAW_missing"]`.

    Returns:
        `dict`: `metrics` (`CUS`, `RAW`, `SPE`, `avg`: floats, or `None` when unavailable), `avg_over`,
        `unavailable` (metric -> reason), `counts`, `per_role` (role -> metrics and counts), `per_type`
        (`script_based` / `script_agnostic` / `mixed` -> SPE and count).
    """
    if len(rows) != len(predictions):
        raise ValueError(f"{len(rows)} rows but {len(predictions)} predictions: give one answer per row")
    answers = ["" if p is None else p for p in predictions]
    general = [i for i, row in enumerate(rows) if row["subset"] == "general"]
    specific = [i for i, row in enumerate(rows) if row["subset"] == "role_specific"]
    raw = [i for i in general if raw_targets is not None and rows[i]["question"].strip() in raw_targets]

    def score(indices, refs):
        if not indices:
            return {}
        lang = rows[indices[0]]["lang"] if len({rows[i]["lang"] for i in indices}) == 1 else None
        return dict(zip(indices, sample_scores([answers[i] for i in indices], [refs(i) for i in indices], lang)))

    per_sample = {
        "CUS": score(general, lambda i: rows[i]["generated"]),
        "RAW": score(raw, lambda i: [raw_targets[rows[i]["question"].strip()]]),
        "SPE": score(specific, lambda i: rows[i]["generated"]),
    }
    unavailable = {}
    if not general:
        unavailable["CUS"] = unavailable["RAW"] = "no general rows in this config"
    elif raw_targets is None:
        unavailable["RAW"] = "no raw targets given (instructions-*/instructions-general.jsonl not found)"
    elif not raw:
        unavailable["RAW"] = "no general question has a raw target"
    if not specific:
        unavailable["SPE"] = "no role_specific rows in this config"

    def summarize(indices_by_metric):
        metrics = {m: _mean([per_sample[m][i] for i in indices_by_metric[m]]) for m in METRICS}
        available = [m for m in METRICS if metrics[m] is not None]
        metrics["avg"] = _mean([metrics[m] for m in available])
        return metrics, available

    everything = {m: list(per_sample[m]) for m in METRICS}
    metrics, avg_over = summarize(everything)
    per_role = {}
    for role in dict.fromkeys(row["role"] for row in rows):
        mine = {m: [i for i in everything[m] if rows[i]["role"] == role] for m in METRICS}
        role_metrics, _ = summarize(mine)
        per_role[role] = {**role_metrics, **{f"n_{m}": len(mine[m]) for m in METRICS}}
    per_type = {}
    for i in specific:
        per_type.setdefault(_row_type(rows[i]), []).append(per_sample["SPE"][i])
    failed = sum(p is None for p in predictions)
    return {
        "metrics": metrics,
        "avg_over": avg_over,
        "unavailable": unavailable,
        "counts": {
            "rows": len(rows),
            "general": len(general),
            "role_specific": len(specific),
            "RAW": len(raw),
            "RAW_missing": len(general) - len(raw) if raw_targets is not None else 0,
            "failed": failed,
        },
        "per_role": per_role,
        "per_type": {name: {"SPE": _mean(values), "n": len(values)} for name, values in sorted(per_type.items())},
    }


def is_number(value) -> bool:
    """Whether `value` is a score (not `None`, not NaN)."""
    return isinstance(value, (int, float)) and not math.isnan(value)
