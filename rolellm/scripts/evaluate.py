"""`rolellm evaluate`: answer a RoleBench config with a model, score RAW / CUS / SPE like the paper, write the report.

```bash
# the release's RoleGPT answers as a "model" (no generation): the paper's RoleGPT rows
rolellm evaluate --model rolegpt --dataset_name zh --data_dir RoleBench --output_dir runs/rolegpt-zh

# a local model (folder or Hub id), greedy, with the role system instruction
rolellm evaluate --model ./rolellama --dataset_name en-instruction --data_dir RoleBench \
    --mode system --output_dir runs/rolellama --compare_with runs/rolegpt-en/results.json

# an OpenAI-compatible endpoint (a vLLM server), with a YAML recipe
rolellm evaluate --config examples/recipes/evaluate_vllm.yaml

# judged against another run's answers (its output_dir) instead of RoleGPT's: raw and length-controlled win rate
rolellm evaluate --model ./rolellama --dataset_name zh --data_dir RoleBench --output_dir runs/rolellama \
    --judge_model gpt-4o --baseline runs/qwen-zh
# ... or against a model answering the same rows now
rolellm evaluate ... --judge_model gpt-4o --baseline_model Qwen/Qwen2.5-7B-Instruct \
    --baseline_base_url http://localhost:8001/v1

# the judge also scores every answer on the rubric (1-5 per dimension); --baseline none: the rubric only
rolellm evaluate --model ./rolellama --dataset_name en-instruction --data_dir RoleBench --output_dir runs/rolellama \
    --judge_model gpt-4o --judge_base_url http://localhost:8000/v1 --rubric rubric --baseline none
```

Exit codes: 0 done, 1 some generations or verdicts (win rate or rubric) failed (`--allow_partial` accepts that), 2
a usage or input error, 3 nothing could be generated or judged (an endpoint that does not answer, every rubric
verdict failed: then no `results.json` is written).

Command-line flags override the values of `--config`.
"""

import json

from rolellm.clients.config import ClientConfig, derive_client, endpoint_options
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.scripts.cli import setup_logging
from rolellm.scripts.exit_codes import evaluation_exit_code
from rolellm.scripts.recipe import dataclasses_from, make_command_parser


JudgeOptions = endpoint_options("judge", model_help="Judge model for the win rate vs the baseline and the rubric.")
BaselineOptions = endpoint_options(
    "baseline", model_help="Model answering as the baseline (local folder, Hub id, or served name)."
)
DATACLASSES = [ClientConfig, BenchmarkConfig, JudgeOptions, BaselineOptions]


def make_parser(subparsers=None):
    description = "Answer a RoleBench config with a model (or score RoleGPT's answers), score RAW/CUS/SPE, report."
    return make_command_parser("evaluate", DATACLASSES, description, subparsers)


def evaluate_config(args) -> BenchmarkConfig:
    """The `BenchmarkConfig` of parsed flags: the model's client from the `ClientConfig` flags, the judge and the
    baseline model derived from it with their `--judge_*` and `--baseline_*` flags."""
    client, judge, baseline = dataclasses_from(args, [ClientConfig, JudgeOptions, BaselineOptions])
    [config] = dataclasses_from(
        args, [BenchmarkConfig], client=client, judge=derive_client(client, "judge", judge),
        baseline_client=derive_client(client, "baseline", baseline),
    )  # fmt: skip
    return config


def format_win_rate(judged: dict) -> str:
    """One line: the raw and length-controlled win rates against the baseline, with their CIs and the counts."""
    against = f"Win rate vs {judged.get('baseline') or 'RoleGPT'}"
    if judged["win_rate"] is None:
        return f"{against}: none, no sample was judged ({judged['failed']} failed)"
    return (
        f"{against}: {judged['win_rate']:.2%} (95% CI {judged['ci_low']:.2%}-{judged['ci_high']:.2%}), "
        f"length-controlled {judged['lc_win_rate']:.2%} ({judged['lc_ci_low']:.2%}-{judged['lc_ci_high']:.2%}), "
        f"average rank {judged['average_rank']:.2f}; answer length {judged['model_length']:.0f} vs "
        f"{judged['baseline_length']:.0f} characters; {judged['judged']} judged: wins {judged['wins']}, ties "
        f"{judged['ties']}, losses {judged['losses']}; failed {judged['failed']}"
    )


def format_rubric_scores(rubric: dict) -> str:
    """One line: the rubric means per dimension and overall, per subset, and the failed verdicts."""
    parts = [f"all {rubric['overall']}"] + [
        f"{subset} {part['overall']}" for subset, part in rubric["per_subset"].items()
    ]
    dimensions = ", ".join(f"{d} {mean}" for d, mean in rubric["per_dimension"].items())
    return (
        f"Rubric (1-5, judge {rubric['judge']}): overall {'; '.join(parts)}; per dimension: {dimensions}; "
        f"{rubric['n']} of {rubric['asked']} answers scored, {rubric['failed']} verdicts failed"
    )


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    from rolellm.evaluation.benchmark.report import format_table
    from rolellm.evaluation.benchmark.runner import run_benchmark

    setup_logging()  # the runner logs what it will send (requests, estimated tokens), resumptions and failures
    config = evaluate_config(args)
    result = run_benchmark(config)
    print(format_table([result.to_dict()]))
    if result.win_rate is not None:
        print(format_win_rate(result.win_rate))
    if result.rubric is not None:
        print(format_rubric_scores(result.rubric))
    for metric, reason in result.unavailable.items():
        print(f"{metric}: unavailable ({reason})")
    print(f"Wrote results.json, results.md, results.html and the charts to {args.output_dir}")
    print(f"Counts: {json.dumps(result.counts)}")
    return evaluation_exit_code("evaluate", result, config)


if __name__ == "__main__":
    main()
