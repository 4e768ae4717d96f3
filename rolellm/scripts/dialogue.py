"""`rolellm dialogue`: multi-turn evaluation: a simulated user talks with the role model, rubric judges score it.

```bash
# a local checkpoint plays the roles; an endpoint simulates the user and two judges score the conversations
rolellm dialogue --profiles ../shared/data/rolebench --roles "Jack Sparrow" --scenarios examples/data/scenarios.yaml \
    --model ./rolellama --user_model gpt-4o-mini --user_base_url http://localhost:8000/v1 \
    --judge_model gpt-4o qwen2.5-72b --judge_base_url http://localhost:8000/v1 --num_turns 4 --output_dir runs/dialogue
```

Scenarios come from `--scenarios` (YAML or JSONL, format in `docs/multi-turn.md`); without it, from the `scenario`
and `first_mes` of Character Card profiles, and for the other roles `--num_scenarios` are written by the user model.
The evaluated model is described by the `ClientConfig` flags (`--model`, `--base_url`, `--max_new_tokens`, ...: a
local folder or Hub id runs in-process, a served model needs `--base_url`). The user simulator (`--user_model`) and
the judges (`--judge_model`) are derived from it (`derive_client`): a name that is an existing folder runs
in-process; any other is asked at `--user_base_url` / `--judge_base_url`, else at `--base_url` when the evaluated
model is served, else at `$OPENAI_BASE_URL`. Everything is cached in `<output_dir>/cache.sqlite` (`--cache_path`)
and every turn is saved as it is played: a run that stops, even killed, goes on where it was when started again.
Writes `scenarios.jsonl`, `turns.jsonl`, `transcripts.jsonl` (one conversation a
line) and, with judges, `scores.json`; then the report: `report.md`, `report.html` (per-dimension, per-role and
per-judge tables, radar charts per role, answer lengths, the judges' agreement, links into `transcripts.html`, the
conversations as a page). Exit codes: 0 done, 1 some conversations or judge answers failed (unless
`--allow_partial`), 2 a usage error, 3 no turn could be played.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.clients.config import ClientConfig, derive_client, endpoint_options
from rolellm.evaluation.multiturn.run import DialogueConfig
from rolellm.scripts.cli import setup_logging
from rolellm.scripts.exit_codes import evaluation_exit_code
from rolellm.scripts.recipe import dataclasses_from, make_command_parser


UserOptions = endpoint_options("user", model_help="User simulator: a local folder, or an endpoint model name.")
JudgeOptions = endpoint_options("judge", many=True, model_help="Rubric judge models (none: no scores).")


@dataclass
class RubricOptions:
    """Which judge scores the conversations.

    Args:
        rubric (`Literal["rubric", "coser_flaws"]`, *optional*, defaults to `"rubric"`): rolellm's rubric (1 to 5 on
            six dimensions, `rolellm.evaluation.multiturn.rubric`) or CoSER's flaw deduction (0 to 100 on three
            dimensions, `rolellm.evaluation.coser.rubric`).
    """

    rubric: Literal["rubric", "coser_flaws"] = field(
        default="rubric", metadata={"help": "rubric (1-5, six dimensions) or coser_flaws (CoSER's flaw deduction)."}
    )


DATACLASSES = [ClientConfig, DialogueConfig, UserOptions, JudgeOptions, RubricOptions]


def make_parser(subparsers=None):
    description = "Multi-turn evaluation: a simulated user talks with the role model for N turns; rubric judges score."
    return make_command_parser("dialogue", DATACLASSES, description, subparsers)


def dialogue_config(args) -> DialogueConfig:
    """The `DialogueConfig` of parsed flags: the model's client from the `ClientConfig` flags, the user simulator
    and the judges derived from it with their `--user_*` and `--judge_*` flags."""
    client, user, judge = dataclasses_from(args, [ClientConfig, UserOptions, JudgeOptions])
    user_client = derive_client(client, "user", user)
    if user_client is None:
        raise ValueError("the following argument is required: --user_model")
    judges = [derive_client(client, "judge", judge, model=name) for name in judge.judge_model or []]
    [config] = dataclasses_from(args, [DialogueConfig], client=client, user=user_client, judges=judges)
    return config


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME
    from rolellm.evaluation.multiturn.run import run_dialogue

    setup_logging()
    config = dialogue_config(args)
    score_transcripts = None
    if args.rubric == "coser_flaws":
        from rolellm.evaluation.coser.rubric import judge_transcripts_by_flaws as score_transcripts
    result = run_dialogue(config, score_transcripts)
    output_dir = Path(config.output_dir)
    print(
        f"Played {result.played} turns in {len(result.transcripts)} conversations; wrote {output_dir / TRANSCRIPTS_NAME}"
    )
    for transcript in result.transcripts:
        if transcript["error"]:
            print(f"conversation {transcript['id']} stopped early: {transcript['error']}", file=sys.stderr)
    if result.error is None:
        if result.scores is not None:
            print(format_scores(result.scores))
            print(f"Wrote {output_dir / 'scores.json'}")
        report = result.report
        print(f"Wrote {report['report']}, {report['html']} and {report['transcripts']}")
    return evaluation_exit_code("dialogue", result, config)


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
