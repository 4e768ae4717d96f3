"""Generated tokens per second of `LocalChatClient` (batched, greedy) against plain `model.generate` on the same
prompts, on CPU, on the embedded real model SmolLM2-135M-Instruct.

The prompts are `--prompts` role prompts: the paper's role system instruction and a question, from a fixed sample
(seed 0) of the English RoleBench rows of the four roles whose descriptions the repository bundles
(`examples/data/roles-eng.json`). The model (`rolellm.clients.gguf.embedded_model()`, float32) is loaded once and
shared by every setup; its tokenizer's own ChatML template renders the prompts, and the token ids the client
generates from (`encode_prompt`) are checked to equal `tokenizer.apply_chat_template(..., add_generation_prompt=True)`,
what `model.generate` gets. Setups, for each batch size B of `--batch_sizes` (8 is the client's default):

- `model.generate`, one prompt at a time (no padding);
- `model.generate` on batches of B prompts in the sample's order, left-padded with the tokenizer;
- `LocalChatClient(model=..., tokenizer=..., batch_size=B)`: prompts grouped by system text and sorted by length,
  left-padded batches of B, the tokens a batch's prompts share (the role's system text) computed once.

All greedy, `max_new_tokens` `--max_new_tokens`, stopping at the end of turn (`<|im_end|>`, the model's end token);
a row's generated tokens are counted up to its end of turn (what the client reports as `completion_tokens`), so a
batch's rows that stopped early count what they said, not the padding generated after it. The setups run in turns,
`--repeats` times; printed are the minimum and the median seconds, the generated tokens, tokens per second from the
median and its ratio to `model.generate` one prompt at a time and to `model.generate` at the same batch size
(about 7 minutes with `--repeats 2` on a loaded 2-core machine: one prompt at a time is the slow part).

    python bench/bench_local.py [--prompts 16] [--max_new_tokens 64] [--batch_sizes 8 16] [--repeats 3]
"""

import argparse
import statistics
import time

from _common import load_english_sample, load_real_model, require_rolebench_data  # sets the offline environment


# isort: split
import datasets
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from rolellm.clients.local import LocalChatClient
from rolellm.training.data import rolebench_to_conversations


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=16, help="role prompts (fixed sample of English rows, seed 0)")
    parser.add_argument("--max_new_tokens", type=int, default=64, help="answer budget of every prompt")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[8, 16], help="batch sizes to compare")
    parser.add_argument("--repeats", type=int, default=3, help="runs of every setup, in turns")
    return parser


def generated_tokens(rows: list[list[int]], stop_ids: list[int]) -> int:
    """Tokens generated up to and including each row's first end token (the whole row when it has none)."""
    return sum(next((j + 1 for j, token in enumerate(row) if token in stop_ids), len(row)) for row in rows)


def plain_generate(model, tokenizer, prompts: list[list[int]], batch_size: int, max_new_tokens: int) -> int:
    """`model.generate` over batches of `prompts` in their order, left-padded; returns the generated tokens."""
    total = 0
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer.pad(
            {"input_ids": prompts[start : start + batch_size]}, padding_side="left", return_tensors="pt"
        )
        with torch.no_grad():
            output = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False)
        total += generated_tokens(output[:, batch["input_ids"].shape[1] :].tolist(), [tokenizer.eos_token_id])
    return total


def client_generate(client: LocalChatClient, requests: list[list[dict]]) -> int:
    results = client.generate(requests)
    assert all(result.ok for result in results), [result.error for result in results if not result.ok]
    return sum(result.usage["completion_tokens"] for result in results)


def main(args):
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    path, tokenizer = load_real_model()
    rows, profiles = load_english_sample(require_rolebench_data(), args.prompts)
    conversations = rolebench_to_conversations(rows, profiles, reference="first", seed=0)
    requests = [messages[:-1] for messages in conversations["messages"]]  # the system instruction and the question
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    clients = {size: LocalChatClient(model=model, tokenizer=tokenizer, batch_size=size,
                                     max_new_tokens=args.max_new_tokens, progress=False)
               for size in args.batch_sizes}  # fmt: skip
    client = clients[args.batch_sizes[0]]
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, return_dict=False) for m in requests]
    if prompts != [client.encode_prompt(messages) for messages in requests]:
        raise SystemExit("the client's prompt ids differ from apply_chat_template's: the comparison would not be fair")
    if client.stop_ids != [tokenizer.eos_token_id]:
        raise SystemExit(f"the client stops at {client.stop_ids}, model.generate at {tokenizer.eos_token_id}")

    setups = {"model.generate, one prompt at a time": lambda: plain_generate(model, tokenizer, prompts, 1,
                                                                              args.max_new_tokens)}  # fmt: skip
    for size in args.batch_sizes:
        setups[f"model.generate, batches of {size}"] = lambda size=size: plain_generate(
            model, tokenizer, prompts, size, args.max_new_tokens
        )
        setups[f"LocalChatClient, batch_size={size}"] = lambda size=size: client_generate(clients[size], requests)
    plain_generate(model, tokenizer, prompts[:2], 2, 2)  # warm-up
    times = {label: [] for label in setups}
    tokens = {label: [] for label in setups}
    for _ in range(args.repeats):  # in turns: every setup sees the same machine load
        for label, run in setups.items():
            start = time.perf_counter()
            tokens[label].append(run())
            times[label].append(time.perf_counter() - start)

    lengths = [len(p) for p in prompts]
    print(f"\nSmolLM2-135M-Instruct, float32, {torch.get_num_threads()} threads; {len(prompts)} role prompts of "
          f"{min(lengths)} to {max(lengths)} tokens (mean {statistics.mean(lengths):.0f}), greedy, at most "
          f"{args.max_new_tokens} new tokens; {args.repeats} runs of each setup in turns; min / median seconds, rates "
          "from the medians")  # fmt: skip
    one = "model.generate, one prompt at a time"
    rate = {label: statistics.median(tokens[label]) / statistics.median(times[label]) for label in setups}
    print(f"{'setup':40s} {'min / median s':>15s} {'tokens':>7s} {'tokens/s':>9s} {'vs one':>7s} {'vs generate':>12s}")
    for label in setups:
        size = label.rsplit(" ", 1)[-1].split("=")[-1]
        same = rate.get(f"model.generate, batches of {size}")
        cell = f"{min(times[label]):.1f} / {statistics.median(times[label]):.1f}"
        versus = f"{rate[label] / same:11.2f}x" if same and label != one else f"{'':12s}"
        print(f"{label:40s} {cell:>15s} {statistics.median(tokens[label]):7.0f} {rate[label]:9.1f} "
              f"{rate[label] / rate[one]:6.2f}x {versus}")  # fmt: skip
    return rate


if __name__ == "__main__":
    main(make_parser().parse_args())
