"""`rolellm dialogue`: multi-turn evaluation: a simulated user talks with the role model, rubric judges score it.

```bash
# a local checkpoint plays the roles; an endpoint simulates the user and two judges score the conversations
rolellm dialogue --profiles ../shared/data/rolebench --roles "Jack Sparrow" --scenarios examples/data/scenarios.yaml \
    --model ./rolellama --user_model gpt-4o-mini --judge_model gpt-4o qwen2.5-72b --base_url http://localhost:8000/v1 \
    --num_turns 4 --output_dir runs/dialogue
```

Scenarios come from `--scenarios` (YAML or JSONL, format in `docs/multi-turn.md`); without it, from the `scenario`
and `first_mes` of Character Card profiles, and for the other roles `--num_scenarios` are written by the user model.
A model that is an existing folder runs in-process (`LocalChatClient`); any other name is asked at `--base_url`
(`--model_base_url` for the evaluated model if it is served elsewhere). Everything is cached in `--cache_path`
(default `<output_dir>/cache.sqlite`) and every turn is saved as it is played: a run that stops, even killed, goes on
where it was when started again. Writes `scenarios.jsonl`, `turns.jsonl`, `transcripts.jsonl` (one conversation a
line) and, with judges, `scores.json`; then the report: `report.md`, `report.html` (per-dimension, per-role and
per-judge tables, radar charts per role, answer lengths, the judges' agreement, links into `transcripts.html`, the
conversations as a page). Exit codes: 0 done, 1 some conversations or judge answers failed (unless
`--allow_partial`), 2 a usage error, 3 no turn could be played.
"""

import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.roles.resolve import as_sources, profiles_field
from rolellm.scripts.exit_codes import EXIT_FAILED, EXIT_PARTIAL
from rolellm.scripts.recipe import dataclasses_from, make_command_parser


