"""CoSER's flaw-deduction score, as pure functions, and the re-scoring of a results file.

A judge lists the flaws of a simulated conversation on one dimension, each with a severity from 1 to 5. The dimension
score starts at 100 and loses 5 points per point of severity, with 0.3 severity points forgiven per message an
actor spoke (longer scenes have more room for flaws), clipped to 0..100:

    score = max(0, min(100, 100 - 5 * (sum of severities - 0.3 * actor_rounds)))

A flaw without a severity (missing or `null`) counts 1; only integer severities are summed (a severity of `"3"` or
`2.5` counts nothing, as in the original). `actor_rounds` is the number of simulated messages not spoken by the
Environment. A scene's score is the mean of its four dimensions; a run reports each dimension's mean over the
scenes, `avg` (the mean of the four means), and the means of BLEU and ROUGE-L against the reference conversation.
The arithmetic follows the original's order of operations, so recorded scores are reproduced to the last bit.

>>> flaws = [{"severity": 3}, {"severity": None}, {"type": "x"}, {"severity": "2"}]
>>> severity_total(flaws), dimension_score(flaws, actor_rounds=10)
(5, 90.0)
>>> dimension_score([], actor_rounds=10)
100
"""

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from rolellm.evaluation.coser.prompts import DIMENSIONS
from rolellm.evaluation.coser.testset import ENVIRONMENT
from rolellm.roles.profile import read_json_file


NSP = "NSP"
TOLERANCE = 1e-9  # how far a recomputed score may be from the recorded one


def severity_total(flaws: Sequence[Mapping]) -> int:
    """The summed severity of `flaws`: a missing or `null` severity is 1, a non-integer one counts nothing."""
    total = 0
    for flaw in flaws:
        severity = flaw.get("severity")
        severity = 1 if severity is None else severity
        if isinstance(severity, int):  # a JSON true is 1 here, as in the original
            total += severity
    return total


def dimension_score(flaws: Sequence[Mapping], actor_rounds: int) -> float:
    """`max(0, min(100 - (severity_total - 0.3 * actor_rounds) * 5, 100))`, in the original's order of operations."""
    return max(0, min(100 - (severity_total(flaws) - 0.3 * actor_rounds) * 5, 100))


def count_actor_rounds(simulation: Sequence[Mapping]) -> int:
    """The simulated messages spoken by a character (not the Environment, not a next-speaker prediction)."""
    return sum(1 for m in simulation if m["role"] not in (ENVIRONMENT, NSP))


def scene_score(critique: Mapping) -> float:
    """The mean of a scene's four dimension scores (`critique[dimension]["score"]`)."""
    return sum(critique[d]["score"] for d in DIMENSIONS) / len(DIMENSIONS)


def mean_scores(cases: Mapping[str, Mapping]) -> dict:
    """The run's scores over scored cases: each dimension's mean, `avg` (the mean of the four), `bleu`, `rouge_l`.

    A case scores when its `critique` holds the four dimensions; others (a failed judge, a stopped scene) are left
    out. With no scored case every value is `None`.
    """
    scored = [c for c in cases.values() if c.get("score") is not None]
    if not scored:
        return dict.fromkeys((*DIMENSIONS, "avg", "bleu", "rouge_l"))
    means = {d: sum(c["critique"][d]["score"] for c in scored) / max(1, len(scored)) for d in DIMENSIONS}
    means["avg"] = sum(means.values()) / len(means)
    for metric in ("bleu", "rouge_l"):
        values = [c["critique"][metric] for c in scored if c["critique"].get(metric) is not None]
        means[metric] = sum(values) / max(1, len(values)) if values else None
    return means


def bleu_rouge(reference: Sequence[Mapping], simulation: Sequence[Mapping]) -> tuple[float, float]:
    """BLEU and ROUGE-L F of the simulated conversation against the reference, as the original computes them.

    Both texts are joined messages (`Name: message` for the reference, the messages as written for the simulation),
    thoughts already removed (`reference_without_thoughts`, `judged_simulation`). BLEU is NLTK's `sentence_bleu`
    (4-grams, no smoothing) of the lower-cased texts cut into words by NLTK's `word_tokenize` (with its Punkt
    sentence splitter when its data is installed, else on the whole text); ROUGE-L is the F measure of `rouge` 1.0.1
    (`rolellm.rouge.score.rouge_l_pairs`).
    """
    from nltk.translate.bleu_score import sentence_bleu

    from rolellm.rouge.score import rouge_l_pairs

    simulation_text = "\n\n".join(m["content"].strip("\n") for m in simulation)
    reference_text = "\n\n".join(f"{m['character']}: {m['message']}".strip("\n") for m in reference)
    tokenize = word_tokenizer()
    with warnings.catch_warnings():  # NLTK warns of every n-gram order without a match: 0 is the answer
        warnings.simplefilter("ignore", UserWarning)
        bleu = sentence_bleu([tokenize(reference_text.lower())], tokenize(simulation_text.lower()))
    if not simulation_text.strip() or not reference_text.strip():
        return float(bleu), 0.0
    rouge = rouge_l_pairs([simulation_text], [reference_text])["f"][0]
    return float(bleu), float(rouge)


