"""The benchmark runner: generate answers for a RoleBench config, score RAW / CUS / SPE, write the report.

A model is a local folder or Hub id (`LocalChatClient`: transformers, batched with left padding and length sorting),
an OpenAI-compatible endpoint such as a vLLM server (`OpenAIChatClient`: concurrent requests), or the RoleGPT
baseline answers of the release (the model `"rolegpt"`: nothing is generated). A run reads every input first
(`read_inputs`), answers the rows (`benchmark.answers`: appended to `<output_dir>/generations.jsonl` as they finish,
so a run that stops resumes where it was and never sends a request twice), scores the answers (`benchmark.scorers`)
and writes the results (`write_results`). It returns a `BenchmarkResult`, the interface's typed result
(`rolellm.evaluation.base`).
"""

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from rolellm.evaluation.base import Evaluation, EvaluationResult, deprecated_names
from rolellm.evaluation.benchmark.answers import RowAnswers, baseline_answers, model_answers
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.evaluation.benchmark.scorers import NothingEvaluated, merge_scores, scorers_for
from rolellm.roles.lookup import Profiles


logger = logging.getLogger(__name__)


@dataclass
class RunInputs:
    """What a run reads before it sends anything (`read_inputs`), so that a bad file stops it first."""

    rows: list[dict]  # the rows answered and scored (`select_rows`)
    lang: str
    profiles: Profiles  # the roles' profiles (`profiles_for`); empty when neither a prompt nor a judge needs them
    raw_targets: dict | None  # the RAW references (`read_raw_targets`), `None` when the release's are unavailable
    compared: list[dict]  # the results of the runs in `compare_with`
    answers: RowAnswers  # who answers the rows (`model_answers`), read already
    baseline: RowAnswers | None  # what the judge compares with (`baseline_answers`), read already


def read_inputs(config: BenchmarkConfig) -> RunInputs:
    """Read every file a run needs before anything is sent: the rows, the RAW references, the runs compared with, the
    model card, the profiles, and what the answers and the baseline's answers have so far (an earlier run's log, the
    release's answers, a predictions folder). A missing or malformed one, or another run's folder, stops the run
    here, naming it, before any model is loaded or asked."""
    from rolellm.data.builder import load_rolebench
    from rolellm.data.layout import raw_targets_path
    from rolellm.data.readers import read_raw_targets
    from rolellm.evaluation.benchmark.report import load_model_card, read_compared_results
    from rolellm.roles.lookup import select_rows
    from rolellm.roles.release import require_release_profiles
    from rolellm.roles.resolve import profiles_for

    answers, baseline = model_answers(config), baseline_answers(config)
    answerers = [each for each in (answers, baseline) if each is not None]
    splits = list(dict.fromkeys([config.split, *(split for each in answerers for split in each.splits)]))
    dataset = load_rolebench(config.dataset_name, data_dir=config.data_dir, splits=splits)
    rows = select_rows(dataset[config.split], config.roles, config.max_samples_per_role)
    if not rows:
        raise ValueError(f"no rows selected from {config.dataset_name!r}/{config.split} (roles={config.roles})")
    lang = rows[0]["lang"]
    raw_path = raw_targets_path(config.raw_targets_file, config.data_dir, lang)
    raw_targets = read_raw_targets(raw_path) if raw_path else None
    compared = [read_compared_results(path) for path in config.compare_with or []]
    if config.model_card is not None:
        load_model_card(config.model_card)
    profiles = Profiles()
    if config.judge is not None or not config.is_rolegpt_baseline:  # the data's, --profiles, the checkpoint's
        model_dir = config.client.model if config.client.runs_weights else None
        found = profiles_for(config.profiles, model_dir, config.data_dir, lang=lang, roles=config.roles)
        profiles = require_release_profiles(found, rows)
    for each in answerers:
        each.read(rows, dataset)
    return RunInputs(rows, lang, profiles, raw_targets, compared, answers, baseline)


@dataclass
class BenchmarkResult(EvaluationResult):
    """What `run_benchmark` returns: the scores of the run as `results.json` holds them, field by field (`to_dict()`
    gives that file's content, in its order), with the report's files (`report`) and what failed (`failed`:
    `generations`, win-rate `verdicts`, `rubric verdicts`).

    Args:
        model_label (`str`): the model's name in tables and plots (`model` in `results.json`); `dataset_name`,
            `split`, `mode` (`None` for RoleGPT's answers), `lang`.
        metrics (`dict`): `CUS`, `RAW`, `SPE`, `avg`, `win_rate`, `rubric` (`None`: unavailable, `unavailable` says
            why); `avg_over`: the metrics `avg` is the mean of.
        counts (`dict`): rows, general and role-specific ones, RAW references, failed generations.
        per_role (`dict`), per_type (`dict`): the breakdowns of the report.
        answer_length (`dict`): mean characters per answer, and the answers counted.
        config (`dict`): the run's `BenchmarkConfig`.
        win_rate (`dict`, *optional*): the judge's full result, when it compares with a baseline.
        rubric (`dict`, *optional*): the rubric scores (`RubricScorer`), when `config.rubric` is set; each answer's
            verdict is in `scores.json`.
    """

    model_label: str
    dataset_name: str
    split: str
    mode: str | None
    lang: str
    metrics: dict
    unavailable: dict
    avg_over: list
    counts: dict
    per_role: dict
    per_type: dict
    answer_length: dict
    config: dict
    win_rate: dict | None = None
    rubric: dict | None = None

    # the keys of `results.json`, in its order; `win_rate` and `rubric` only when the run has them
    RESULTS_KEYS = (
        "model", "dataset_name", "split", "mode", "lang", "metrics", "unavailable", "avg_over", "counts", "per_role",
        "per_type", "win_rate", "rubric", "answer_length", "config",
    )  # fmt: skip

    def to_dict(self) -> dict:
        """The content of `results.json` (what `write_report` and `update_model_card` read)."""
        values = {key: getattr(self, "model_label" if key == "model" else key) for key in self.RESULTS_KEYS}
        return {key: value for key, value in values.items() if value is not None or key not in ("win_rate", "rubric")}


