"""RoleBench in lm-evaluation-harness: rolellm's task files run by lm-eval on a model, scored with the paper's ROUGE-L.

Offline, the model is a tiny random two-layer Llama built on the spot (its scores mean nothing; the point is the
pipeline), and the data are the release files in `--data_dir`. With a real model:

    lm_eval --model hf --model_args pretrained=./rolellama --tasks rolebench_zh_spe,rolebench_zh_cus \
        --apply_chat_template --include_path $(python -c "import rolellm; print(rolellm.lm_eval_tasks_dir())") \
        --metadata '{"data_dir": "RoleBench"}' --log_samples --output_path runs/harness

Run: `python examples/harness_rolebench.py [--data_dir ../shared/data/rolebench] [--limit 8]` (needs
`pip install rolellm[harness]`; a minute on a CPU).
"""

import argparse
import tempfile

import lm_eval
import torch
from lm_eval.tasks import TaskManager

import rolellm
from rolellm.evaluation.benchmark.rouge import rouge_l
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.models import build_tiny_llama


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", help="the RoleBench release folder (default: ../shared/data/rolebench)")
    parser.add_argument("--model", help="a model folder or Hub id (default: a tiny random Llama)")
    parser.add_argument("--limit", type=int, default=8, help="documents per task")
    args = parser.parse_args()
    data_dir = args.data_dir or str(find_rolebench_data() / "rolebench")
    model = args.model or build_tiny_llama(tempfile.mkdtemp(prefix="tiny-llama-"))
    tasks = TaskManager(include_path=rolellm.lm_eval_tasks_dir(), metadata={"data_dir": data_dir})
    output = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={model}", tasks=["rolebench_zh_spe", "rolebench_zh_cus"],
        task_manager=tasks, limit=args.limit, log_samples=True, gen_kwargs="max_gen_toks=32",
        device="cuda" if torch.cuda.is_available() else "cpu",
    )  # fmt: skip
    for task, samples in output["samples"].items():
        reported = output["results"][task]["rouge_l,none"]
        again = rouge_l(
            [s["filtered_resps"][0] for s in samples], [s["doc"]["references"] for s in samples], lang="zh"
        )
        print(f"{task}: lm-eval reports ROUGE-L {reported:.4f}; rolellm on the logged samples {again:.4f}")


if __name__ == "__main__":
    main()
