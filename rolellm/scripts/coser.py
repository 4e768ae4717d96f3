"""`rolellm coser`: CoSER's given-circumstance acting evaluation (`run`) and the re-scoring of its results (`rescore`).

```bash
# every agent served by one vLLM server; the judge pinned by the CoSER authors at OpenAI
rolellm coser run --test_file CoSER/data/test/test_set.json --actor_model my-model \
    --base_url http://localhost:8000/v1 --env_model my-model --nsp_model my-model \
    --judge_model gpt-4o-2024-08-06 --judge_base_url https://api.openai.com/v1 --judge_api_key_env OPENAI_JUDGE_KEY \
    --output_dir runs/coser

# recompute every score of a results file (rolellm's or the original scripts') and compare with the recorded ones
rolellm coser rescore runs/coser/results.json --json
```

The actor is described by the `ClientConfig` flags (`--actor_model` or `--model`, `--base_url`, `--max_new_tokens`
(here 512 by default, the original's), ...); the Environment (`--env_model`, default gpt-4o), the next-speaker
predictor (`--nsp_model`, default gpt-4o-mini) and the judge (`--judge_model`) are derived from it
(`derive_client`): a name that is an existing folder runs in-process, any other is asked at its own `--*_base_url`,
else at `--base_url`. Everything is cached in `<output_dir>/cache.sqlite` and every message is saved as it is
played: a run that stops, even killed, goes on where it was when started again.

Exit codes: 0 done; 1 some scenes or judge answers failed (unless `--allow_partial`), or `rescore` found a recorded
score it does not reproduce; 2 a usage or input error; 3 an endpoint is unusable, or no scene could be scored.
"""

import argparse
import json
import sys
from dataclasses import dataclass, field

from rolellm.clients.config import ClientConfig, derive_client, endpoint_options
from rolellm.evaluation.coser.run import DEFAULT_ENV_MODEL, DEFAULT_NSP_MODEL, CoserConfig, count
from rolellm.scripts.cli import setup_logging
from rolellm.scripts.exit_codes import EXIT_PARTIAL, evaluation_exit_code
from rolellm.scripts.recipe import dataclasses_from, make_command_group, make_command_parser


EnvOptions = endpoint_options("env", model_help=f"Environment agent model ({DEFAULT_ENV_MODEL} when not given).")
NspOptions = endpoint_options("nsp", model_help=f"Next-speaker predictor model ({DEFAULT_NSP_MODEL} when not given).")
JudgeOptions = endpoint_options(
    "judge", model_help="Judge model: required, except with --dry_run (CoSER pins gpt-4o-2024-08-06)."
)
# `ClientConfig` flags that change nothing in a CoSER run: its prompts are CoSER's, never a Character Card's
NOT_FOR_COSER = ("card_extras",)
RUN_DATACLASSES = [ClientConfig, CoserConfig, EnvOptions, NspOptions, JudgeOptions]


@dataclass
class RescoreArguments:
    """`rolellm coser rescore`: recompute the scores of a results file.

    Args:
        results (`str`): a CoSER results file (`results.json` of `rolellm coser run`, or the original's).
        json (`bool`, *optional*, defaults to `False`): print `{"scores": {...}, "cases": {case_id: score}}` as JSON.
    """

    results: str = field(metadata={"help": "A CoSER results file (rolellm's or the original's).", "positional": True})
    json: bool = field(default=False, metadata={"help": "Print the scores as JSON."})


def make_parser(subparsers=None):
    description = "CoSER's given-circumstance acting evaluation: simulate test scenes, judge their flaws, score."
    parser, actions = make_command_group("coser", description, subparsers)
    run = make_command_parser("run", RUN_DATACLASSES, "Simulate, judge and score CoSER test scenes.", actions)
    run.set_defaults(max_new_tokens=512)  # the original's answer budget of every agent
    model = next(action for action in run._actions if action.dest == "model")
    model.required = False  # --actor_model (CoSER's name) or --model
    run.add_argument(
        "--actor_model", "--actor-model", dest="model", default=argparse.SUPPRESS, help="The actor model (= --model)."
    )
    for action in [action for action in run._actions if action.dest in NOT_FOR_COSER]:
        run._remove_action(action)
        for option in action.option_strings:
            del run._option_string_actions[option]
    make_command_parser("rescore", [RescoreArguments], "Recompute the scores of a CoSER results file.", actions)
    return parser


