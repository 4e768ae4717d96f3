"""ROUGE-L speed: rolellm vs the `rouge` package (the paper's metric) vs `rouge_score`, on the same release pairs.

Pairs are the RoleGPT baseline answers against their test references (English SPE, Chinese SPE, Chinese CUS), as
`rouge` sees them (Chinese split into characters). rolellm scores every pair; `rouge` and `rouge_score` score
the first pairs for a time budget each, and the script checks that rolellm's scores are identical to `rouge`'s on
those. Times are CPU seconds of this process (`time.process_time`), so other load on the machine counts less.
rolellm's rates are steady state (best of three calls, after a first call); the one-time cost of the first call in
a new process (importing `numba` and loading its compiled kernels, or compiling them when nothing is cached) is
measured apart, in fresh processes, and printed on its own.

    python bench/bench_rouge.py [--data_dir ../shared/data] [--budget 15]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rouge import Rouge
from rouge_score.rouge_scorer import RougeScorer

from rolellm.rouge.score import rouge_l_pairs, to_rouge_text
from rolellm.testing.data import find_rolebench_data


PARTS = {
    "English SPE": ("rolebench-eng/instruction-generalization/role_specific", "whitespace"),
    "Chinese SPE": ("rolebench-zh/role_specific", "char"),
    "Chinese CUS": ("rolebench-zh/general", "char"),
}


class WhitespaceTokenizer:
    """For `rouge_score` on text that is already split (its default tokenizer drops every non-ASCII character)."""

    def tokenize(self, text):
        return text.split()


RUNS = 3


def read_pairs(folder, tokenizer):
    def read(name):
        with open(folder / name, encoding="utf-8") as file:
            return [json.loads(line) for line in file]

    baseline = {(row["role"], row["question"]): row["generated"][0] for row in read("rolegpt_baseline.jsonl")}
    predictions, references = [], []
    for row in read("test.jsonl"):
        prediction = to_rouge_text(baseline[row["role"], row["question"]], tokenizer)
        for reference in row["generated"]:
            predictions.append(prediction)
            references.append(to_rouge_text(reference, tokenizer))
    return predictions, references


def timed(function, *args):
    start = time.process_time()
    result = function(*args)
    return time.process_time() - start, result


def run_for(budget, score_one, predictions, references):
    """Score pairs one by one until `budget` CPU seconds are spent; return (seconds, scores)."""
    scores, start = [], time.process_time()
    for prediction, reference in zip(predictions, references):
        scores.append(score_one(prediction, reference))
        if time.process_time() - start > budget:
            break
    return time.process_time() - start, scores


FIRST_CALL = (
    "import time; from rolellm.rouge.score import rouge_l_pairs, _compiled_kernels; "
    "start, wall = time.process_time(), time.perf_counter(); rouge_l_pairs(['a b'], ['a c']); "
    "print(time.process_time() - start, time.perf_counter() - wall, _compiled_kernels() is not None)"
)


def first_call_cost():
    """CPU and wall seconds of the first ROUGE-L call in a fresh process (after importing rolellm's ROUGE-L): with an
    empty `numba` cache (importing numba and compiling the kernels), then with the cache that run left."""
    runs = []
    with tempfile.TemporaryDirectory() as cache:
        for _ in range(2):
            environment = {**os.environ, "NUMBA_CACHE_DIR": cache}
            output = subprocess.run(
                [sys.executable, "-c", FIRST_CALL], env=environment, capture_output=True, text=True, check=True
            )
            cpu, wall, compiled = output.stdout.split()
            runs.append((float(cpu), float(wall), compiled == "True"))
    return runs


def main(args):
    data_dir = Path(args.data_dir) if args.data_dir else find_rolebench_data()
    if data_dir is None or not (data_dir / "rolebench").is_dir():
        print("RoleBench release files not found: pass --data_dir or set ROLEBENCH_DATA_DIR")
        return 1
    rouge = Rouge(metrics=["rouge-l"])
    scorer = RougeScorer(["rougeL"], tokenizer=WhitespaceTokenizer())
    totals = {"rolellm": [0.0, 0], "rouge": [0.0, 0], "rouge_score": [0.0, 0]}
    (compile_cpu, compile_wall, compiled), (load_cpu, load_wall, _) = first_call_cost()
    if compiled:
        print(
            f"first ROUGE-L call in a new process (imports numba): {compile_cpu:.2f} CPU s ({compile_wall:.2f} s wall) "
            f"compiling the kernels (once per machine), {load_cpu:.2f} CPU s ({load_wall:.2f} s wall) with them cached"
        )
    else:
        print(f"numba is not installed: NumPy backend (first call {load_cpu:.2f} CPU s); pip install numba")
    rouge_l_pairs(["a b"], ["a c"])  # the one-time cost above, paid before the steady-state timings
    print(
        f"median pairs/s of {RUNS} runs in turns (rolellm scores every pair; rouge and rouge_score a CPU budget each)"
    )
    print(f"{'pairs':<12} {'count':>6} {'rolellm/s':>10} {'rouge/s':>8} {'rouge_score/s':>13} {'vs rouge':>9} {'vs rouge_score':>14}")  # fmt: skip
    for name, (folder, tokenizer) in PARTS.items():
        predictions, references = read_pairs(data_dir / "rolebench" / folder, tokenizer)
        rates_by_tool = {tool: [] for tool in totals}
        for _ in range(RUNS):  # in turns: the three see the same machine load
            seconds, ours = timed(rouge_l_pairs, predictions, references)
            rates_by_tool["rolellm"].append(len(predictions) / seconds)
            seconds, expected = run_for(
                args.budget / RUNS, lambda p, r: rouge.get_scores(p, r)[0]["rouge-l"], predictions, references
            )
            rates_by_tool["rouge"].append(len(expected) / seconds)
            seconds, scored = run_for(
                args.budget / RUNS, lambda p, r: scorer.score(r, p)["rougeL"], predictions, references
            )
            rates_by_tool["rouge_score"].append(len(scored) / seconds)
            mismatches = sum(
                (scores["r"], scores["p"], scores["f"]) != (ours["recall"][i], ours["precision"][i], ours["f"][i])
                for i, scores in enumerate(expected)
            )
            if mismatches:
                print(f"{name}: {mismatches} of {len(expected)} pairs differ from rouge")
                return 1
        rates = [statistics.median(rates_by_tool[tool]) for tool in totals]
        low = min(rates_by_tool["rolellm"]) / max(rates_by_tool["rouge"])
        print(
            f"{name:<12} {len(predictions):>6} {rates[0]:>10.0f} {rates[1]:>8.0f} {rates[2]:>13.0f} "
            f"{rates[0] / rates[1]:>8.0f}x {rates[0] / rates[2]:>13.1f}x   (lowest run pair: {low:.0f}x rouge)"
        )
        for tool, rate in zip(totals, rates):  # the time each would take to score every pair of the part
            totals[tool][0] += len(predictions) / rate
            totals[tool][1] += len(predictions)
    rates = {tool: count / seconds for tool, (seconds, count) in totals.items()}
    print(
        f"{'all':<12} {totals['rolellm'][1]:>6} {rates['rolellm']:>10.0f} {rates['rouge']:>8.0f} "
        f"{rates['rouge_score']:>13.0f} {rates['rolellm'] / rates['rouge']:>8.0f}x "
        f"{rates['rolellm'] / rates['rouge_score']:>13.1f}x"
    )
    print("rolellm scores every pair and equals rouge exactly on every pair rouge scored.")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=None, help="folder holding rolebench/ (default: ../shared/data)")
    parser.add_argument(
        "--budget", type=float, default=15.0, help="CPU seconds for rouge and for rouge_score per part"
    )
    sys.exit(main(parser.parse_args()))
