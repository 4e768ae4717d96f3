"""`DialogueConfig` and `run_dialogue`: the multi-turn evaluation of `rolellm dialogue` as a library call, beside
`run_benchmark(BenchmarkConfig)`, following the same interface (`rolellm.evaluation.base`).

A simulated user (`user`) talks with the evaluated model (`client`) for each scenario's turns; rubric judges
(`judges`) score the conversations; the report is written. Every client is a `ClientConfig`, answers are cached in
`<output_dir>/cache.sqlite` unless a client sets its own `cache_path`, and every turn is saved as it is played: a
run that stops, even killed, goes on where it was when started again.

>>> import tempfile
>>> from rolellm.clients.config import ClientConfig
>>> from rolellm.roles.profile import RoleProfile
>>> from rolellm.roles.release import write_release_profiles
>>> from rolellm.testing.server import ChatCompletionsServer
>>> folder = tempfile.mkdtemp()
>>> _ = write_release_profiles({"Po": RoleProfile("Po", "en", "A kung fu panda.")}, folder)
>>> scenarios = folder + "/scenarios.yaml"
>>> _ = open(scenarios, "w").write("- role: Po\\n  situation: Dinner.\\n  user_persona: A cook.\\n"
...                                "  opening_line: Noodles?\\n  num_turns: 1\\n")
>>> with ChatCompletionsServer(lambda body: "Skadoosh!") as server:
...     config = DialogueConfig(
...         profiles=[folder], output_dir=folder + "/run", scenarios=scenarios,
...         client=ClientConfig("po-model", base_url=server.base_url, progress=False),
...         user=ClientConfig("user-sim", base_url=server.base_url, progress=False),
...     )
...     result = run_dialogue(config)
>>> result.played, result.transcripts[0]["turns"][0]["assistant"], result.failed_count
(1, 'Skadoosh!', 0)
"""

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.clients.config import ClientConfig, check_endpoints, check_minimums, make_client
from rolellm.clients.inference_settings import resolve_card_extras
from rolellm.evaluation.base import Evaluation, EvaluationConfig, EvaluationResult, deprecated_names
from rolellm.roles.resolve import as_sources, profiles_field


logger = logging.getLogger(__name__)


