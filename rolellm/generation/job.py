"""What the generators share: the job shape (`GenerationJob` -> `GenerationResult`), prompt files, profile inputs,
stable train/test splits, and writing outputs in the release layout beside their generation config.

An output folder is a RoleBench release of its own: every job adds its files to it (`rolebench-{lang}/...` rows,
`profiles-{lang}/` profiles) and keeps what other runs wrote there, and each job's config, stats and failures go to
`generation/{job}/`.

>>> render_prompt("rolegpt_question_en.jinja", question="What is rum?", reference=None, role="Jack Sparrow")
'What is rum?'
"""

import dataclasses
import json
import re
import warnings
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import datasets
import jinja2

from rolellm.data.heldout import question_hash
from rolellm.data.schema import ROW_FEATURES
from rolellm.roles.profile import DataFormatError, RoleProfile, parse_json_line, read_json_file, read_text
from rolellm.roles.prompts import JINJA_ENV, load_prompt, looks_like_a_file_name
from rolellm.roles.release import RELEASE_LANG_DIRS, read_release_profiles, write_release_profiles


GENERATION_CONFIG_NAME = "generation_config.json"
GENERATION_STATS_NAME = "generation_stats.json"
FAILURES_NAME = "failures.jsonl"
RUNS_DIR = "generation"  # `<output_dir>/generation/<job>/` holds a job's config, stats and failures


class NothingGenerated(RuntimeError):
    """Every request of a generation run failed: no data file is written (the failures are, in `failures.jsonl`)."""


def render_prompt(name: str, **variables) -> str:
    """Render the package prompt file `rolellm/prompts/{name}` with `variables` (a missing variable is an error)."""
    return load_prompt(name).render(**variables).strip()


def render_prompt_source(template_source: str, /, **variables) -> str:
    """Render a user-supplied Jinja template (a config's prompt override) with `variables` (any names, `source`
    and `template_source` included)."""
    try:
        return JINJA_ENV.from_string(template_source).render(**variables).strip()
    except jinja2.TemplateError as error:
        raise ValueError(f"The prompt template is not valid Jinja for {sorted(variables)}: {error}") from error


def check_prompt_source(template_source: str | None) -> None:
    """A generator config's `prompt_template` checked before any request: Jinja text with at least one `{{ ... }}`
    (a file name, or text without a variable, would send one fixed prompt for every role), that compiles.

    >>> check_prompt_source("Questions about {{ role }}.")
    >>> check_prompt_source("prompts/mine.jinja")
    Traceback (most recent call last):
    ...
    ValueError: prompt_template='prompts/mine.jinja' is the name of a file, not a template's text: pass the file's content (--prompt_template "$(cat prompts/mine.jinja)")
    """
    if template_source is None:
        return
    if not isinstance(template_source, str) or not template_source.strip():
        raise ValueError(f"prompt_template={template_source!r} must be the Jinja text of the prompt")
    text = template_source.strip()
    if looks_like_a_file_name(text) or ("{" not in text and " " not in text and ("/" in text or Path(text).suffix)):
        raise ValueError(
            f"prompt_template={template_source!r} is the name of a file, not a template's text: pass the file's "
            f'content (--prompt_template "$(cat {text})")'
        )
    if "{{" not in text:
        raise ValueError(
            f"prompt_template={template_source!r} has no {{{{ variable }}}}: every role would get the same prompt"
        )
    try:
        JINJA_ENV.parse(template_source)
    except jinja2.TemplateSyntaxError as error:
        raise ValueError(f"prompt_template: line {error.lineno}: not valid Jinja: {error.message}") from None


def user_prompt(prompt_template: str | None, name: str, **variables) -> list[dict]:
    """A generator's request messages: one user message rendered from the config's `prompt_template` (Jinja source)
    when it is set, from the package prompt file `rolellm/prompts/{name}` otherwise."""
    if prompt_template is not None:
        content = render_prompt_source(prompt_template, **variables)
    else:
        content = render_prompt(name, **variables)
    return [{"role": "user", "content": content}]


def sampling_params(config, seed_offset: int = 0) -> dict:
    """A generator config's sampling parameters in the chat-completions names (the seed moved on by `seed_offset`)."""
    return {"temperature": config.temperature, "max_tokens": config.max_tokens, "seed": config.seed + seed_offset}


