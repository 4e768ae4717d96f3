"""What a benchmark run scores its answers with: one interface, one scorer per kind of metric.

- `RougeScorer`: the paper's RAW / CUS / SPE (ROUGE-L recall, `score_predictions`).
- `WinRateScorer`: the paper's GPT-judge win rate against a baseline's answers (`judge_win_rate`, both orders).
- `RubricScorer`: the judge's 1-5 scores on the single-turn rubric dimensions (`judge_answers`).
- `NotRequested`: a metric the run leaves out, with the reason `results.json` gives for it.

`scorers_for` picks them from an `BenchmarkConfig` once the run's inputs are read; `run_benchmark` calls each one's
`prepare(rows)` before the model answers (the judge's endpoint is checked, a baseline model answers) and `score(rows,
predictions)` after, and merges what they return (`merge_scores`). The judged scorers share one `Judge`. A scorer that
has nothing to score raises `NothingEvaluated`, so no result is written.

>>> rows = [{"role": "Po", "question": "Who are you?", "generated": ["I am Po."], "type": [], "subset": "general",
...          "lang": "en"}]
>>> results, files = merge_scores([RougeScorer(None).score(rows, ["I am Po. Skadoosh!"]),
...                                NotRequested("win_rate", "judge_model not set").score(rows, ["I am Po."])])
>>> results["metrics"], results["unavailable"]["win_rate"], files
({'CUS': 1.0, 'RAW': None, 'SPE': None, 'avg': 1.0, 'win_rate': None}, 'not requested (judge_model not set)', {})
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.clients.config import ClientConfig, check_endpoints, make_client
from rolellm.evaluation.benchmark.answers import RowAnswers
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.evaluation.benchmark.scoring import score_predictions


class NothingEvaluated(RuntimeError):
    """Every generation of a run failed, or every win-rate or rubric verdict: there is nothing to score, and no
    result is written."""


@dataclass
class Scores:
    """What one scorer adds to `results.json`."""

    metrics: dict  # metric name -> value (`None`: unavailable, `unavailable` says why)
    unavailable: dict = field(default_factory=dict)  # metric name -> reason
    sections: dict = field(default_factory=dict)  # keys of `results.json` of its own (`counts`, `win_rate`, ...)
    files: dict = field(default_factory=dict)  # file name in `output_dir` -> its JSON content (`scores.json`)


class Judge:
    """A run's judge, shared by its judged scorers: the client is made, and its endpoint checked, when a scorer first
    asks for it (`client()`), so a dead judge stops the run before any answer is generated."""

    def __init__(self, config: ClientConfig):
        self.config = config
        self._client = None

    def client(self):
        if self._client is None:
            self._client = make_client(self.config)
            check_endpoints(self._client)
        return self._client


class Scorer:
    """One kind of metric of a run's answers."""

    def prepare(self, rows: list[dict]) -> None:
        """What the scorer needs before the model answers `rows` (nothing, unless it says so)."""

    def score(self, rows: list[dict], predictions: list[str | None]) -> Scores:
        """Score `predictions` (one per row of `rows`; `None` is a failed generation) and say what to add to
        `results.json`."""
        raise NotImplementedError


@dataclass
class NotRequested(Scorer):
    """A metric the run was not asked for: `None` in `metrics`, with `reason` in `unavailable`."""

    metric: str
    reason: str

    def score(self, rows, predictions) -> Scores:
        return Scores({self.metric: None}, {self.metric: f"not requested ({self.reason})"})


@dataclass
class RougeScorer(Scorer):
    """RAW / CUS / SPE, overall, per role and per question type (`score_predictions`); RAW needs `raw_targets`."""

    raw_targets: dict | None

    def score(self, rows, predictions) -> Scores:
        scored = score_predictions(rows, predictions, self.raw_targets)
        sections = {key: scored[key] for key in ("avg_over", "counts", "per_role", "per_type")}
        return Scores(scored["metrics"], scored["unavailable"], sections)


class WinRateScorer(Scorer):
    """The paper's GPT-judge win rate against a baseline's answers (`baseline`, named `baseline_label`).

    `prepare` checks the judge and has the baseline answer the rows (a baseline model generates into
    `<output_dir>/baseline/`). Both orders are judged (`judge_win_rate`); judge answers are cached in
    `<output_dir>/judge_cache.sqlite`, so a re-run sends nothing already judged. A failed generation is judged as an
    empty answer; a failed baseline generation makes its sample `failed`. `answers_file` is where the answers are kept
    (named when nothing could be judged).
    """

    def __init__(self, judge: Judge, baseline: RowAnswers, baseline_label: str, profiles: Mapping, answers_file):
        self.judge, self.baseline, self.baseline_label = judge, baseline, baseline_label
        self.profiles, self.answers_file = profiles, Path(answers_file)

    def prepare(self, rows) -> None:
        self.judge.client()
        self.baseline_answers = self.baseline.answer(rows, self.profiles)

    def score(self, rows, predictions) -> Scores:
        from rolellm.evaluation.judge.pairwise import judge_win_rate
        from rolellm.roles.card_prompts import role_description

        judge = self.judge.client()
        descriptions = {row["role"]: role_description(self.profiles[row["role"]]) for row in rows}
        answers = ["" if p is None else p for p in predictions]
        result = judge_win_rate(rows, answers, self.baseline_answers, descriptions, judge, lang=rows[0]["lang"])
        verdicts = result.to_dict()
        if verdicts["judged"] == 0:
            errors = list((verdicts.get("errors") or {}).values())
            raise NothingEvaluated(
                f"no sample was judged against {self.baseline_label}: {verdicts['failed']} verdicts of "
                f"{judge.model_name} failed{f' (e.g. {errors[0]})' if errors else ''}, so no result was "
                f"written; the answers are kept in {self.answers_file}, and a re-run asks the judge again only "
                "what failed"
            )
        metrics = {"win_rate": verdicts["win_rate"], "lc_win_rate": verdicts["lc_win_rate"]}
        return Scores(metrics, sections={"win_rate": {**verdicts, "baseline": self.baseline_label}})


