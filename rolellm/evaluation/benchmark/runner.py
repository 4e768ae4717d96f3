"""The benchmark runner: generate answers for a RoleBench config, score RAW / CUS / SPE, write the report.

A model is a local folder or Hub id (`LocalChatClient`: transformers, batched with left padding and length sorting),
an OpenAI-compatible endpoint such as a vLLM server (`OpenAIChatClient`: concurrent requests), or the RoleGPT
baseline answers of the release (the model `"rolegpt"`: nothing is generated). Generations are appended to
`<output_dir>/generations.jsonl` as they finish, beside `run_config.json`, so a run that stops resumes where it was
and never sends a request twice.
"""

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from rolellm.clients.config import check_endpoints, make_client
from rolellm.evaluation.benchmark.baseline import read_predictions_folder, rolegpt_predictions
from rolellm.evaluation.benchmark.config import ROLEGPT, EvaluateConfig
from rolellm.evaluation.benchmark.scorers import NothingEvaluated, merge_scores, scorers_for
from rolellm.evaluation.benchmark.scoring import read_raw_targets
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import DataFormatError, parse_json_line, read_json_object, read_text
from rolellm.roles.release import RELEASE_LANG_DIRS


logger = logging.getLogger(__name__)


def changed_settings(config: EvaluateConfig) -> dict:
    """The generation settings that differ from those `run_config.json` in `output_dir` records (`{}` for a new
    folder); raises `ValueError` when they differ and `overwrite_output_dir` is not set."""
    folder = Path(config.output_dir)
    config_path = folder / "run_config.json"
    if not config_path.exists():
        return {}
    previous = read_json_object(config_path, "the run's settings", ": not the settings of a run; use a new output_dir")
    changed = {k: (previous.get(k), v) for k, v in config.generation_settings().items() if previous.get(k) != v}
    if changed and not config.overwrite_output_dir:
        detail = ", ".join(f"{k}: {old!r} there, {new!r} now" for k, (old, new) in changed.items())
        raise ValueError(
            f"{folder} holds generations of another run ({detail}); pass another output_dir or "
            "overwrite_output_dir=True to discard them"
        )
    return changed