@dataclass
class DialogueArguments:
    """What `rolellm dialogue` reads, who talks, who judges, and where it writes.

    > Parameters that control the roles and scenarios

    Args:
        profiles (`list[str]`): one or more profile sources `rolellm.roles.load_profiles` reads (`--profiles`,
            repeatable: release folder, screenplay folder or file, `desc.json`, Character Card or folder of cards).
        roles (`list[str]`, *optional*): only these roles (spelled as in the profiles or not); required for a
            screenplay file.
        lang (`Literal["en", "zh"]`, *optional*): the profiles' language.
        scenarios (`str`, *optional*): a YAML or JSONL scenario file; default: card scenarios, else generated.
        num_scenarios (`int`, *optional*, defaults to 2): scenarios the user model writes per role without a file.
        num_turns (`int`, *optional*): turns of every conversation (default: each scenario's `num_turns`).

    > Parameters that control the models

        model (`str`): the evaluated model: a local folder (run in-process) or an endpoint's model name.
        user_model (`str`): the user simulator (and scenario writer): a local folder or an endpoint's model name.
        judge_model (`list[str]`, *optional*): rubric judges; none: transcripts only.
        base_url (`str`, *optional*): the endpoint of the user and judge models (and of `model`, see below).
        model_base_url (`str`, *optional*): the evaluated model's endpoint, when it differs from `base_url`.
        max_concurrency (`int`, *optional*, defaults to 16): endpoint requests in flight at once.
        chat_template (`str`, *optional*): chat template of a local model without one (`"chatml"`).
        batch_size (`int`, *optional*, defaults to 8): prompts per batch of a local model.
        max_new_tokens (`int`, *optional*, defaults to 256): the role's answer budget.
        temperature (`float`, *optional*, defaults to 0.0), seed (`int`, *optional*, defaults to 0): the role's and
            the simulator's sampling (greedy by default).

    > Parameters that control the output

        output_dir (`str`): where scenarios, turns, transcripts and scores go.
        cache_path (`str`, *optional*): the answer cache, defaults to `<output_dir>/cache.sqlite`.
        allow_partial (`bool`, *optional*, defaults to `False`): exit 0 although some requests failed.
    """

    profiles: list[str] = profiles_field(required=True)
    model: str = field(metadata={"help": "Evaluated model: a local folder, or an endpoint model name."})
    user_model: str = field(metadata={"help": "User simulator: a local folder, or an endpoint model name."})
    output_dir: str = field(metadata={"help": "Where scenarios, turns, transcripts and scores go."})
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles."})
    lang: Literal["en", "zh"] | None = field(default=None, metadata={"help": "The profiles' language."})
    scenarios: str | None = field(default=None, metadata={"help": "YAML/JSONL scenarios (default: cards, generated)."})
    num_scenarios: int = field(default=2, metadata={"help": "Scenarios generated per role without --scenarios."})
    num_turns: int | None = field(default=None, metadata={"help": "Turns per conversation (default: the scenario's)."})
    judge_model: list[str] | None = field(default=None, metadata={"help": "Rubric judge models (none: no scores)."})
    base_url: str | None = field(default=None, metadata={"help": "Endpoint of the user and judge models."})
    model_base_url: str | None = field(default=None, metadata={"help": "Endpoint of --model (default: --base_url)."})
    max_concurrency: int = field(default=16, metadata={"help": "Endpoint requests in flight at once."})
    chat_template: str | None = field(default=None, metadata={"help": "Local models: chat template or 'chatml'."})
    batch_size: int = field(default=8, metadata={"help": "Local models: prompts per batch."})
    max_new_tokens: int = field(default=256, metadata={"help": "The role's answer budget."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature of the role and the user."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    cache_path: str | None = field(
        default=None, metadata={"help": "Answer cache (default <output_dir>/cache.sqlite)."}
    )
    allow_partial: bool = field(default=False, metadata={"help": "Exit 0 although some requests failed."})

    def __post_init__(self):
        self.profiles = as_sources(self.profiles)
        if self.num_turns is not None and self.num_turns < 1:
            raise ValueError(f"--num_turns must be at least 1, got {self.num_turns}")
        if self.num_scenarios < 1:
            raise ValueError(f"--num_scenarios must be at least 1, got {self.num_scenarios}")

    def client_config(self, model: str, base_url: str | None = None):
        """The `ClientConfig` of one of the run's models: in-process when `model` is a folder, else an endpoint."""
        from rolellm.clients.config import ClientConfig

        local = Path(model).is_dir()
        return ClientConfig(
            model,
            backend="local" if local else "openai",
            base_url=None if local else (base_url or self.base_url),
            max_concurrency=self.max_concurrency,
            batch_size=self.batch_size,
            max_new_tokens=self.max_new_tokens,
            chat_template=self.chat_template,
            cache_path=self.cache_path or str(Path(self.output_dir) / "cache.sqlite"),
        )


def make_parser(subparsers=None):
    description = "Multi-turn evaluation: a simulated user talks with the role model for N turns; rubric judges score."
    return make_command_parser("dialogue", [DialogueArguments], description, subparsers)


def read_run_scenarios(args: DialogueArguments, profiles, user_client) -> list:
    """The run's scenarios: the file (only those of `--roles`, when given), else card scenarios and generated ones;
    `--num_turns` applied. `profiles` is a `Profiles` mapping: a scenario's role is found however it is spelled."""
    from rolellm.evaluation.multiturn.dialogue import generate_scenarios, read_scenarios, scenarios_from_card

    if args.scenarios:
        scenarios = [s for s in read_scenarios(args.scenarios) if not args.roles or s.role in profiles]
    else:
        scenarios = [s for profile in profiles.values() for s in scenarios_from_card(profile)]
        carded = {s.role for s in scenarios}
        rest = [profile for name, profile in profiles.items() if name not in carded]
        if rest:
            generated, failures = generate_scenarios(rest, user_client, args.num_scenarios, seed=args.seed)
            for role, error in failures.items():
                print(f"no scenario for {role}: {error}", file=sys.stderr)
            scenarios += generated
    for scenario in scenarios:
        scenario.num_turns = args.num_turns or scenario.num_turns
    return scenarios


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    from rolellm.clients.config import check_endpoints, make_client
    from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME, run_dialogues
    from rolellm.evaluation.multiturn.report import write_dialogue_report
    from rolellm.evaluation.multiturn.rubric import judge_transcripts
    from rolellm.roles.resolve import profiles_for

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    [config] = dataclasses_from(args, [DialogueArguments])
    output_dir = Path(config.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    profiles = profiles_for(config.profiles, lang=config.lang, roles=config.roles)
    user_client = make_client(config.client_config(config.user_model))
    model_client = make_client(config.client_config(config.model, config.model_base_url))
    judges = [make_client(config.client_config(name)) for name in config.judge_model or []]
    check_endpoints(user_client, model_client, *judges)  # every endpoint answers before the first turn is played
    scenarios = read_run_scenarios(config, profiles, user_client)
    if not scenarios:
        raise ValueError("no scenario to play: give --scenarios, Character Cards with a scenario, or a user model")
    (output_dir / "scenarios.jsonl").write_text(
        "".join(json.dumps(asdict(s), ensure_ascii=False) + "\n" for s in scenarios), encoding="utf-8"
    )
    transcripts = run_dialogues(
        scenarios, profiles, model_client, user_client, output_dir, max_tokens=config.max_new_tokens,
        temperature=config.temperature, user_temperature=config.temperature, seed=config.seed,
    )  # fmt: skip
    played = sum(len(t["turns"]) for t in transcripts)
    stopped = [t for t in transcripts if t["error"]]
    print(f"Played {played} turns in {len(transcripts)} conversations; wrote {output_dir / TRANSCRIPTS_NAME}")
    for transcript in stopped:
        print(f"conversation {transcript['id']} stopped early: {transcript['error']}", file=sys.stderr)
    if played == 0:
        print("rolellm dialogue: no turn could be played", file=sys.stderr)
        return EXIT_FAILED
    failures = len(stopped)
    if config.judge_model:
        scores = judge_transcripts(transcripts, profiles, judges, seed=config.seed)
        (output_dir / "scores.json").write_text(json.dumps(scores, indent=2, ensure_ascii=False) + "\n", "utf-8")
        print(format_scores(scores))
        print(f"Wrote {output_dir / 'scores.json'}")
        failures += scores["failures"]["count"]
    report = write_dialogue_report(output_dir)
    print(f"Wrote {report['report']}, {report['html']} and {report['transcripts']}")
    if failures and not config.allow_partial:
        what = f"{failures} conversations or judge answers failed"
        print(f"rolellm dialogue: {what} (pass --allow_partial to accept a partial run)", file=sys.stderr)
        return EXIT_PARTIAL
    return 0


def format_scores(scores: dict) -> str:
    """Mean score per dimension with the judges' agreement and the mean answer length, as a Markdown table."""
    agreement = scores.get("agreement", {})
    lines = ["| dimension | mean | n | Krippendorff's alpha | length-score Spearman |", "|---|---|---|---|---|"]
    for dimension, row in scores["summary"]["per_dimension"].items():
        alpha = agreement.get(dimension, {}).get("krippendorff_alpha")
        cells = [row["mean"], row["n"], alpha, row["length_spearman"]]
        lines.append(f"| {dimension} | " + " | ".join("n/a" if c is None else str(c) for c in cells) + " |")
    length = scores["summary"]["length"]
    lines.append(f"\nOverall {scores['summary']['overall']}; mean answer length {length['chars_per_answer']} chars; "
                 f"{scores['failures']['count']} judge answers failed")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