@dataclass
class RubricScorer(Scorer):
    """The judge's scores of the answers on `rubric` (`BenchmarkConfig.rubric`): every answer scored from 1 to 5 on
    the single-turn dimensions of the rubric of `rolellm dialogue`, by `judge_answers`
    (`rolellm.evaluation.multiturn.rubric`).

    A failed generation is judged as an empty answer, as ROUGE-L scores it. An answer the judge never gives in the
    rubric's form (after the client's re-asks), or a request that fails, is a failed verdict: counted, with its
    reason, and left out of the means. The judge's answers are cached in `<output_dir>/judge_cache.sqlite`.

    Its `rubric` section of `results.json`: `rubric`, `judge`, `dimensions`, `scale`, `per_dimension` (mean per
    dimension), `overall` (the mean of those), `n` (answers scored), `per_subset` (`general` (the CUS rows) and
    `role_specific` (the SPE rows): the same means and `n`), `per_role`, `length_spearman` (per dimension, answer
    length against score), `asked`, `failed`, `unscored`, `errors` (the first five failed verdicts: `{"id", "judge",
    "error"}`, `id` the row index), `scores_file`; the full `judge_answers` result is written as `scores.json` (each
    answer's scores and rationales, which `rolellm judge agreement` reads).
    """

    rubric: str
    judge: Judge
    profiles: Mapping
    answers_file: Path

    def prepare(self, rows) -> None:
        self.judge.client()

    def score(self, rows, predictions) -> Scores:
        from rolellm.evaluation.multiturn.rubric import SINGLE_TURN_DIMENSIONS, judge_answers, summarize

        judge = [self.judge.client()]
        scored = judge_answers(rows, predictions, self.profiles, judge, SINGLE_TURN_DIMENSIONS)
        dimensions, items, names = scored["dimensions"], scored["items"], scored["judges"]

        def means(summary: dict, chosen: list[dict]) -> dict:
            return {
                "per_dimension": {d: v["mean"] for d, v in summary["per_dimension"].items()},
                "overall": summary["overall"],
                "n": sum(any(v is not None for v in item["scores"].values()) for item in chosen),
            }

        per_subset = {}
        for subset in ("general", "role_specific"):
            chosen = [item for item, row in zip(items, rows) if row["subset"] == subset]
            if chosen:
                per_subset[subset] = means(summarize(chosen, dimensions, names), chosen)
        summary, failures = scored["summary"], scored["failures"]
        result = {
            "rubric": self.rubric, "judge": names[0], "dimensions": dimensions, "scale": scored["scale"],
            **means(summary, items), "per_subset": per_subset, "per_role": summary["per_role"],
            "length_spearman": {d: v["length_spearman"] for d, v in summary["per_dimension"].items()},
            "asked": len(items), "failed": failures["count"], "unscored": failures["unscored"],
            "errors": failures["reasons"][:5], "scores_file": "scores.json",
        }  # fmt: skip
        if result["unscored"] == len(rows):
            example = result["errors"][0]["error"] if result["errors"] else "no answer"
            raise NothingEvaluated(
                f"all {len(rows)} rubric verdicts of {result['judge']} failed (e.g. {example}), so no result was "
                f"written; the answers are kept in {self.answers_file}, and a re-run asks the judge again only what "
                "failed"
            )
        return Scores({"rubric": result["overall"]}, sections={"rubric": result}, files={"scores.json": scored})


def scorers_for(
    config: BenchmarkConfig, raw_targets: dict | None, baseline: RowAnswers | None, profiles: Mapping
) -> list[Scorer]:
    """The scorers of a run: ROUGE-L always; the win rate against `baseline` (`baseline_answers`, read already) when
    the judge compares with one; the rubric when `config.rubric` is set. The judged ones share one `Judge`."""
    answers_file = Path(config.output_dir) / "generations.jsonl"
    judge = Judge(config.judge) if config.judge is not None else None
    scorers: list[Scorer] = [RougeScorer(raw_targets)]
    if judge is None:
        scorers.append(NotRequested("win_rate", "judge_model not set"))
    elif not config.judges_win_rate:
        scorers.append(NotRequested("win_rate", "baseline none"))
    else:
        label = config.baseline_label or baseline.label
        scorers.append(WinRateScorer(judge, baseline, label, profiles, answers_file))
    if config.rubric is None:
        scorers.append(NotRequested("rubric", "rubric not set"))
    else:
        scorers.append(RubricScorer(config.rubric, judge, profiles, answers_file))
    return scorers


def merge_scores(scored: list[Scores]) -> tuple[dict, dict]:
    """The scorers' parts of `results.json` as one (`metrics`, `unavailable`, then each scorer's sections), and the
    files they write."""
    metrics, unavailable, sections, files = {}, {}, {}, {}
    for scores in scored:
        metrics.update(scores.metrics)
        unavailable.update(scores.unavailable)
        sections.update(scores.sections)
        files.update(scores.files)
    return {"metrics": metrics, "unavailable": unavailable, **sections}, files