def run_benchmark(config: BenchmarkConfig, client=None) -> BenchmarkResult:
    """Answer a RoleBench config with a model (or take RoleGPT's answers), score it and write the report.

    Args:
        config (`BenchmarkConfig`): what to evaluate, how, and where to write.
        client (*optional*): a chat client with `generate(requests, desc=...)` to use instead of the one `config`
            describes (an `OpenAIChatClient` with custom retries, a `LocalChatClient` holding a loaded model).

    Returns:
        `BenchmarkResult`: the content of `results.json` as fields (`metrics`, `counts`, `per_role`, `win_rate`, ...;
        `to_dict()` gives the file's content), the report's files and the failures counted.

    Raises:
        `NothingEvaluated`: every generation failed, every win-rate verdict, or every rubric verdict;
        `EndpointError`: an endpoint does not answer (checked before anything is generated) or stops answering. Then
        no `results.json` is written, and those of an earlier run in `output_dir` are removed first, so a folder
        never shows results this run did not finish; the answers and the judge's verdicts so far are kept for the
        next run. `ValueError`: `output_dir`
        (or its `baseline/`) holds the generations of a run with other settings (`changed_settings`) or of other rows;
        then nothing in it is written or removed.
    """
    output_dir = Path(config.output_dir)
    inputs = read_inputs(config)
    for name in ("results.json", "scores.json", "results.md", "results.html"):  # an earlier run's: not this one's
        (output_dir / name).unlink(missing_ok=True)
    rows, profiles = inputs.rows, inputs.profiles
    scorers = scorers_for(config, inputs.raw_targets, inputs.baseline, profiles)
    for scorer in scorers:  # the judge is checked, and a baseline answers, before the model answers
        scorer.prepare(rows)
    predictions = inputs.answers.answer(rows, profiles, client)
    if all(prediction is None for prediction in predictions):
        raise NothingEvaluated(
            f"all {len(rows)} generations failed, so nothing was scored or written; the errors are logged above and "
            f"in {output_dir / 'generations.jsonl'}"
        )
    scores, files = merge_scores([scorer.score(rows, predictions) for scorer in scorers])
    answered = [len(p) for p in predictions if p is not None]
    scores["answer_length"] = {"chars": sum(answered) / len(answered) if answered else None, "answers": len(answered)}
    failed = {
        "generations": scores["counts"].get("failed", 0),
        "verdicts": (scores.get("win_rate") or {}).get("failed", 0),
        "rubric verdicts": (scores.get("rubric") or {}).get("failed", 0),
    }
    result = BenchmarkResult(
        model_label=config.model_label, dataset_name=config.dataset_name, split=config.split,
        mode=None if config.is_rolegpt_baseline else config.mode, lang=inputs.lang, **scores, config=asdict(config),
        output_dir=config.output_dir, failed=failed,
    )  # fmt: skip
    result.report = write_results(config, result, files, inputs.compared)
    return result


def write_results(config: BenchmarkConfig, result: BenchmarkResult, files: dict, compared: list[dict]) -> dict:
    """`results.json`, the scorers' `files` (`scores.json`: each rubric verdict), the report beside `compared`
    (`write_report`, whose files are returned), and the model card (`update_model_card`: only when `config` accepts
    the result: nothing failed, or `allow_partial`)."""
    from rolellm.evaluation.benchmark.report import update_model_card, write_report

    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (output_dir / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    results = result.to_dict()
    (output_dir / "results.json").write_text(
        json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    report = write_report([*compared, results], output_dir)
    if config.model_card is not None and config.accepts(result):
        update_model_card(config.model_card, results)
    elif config.model_card is not None:
        logger.warning(
            "%s not updated: %d generations or verdicts failed (allow_partial not set)",
            config.model_card, result.failed_count,
        )  # fmt: skip
    return report


def _write_benchmark_report(folder):
    from rolellm.evaluation.benchmark.report import write_benchmark_report

    return write_benchmark_report(folder)


BENCHMARK = Evaluation(BenchmarkConfig, run_benchmark, _write_benchmark_report)
__getattr__ = deprecated_names(globals(), {"EvaluateConfig": "BenchmarkConfig"})