def as_profiles(profiles) -> list[RoleProfile]:
    """Accept a list or mapping (`dict`, `Profiles`) of `RoleProfile`, or a `datasets.Dataset` of profile rows
    (`RoleProfile.to_dict()`)."""
    if isinstance(profiles, Mapping):
        profiles = list(profiles.values())
    if isinstance(profiles, datasets.Dataset):
        return [RoleProfile.from_dict(row) for row in profiles]
    result = list(profiles)
    for i, profile in enumerate(result):
        if not isinstance(profile, RoleProfile):
            raise TypeError(f"profiles[{i}] is a {type(profile).__name__}, expected a `RoleProfile`")
    return result


def rows_to_dataset(rows: list[dict]) -> datasets.Dataset:
    """RoleBench rows as a `Dataset` in `ROW_FEATURES` (an empty list gives an empty dataset with the schema)."""
    return datasets.Dataset.from_dict(
        {name: [row[name] for row in rows] for name in ROW_FEATURES}, features=ROW_FEATURES
    )


def config_to_dict(config) -> dict:
    """A generation config as JSON-ready values (`Literal`/`Path` fields become strings)."""
    return json.loads(json.dumps(dataclasses.asdict(config), ensure_ascii=False, default=str))


def describe_client(client) -> dict:
    """What identifies the answering model in a saved config: the client, its model and endpoint; never credentials."""
    return {"class": type(client).__name__, "model": client.model_name, "repr": repr(client)}


