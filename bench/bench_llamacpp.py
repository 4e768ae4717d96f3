"""Generated tokens per second of `--backend llamacpp` (`LlamaCppChatClient`: a GGUF file in llama.cpp, `batch_size`
prompts decoded together) against `--backend local` (`LocalChatClient`: transformers, batched) on the same role
prompts, on CPU, on the embedded real model SmolLM2-135M-Instruct.

The prompts are `--prompts` role prompts (the paper's system instruction and a question, a fixed sample of the English
RoleBench rows of the four roles the repository describes, as in `bench_local.py`). Every client is given the same
token ids (checked: rolellm's own encoder, with the same template), decodes greedily for at most `--max_new_tokens`
and stops at the end of turn; their answers are compared too. llama.cpp runs the shipped file (Q4_1) as
`--model FILE.gguf --backend llamacpp` does, one prompt at a time and in batches of `--batch_size`, and the files
`rolellm export --gguf q4_0` and `--gguf q8_0` write from the model's transformers folder, in batches of
`--batch_size`. transformers runs that folder as `--backend local` does, in batches of `--batch_size`, in float32 (its
default) and in bfloat16 (faster where the CPU computes it natively: AVX512-BF16, AMX); the faster of the two is its
best setting. All use the same threads (`--threads`, default: the usable cores). The setups run in turns,
`--repeats` times; printed are the median seconds, tokens and tokens per second, and the ratios to the local
backend's float32 batches and to its best setting.

Then where the time goes: one decoding step (a token for each of 1, 8 and `--batch_size` sequences, each holding
`--held` tokens), in llama.cpp on the exported Q4_0 file and in transformers in float32 and bfloat16, median of
`--repeats` times 10 steps; the ratio is to the faster of the two. The slope between the two largest sizes is what
one more sequence costs a step; the rest is the step's fixed cost. A backend's lead in a large batch is the ratio of
the slopes: there both compute the same arithmetic, one in 4-bit blocks and 8-bit activations, the other in float32 or
bfloat16. Printed with them: the vector extensions llama.cpp was built with.

    python bench/bench_llamacpp.py [--prompts 8] [--batch_size 8] [--max_new_tokens 64] [--repeats 2] [--threads N]
        [--held 150]
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import load_english_sample, require_rolebench_data  # sets the offline environment


# isort: split
import datasets
import llama_cpp
import torch
from transformers.utils import logging as hf_logging

from rolellm.clients.gguf import embedded_model, embedded_model_file
from rolellm.clients.llamacpp_backend import LlamaCppChatClient
from rolellm.clients.llamacpp_engine import PlannedToken
from rolellm.clients.local import LocalChatClient
from rolellm.training.data import rolebench_to_conversations
from rolellm.training.gguf_export import export_gguf


# the local backend's settings; its best is measured, not assumed from the CPU's flags
LOCAL_DTYPES = ("float32", "bfloat16")


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=8, help="role prompts (fixed sample of English rows, seed 0)")
    parser.add_argument("--max_new_tokens", type=int, default=64, help="answer budget of every prompt")
    parser.add_argument("--batch_size", type=int, default=8, help="prompts answered together, by every backend")
    parser.add_argument("--repeats", type=int, default=2, help="runs of every setup, in turns")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="CPU threads of all")
    parser.add_argument("--held", type=int, default=150, help="tokens each sequence holds in the step measurements")
    return parser


def run(client, requests) -> tuple[int, list[str]]:
    results = client.generate(requests)
    assert all(result.ok for result in results), [result.error for result in results if not result.ok]
    return sum(result.usage["completion_tokens"] for result in results), [result.text for result in results]


def llamacpp_step(engine, n: int, held: int, steps: int) -> float:
    """Seconds of one llama.cpp decoding step of a token for each of `n` sequences holding `held` tokens."""
    engine.clear()
    for seq in range(n):
        engine._decode([PlannedToken(100 + (k * 7 + seq) % 1000, k, seq, False) for k in range(held - 1)])
    engine._decode([PlannedToken(200 + seq, held - 1, seq, True) for seq in range(n)])  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        engine._decode([PlannedToken(200 + seq, len(engine.held[seq]), seq, True) for seq in range(n)])
    seconds = (time.perf_counter() - start) / steps
    engine.clear()
    return seconds


@torch.no_grad()
def transformers_step(model, n: int, held: int, steps: int) -> float:
    """Seconds of one transformers decoding step (`model` with its cache) of a token for each of `n` sequences
    holding `held` tokens."""
    generator = torch.Generator().manual_seed(0)
    cache = model(torch.randint(100, 1000, (n, held), generator=generator), use_cache=True).cache
    tokens = torch.randint(100, 1000, (n, 1), generator=generator)
    cache = model(tokens, cache=cache, use_cache=True).cache  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        cache = model(tokens, cache=cache, use_cache=True).cache
    return (time.perf_counter() - start) / steps


def best_local(rate: dict[str, float]) -> str:
    """The local backend's fastest setup: its best setting, measured, not assumed from the CPU's flags."""
    return max((label for label in rate if label.startswith("local")), key=rate.get)


def print_rates(args, clients, requests, times, tokens, answers) -> dict[str, float]:
    local_f32 = f"local, float32, batch_size={args.batch_size}"
    print(f"\nSmolLM2-135M-Instruct, {args.threads} threads; {len(requests)} role prompts, greedy, at most "
          f"{args.max_new_tokens} new tokens; median of {args.repeats} runs in turns")  # fmt: skip
    rate = {label: tokens[label] / statistics.median(times[label]) for label in clients}
    best = best_local(rate)
    print(f"{'setup':40s} {'median s':>9s} {'tokens':>7s} {'tokens/s':>9s} {'vs local f32':>13s} {'vs best local':>14s}"
          f" {'same answers':>13s}")  # fmt: skip
    for label in clients:
        same = sum(a == b for a, b in zip(answers[label], answers[local_f32]))
        ratios = f"{rate[label] / rate[local_f32]:12.2f}x {rate[label] / rate[best]:13.2f}x"
        print(f"{label:40s} {statistics.median(times[label]):9.1f} {tokens[label]:7d} {rate[label]:9.1f} {ratios} "
              f"{same:9d} of {len(requests)}")  # fmt: skip
    print(f"best local setting: {best}; same answers: greedy answers equal to the local float32 backend's")
    print(f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) built with: {built_with()}")
    return rate


def built_with() -> str:
    """The vector extensions llama.cpp was compiled for, as it reports them (`AVX2 AVX512 ...`)."""
    features = (part.partition("=") for part in llama_cpp.llama_print_system_info().decode().split("|"))
    return " ".join(name.split(":")[-1].strip() for name, _, on in features if on.strip() == "1")


def step_costs(engine, models: dict[str, object], args) -> None:
    """One decoding step in llama.cpp (`engine`) and in transformers (`models`, by dtype); the ratio is to the faster
    transformers setting at each size."""
    sizes = sorted({1, min(8, args.batch_size), args.batch_size})
    setups = {"llama.cpp Q4_0": (llamacpp_step, engine)}
    setups.update({f"transformers {dtype}": (transformers_step, model) for dtype, model in models.items()})
    print(f"\none decoding step, each sequence holding {args.held} tokens; median of {args.repeats} times 10 steps")
    print(f"{'sequences':>9s}" + "".join(f" {name + ' ms':>24s}" for name in setups) + f" {'ratio':>6s}")
    ms = {name: {} for name in setups}
    for n in sizes:
        for name, (measure, engine_or_model) in setups.items():
            runs = [measure(engine_or_model, n, args.held, 10) for _ in range(args.repeats)]
            ms[name][n] = 1000 * statistics.median(runs)
        costs = [ms[name][n] for name in setups]
        print(f"{n:9d}" + "".join(f" {cost:24.1f}" for cost in costs) + f" {min(costs[1:]) / costs[0]:5.2f}x")
    if len(sizes) > 1:
        low, high = sizes[-2], sizes[-1]
        slope = {name: (ms[name][high] - ms[name][low]) / (high - low) for name in setups}
        fixed = {name: ms[name][low] - low * slope[name] for name in setups}
        print(f"one more sequence ({low} to {high}): " + ", ".join(f"{name} {slope[name]:.2f} ms" for name in setups))
        print("the fixed part of a step: " + ", ".join(f"{name} {fixed[name]:.1f} ms" for name in setups))


def main(args):
    local_f32 = f"local, float32, batch_size={args.batch_size}"
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    torch.set_num_threads(args.threads)
    rows, profiles = load_english_sample(require_rolebench_data(), args.prompts)
    conversations = rolebench_to_conversations(rows, profiles, reference="first", seed=0)
    requests = [messages[:-1] for messages in conversations["messages"]]  # the system instruction and the question
    exported = Path(tempfile.mkdtemp(prefix="bench-llamacpp-"))
    files = {"Q4_1, shipped": embedded_model_file()}
    for gguf_type in ("q4_0", "q8_0"):
        files[f"{gguf_type.upper()}, exported"] = export_gguf(embedded_model(), exported / gguf_type, gguf_type)
    clients = {}
    try:
        clients["llamacpp Q4_1, shipped, batch_size=1"] = LlamaCppChatClient(
            files["Q4_1, shipped"], batch_size=1, max_new_tokens=args.max_new_tokens, n_threads=args.threads,
            progress=False,
        )  # fmt: skip
        for label, file in files.items():
            clients[f"llamacpp {label}, batch_size={args.batch_size}"] = LlamaCppChatClient(
                file,
                batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens,
                n_threads=args.threads,
                progress=False,
            )
        for dtype in LOCAL_DTYPES:
            clients[f"local, {dtype}, batch_size={args.batch_size}"] = LocalChatClient(
                embedded_model(),
                batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens,
                dtype=dtype,
                progress=False,
            )
        ids = {label: [client.encode_prompt(r) for r in requests] for label, client in clients.items()}
        if any(prompt_ids != ids[local_f32] for prompt_ids in ids.values()):
            raise SystemExit("the clients would be given different prompt ids: the comparison would not be fair")
        times = {label: [] for label in clients}
        tokens, answers = {}, {}
        for _ in range(args.repeats):
            for label, client in clients.items():
                if isinstance(client, LlamaCppChatClient):
                    client.engine.clear()  # each run from an empty cache, as the local backend's
                start = time.perf_counter()
                tokens[label], answers[label] = run(client, requests)
                times[label].append(time.perf_counter() - start)
        rate = print_rates(args, clients, requests, times, tokens, answers)
        q4_0 = clients[f"llamacpp Q4_0, exported, batch_size={args.batch_size}"]
        local = {dtype: clients[f"local, {dtype}, batch_size={args.batch_size}"].model for dtype in LOCAL_DTYPES}
        step_costs(q4_0.engine, local, args)
    finally:
        for client in clients.values():
            if isinstance(client, LlamaCppChatClient):
                client.close()
    return rate


if __name__ == "__main__":
    main(make_parser().parse_args())
