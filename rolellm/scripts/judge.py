"""`rolellm judge`: check an LLM judge against people before trusting it.

```bash
# Spearman and Kendall per rubric dimension, Cohen's kappa for pairwise choices, each with a bootstrap CI
rolellm judge agreement --human examples/data/human_labels.jsonl --results runs/dialogue
```

`--results` is a folder holding `scores.json` (rubric scores of `rolellm dialogue`) and/or `results.json` (the
pairwise verdicts of `rolellm evaluate` with a judge); `--human` is a JSONL file of human labels (format in
`docs/multi-turn.md`). The agreement is printed and written to `<results>/agreement.json` (or `--output`); in the
first case the folder's reports (`report.html`, `results.html`) are written again to show it.
Exit codes: 0 compared, 1 nothing could be compared (no human item id has a judge verdict), 2 a usage or input error.
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.scripts.exit_codes import EXIT_USAGE
from rolellm.scripts.recipe import make_command_group, make_command_parser


@dataclass
class AgreementArguments:
    """`rolellm judge agreement`: a judge's scores and verdicts against human labels.

    Args:
        human (`str`): JSONL file of human labels (format in `docs/multi-turn.md`).
        results (`str`): folder with `scores.json` (`rolellm dialogue`) and/or `results.json` (`rolellm evaluate`).
        output (`str`, *optional*): where to write the agreement JSON; defaults to `<results>/agreement.json`.
        num_bootstrap (`int`, *optional*, defaults to 1000): bootstrap resamples of the confidence intervals.
        confidence_level (`float`, *optional*, defaults to 0.95): the level of the confidence intervals.
        seed (`int`, *optional*, defaults to 0): the bootstrap seed.
    """

    human: str = field(metadata={"help": "JSONL file of human labels (see docs/multi-turn.md)."})
    results: str = field(
        metadata={"help": "Folder with scores.json (rolellm dialogue) and/or results.json (evaluate)."}
    )
    output: str | None = field(
        default=None, metadata={"help": "Where to write the agreement JSON (default: <results>/agreement.json)."}
    )
    num_bootstrap: int = field(default=1000, metadata={"help": "Bootstrap resamples."})
    confidence_level: float = field(default=0.95, metadata={"help": "Level of the confidence intervals."})
    seed: int = field(default=0, metadata={"help": "Bootstrap seed."})


def make_parser(subparsers=None):
    description = "Check an LLM judge against people: agreement of its scores and verdicts with human labels."
    parser, commands = make_command_group("judge", description, subparsers, "judge_command", "<command>")
    help_text = "Spearman/Kendall per dimension and Cohen's kappa of a judge against human labels, with bootstrap CIs."
    make_command_parser("agreement", [AgreementArguments], help_text, commands)
    return parser


def _value(value, ci) -> str:
    if value is None:
        return "n/a"
    interval = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci[0] is not None else ""
    return f"{value:.3f}{interval}"


def format_agreement(result: dict, level: float = 0.95) -> str:
    """The agreement as a Markdown table (one row per dimension, and one for pairwise choices)."""
    lines = [f"| | n | Spearman [{level:.0%} CI] | Kendall [{level:.0%} CI] |", "|---|---|---|---|"]
    for dimension, row in result["scores"].items():
        spearman, kendall = _value(row["spearman"], row["spearman_ci"]), _value(row["kendall"], row["kendall_ci"])
        lines.append(f"| {dimension} | {row['n']} | {spearman} | {kendall} |")
    if "choices" in result:
        choices = result["choices"]
        lines.append(
            f"| pairwise choice | {choices['n']} | Cohen's kappa {_value(choices['kappa'], choices['kappa_ci'])} | |"
        )
    return "\n".join(lines)


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    from rolellm.evaluation.benchmark.report import rewrite_reports
    from rolellm.evaluation.multiturn.agreement import compare_with_humans, read_human_labels, read_judge_results

    prog = "rolellm judge agreement"
    if args.num_bootstrap < 1 or not 0 < args.confidence_level < 1:
        print(f"{prog}: --num_bootstrap must be >= 1 and --confidence_level in (0, 1)", file=sys.stderr)
        return EXIT_USAGE
    try:
        labels = read_human_labels(args.human)
        scores, choices = read_judge_results(args.results)
    except (OSError, ValueError) as error:  # a missing file, a malformed line (DataFormatError), unreadable JSON
        print(f"{prog}: {error}", file=sys.stderr)
        return EXIT_USAGE
    result = compare_with_humans(labels, scores, choices, args.num_bootstrap, args.confidence_level, args.seed)
    if result["compared"] == 0:
        ids = sorted({label["id"] for label in labels})
        found = sorted(set(scores) | set(choices))
        print(
            f"{prog}: nothing to compare: none of the {len(ids)} human item ids ({', '.join(ids[:3])}...) has a judge "
            f"verdict in {args.results} (its ids: {', '.join(found[:3]) or 'none'}...); nothing was written",
            file=sys.stderr,
        )
        return EXIT_USAGE  # labels and verdicts of different items: an input error, nothing was done
    print(format_agreement(result, args.confidence_level))
    if result["unmatched"]:
        print(f"{len(result['unmatched'])} human items have no judge verdict: {', '.join(result['unmatched'][:5])}")
    output = Path(args.output) if args.output else Path(args.results) / "agreement.json"
    output.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"Wrote {output}")
    reports = rewrite_reports(Path(args.results)) if args.output is None else []  # now showing the agreement
    if reports:
        print(f"Wrote again {', '.join(str(path) for path in reports)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