def word_tokenizer():
    """NLTK's `word_tokenize`, with Punkt sentence splitting where its data is installed (`nltk.download("punkt_tab")`
    once), else word-tokenizing each line as a whole (no download, slightly different around periods)."""
    import nltk
    from nltk.tokenize import word_tokenize

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return word_tokenize
    except LookupError:
        return lambda text: word_tokenize(text, preserve_line=True)


def bleu_tokenizer_name() -> str:
    """Which tokenizer `bleu_rouge` uses here (recorded in the results)."""
    import nltk

    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
        return "nltk word_tokenize (punkt_tab)"
    except LookupError:
        return "nltk word_tokenize (preserve_line: no punkt_tab data)"


# --- re-scoring --------------------------------------------------------------------------------------------------------


def read_results(path: str | os.PathLike) -> dict:
    """A results file (`{"scores", "cases"}`, the original's or rolellm's); an error names the file and what is
    missing."""
    path = Path(path)
    results = read_json_file(path, "results file (results.json)")
    if not isinstance(results, dict) or not isinstance(results.get("cases"), dict):
        raise ValueError(f"{path}: a CoSER results file is an object with 'scores' and 'cases'")
    if not results["cases"]:
        raise ValueError(f"{path}: field 'cases' is empty: no scene to score")
    if not isinstance(results.get("scores", {}), dict):
        raise ValueError(f"{path}: field 'scores' must be an object of score name -> value")
    for case_id, case in results["cases"].items():
        if not isinstance(case, dict):
            raise ValueError(f"{path}: case {case_id!r} is not an object")
        if case.get("score") is None:
            continue
        critique, simulation = case.get("critique"), case.get("simulation")
        if not isinstance(simulation, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str)
                                                       for m in simulation):  # fmt: skip
            raise ValueError(f"{path}: case {case_id!r}: field 'simulation' must be a list of {{'role', 'content'}}")
        for d in DIMENSIONS:
            entry = (critique or {}).get(d)
            if not isinstance(entry, dict) or not isinstance(entry.get("flaws"), list):
                raise ValueError(f"{path}: case {case_id!r}: field 'critique.{d}.flaws' must be a list")
            if not all(isinstance(f, dict) for f in entry["flaws"]):
                raise ValueError(f"{path}: case {case_id!r}: field 'critique.{d}.flaws' must hold objects")
    return results


def _differs(recorded, recomputed) -> bool:
    if recorded is None or recomputed is None:
        return recorded is not recomputed
    return not (
        isinstance(recorded, (int, float)) and math.isclose(recorded, recomputed, rel_tol=0, abs_tol=TOLERANCE)
    )


def rescore_coser_results(results: Mapping) -> dict:
    """Recompute every score of a results file from its recorded critiques and simulations.

    Each scored case's four dimension scores come from its flaws and actor rounds, its score from them; the run's
    means from the cases (BLEU and ROUGE-L from the per-case values recorded, since the file holds no reference).

    Returns:
        `dict`: `scores` (the recomputed means), `cases` (`{case_id: score}`, `None` for an unscored case),
        `mismatches`: `[{"case", "field", "recorded", "recomputed"}]` for every value further than 1e-9 from the one
        recorded (`case` is `None` for the run's means), and `unchecked`: the run's means the file records without
        the per-scene values they come from (`"bleu"`, `"rouge_l"`), which cannot be recomputed (not mismatches).
    """
    cases, recomputed, mismatches = {}, {}, []
    for case_id, case in results["cases"].items():
        if case.get("score") is None:
            cases[case_id] = None
            continue
        rounds = count_actor_rounds(case["simulation"])
        critique = {d: {"score": dimension_score(case["critique"][d]["flaws"], rounds)} for d in DIMENSIONS}
        for d in DIMENSIONS:
            if _differs(case["critique"][d].get("score"), critique[d]["score"]):
                mismatches.append({"case": case_id, "field": d, "recorded": case["critique"][d].get("score"),
                                   "recomputed": critique[d]["score"]})  # fmt: skip
        score = scene_score(critique)
        if _differs(case["score"], score):
            mismatches.append({"case": case_id, "field": "score", "recorded": case["score"], "recomputed": score})
        cases[case_id] = score
        for metric in ("bleu", "rouge_l"):
            critique[metric] = case["critique"].get(metric)
        recomputed[case_id] = {"score": score, "critique": critique}
    scores, unchecked = mean_scores(recomputed), []
    for key, value in scores.items():
        if key not in (results.get("scores") or {}):
            continue
        if value is None and key in ("bleu", "rouge_l") and results["scores"][key] is not None:
            unchecked.append(key)  # the file records the mean, not the scenes' values it was taken from
        elif _differs(results["scores"][key], value):
            mismatches.append({"case": None, "field": key, "recorded": results["scores"][key], "recomputed": value})
    return {"scores": scores, "cases": cases, "mismatches": mismatches, "unchecked": unchecked}