def write_jsonl(path: Path, records) -> Path:
    """Write `records` (dicts) as UTF-8 JSON lines, creating the parent folder; the file is replaced only once
    complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(record, ensure_ascii=False) + "\n")
    partial.replace(path)
    return path


def merge_jsonl(files: dict[Path, tuple[list[dict], Callable[[dict], bool]]]) -> list[Path]:
    """Merge records into JSON-lines files: `files` maps each path to `(records, replaces)`; the records already in
    the file for which `replaces(record)` is true are dropped (they are this run's to write), the others are kept
    and `records` written after them. Every file is read before any is written, so a malformed file
    (`DataFormatError`, naming it and the line) leaves them all as they were. A file left with no record is
    removed rather than left empty (an empty split file reads as a broken one).

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "rows.jsonl"
    >>> _ = merge_jsonl({path: ([{"role": "A", "n": 1}, {"role": "B", "n": 1}], lambda r: False)})
    >>> _ = merge_jsonl({path: ([{"role": "B", "n": 2}], lambda r: r["role"] == "B")})
    >>> path.read_text()
    '{"role": "A", "n": 1}\\n{"role": "B", "n": 2}\\n'
    """
    merged = {}
    for path, (records, replaces) in files.items():
        kept = []
        if path.is_file():
            for line_no, line in enumerate(read_text(path, allow_empty=True).splitlines(), start=1):
                if line.strip():
                    record = parse_json_line(line, path, line_no)
                    if not replaces(record):
                        kept.append(record)
        merged[path] = [*kept, *records]
    for path, records in merged.items():
        if records:
            write_jsonl(path, records)
        else:
            path.unlink(missing_ok=True)
    return list(merged)


def stable_split(role: str, question: str, test_fraction: float, seed: int = 0) -> str:
    """`"test"` or `"train"` for one item, from a hash of `(seed, role, question)` alone (surrounding whitespace
    ignored): an item keeps its split whatever else a run generates, so a re-run that fills gaps moves nothing.

    About `test_fraction` of the items land in test.

    >>> stable_split("李白", "你最喜欢哪首诗？", 0.5), stable_split("李白", " 你最喜欢哪首诗？", 0.5)
    ('test', 'test')
    >>> stable_split("李白", "你最喜欢哪首诗？", 1.0), stable_split("李白", "你最喜欢哪首诗？", 0.0)
    ('test', 'train')
    """
    return "test" if question_hash(role, question, seed) < test_fraction else "train"


def check_test_fraction(test_fraction: float) -> None:
    if not 0 <= test_fraction <= 1:
        raise ValueError(f"test_fraction={test_fraction} must be between 0 and 1")


def save_profiles(output_dir, profiles: list[RoleProfile], warn: bool = True) -> list[Path]:
    """Write `profiles` into `output_dir/profiles-{lang}/` in the release layout, beside the profiles already
    there: a role of `profiles` replaces its earlier profile (its `generated` mark included; with `warn`, a warning
    says so when the description differs), other roles are kept.

    Returns:
        `list[pathlib.Path]`: the profile folders written, one per language.
    """
    folders = []
    for lang in sorted({profile.lang for profile in profiles}):
        folder = Path(output_dir) / f"profiles-{RELEASE_LANG_DIRS[lang]}"
        merged = dict(read_release_profiles(folder, lang)) if (folder / "desc.json").is_file() else {}
        for profile in profiles:
            if profile.lang == lang:
                earlier = merged.get(profile.name)
                if (
                    warn
                    and earlier is not None
                    and earlier.description_with_catchphrases() != profile.description_with_catchphrases()
                ):
                    warnings.warn(
                        f"{folder / 'desc.json'}: the description of {profile.name!r} is replaced by the one this run "
                        "used; pass the folder itself as the profiles to keep it",
                        stacklevel=2,
                    )
                merged[profile.name] = profile
                if not profile.dialogue:  # no earlier dialogue file may speak for it
                    (folder / f"{folder.name}-{profile.name}.jsonl").unlink(missing_ok=True)
        if not any(profile.generated for profile in merged.values()):
            (folder / "generated.json").unlink(missing_ok=True)
        folders.append(write_release_profiles(merged, output_dir))
    return folders


USAGE_COUNTING = (
    "usage: this run; usage_in_all: every run into this folder. requests = answers received from the endpoint "
    "(billed); cached = answers read from the cache, every attempt of a re-asked request counted; reasks = attempts "
    "after an answer that could not be parsed; retries = requests sent again after a 429, 5xx or time-out"
)


def save_generation_metadata(output_dir, config, client, stats: dict) -> None:
    """Write `generation_config.json` (the config and the model) and `generation_stats.json` into `output_dir`.

    The stats hold this run's client usage (`usage`) and, since runs into one folder add up, the usage of every run
    into it (`usage_in_all`, with the number of `runs`).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    payload = {"generator": type(config).__name__, "client": describe_client(client), "config": config_to_dict(config)}
    (output_dir / GENERATION_CONFIG_NAME).write_text(json.dumps(payload, ensure_ascii=False, indent=2), "utf-8")
    stats_path = output_dir / GENERATION_STATS_NAME
    before = _earlier_stats(stats_path)
    earlier = before.get("usage_in_all", before.get("usage", {}))
    usage = stats.get("usage", {})
    in_all = {key: earlier.get(key, 0) + value for key, value in usage.items()}
    stats = {**stats, "usage_in_all": in_all, "runs": before.get("runs", 1 if before else 0) + 1}
    stats["counting"] = USAGE_COUNTING
    stats_path.write_text(json.dumps(stats, ensure_ascii=False, indent=2), "utf-8")


def _earlier_stats(path: Path) -> dict:
    """The `generation_stats.json` of the earlier runs into a folder (`{}` for none). One that cannot be read as such
    (cut short, edited) is warned about, naming it, and the usage is counted from this run: the run's data is
    written by then, and is not refused for a count."""
    if not path.exists():
        return {}
    try:
        before = read_json_file(path)
    except (DataFormatError, OSError) as error:
        problem = str(error)
    else:
        usage = before.get("usage_in_all", before.get("usage", {})) if isinstance(before, dict) else None
        counts = [*(usage or {}).values(), before.get("runs", 0)] if isinstance(usage, dict) else [None]
        if all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in counts):
            return before
        problem = f"{path}: not the usage counts of earlier runs"
    warnings.warn(f"{problem}; usage_in_all counts from this run", stacklevel=3)
    return {}


def extract_json(text: str):
    """The JSON value in an LLM answer, after the usual repairs: code fences, prose around it, trailing commas.

    Raises:
        `ValueError`: no JSON value can be read (a client's `parse` then asks again).

    >>> extract_json('Here you go: ```json {"a": [1, 2,],} ```')
    {'a': [1, 2]}
    """
    text = re.sub(r"^\s*```(?:json)?\s*|\s*```\s*$", "", text.strip())
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if not starts:
        raise ValueError("the answer holds no JSON array or object")
    text = text[min(starts) : max(text.rfind("]"), text.rfind("}")) + 1]
    text = re.sub(r",\s*([\]}])", r"\1", text)
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"the answer is not valid JSON ({error.msg} at character {error.pos})") from None


