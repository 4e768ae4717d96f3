"""`rolellm evaluate`: answer a RoleBench config with a model, score RAW / CUS / SPE like the paper, write the report.

```bash
# the release's RoleGPT answers as a "model" (no generation): the paper's RoleGPT rows
rolellm evaluate --model_name_or_path rolegpt --dataset_name zh --data_dir RoleBench --output_dir runs/rolegpt-zh

# a local model (folder or Hub id), greedy, with the role system instruction
rolellm evaluate --model_name_or_path ./rolellama --dataset_name en-instruction --data_dir RoleBench \
    --mode system --output_dir runs/rolellama --compare_with runs/rolegpt-en/results.json

# an OpenAI-compatible endpoint (a vLLM server), with a YAML recipe
rolellm evaluate --config examples/recipes/evaluate_vllm.yaml
```

Command-line flags override the values of `--config`.
"""

import json
import logging
import sys

from rolellm.evaluation.runner import EvaluateConfig
from rolellm.scripts.exit_codes import EXIT_PARTIAL
from rolellm.scripts.recipe import dataclasses_from, make_command_parser


def make_parser(subparsers=None):
    description = "Answer a RoleBench config with a model (or score RoleGPT's answers), score RAW/CUS/SPE, report."
    return make_command_parser("evaluate", EvaluateConfig, description, subparsers)


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    from rolellm.evaluation.report import format_table
    from rolellm.evaluation.runner import run_benchmark

    # the runner logs what it will send (requests, estimated tokens), resumptions and failures
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    [config] = dataclasses_from(args, [EvaluateConfig])
    results = run_benchmark(config)
    print(format_table([results]))
    if "win_rate" in results:
        judged = results["win_rate"]
        if judged["win_rate"] is None:
            print(f"Win rate vs RoleGPT: none, no sample was judged ({judged['failed']} failed)")
        else:
            print(
                f"Win rate vs RoleGPT: {judged['win_rate']:.2%} (95% CI {judged['ci_low']:.2%}-"
                f"{judged['ci_high']:.2%}), average rank {judged['average_rank']:.2f}; {judged['judged']} judged: "
                f"wins {judged['wins']}, ties {judged['ties']}, losses {judged['losses']}; failed {judged['failed']}"
            )
    for metric, reason in results["unavailable"].items():
        print(f"{metric}: unavailable ({reason})")
    print(f"Wrote results.json, results.md, per_role.png and comparison.png to {args.output_dir}")
    counts = json.dumps(results["counts"])
    print(f"Counts: {counts}")
    failed = {
        "generations": results["counts"].get("failed", 0),
        "verdicts": results.get("win_rate", {}).get("failed", 0),
    }
    if any(failed.values()) and not config.allow_partial:
        what = ", ".join(f"{n} {name}" for name, n in failed.items() if n)
        print(f"rolellm evaluate: {what} failed (pass --allow_partial to accept a partial run)", file=sys.stderr)
        return EXIT_PARTIAL
    return 0


if __name__ == "__main__":
    main()
