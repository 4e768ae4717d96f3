"""A benchmark run's answers: prompted from RoleBench rows, generated, and kept in `<output_dir>/generations.jsonl`.

`RowAnswers` says who answers: the model (`ModelAnswers`), the release's RoleGPT answers (`ReleaseAnswers`) or an
earlier run's folder (`FolderAnswers`); `model_answers` and `baseline_answers` pick them from an `BenchmarkConfig`.
`GenerationLog` is the log of a model's answers beside `run_config.json` (the settings that made them): a run that
stops resumes where it was and never sends a request twice; another run's folder is refused (`changed_settings`).
`generate_predictions` answers every row not answered yet (`build_requests` prompts each row in the run's mode).
"""

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from rolellm.clients.config import check_endpoints, make_client
from rolellm.evaluation.benchmark.baseline import read_predictions_folder, rolegpt_predictions
from rolellm.evaluation.benchmark.config import ROLEGPT, BenchmarkConfig
from rolellm.roles.profile import DataFormatError, parse_json_line, read_json_object, read_text
from rolellm.roles.release import require_release_profiles


logger = logging.getLogger(__name__)


def changed_settings(config: BenchmarkConfig) -> dict:
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

    def __init__(self, config: BenchmarkConfig, rows: list[dict]):
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


def build_requests(rows: list[dict], indices: list[int], profiles: Mapping, config: BenchmarkConfig) -> list:
    """One `ChatRequest` per row index, prompted with `config.mode` (greedy unless `temperature` > 0); a role of
    these rows without a profile is a `ValueError` (`require_release_profiles`)."""
    from rolellm.clients.openai_compatible import ChatRequest
    from rolellm.roles.prompts import EXAMPLE_MODES, build_role_messages
    from rolellm.roles.retrieval import DialogueRetriever

    profiles = require_release_profiles(profiles, [rows[index] for index in indices])
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


def generate_predictions(
    rows: list[dict], profiles: Mapping, config: BenchmarkConfig, client=None, log: GenerationLog | None = None
) -> list[str | None]:
    """Answer every row, resuming from `<output_dir>/generations.jsonl`; `None` marks a failed generation.

    Rows already answered are not asked again (a finished run does not even load the model); before generating,
    the number of requests and an estimate of their tokens are logged; new answers are written every
    `config.save_every` rows. `log` is the run's `GenerationLog` when it was read already (`ModelAnswers.read`, with
    the run's other inputs, before anything is removed).
    """
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


class RowAnswers:
    """Where the answers to a run's rows come from: the model, a baseline model, the release's RoleGPT answers or an
    earlier run's folder. `read` comes first, before anything is sent or removed (a bad file, another run's folder or
    a log of other rows stops the run there); `answer` then gives one answer per row (`None`: a failed generation).
    `label` is the name of the answers in tables, when they know one."""

    label: str | None = None
    splits: tuple[str, ...] = ()  # the config's splits `read` needs besides the rows' own

    def read(self, rows: list[dict], dataset) -> None:
        """Read what answers `rows` already (`dataset`: the loaded config, with the splits named in `splits`)."""
        raise NotImplementedError

    def answer(self, rows: list[dict], profiles: Mapping, client=None) -> list[str | None]:
        """One answer per row of `rows`, prompted with `profiles` where a model answers; `client` is a chat client to
        ask instead of the one the config describes (`run_benchmark(config, client)`)."""
        raise NotImplementedError


class ReleaseAnswers(RowAnswers):
    """The release's RoleGPT answers (the `rolegpt_baseline` split), matched to the rows: nothing is generated."""

    splits = ("rolegpt_baseline",)

    def read(self, rows, dataset) -> None:
        self.answers = rolegpt_predictions(rows, dataset["rolegpt_baseline"])

    def answer(self, rows, profiles, client=None) -> list[str]:
        return self.answers


class FolderAnswers(RowAnswers):
    """The answers an earlier `rolellm evaluate` run wrote to `<folder>/generations.jsonl`; a row without one there
    stops the run. Its label is that run's model (`read_predictions_folder`)."""

    def __init__(self, folder: str):
        self.folder = folder

    def read(self, rows, dataset) -> None:
        self.answers, self.label = read_predictions_folder(self.folder, rows)

    def answer(self, rows, profiles, client=None) -> list[str]:
        return self.answers


class ModelAnswers(RowAnswers):
    """A model's answers, generated and logged in `config.output_dir` (`GenerationLog`, `generate_predictions`)."""

    def __init__(self, config: BenchmarkConfig):
        self.config = config

    def read(self, rows, dataset) -> None:
        self.log = GenerationLog(self.config, rows)

    def answer(self, rows, profiles, client=None) -> list[str | None]:
        logger.info("%s answers into %s", self.config.client.model, self.config.output_dir)
        return generate_predictions(rows, profiles, self.config, client=client, log=self.log)


def model_answers(config: BenchmarkConfig) -> RowAnswers:
    """Who answers a run's rows: the release's RoleGPT answers for the model `rolegpt`, else the model."""
    return ReleaseAnswers() if config.is_rolegpt_baseline else ModelAnswers(config)


def baseline_answers(config: BenchmarkConfig) -> RowAnswers | None:
    """What the judge compares the answers with: a baseline model's answers (in `<output_dir>/baseline/`), the
    release's RoleGPT answers or an earlier run's folder; `None` when no win rate is judged."""
    if not config.judges_win_rate:
        return None
    if config.baseline_client is not None:
        return ModelAnswers(config.baseline_config())
    return ReleaseAnswers() if config.baseline.lower() == ROLEGPT else FolderAnswers(config.baseline)