def failure_reason(result) -> str:
    """The counted reason of a request that produced no usable answer (`ChatResult.error` names it)."""
    return "unparseable" if result.error.startswith("unparseable") else "request_failed"


@dataclasses.dataclass
class GenerationResult:
    """What a generation job returns.

    Args:
        dataset (`datasets.DatasetDict` or `datasets.Dataset`): the rows made (RoleBench rows in `ROW_FEATURES`, or
            profiles as rows).
        stats (`dict`): the counts of the run: requests, rows, drops and failures by reason, the client's usage.
        details (`dict`, *optional*): what a job's files need beyond the rows (Context-Instruct's items with their
            metrics, the describer's `RoleProfile`s).
        failures (`list[dict]`, *optional*): one record per request that produced no usable answer: its metadata
            (role, question or segment, sample) and the error.
    """

    dataset: datasets.DatasetDict | datasets.Dataset
    stats: dict
    details: dict = dataclasses.field(default_factory=dict)
    failures: list[dict] = dataclasses.field(default_factory=list)

    @property
    def num_rows(self) -> int:
        if isinstance(self.dataset, datasets.DatasetDict):
            return sum(split.num_rows for split in self.dataset.values())
        return self.dataset.num_rows


class GenerationJob:
    """The shape every generator shares: a config, `prompt()` and `parse()`, `generate(client, ...)` returning a
    `GenerationResult`, and `save(output_dir, result, client)` writing what it is given.

    Subclasses set `config_class`, `name` (the folder of the job's run files, `generation/{name}/`) and `desc` (the
    progress bar's label), and implement `prompt`, `parse`, `generate` and `write` (their files in the release
    layout, merged with what the folder holds; `save` adds `generation_config.json` and `generation_stats.json`).
    """

    config_class: type
    name: str
    desc: str
    # the JSON schema of an answer, for a generator that asks for JSON: a backend with constrained decoding (vLLM's
    # structured outputs) keeps every answer inside it; `parse` still checks each one
    answer_schema: dict | None = None

    def __init__(self, config=None):
        self.config = config if config is not None else self.config_class()

    def ask(self, client, requests: list, parse) -> tuple[list, dict]:
        """Send `requests` through `client` with `parse`; the results and the client usage this run added."""
        before = dataclasses.replace(client.usage)
        results = client.generate(requests, parse=parse, desc=self.desc, json_schema=self.answer_schema)
        return results, dataclasses.asdict(client.usage - before)

    @staticmethod
    def failures(results: list) -> list[dict]:
        """One record per failed result: its request's metadata, its sample index and the error."""
        return [
            {**result.request.metadata, "sample_index": result.request.sample_index, "error": result.error}
            for result in results
            if not result.ok
        ]

    def run_dir(self, output_dir) -> Path:
        """`<output_dir>/generation/<name>/`: where this job's config, stats and failures go."""
        return Path(output_dir) / RUNS_DIR / self.name

    def save(self, output_dir, result: GenerationResult, client) -> Path:
        """Write `result` in the release's layout into `output_dir`, keeping what other runs wrote there, and the
        config and the stats of the run into `run_dir(output_dir)`.

        The requests that failed are listed in `run_dir(output_dir)/failures.jsonl` (removed when there are none).
        When every request failed nothing else is written and `NothingGenerated` is raised.

        Raises:
            `NothingGenerated`: the run produced no row and some requests failed.
        """
        output_dir = Path(output_dir)
        run_dir = self.run_dir(output_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / FAILURES_NAME).unlink(missing_ok=True)
        if result.failures:
            write_jsonl(run_dir / FAILURES_NAME, result.failures)
        if result.failures and not result.num_rows:
            first = result.failures[0]["error"]
            raise NothingGenerated(
                f"no row generated and {len(result.failures)} requests failed; nothing written but "
                f"{run_dir / FAILURES_NAME} (first error: {first})"
            )
        self.write(output_dir, result)
        save_generation_metadata(run_dir, self.config, client, result.stats)
        return output_dir

    def write(self, output_dir: Path, result: GenerationResult) -> None:
        raise NotImplementedError


class DropCounter(Counter):
    """Counts of dropped items by reason; `as_dict()` orders them for reports."""

    def as_dict(self) -> dict:
        return dict(sorted(self.items()))