def coser_config(args) -> CoserConfig:
    """The `CoserConfig` of parsed `run` flags: the actor from the `ClientConfig` flags, the other agents derived."""
    if getattr(args, "model", None) is None:
        raise ValueError("the following argument is required: --actor_model (or --model)")
    client, env, nsp, judge = dataclasses_from(args, [ClientConfig, EnvOptions, NspOptions, JudgeOptions])
    [config] = dataclasses_from(
        args, [CoserConfig], client=client,
        env=derive_client(client, "env", env, model=env.env_model or DEFAULT_ENV_MODEL),
        nsp=derive_client(client, "nsp", nsp, model=nsp.nsp_model or DEFAULT_NSP_MODEL),
        judge=derive_client(client, "judge", judge),
    )  # fmt: skip
    return config


def format_scores(scores: dict) -> str:
    """The run's means as a Markdown table."""
    keys = list(scores)
    cells = ["n/a" if scores[k] is None else f"{scores[k]:.4f}" if k in ("bleu", "rouge_l") else f"{scores[k]:.2f}"
             for k in keys]  # fmt: skip
    return "| " + " | ".join(keys) + " |\n|" + "---|" * len(keys) + "\n| " + " | ".join(cells) + " |"


def run_main(args) -> int:
    from rolellm.evaluation.coser.run import run_coser

    setup_logging()
    config = coser_config(args)
    result = run_coser(config)
    if config.dry_run:
        print(format_estimate(result.scenes, result.estimate))
        return 0
    if result.scored:
        print(format_scores(result.results["scores"]))
        print(f"{result.scored} of {result.scenes} scenes scored; wrote {config.output_dir}/results.json, "
              f"report.html and conversations.html")  # fmt: skip
    if result.results["run"].get("warning"):
        print(f"rolellm coser: warning: {result.results['run']['warning']}", file=sys.stderr)
    for failure in result.failures:
        print(f"scene {failure['case']}: {failure['error']}", file=sys.stderr)
    return evaluation_exit_code("coser", result, config, retry_hint="; run again to retry them")


def format_estimate(scenes: int, estimate: dict) -> str:
    """A dry run's estimate (`rolellm.evaluation.coser.run.estimate_run`) in a few lines: requests and tokens per
    agent, and the batches played one after the other."""
    lines = [f"Dry run: {count(scenes, 'scene')} checked, every prompt rendered; nothing was sent. At most:", ""]
    lines += ["| agent | model | requests | prompt tokens | completion tokens |", "|---|---|---|---|---|"]
    for row in estimate["agents"]:
        lines.append(f"| {row['agent']} | {row['model']} | {row['requests']:,} | {row['prompt_tokens']:,} | "
                     f"{row['completion_tokens']:,} |")  # fmt: skip
    lines += [
        "",
        f"An upper bound: every scene plays {estimate['rounds']} rounds, with messages as long as its reference's, and "
        f"every judge answer is asked {estimate['judge_attempts']} times (re-asked when it cannot be read); tokens "
        "are estimated without a tokenizer. The cost is these tokens at each model's price.",
        f"The run is at most {estimate['batches']:,} batches one after the other (the Environment, the characters and "
        "the next speaker each round, then the judge), each as long as its slowest answer.",
    ]
    return "\n".join(lines)


def rescore_main(args) -> int:
    from rolellm.evaluation.coser.scoring import read_results, rescore_coser_results

    recomputed = rescore_coser_results(read_results(args.results))
    if args.json:
        print(json.dumps({"scores": recomputed["scores"], "cases": recomputed["cases"]}, indent=2, ensure_ascii=False))
    else:
        print(format_scores(recomputed["scores"]))
        scored = sum(score is not None for score in recomputed["cases"].values())
        print(f"{scored} of {len(recomputed['cases'])} scenes scored")
    if recomputed["unchecked"]:
        print(f"rolellm coser rescore: the recorded {' and '.join(recomputed['unchecked'])} cannot be recomputed: the "
              "file has no per-scene values of them", file=sys.stderr)  # fmt: skip
    for mismatch in recomputed["mismatches"]:
        where = f"scene {mismatch['case']}" if mismatch["case"] is not None else "the run's means"
        print(f"{where}: {mismatch['field']} recorded {mismatch['recorded']}, recomputed {mismatch['recomputed']}",
              file=sys.stderr)  # fmt: skip
    if recomputed["mismatches"]:
        scenes = sorted({m["case"] for m in recomputed["mismatches"] if m["case"] is not None})
        print(f"rolellm coser rescore: {len(recomputed['mismatches'])} recorded values differ (scenes: "
              f"{', '.join(scenes) or 'none'})", file=sys.stderr)  # fmt: skip
        return EXIT_PARTIAL
    return 0


def main(args=None):
    if args is None:
        args = make_parser().parse_args()
    return run_main(args) if args.action == "run" else rescore_main(args)


if __name__ == "__main__":
    sys.exit(main())