class GenerationLog:
    """`generations.jsonl` + `run_config.json` in `output_dir`: the answers so far, appended as they arrive.

    Making one only reads (and refuses another run's folder, or a log of other rows); entering it (`with`) writes:
    the folder, `run_config.json`, the log without a line a crash cut short (or without the discarded answers of
    `overwrite_output_dir`), then each answer as it arrives.
    """

    def __init__(self, config: EvaluateConfig, rows: list[dict]):
        self.folder = Path(config.output_dir)
        self.path = self.folder / "generations.jsonl"
        self.rows = rows
        self.run_config = config.generation_settings()
        self.discard = bool(changed_settings(config))  # refused here unless overwrite_output_dir
        self._kept: list[str] | None = None  # the log's lines to write back, when some were dropped
        self.answers: dict[int, str] = {} if self.discard else self._read()

    def _read(self) -> dict[int, str]:
        answers, kept, dropped = {}, [], 0
        if not self.path.exists():
            return answers
        lines = read_text(self.path, allow_empty=True, log=True).splitlines(keepends=True)
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                dropped += 1
                continue
            try:
                record = parse_json_line(line, self.path, number)
            except DataFormatError:
                if number < len(lines) or line.endswith("\n"):  # only the last write can be cut short by a crash
                    raise
                logger.warning("%s:%d: incomplete line dropped; its row is answered again", self.path, number)
                dropped += 1
                continue
            for name, kind in (("index", int), ("role", str), ("question", str), ("prediction", str)):
                if not isinstance(record.get(name), kind) or isinstance(record.get(name), bool):
                    raise DataFormatError(
                        f"{self.path}:{number}: field {name!r} must be {kind.__name__}, got {record.get(name)!r}: "
                        "not an answer of rolellm evaluate; use a new output_dir"
                    )
            row = self.rows[record["index"]] if 0 <= record["index"] < len(self.rows) else None
            if row is None or (row["role"], row["question"]) != (record["role"], record["question"]):
                raise ValueError(
                    f"{self.path}:{number}: row {record['index']} is not the row this run selects "
                    f"({record['role']!r}, {record['question'][:40]!r}); the data changed: use a new output_dir"
                )
            answers[record["index"]] = record["prediction"]
            kept.append(line if line.endswith("\n") else line + "\n")
        if dropped:  # written back without the broken lines, so appended records start on a line of their own
            self._kept = kept
        return answers

    def add(self, index: int, prediction: str) -> None:
        row = self.rows[index]
        record = {"index": index, "role": row["role"], "subset": row["subset"], "question": row["question"]}
        self._file.write(json.dumps({**record, "prediction": prediction}, ensure_ascii=False) + "\n")
        self.answers[index] = prediction

    def __enter__(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.discard:
            self.path.unlink(missing_ok=True)
        elif self._kept is not None:
            partial = self.path.with_suffix(".jsonl.tmp")
            partial.write_text("".join(self._kept), encoding="utf-8")
            partial.replace(self.path)
        config_path = self.folder / "run_config.json"
        config_path.write_text(json.dumps(self.run_config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        self._file = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, *exc):
        self._file.close()

    def flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())


def build_requests(rows: list[dict], indices: list[int], profiles: Mapping, config: EvaluateConfig) -> list:
    """One `ChatRequest` per row index, prompted with `config.mode` (greedy unless `temperature` > 0)."""
    from rolellm.clients.openai_compatible import ChatRequest
    from rolellm.roles.prompts import EXAMPLE_MODES, build_role_messages
    from rolellm.roles.retrieval import DialogueRetriever

    profiles = Profiles(profiles)
    retrievers = {}
    params = {"max_tokens": config.client.max_new_tokens, "temperature": config.temperature}
    requests = []
    for index in indices:
        row = rows[index]
        profile = profiles[row["role"]]
        if config.mode in EXAMPLE_MODES and row["role"] not in retrievers:
            try:
                retrievers[row["role"]] = DialogueRetriever(profile)
            except ValueError as error:
                raise ValueError(
                    f"mode={config.mode!r} needs script dialogue of {row['role']!r}: {error}. Pass profiles= "
                    "(--profiles) with a screenplay or Character Card of this role, or use mode='system'"
                ) from error
        question = row["question"].strip()  # the English release starts every question with a space
        examples = (
            retrievers[row["role"]].retrieve(question, k=config.num_examples) if row["role"] in retrievers else None
        )
        messages = build_role_messages(
            profile, question, config.mode, examples, lang=row["lang"], system_template=config.system_template
        )
        requests.append(ChatRequest(messages=messages, params=dict(params), metadata={"index": index}))
    return requests


def require_profiles(profiles: Mapping, rows: list[dict]) -> Profiles:
    """`profiles` as `Profiles`, once each role of `rows` finds one; else a `ValueError` naming the roles without one
    and what to pass: the prompts and the judges need each role's description."""
    folder = f"profiles-{RELEASE_LANG_DIRS[rows[0]['lang']]}" if rows else "profiles-<lang>"
    return Profiles(profiles).require(
        (row["role"] for row in rows), "the evaluation rows",
        "the system instruction and the judges need each role's description. Give data_dir with the release's "
        f"{folder}/desc.json, or profiles (--profiles) with any profile source of these roles",
    )  # fmt: skip


def generate_predictions(
    rows: list[dict], profiles: Mapping, config: EvaluateConfig, client=None, log: GenerationLog | None = None
) -> list[str | None]:
    """Answer every row, resuming from `<output_dir>/generations.jsonl`; `None` marks a failed generation.

    Rows already answered are not asked again (a finished run does not even load the model); before generating,
    the number of requests and an estimate of their tokens are logged; new answers are written every
    `config.save_every` rows. `log` is the run's `GenerationLog` when it was read already (`run_benchmark` reads it
    before anything is removed).
    """
    profiles = require_profiles(profiles, rows)
    failures = []
    with log if log is not None else GenerationLog(config, rows) as log:
        pending = [i for i in range(len(rows)) if i not in log.answers]
        requests = build_requests(rows, pending, profiles, config) if pending else []
        if requests:
            client = client if client is not None else make_client(config.client)
            check_endpoints(client)
            estimate = client.estimate(requests, max_tokens=config.client.max_new_tokens)
            logger.info("%d of %d rows to answer: %s", len(pending), len(rows), estimate)
        for start in range(0, len(requests), config.save_every):
            done = len(rows) - len(pending) + start
            for result in client.generate(
                requests[start : start + config.save_every], desc=f"Answering ({done} done)"
            ):
                if not result.ok:
                    failures.append((result.request.metadata["index"], result.error))
                else:
                    log.add(result.request.metadata["index"], result.text)
            log.flush()
        if failures:
            index, error = failures[0]
            logger.warning(
                "%d generations failed (scored as empty answers; a re-run retries them), e.g. row %d: %s",
                len(failures), index, error,
            )  # fmt: skip
        return [log.answers.get(i) for i in range(len(rows))]


@dataclass
class RunInputs:
    """What a run reads before it sends anything (`read_inputs`), so that a bad file stops it first."""

    rows: list[dict]  # the rows answered and scored (`select_rows`)
    lang: str
    profiles: Profiles  # the roles' profiles (`profiles_for`); empty when neither a prompt nor a judge needs them
    raw_targets: dict | None  # the RAW references (`read_raw_targets`), `None` when the release's are unavailable
    compared: list[dict]  # the results of the runs in `compare_with`
    rolegpt: list[str] | None  # the release's RoleGPT answers to `rows`, when the run scores or judges against them
    baseline: list[str] | None  # the answers judged against when they are read (RoleGPT's, a run folder's)
    baseline_label: str | None


def read_inputs(config: EvaluateConfig) -> RunInputs:
    """Read every file a run needs before anything is sent: the rows, the RAW references, the runs compared with, the
    model card, the profiles, and the baseline answers that are read rather than generated. A missing or malformed
    one stops the run here, naming it, before any model is loaded or asked."""
    from rolellm.data.builder import load_rolebench, select_rows
    from rolellm.data.layout import raw_targets_path
    from rolellm.evaluation.benchmark.report import load_model_card, read_compared_results
    from rolellm.roles.resolve import profiles_for

    reads_baseline = config.judges_win_rate and config.baseline_client is None
    needs_rolegpt = config.is_rolegpt_baseline or (reads_baseline and config.baseline.lower() == ROLEGPT)
    splits = [config.split, "rolegpt_baseline"] if needs_rolegpt else [config.split]
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
        profiles = require_profiles(found, rows)
    rolegpt = rolegpt_predictions(rows, dataset["rolegpt_baseline"]) if needs_rolegpt else None
    baseline, baseline_label = None, None
    if reads_baseline and config.baseline.lower() == ROLEGPT:
        baseline = rolegpt
    elif reads_baseline:  # a row without an answer there stops the run
        baseline, baseline_label = read_predictions_folder(config.baseline, rows)
    return RunInputs(rows, lang, profiles, raw_targets, compared, rolegpt, baseline, baseline_label)


def run_benchmark(config: EvaluateConfig, client=None) -> dict:
    """Answer a RoleBench config with a model (or take RoleGPT's answers), score it and write the report.

    Args:
        config (`EvaluateConfig`): what to evaluate, how, and where to write.
        client (*optional*): a chat client with `generate(requests, desc=...)` to use instead of the one `config`
            describes (an `OpenAIChatClient` with custom retries, a `LocalChatClient` holding a loaded model).

    Returns:
        `dict`: the content of `results.json`: `model`, `dataset_name`, `split`, `mode`, `lang`, `metrics` (`CUS`,
        `RAW`, `SPE`, `avg`, `win_rate`, `rubric`), `unavailable`, `counts`, `per_role`, `per_type`, `win_rate`
        (the judge's full result, when the judge compares with a baseline), `rubric` (`rubric_scores`, when
        `config.rubric` is set; each answer's verdict is in `scores.json`) and `config`.

    Raises:
        `NothingEvaluated`: every generation failed, every win-rate verdict, or every rubric verdict; `EndpointError`: an endpoint does not
        answer (checked before anything is generated) or stops answering. Then no `results.json` is written, and
        those of an earlier run in `output_dir` are removed first, so a folder never shows results this run did not
        finish; the answers and the judge's verdicts so far are kept for the next run. `ValueError`: `output_dir`
        (or its `baseline/`) holds the generations of a run with other settings (`changed_settings`) or of other rows;
        then nothing in it is written or removed.
    """
    output_dir = Path(config.output_dir)
    # the runs whose answers are generated into output_dir: this one's, and the baseline model's in its baseline/
    baseline_config = config.baseline_config() if config.baseline_client is not None else None
    generated = [run for run in (None if config.is_rolegpt_baseline else config, baseline_config) if run is not None]
    for run in generated:  # another run's folder stops the run before anything in it is written or removed
        changed_settings(run)
    inputs = read_inputs(config)
    # the answers saved so far are read once, now: a log of other rows stops the run
    logs = {run.output_dir: GenerationLog(run, inputs.rows) for run in generated}
    for name in ("results.json", "scores.json", "results.md", "results.html"):  # an earlier run's: not this one's
        (output_dir / name).unlink(missing_ok=True)
    rows, profiles, judge = inputs.rows, inputs.profiles, None
    if config.judge is not None:  # the judge is checked before any answer is generated, the baseline model's included
        judge = make_client(config.judge)
        check_endpoints(judge)
    baseline, baseline_label = inputs.baseline, config.baseline_label or inputs.baseline_label
    if config.judges_win_rate and baseline is None:  # a baseline model answers the same rows
        logger.info("Baseline %s answers into %s", config.baseline_client.model, baseline_config.output_dir)
        baseline = generate_predictions(rows, profiles, baseline_config, log=logs[baseline_config.output_dir])
    if config.is_rolegpt_baseline:
        predictions = inputs.rolegpt
    else:
        predictions = generate_predictions(rows, profiles, config, client=client, log=logs[config.output_dir])
        if all(prediction is None for prediction in predictions):
            raise NothingEvaluated(
                f"all {len(rows)} generations failed, so nothing was scored or written; the errors are logged "
                f"above and in {output_dir / 'generations.jsonl'}"
            )
    scorers = scorers_for(config, inputs.raw_targets, judge, (baseline, baseline_label), profiles)
    scores, files = merge_scores([scorer.score(rows, predictions) for scorer in scorers])
    answered = [len(p) for p in predictions if p is not None]
    scores["answer_length"] = {"chars": sum(answered) / len(answered) if answered else None, "answers": len(answered)}
    results = {
        "model": config.model_label,
        "dataset_name": config.dataset_name,
        "split": config.split,
        "mode": None if config.is_rolegpt_baseline else config.mode,
        "lang": inputs.lang,
        **scores,
        "config": asdict(config),
    }
    write_results(config, results, files, inputs.compared)
    return results


def write_results(config: EvaluateConfig, results: dict, files: dict, compared: list[dict]) -> None:
    """`results.json`, the scorers' `files` (`scores.json`: each rubric verdict), the report beside `compared`
    (`write_report`), and the model card (`update_model_card`: only when nothing failed, or with `allow_partial`)."""
    from rolellm.evaluation.benchmark.report import update_model_card, write_report

    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (output_dir / name).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (output_dir / "results.json").write_text(
        json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    write_report([*compared, results], output_dir)
    failed = (
        results["counts"].get("failed", 0)
        + (results.get("win_rate") or {}).get("failed", 0)
        + (results.get("rubric") or {}).get("failed", 0)
    )
    if config.model_card is not None and (not failed or config.allow_partial):
        update_model_card(config.model_card, results)
    elif config.model_card is not None:
        logger.warning(
            "%s not updated: %d generations or verdicts failed (allow_partial not set)", config.model_card, failed
        )
