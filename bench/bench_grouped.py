"""GRPO training step with each group's prompt computed once (`RoleGRPOTrainer`, `prefix_sharing=True`) against
TRL's default forward (`prefix_sharing=False`: the K completions as K padded rows, the prompt in each), on CPU.

Llamas with a BPE tokenizer trained on the Chinese RoleBench texts: the tiny test model of `rolellm.testing.models`
(2 layers, 64 wide) and one of about 50M parameters (10 layers, 640 wide), prompted with the paper's role system
instruction and questions from a fixed sample of the Chinese RoleBench train rows. K = 8 completions per prompt,
`--groups` prompts per step.

What is timed is the part of a training step that the two paths do differently: the policy's log-prob forward, the
GRPO loss and the backward (`compute_loss` + `backward`). Generation is excluded: the completions are generated
once, before the timing, by the model itself through TRL's `_generate_and_score_completions` (which also gives the
advantages), and both sides get the very same batches. The optimizer step, the same on both sides, is excluded too.
One trainer per size runs both sides (same weights, same inputs); steps of the two sides alternate so the machine's
drift affects them alike. The timed steps form `--runs` runs of `--rounds` steps of each side; printed per size are
the minimum and the median over the runs of the seconds per step, the tokens each side runs through the model, and
the ratio of the medians.

    python bench/bench_grouped.py [--rows 64] [--groups 2] [--completion_length 64] [--rounds 3] [--runs 3]
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import load_sample, require_rolebench_data  # sets the offline environment: before the HF imports


# isort: split
import datasets
import torch
from transformers.utils import logging as hf_logging

from rolellm.encoding.chat_template import set_role_chat_template
from rolellm.rewards.reference import reference_rouge_l
from rolellm.roles.resolve import load_profiles
from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer
from rolellm.training.grouped import plan_grouped_rows
from rolellm.training.grpo import RoleGRPOConfig, RoleGRPOTrainer


K = 8
SIZES = {
    "tiny": {},  # build_tiny_llama's defaults: 2 layers, 64 wide
    "50m": {
        "hidden_size": 640,
        "intermediate_size": 1792,
        "num_hidden_layers": 10,
        "num_attention_heads": 10,
        "num_key_value_heads": 10,
    },
}
SIDES = {"trl": "TRL's forward (K padded rows)", "grouped": "RoleGRPOTrainer, prompt once per group"}


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=64, help="fixed sample of Chinese train rows (seed 0)")
    parser.add_argument("--groups", type=int, default=2, help="prompts per step (each with K = 8 completions)")
    parser.add_argument("--completion_length", type=int, default=64, help="max_completion_length")
    parser.add_argument("--batches", type=int, default=3, help="distinct generated batches, cycled through")
    parser.add_argument("--rounds", type=int, default=3, help="timed steps of each side per run")
    parser.add_argument("--runs", type=int, default=3, help="timed runs (after one warm-up step of each side)")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES), help="model sizes to run")
    return parser


def main(args):
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    data_dir = require_rolebench_data()
    torch.manual_seed(0)
    rows, corpus = load_sample(data_dir, args.rows)
    profiles = load_profiles(data_dir / "rolebench" / "profiles-zh")
    tokenizer = train_tiny_tokenizer(corpus, vocab_size=6000)
    set_role_chat_template(tokenizer)
    tmp = Path(tempfile.mkdtemp(prefix="bench_grouped_"))
    results = {}
    for size in args.sizes:
        path = build_tiny_llama(tmp / size, tokenizer, max_position_embeddings=4096, **SIZES[size])
        results[size] = run_size(args, size, path, tmp / f"run-{size}", rows, profiles, tokenizer)
    print(f"\nseconds per step (policy log-prob forward + loss + backward, K = {K}, {args.groups} prompts per step), "
          "medians over the runs")  # fmt: skip
    print(f"{'size':>6s} {'parameters':>11s} {'TRL':>9s} {'grouped':>9s} {'speed-up':>9s} {'fewer tokens':>13s}")
    for size, r in results.items():
        print(f"{size:>6s} {r['parameters'] / 1e6:10.1f}M {r['trl']['median']:9.3f} {r['grouped']['median']:9.3f} "
              f"{r['speedup']:8.2f}x {r['token_ratio']:12.2f}x")  # fmt: skip
    return results


def run_size(args, size, path, tmp, rows, profiles, tokenizer):
    config = RoleGRPOConfig(
        str(tmp), use_cpu=True, bf16=False, activation_checkpointing=False, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=0, num_generations=K, per_device_train_batch_size=K * args.groups,
        max_completion_length=args.completion_length, beta=0.0, logging_steps=1,
    )  # fmt: skip
    trainer = RoleGRPOTrainer(str(path), reference_rouge_l, config, rows, processing_class=tokenizer,
                              profiles=profiles)  # fmt: skip
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what `Trainer.train` sets before the first step
    prompts = trainer.train_dataset
    batches, tokens = [], {"trl": 0, "grouped": 0}
    start = time.perf_counter()
    for b in range(args.batches):
        picked = [prompts[(b * args.groups + g) % len(prompts)] for g in range(args.groups)]
        batch = trainer._generate_and_score_completions([row for row in picked for _ in range(K)])
        batches.append(batch)
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        completion_mask = torch.cat([torch.zeros_like(batch["prompt_mask"]), batch["completion_mask"]], 1)
        plan = plan_grouped_rows(ids, mask, completion_mask, tokenizer.pad_token_id)
        tokens["trl"] += ids.numel()
        tokens["grouped"] += plan.batch["input_ids"].numel()
    advantages = torch.cat([b["advantages"] for b in batches])
    prompt_lengths = [int(b["prompt_mask"].sum(1).float().mean()) for b in batches]
    completion_lengths = [float(b["completion_mask"].sum(1).float().mean()) for b in batches]
    print(f"\n{size}: generated {args.batches} batches of {args.groups} x {K} completions in "
          f"{time.perf_counter() - start:.1f}s (not timed); mean prompt {statistics.mean(prompt_lengths):.0f} tokens, "
          f"mean completion {statistics.mean(completion_lengths):.1f} tokens (max {args.completion_length}); "
          f"{int((advantages != 0).sum())} of {len(advantages)} advantages non-zero")  # fmt: skip

    def step(side, batch):
        trainer.args.prefix_sharing = side == "grouped"
        begin = time.perf_counter()
        loss = trainer.compute_loss(trainer.model, batch)
        trainer.accelerator.backward(loss)
        elapsed = time.perf_counter() - begin
        with torch.no_grad():  # the gradient, not the loss, is what depends on the log-probs on-policy
            norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in trainer.model.parameters()])).item()
        trainer.model.zero_grad(set_to_none=True)
        return elapsed, norm

    norms = {side: [] for side in SIDES}
    for side in SIDES:  # warm-up
        step(side, batches[0])
    runs = {side: [0.0] * args.runs for side in SIDES}
    for run in range(args.runs):
        for i in range(args.rounds):
            batch = batches[(run * args.rounds + i) % len(batches)]
            for side in SIDES:
                seconds, norm = step(side, batch)
                runs[side][run] += seconds / args.rounds
                norms[side].append(norm)
    params = sum(p.numel() for p in trainer.model.parameters())
    gap = max(abs(a - b) / a for a, b in zip(norms["trl"], norms["grouped"]))
    print(f"{size} model ({params / 1e6:.1f}M parameters): {args.runs} runs of {args.rounds} interleaved steps, "
          f"{torch.get_num_threads()} threads; gradient norms {min(norms['trl']):.3g} to {max(norms['trl']):.3g}, "
          f"largest relative difference between the sides {gap:.1e}")  # fmt: skip
    result = {"parameters": params}
    print(f"{'side':50s} {'s/step min':>11s} {'median':>8s} {'tokens/step':>12s}")
    for side, name in SIDES.items():
        result[side] = {"min": min(runs[side]), "median": statistics.median(runs[side])}
        per_step = tokens[side] / len(batches)
        print(f"{name:50s} {result[side]['min']:11.3f} {result[side]['median']:8.3f} {per_step:12.0f}")
    result["speedup"] = result["trl"]["median"] / result["grouped"]["median"]
    result["token_ratio"] = tokens["trl"] / tokens["grouped"]
    print(f"grouped vs TRL: {result['speedup']:.2f}x faster per step (medians), "
          f"{result['token_ratio']:.2f}x fewer tokens through the model")  # fmt: skip
    print(json.dumps({"size": size, "K": K, "groups": args.groups, "completion_length": args.completion_length,
                      "runs": args.runs, "rounds": args.rounds, **result}))  # fmt: skip
    return result


if __name__ == "__main__":
    main(make_parser().parse_args())
