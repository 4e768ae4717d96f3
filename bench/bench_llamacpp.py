"""Generated tokens per second of `--backend llamacpp` (`LlamaCppChatClient`: the GGUF file in llama.cpp, one prompt
at a time) against `--backend local` (`LocalChatClient`: transformers, float32, batched) on the same role prompts, on
CPU, on the embedded real model SmolLM2-135M-Instruct.

The prompts are `--prompts` role prompts (the paper's system instruction and a question, a fixed sample of the English
RoleBench rows of the four roles the repository describes, as in `bench_local.py`). Both clients are given the same
token ids (checked: rolellm's own encoder, with the same template), decode greedily for at most `--max_new_tokens`
and stop at the end of turn; their answers are compared too. llama.cpp runs the shipped file (Q4_1) as
`--model FILE.gguf --backend llamacpp` does; transformers its dequantized folder as `--backend local` does. Both use
the same number of threads (`--threads`, default: the usable cores). The setups run in turns, `--repeats` times;
printed are the median seconds, tokens and tokens per second, and the ratios.

    python bench/bench_llamacpp.py [--prompts 8] [--max_new_tokens 64] [--repeats 2] [--threads N]
"""

import argparse
import os
import statistics
import time

from _common import load_english_sample, require_rolebench_data  # sets the offline environment


# isort: split
import datasets
import torch
from transformers.utils import logging as hf_logging

from rolellm.clients.gguf import embedded_model, embedded_model_file
from rolellm.clients.llamacpp_backend import LlamaCppChatClient
from rolellm.clients.local import LocalChatClient
from rolellm.training.data import rolebench_to_conversations


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="role prompts (fixed sample of English rows, seed 0)")
    parser.add_argument("--max_new_tokens", type=int, default=64, help="answer budget of every prompt")
    parser.add_argument("--repeats", type=int, default=2, help="runs of every setup, in turns")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads of both")
    return parser


def run(client, requests) -> tuple[int, list[str]]:
    results = client.generate(requests)
    assert all(result.ok for result in results), [result.error for result in results if not result.ok]
    return sum(result.usage["completion_tokens"] for result in results), [result.text for result in results]


def main(args):
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    torch.set_num_threads(args.threads)
    rows, profiles = load_english_sample(require_rolebench_data(), args.prompts)
    conversations = rolebench_to_conversations(rows, profiles, reference="first", seed=0)
    requests = [messages[:-1] for messages in conversations["messages"]]  # the system instruction and the question
    llama = LlamaCppChatClient(embedded_model_file(), max_new_tokens=args.max_new_tokens, n_threads=args.threads,
                               progress=False)  # fmt: skip
    try:
        clients = {
            f"llamacpp ({embedded_model_file().name}), one at a time": llama,
            "local (transformers float32), batch_size=8": LocalChatClient(
                embedded_model(), batch_size=8, max_new_tokens=args.max_new_tokens, progress=False
            ),
            "local (transformers float32), batch_size=1": LocalChatClient(
                embedded_model(), batch_size=1, max_new_tokens=args.max_new_tokens, progress=False
            ),
        }
        local = clients["local (transformers float32), batch_size=8"]
        if [llama.encode_prompt(r) for r in requests] != [local.encode_prompt(r) for r in requests]:
            raise SystemExit("the two clients would be given different prompt ids: the comparison would not be fair")
        times = {label: [] for label in clients}
        tokens, answers = {}, {}
        for _ in range(args.repeats):
            for label, client in clients.items():
                start = time.perf_counter()
                tokens[label], answers[label] = run(client, requests)
                times[label].append(time.perf_counter() - start)
    finally:
        llama.close()
    print(f"\nSmolLM2-135M-Instruct, {args.threads} threads; {len(requests)} role prompts, greedy, at most "
          f"{args.max_new_tokens} new tokens; median of {args.repeats} runs in turns")  # fmt: skip
    rate = {label: tokens[label] / statistics.median(times[label]) for label in clients}
    base = rate["local (transformers float32), batch_size=8"]
    print(f"{'setup':48s} {'median s':>9s} {'tokens':>7s} {'tokens/s':>9s} {'vs local b8':>12s}")
    for label in clients:
        print(f"{label:48s} {statistics.median(times[label]):9.1f} {tokens[label]:7d} {rate[label]:9.1f} "
              f"{rate[label] / base:11.2f}x")  # fmt: skip
    same = sum(
        a == b for a, b in zip(answers[next(iter(clients))], answers["local (transformers float32), batch_size=8"])
    )
    print(f"greedy answers equal to the local backend's: {same} of {len(requests)} (Q4_1 against float32)")
    return rate


if __name__ == "__main__":
    main(make_parser().parse_args())
