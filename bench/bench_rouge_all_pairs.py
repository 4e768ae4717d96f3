"""ROUGE-L equality on every release pair: rolellm's scores against the `rouge` package (the paper's scorer).

Every (RoleGPT baseline answer, reference) pair of the English SPE, Chinese SPE and Chinese CUS parts (both splits
of the Chinese general part: its baseline file answers the train questions too), as `rouge` sees them, is scored
by both; any pair whose recall, precision or F differs is printed and the script exits 1. The times of the two
scorers are printed side by side. `make test` checks a fixed sample of these pairs; this checks all of them.

    python bench/bench_rouge_all_pairs.py [--data_dir ../shared/data]
"""

import argparse
import json
import sys
import time
from pathlib import Path

from rouge import Rouge

from rolellm.rouge.score import rouge_l_pairs, to_rouge_text
from rolellm.testing.data import find_rolebench_data


PARTS = [
    ("rolebench-eng/instruction-generalization/role_specific", "test", "whitespace"),
    ("rolebench-zh/role_specific", "test", "char"),
    ("rolebench-zh/general", "test", "char"),
    ("rolebench-zh/general", "train", "char"),
]
MEASURES = {"recall": "r", "precision": "p", "f": "f"}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def release_pairs(folder: Path, split: str, tokenizer: str) -> tuple[list[str], list[str]]:
    """Flat (prediction, reference) pairs: each baseline answer against every reference of its question."""
    baseline = {(r["role"], r["question"]): r["generated"][0] for r in read_jsonl(folder / "rolegpt_baseline.jsonl")}
    predictions, references = [], []
    for row in read_jsonl(folder / f"{split}.jsonl"):
        for reference in row["generated"]:
            predictions.append(to_rouge_text(baseline[row["role"], row["question"]], tokenizer))
            references.append(to_rouge_text(reference, tokenizer))
    return predictions, references


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", help="the shared data folder (default: $ROLEBENCH_DATA_DIR or ../shared/data)")
    args = parser.parse_args()
    data = Path(args.data_dir) if args.data_dir else find_rolebench_data()
    if data is None:
        print("skipped: the RoleBench release files were not found (set ROLEBENCH_DATA_DIR)")
        return 0
    scorer, mismatches, total = Rouge(metrics=["rouge-l"]), 0, 0
    print(f"{'part':<58} {'pairs':>7} {'rolellm s':>10} {'rouge s':>9} {'ratio':>8}")
    for part, split, tokenizer in PARTS:
        predictions, references = release_pairs(data / "rolebench" / part, split, tokenizer)
        start = time.process_time()
        ours = rouge_l_pairs(predictions, references)
        ours_time = time.process_time() - start
        start = time.process_time()
        expected = []
        for prediction, reference in zip(predictions, references):
            try:
                expected.append(scorer.get_scores(prediction, reference)[0]["rouge-l"])
            except ValueError:  # `rouge` raises on a prediction without a sentence; rolellm scores it 0
                expected.append({"r": 0.0, "p": 0.0, "f": 0.0})
        rouge_time = time.process_time() - start
        for index, scores in enumerate(expected):
            for measure, key in MEASURES.items():
                if ours[measure][index] != scores[key]:
                    mismatches += 1
                    print(f"MISMATCH {part}/{split} pair {index} {measure}: {ours[measure][index]} != {scores[key]}")
        total += len(expected)
        ratio = rouge_time / max(ours_time, 1e-9)
        print(f"{part + '/' + split:<58} {len(expected):>7} {ours_time:>10.3f} {rouge_time:>9.2f} {ratio:>7.0f}x")
    print(
        f"{total} pairs, {mismatches} differing scores: {'identical to rouge 1.0.1' if not mismatches else 'FAILED'}"
    )
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
