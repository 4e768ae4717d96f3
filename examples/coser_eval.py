"""CoSER's given-circumstance acting evaluation, end to end: simulate the scenes of a test set, judge, score, report.

Offline by default: a local chat-completions test server plays the actor, the Environment, the next-speaker
predictor and the judge with canned answers (the scores mean nothing; the files and the flow are real). With
`--base_url` every agent is a model at that endpoint (a vLLM server), with `--judge_base_url` the judge elsewhere,
with its own key (`--judge_api_key_env`: the environment variable holding it; the other agents get
`OPENAI_API_KEY` when it is set):

    python examples/coser_eval.py --test_file tests/fixtures/coser/test_set.json --output_dir runs/coser-demo
    OPENAI_JUDGE_KEY=sk-... python examples/coser_eval.py --test_file CoSER/data/test/example_test_set.json \
        --base_url http://localhost:8000/v1 --actor_model actor --judge_model gpt-4o-2024-08-06 \
        --judge_base_url https://api.openai.com/v1 --judge_api_key_env OPENAI_JUDGE_KEY

It then re-scores the results file it wrote (`rescore_coser_results`), as `rolellm coser rescore` does.
"""

import argparse
import contextlib
import json
import re
import tempfile
from pathlib import Path

from rolellm import ClientConfig, CoserConfig, run_coser
from rolellm.evaluation.coser.prompts import DIMENSIONS
from rolellm.evaluation.coser.scoring import read_results, rescore_coser_results
from rolellm.testing.server import ChatCompletionsServer


def offline_agents(body):
    """Canned agents: characters that think and act, a windy world, a predictor that ends the scene at round 5,
    and a judge that finds one moderate flaw per dimension."""
    messages, system = body["messages"], body["messages"][0]["content"]
    if body["model"] == "judge":
        dimension = next(d for d in DIMENSIONS if f"dimension, {d}:" in system)
        return json.dumps({dimension: {"flaws": [{"instance": "a stiff line", "type": dimension, "severity": 3}]}})
    turn = sum(m["role"] == "assistant" for m in messages)
    if body["model"] == "nsp":
        speakers = re.search(r"The candidates are (.+?);", system).group(1).split(", ")
        return "Next Speaker: <END CHAT>" if turn >= 5 else f"Next Speaker: {speakers[turn % len(speakers)]}"
    if body["model"] == "env":
        return "A gust of wind rattles the shutters."
    name = re.match(r"You are (.+?), a character of", system).group(1)
    return f"[{name} weighs the moment.] ({name} steps forward) It is my turn to speak, the {turn + 1}th time."


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test_file", required=True, help="A CoSER test set JSON.")
    parser.add_argument("--output_dir", default=None, help="Where the results go (default: a temp folder).")
    parser.add_argument("--base_url", default=None, help="An OpenAI-compatible endpoint (default: offline).")
    parser.add_argument("--actor_model", default="actor")
    parser.add_argument("--env_model", default="env")
    parser.add_argument("--nsp_model", default="nsp")
    parser.add_argument("--judge_model", default="judge")
    parser.add_argument("--judge_base_url", default=None)
    parser.add_argument("--judge_api_key_env", default=None, help="The variable holding the judge's key.")
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="coser-")

    with contextlib.ExitStack() as stack:
        base_url = args.base_url or stack.enter_context(ChatCompletionsServer(offline_agents)).base_url
        endpoint = {"base_url": base_url, "progress": False}
        config = CoserConfig(
            test_file=args.test_file, output_dir=output_dir, limit=args.limit,
            client=ClientConfig(args.actor_model, max_new_tokens=512, **endpoint),
            env=ClientConfig(args.env_model, **endpoint), nsp=ClientConfig(args.nsp_model, **endpoint),
            judge=ClientConfig(args.judge_model, **{**endpoint, "base_url": args.judge_base_url or base_url},
                               api_key_env=args.judge_api_key_env),
        )  # fmt: skip
        result = run_coser(config)

    results = result.results
    print(f"{result.scored} of {result.scenes} scenes scored; failures: {len(result.failures)}")
    for case_id, case in results["cases"].items():
        print(f"  {case_id}: {case['score']} ({case.get('rounds')} rounds, ended by {case.get('ended')})")
    print("| " + " | ".join(results["scores"]) + " |")
    print("| " + " | ".join("n/a" if v is None else f"{v:.4f}" for v in results["scores"].values()) + " |")
    recomputed = rescore_coser_results(read_results(Path(output_dir) / "results.json"))
    print(
        f"Re-scored from the critiques: avg {recomputed['scores']['avg']}, {len(recomputed['mismatches'])} mismatches"
    )
    print(f"Report: {result.report['html']}")


if __name__ == "__main__":
    main()
