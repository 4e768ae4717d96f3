"""RoleBench in lm-evaluation-harness: rolellm's task files run by lm-eval on a model, scored with the paper's ROUGE-L.

The model goes to lm-eval through `rolellm.lm_eval_tasks.model.harness_model`, so lm-eval prompts it with its chat
template (the role's system turn, then the question) and stops each answer at the template's end of turn, exactly as
`rolellm evaluate` does: the two report the same answers and the same ROUGE-L on the same rows.

Offline, the model is a tiny random two-layer Llama built on the spot with rolellm's ChatML role template (its scores
mean nothing; the point is the pipeline), and the data are the release files in `--data_dir`.

Run: `python examples/harness_rolebench.py [--data_dir ../shared/data/rolebench] [--model ./rolellama] [--limit 8]`
(needs `pip install rolellm[harness]`; a minute on a CPU).
"""

import argparse
import tempfile

import lm_eval
from lm_eval.tasks import TaskManager

import rolellm
from rolellm.clients.config import ClientConfig
from rolellm.lm_eval_tasks.model import harness_model
from rolellm.rouge.score import rouge_l
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.models import build_tiny_llama


def evaluate_with_harness(model, data_dir, tasks, limit, max_new_tokens=32, chat_template=None, batch_size=4):
    """`lm_eval.simple_evaluate` of rolellm's `tasks` on `model` with its chat template; returns (the `HFLM`, the
    output of `simple_evaluate` with the logged samples)."""
    client = ClientConfig(model, backend="local", chat_template=chat_template, max_new_tokens=max_new_tokens)
    lm = harness_model(client, batch_size=batch_size)
    output = lm_eval.simple_evaluate(
        model=lm, tasks=tasks, task_manager=TaskManager(include_path=rolellm.lm_eval_tasks_dir(),
                                                        include_defaults=False, metadata={"data_dir": str(data_dir)}),
        limit=limit, log_samples=True, apply_chat_template=True, gen_kwargs=f"max_gen_toks={max_new_tokens}",
    )  # fmt: skip
    return lm, output


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", help="the RoleBench release folder (default: ../shared/data/rolebench)")
    parser.add_argument("--model", help="a model folder or Hub id (default: a tiny random Llama)")
    parser.add_argument("--limit", type=int, default=8, help="documents per task")
    args = parser.parse_args()
    data_dir = args.data_dir or str(find_rolebench_data() / "rolebench")
    model = args.model or str(build_tiny_llama(tempfile.mkdtemp(prefix="tiny-llama-")))
    chat_template = None if args.model else "chatml"  # the tiny model's tokenizer has no template of its own
    _, output = evaluate_with_harness(
        model, data_dir, ["rolebench_zh_spe", "rolebench_zh_cus"], args.limit, chat_template=chat_template
    )
    for task, samples in output["samples"].items():
        reported = output["results"][task]["rouge_l,none"]
        again = rouge_l(
            [s["filtered_resps"][0] for s in samples], [s["doc"]["references"] for s in samples], lang="zh"
        )
        print(f"{task}: lm-eval reports ROUGE-L {reported:.4f}; rolellm on the logged samples {again:.4f}")


if __name__ == "__main__":
    main()