@dataclass
class DialogueConfig(EvaluationConfig):
    """What `run_dialogue` and `rolellm dialogue` read, who talks, who judges, and where they write.

    The clients are values (`ClientConfig`): `rolellm dialogue` builds `client` from its `ClientConfig` flags
    (`--model`, `--base_url`, `--max_new_tokens`, ...) and derives `user` and `judges` from the `--user_*` and
    `--judge_*` flags (`rolellm.clients.config.derive_client`).

    > Parameters that control the roles and scenarios

    Args:
        profiles (`list[str]`): one or more profile sources `rolellm.load_profiles` reads (`--profiles`,
            repeatable: release folder, screenplay folder or file, `desc.json`, Character Card or folder of cards).
        roles (`list[str]`, *optional*): only these roles (spelled as in the profiles or not); required for a
            screenplay file.
        lang (`Literal["en", "zh"]`, *optional*): the profiles' language.
        scenarios (`str`, *optional*): a YAML or JSONL scenario file; default: card scenarios, else generated.
        num_scenarios (`int`, *optional*, defaults to 2): scenarios the user model writes per role without a file.
        num_turns (`int`, *optional*): turns of every conversation (default: each scenario's `num_turns`).

    > Parameters that control the models

        client (`ClientConfig`): the evaluated model; its `max_new_tokens` is the role's answer budget.
        user (`ClientConfig`): the user simulator (and scenario writer).
        judges (`list[ClientConfig]`, *optional*): rubric judges; none: transcripts only.
        temperature (`float`, *optional*, defaults to 0.0), seed (`int`, *optional*, defaults to 0): the role's and
            the simulator's sampling (greedy by default).

    > Parameters that control the output

        output_dir (`str`): where scenarios, turns, transcripts, scores and the report go; the clients' answers are
            cached in its `cache.sqlite` unless they set their own `cache_path`.
        allow_partial (`bool`, *optional*, defaults to `False`): `rolellm dialogue` exits 0 although some requests
            failed.
    """

    profiles: list[str] = profiles_field(required=True)
    output_dir: str = field(metadata={"help": "Where scenarios, turns, transcripts and scores go."})
    client: ClientConfig = field(metadata={"help": "The evaluated model (from the ClientConfig flags)."})
    user: ClientConfig = field(metadata={"help": "The user simulator (--user_* flags)."})
    judges: list[ClientConfig] = field(
        default_factory=list, metadata={"help": "Rubric judges (--judge_* flags).", "flag": False}
    )
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles."})
    lang: Literal["en", "zh"] | None = field(default=None, metadata={"help": "The profiles' language."})
    scenarios: str | None = field(default=None, metadata={"help": "YAML/JSONL scenarios (default: cards, generated)."})
    num_scenarios: int = field(default=2, metadata={"help": "Scenarios generated per role without --scenarios."})
    num_turns: int | None = field(default=None, metadata={"help": "Turns per conversation (default: the scenario's)."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature of the role and the user."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    allow_partial: bool = field(default=False, metadata={"help": "Exit 0 although some requests failed."})

    def __post_init__(self):
        check_minimums(self, temperature=0)
        self.profiles = as_sources(self.profiles)
        if self.num_turns is not None and self.num_turns < 1:
            raise ValueError(f"--num_turns must be at least 1, got {self.num_turns}")
        if self.num_scenarios < 1:
            raise ValueError(f"--num_scenarios must be at least 1, got {self.num_scenarios}")
        self.set_default_caches()  # one cache for all: its keys hold the model's name


def read_run_scenarios(config: DialogueConfig, profiles, user_client) -> list:
    """The run's scenarios: the file (only those of `roles`, when given), else card scenarios and generated ones (a
    role the user model wrote none for is logged); `num_turns` applied. `profiles` is a `Profiles` mapping: a
    scenario's role is found however it is spelled."""
    from rolellm.evaluation.multiturn.dialogue import generate_scenarios, read_scenarios, scenarios_from_card

    if config.scenarios:
        scenarios = [s for s in read_scenarios(config.scenarios) if not config.roles or s.role in profiles]
    else:
        scenarios = [s for profile in profiles.values() for s in scenarios_from_card(profile)]
        carded = {s.role for s in scenarios}
        rest = [profile for name, profile in profiles.items() if name not in carded]
        if rest:
            generated, failures = generate_scenarios(rest, user_client, config.num_scenarios, seed=config.seed)
            for role, error in failures.items():
                logger.warning("no scenario for %s: %s", role, error)
            scenarios += generated
    for scenario in scenarios:
        scenario.num_turns = config.num_turns or scenario.num_turns
    return scenarios


FAILED_KIND = "conversations or judge answers"  # what `DialogueResult.failed` counts
# what scoring a run writes (`scores.json` and the report), removed before the judges are asked again
SCORED_FILES = ("scores.json", "report.md", "report.html", "transcripts.html", "radar.svg", "lengths.svg")


@dataclass
class DialogueResult(EvaluationResult):
    """What `run_dialogue` returns: the conversations, the judges' scores, the report's files (`report`), what failed
    (`failed`: conversations stopped early plus judge answers that failed) and, when nothing could be evaluated, why
    (`error`).

    Args:
        transcripts (`list[dict]`): one per conversation, `error` set where it stopped early.
        played (`int`): the turns played.
        scores (`dict`, *optional*): the judges' `scores.json`; `None` without judges.
    """

    transcripts: list[dict]
    played: int
    scores: dict | None = None


def run_dialogue(config: DialogueConfig, score_transcripts=None) -> DialogueResult:
    """Play the scenarios of `config` between its user simulator and its model, score them with its judges and write
    the report into `config.output_dir`.

    `score_transcripts(transcripts, profiles, judges, seed=...)` scores the conversations; it defaults to the rubric
    judges (`judge_transcripts`), and CoSER's flaw deduction takes its place with
    `rolellm.evaluation.coser.rubric.judge_transcripts_by_flaws` (`rolellm dialogue --rubric coser_flaws`).

    Every endpoint is checked before the first turn (`check_endpoints`: an `EndpointError` stops the run); a run
    where no turn could be played, or no judge answer could be read, writes no scores and no report (an earlier
    run's are removed; the transcripts are kept).

    Returns:
        `DialogueResult`: the transcripts, the turns played, the judges' scores, the failures and the report's files
        (`None` when nothing was played or scored; `error` says why).
    """
    from rolellm.evaluation.multiturn.dialogue import (
        RUN_NAME,
        TURNS_NAME,
        check_scenario_roles,
        dialogue_run,
        run_dialogues,
    )
    from rolellm.evaluation.multiturn.report import write_dialogue_report
    from rolellm.evaluation.multiturn.rubric import judge_transcripts
    from rolellm.evaluation.runlog import check_run
    from rolellm.roles.resolve import profiles_for

    output_dir = Path(config.output_dir)
    profiles = profiles_for(config.profiles, lang=config.lang, roles=config.roles)
    settings = {
        "model": str(config.client.model), "user_model": str(config.user.model),
        "max_tokens": config.client.max_new_tokens, "temperature": config.temperature, "seed": config.seed,
        "card_extras": resolve_card_extras(config.client),
    }  # fmt: skip
    # a folder of another run is refused before anything is loaded, asked or written: first on the settings, then
    # on the scenarios once they are known (a file's now, generated ones after the user model wrote them)
    check_run(output_dir, dialogue_run(**settings), RUN_NAME, TURNS_NAME)
    scenarios = None
    if config.scenarios:  # a scenario file is read, and its roles found, before any endpoint is asked
        scenarios = read_run_scenarios(config, profiles, None)
        check_scenario_roles(scenarios, profiles)
        check_run(output_dir, dialogue_run(**settings, scenarios=scenarios), RUN_NAME, TURNS_NAME)
    output_dir.mkdir(parents=True, exist_ok=True)
    user_client, model_client = make_client(config.user), make_client(config.client)
    judges = [make_client(judge) for judge in config.judges]
    check_endpoints(user_client, model_client, *judges)  # every endpoint answers before the first turn is played
    if scenarios is None:
        scenarios = read_run_scenarios(config, profiles, user_client)
        check_run(output_dir, dialogue_run(**settings, scenarios=scenarios), RUN_NAME, TURNS_NAME)
    if not scenarios:
        raise ValueError("no scenario to play: give --scenarios, Character Cards with a scenario, or a user model")
    (output_dir / "scenarios.jsonl").write_text(
        "".join(json.dumps(asdict(s), ensure_ascii=False) + "\n" for s in scenarios), encoding="utf-8"
    )
    transcripts = run_dialogues(
        scenarios, profiles, model_client, user_client, output_dir, max_tokens=config.client.max_new_tokens,
        temperature=config.temperature, user_temperature=config.temperature, seed=config.seed,
        card_extras=settings["card_extras"],
    )  # fmt: skip
    played = sum(len(t["turns"]) for t in transcripts)
    result = DialogueResult(transcripts=transcripts, played=played, output_dir=config.output_dir)
    result.failed = {FAILED_KIND: sum(1 for t in transcripts if t["error"])}
    if played == 0:
        result.error = "no turn could be played"
        return result
    if judges:
        for name in SCORED_FILES:  # an earlier scoring's: never shown as this run's
            (output_dir / name).unlink(missing_ok=True)
        scores = (score_transcripts or judge_transcripts)(transcripts, profiles, judges, seed=config.seed)
        result.scores = scores
        result.failed[FAILED_KIND] += scores["failures"]["count"]
        if scores["failures"]["unscored"] == len(scores["items"]):  # nothing scored: no scores.json, no report
            result.error = (
                f"no judge answer could be read ({scores['failures']['count']} failed), so nothing was scored; the "
                "transcripts are kept"
            )
            return result
        (output_dir / "scores.json").write_text(json.dumps(scores, indent=2, ensure_ascii=False) + "\n", "utf-8")
    result.report = write_dialogue_report(output_dir)
    return result


def _write_dialogue_report(folder):
    from rolellm.evaluation.multiturn.report import write_dialogue_report

    return write_dialogue_report(folder)


DIALOGUE = Evaluation(DialogueConfig, run_dialogue, _write_dialogue_report)
__getattr__ = deprecated_names(globals(), {"run_dialogue_eval": "run_dialogue"})
