"""GRPO rollouts and GRPO and DPO training steps with each group's prompt computed once (`RoleGRPOTrainer`,
`RoleDPOTrainer`, `prefix_sharing=True`) against TRL's default generation and forward (`prefix_sharing=False`: the
prompt in every row), on CPU.

Llamas with a BPE tokenizer trained on the Chinese RoleBench texts: the tiny test model of `rolellm.testing.models`
(2 layers, 64 wide) and one of about 50M parameters (10 layers, 640 wide), prompted with the paper's role system
instruction and questions from a fixed sample of the Chinese RoleBench train rows.

- rollout: GRPO's generation of K = 8 completions for each of `--groups` prompts (`_generate_single_turn`, TRL's
  `transformers` path): TRL's `generate` computes each prompt K times; `prefix_sharing` computes its tokens but the
  last once, then every row from that cache. Both sides sample from seed 0, and the completions are compared.
- GRPO: K = 8 completions per prompt, `--groups` prompts per step; TRL runs them as K padded rows
  `[prompt][completion]`. The completions are generated once, before the timing, by the model itself through TRL's
  `_generate_and_score_completions` (which also gives the advantages); `beta=0`, so no reference model.
- DPO: `--pairs` pairs per step, each a row's reference answer (chosen) and the next sampled row's answer (rejected:
  another question's, often another role's); TRL runs `[prompt][chosen]` and `[prompt][rejected]` rows. The batches
  come from the trainer's own data loader; `beta=0.1` with the reference model (a copy of the policy), whose forward
  is inside the loss.

What is timed is the part of a training step that the two paths do differently: `compute_loss` (the policy's
log-prob forward, for DPO also the reference model's, and the loss) + `backward`. Generation and the optimizer step,
the same on both sides, are excluded. One trainer per stage and size runs both sides (same weights, the very same
batches); steps of the two sides alternate so the machine's drift affects them alike. The timed steps form `--runs`
runs of `--rounds` steps of each side; printed per stage and size are the minimum and the median over the runs of the
seconds per step, the tokens each side runs through the model per forward, and the ratio of the medians.

The real model, `--sizes smollm2`: the embedded SmolLM2-135M-Instruct (`rolellm.clients.gguf.embedded_model()`, 135M
parameters), fully trained in float32, with its own tokenizer and ChatML template, on English RoleBench rows of the
four roles whose descriptions the repository bundles (`examples/data/roles-eng.json`). A step of that model costs
seconds on a CPU, so its defaults are smaller: `--rows 200` (every row of the four roles), `--groups 1`, `--pairs 2`,
`--rounds 1` (3 to 4 minutes a stage on a loaded 2-core machine). What the command line gives applies to every size
it names.

    python bench/bench_grouped.py [--stages grpo dpo] [--rows 64] [--groups 2] [--pairs 4] [--completion_length 64]
        [--rounds 3] [--runs 3] [--sizes tiny 50m]
    python bench/bench_grouped.py --sizes smollm2 --stages grpo
    python bench/bench_grouped.py --sizes smollm2 --stages rollout --completion_length 16 --runs 3
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from _common import (  # sets the offline environment: before the HF imports
    load_english_sample,
    load_real_model,
    load_sample,
    require_rolebench_data,
)


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
from rolellm.training.preference import RoleDPOConfig, RoleDPOTrainer


K = 8
# None: the embedded real model
SIZES = {
    "tiny": {},  # build_tiny_llama's defaults: 2 layers, 64 wide
    "50m": {
        "hidden_size": 640,
        "intermediate_size": 1792,
        "num_hidden_layers": 10,
        "num_attention_heads": 10,
        "num_key_value_heads": 10,
    },
    "smollm2": None,
}
DEFAULTS = {"rows": 64, "groups": 2, "pairs": 4, "completion_length": 64, "batches": 3, "rounds": 3, "runs": 3}
REAL_MODEL_DEFAULTS = {**DEFAULTS, "rows": 200, "groups": 1, "pairs": 2, "rounds": 1}
SIDES = {
    "rollout": {
        "trl": "TRL's generate (K copies of each prompt)",
        "grouped": "RoleGRPOTrainer, prompt once per group",
    },
    "grpo": {"trl": "TRL's forward (K padded rows)", "grouped": "RoleGRPOTrainer, prompt once per group"},
    "dpo": {"trl": "TRL's forward (chosen rows, rejected rows)", "grouped": "RoleDPOTrainer, prompt once per pair"},
}


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stages", nargs="+", default=list(SIDES), choices=list(SIDES), help="trainers to time")
    parser.add_argument("--rows", type=int, help="fixed sample of train rows, seed 0 (default 64; smollm2: 200)")
    parser.add_argument("--groups", type=int, help=f"GRPO prompts per step, each with K = {K} completions (default 2; "
                        "smollm2: 1)")  # fmt: skip
    parser.add_argument("--pairs", type=int, help="DPO pairs per step (default 4; smollm2: 2)")
    parser.add_argument("--completion_length", type=int, help="GRPO max_completion_length (default 64)")
    parser.add_argument("--batches", type=int, help="distinct batches, cycled through (default 3)")
    parser.add_argument("--rounds", type=int, help="timed steps of each side per run (default 3; smollm2: 1)")
    parser.add_argument("--runs", type=int, help="timed runs after one warm-up step of each side (default 3)")
    parser.add_argument("--sizes", nargs="+", default=["tiny", "50m"], choices=list(SIZES), help="model sizes to run")
    return parser


def settings_for(args, size):
    """The settings of one size: what the command line gave, else the size's defaults."""
    defaults = REAL_MODEL_DEFAULTS if SIZES[size] is None else DEFAULTS
    return argparse.Namespace(**{name: getattr(args, name) or value for name, value in defaults.items()})


def main(args):
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    data_dir = require_rolebench_data()
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="bench_grouped_"))
    results = {}
    for size in args.sizes:
        settings = settings_for(args, size)
        if SIZES[size] is None:
            path, tokenizer = load_real_model()
            rows, profiles = load_english_sample(data_dir, settings.rows)
        else:
            rows, corpus = load_sample(data_dir, settings.rows)
            profiles = load_profiles(data_dir / "rolebench" / "profiles-zh")
            tokenizer = train_tiny_tokenizer(corpus, vocab_size=6000)
            set_role_chat_template(tokenizer)
            path = build_tiny_llama(tmp / size, tokenizer, max_position_embeddings=4096, **SIZES[size])
        for stage in args.stages:
            prepare = {"rollout": prepare_rollout, "grpo": prepare_grpo, "dpo": prepare_dpo}[stage]
            trainer, batches = prepare(settings, size, path, tmp / f"{stage}-{size}", rows, profiles, tokenizer)
            timer = time_rollouts if stage == "rollout" else time_sides
            results[stage, size] = timer(settings, stage, size, trainer, batches)
    print(
        "\nseconds per step (rollout: generate; grpo, dpo: compute_loss + backward), medians over the runs; tokens "
        "per forward (rollout: through the model before the first new token)"
    )
    print(f"{'stage':>5s} {'size':>8s} {'parameters':>11s} {'TRL':>9s} {'grouped':>9s} {'speed-up':>9s} "
          f"{'fewer tokens':>13s}")  # fmt: skip
    for (stage, size), r in results.items():
        print(f"{stage:>5s} {size:>8s} {r['parameters'] / 1e6:10.1f}M {r['trl']['median']:9.3f} "
              f"{r['grouped']['median']:9.3f} {r['speedup']:8.2f}x {r['token_ratio']:12.2f}x")  # fmt: skip
    return results


def common_settings(tmp):
    return {
        "output_dir": str(tmp), "use_cpu": True, "bf16": False, "activation_checkpointing": False,
        "report_to": "none", "save_strategy": "no", "disable_tqdm": True, "seed": 0,
    }  # fmt: skip


def grpo_trainer(args, path, tmp, rows, profiles, tokenizer):
    config = RoleGRPOConfig(
        **common_settings(tmp), num_generations=K, per_device_train_batch_size=K * args.groups,
        max_completion_length=args.completion_length, beta=0.0, logging_steps=1,
    )  # fmt: skip
    return RoleGRPOTrainer(str(path), reference_rouge_l, config, rows, processing_class=tokenizer, profiles=profiles)


def prepare_rollout(args, size, path, tmp, rows, profiles, tokenizer):
    """A GRPO trainer and `args.batches` batches of `args.groups` encoded prompts, each K times, as TRL's sampler
    lays a step's prompts out."""
    trainer = grpo_trainer(args, path, tmp, rows, profiles, tokenizer)
    prompts = trainer.train_dataset
    batches = []
    for b in range(args.batches):
        picked = [prompts[(b * args.groups + g) % len(prompts)]["prompt"] for g in range(args.groups)]
        batches.append([trainer.encode_prompt(prompt) for prompt in picked for _ in range(K)])
    lengths = [len(ids) for batch in batches for ids in batch]
    print(f"\n{size} GRPO rollouts: {args.batches} batches of {args.groups} prompts x {K} completions of at most "
          f"{args.completion_length} tokens; mean prompt {statistics.mean(lengths):.0f} tokens")  # fmt: skip
    return trainer, batches


def time_rollouts(args, stage, size, trainer, batches):
    """Alternating timed generations of TRL's `generate` and the prompt-once one on the same prompts, from the same
    seed (the completions are compared); prints them."""
    trainer.model.eval()
    tokens = {"trl": 0, "grouped": 0}
    for prompt_ids in batches:
        width, distinct = max(map(len, prompt_ids)), len({tuple(ids) for ids in prompt_ids})
        tokens["trl"] += len(prompt_ids) * width
        tokens["grouped"] += distinct * (width - 1) + len(prompt_ids)

    def step(side, prompt_ids):
        trainer.args.prefix_sharing = side == "grouped"
        torch.manual_seed(0)
        begin = time.perf_counter()
        completions, _ = trainer._generate_single_turn(prompt_ids, None, {}, K)
        return time.perf_counter() - begin, completions

    sides = SIDES[stage]
    for side in sides:  # warm-up
        step(side, batches[0])
    runs = {side: [0.0] * args.runs for side in sides}
    same = made = 0
    for run in range(args.runs):
        for i in range(args.rounds):
            prompt_ids = batches[(run * args.rounds + i) % len(batches)]
            completions = {}
            for side in sides:
                seconds, completions[side] = step(side, prompt_ids)
                runs[side][run] += seconds / args.rounds
            same += sum(a == b for a, b in zip(completions["trl"], completions["grouped"]))
            made += len(prompt_ids)
    params = sum(p.numel() for p in trainer.model.parameters())
    print(f"{size} rollouts ({params / 1e6:.1f}M parameters): {args.runs} runs of {args.rounds} interleaved "
          f"generations, {torch.get_num_threads()} threads; {same} of {made} completions the same on both "
          "sides")  # fmt: skip
    return summarize(args, stage, size, params, runs, tokens, len(batches),
                     "prompt once vs TRL: {speedup:.2f}x faster per generation (medians), {token_ratio:.2f}x fewer "
                     "prompt tokens through the model")  # fmt: skip


def summarize(args, stage, size, params, runs, tokens, batches, verdict):
    """Prints each side's seconds per step (min, median over the runs) and tokens per step, then `verdict` (formatted
    with the median speed-up and the token ratio) and the JSON line; returns the figures."""
    result = {"parameters": params}
    print(f"{'side':50s} {'s/step min':>11s} {'median':>8s} {'tokens/step':>12s}")
    for side, name in SIDES[stage].items():
        result[side] = {"min": min(runs[side]), "median": statistics.median(runs[side])}
        per_step = tokens[side] / batches
        print(f"{name:50s} {result[side]['min']:11.3f} {result[side]['median']:8.3f} {per_step:12.0f}")
    result["speedup"] = result["trl"]["median"] / result["grouped"]["median"]
    result["token_ratio"] = tokens["trl"] / tokens["grouped"]
    print(verdict.format(**result))
    print(json.dumps({"stage": stage, "size": size, "K": K, **vars(args), **result}))
    return result


def prepare_grpo(args, size, path, tmp, rows, profiles, tokenizer):
    """A GRPO trainer and `args.batches` batches of `args.groups` prompts x K completions, generated by the model."""
    trainer = grpo_trainer(args, path, tmp, rows, profiles, tokenizer)
    prompts = trainer.train_dataset
    batches = []
    start = time.perf_counter()
    for b in range(args.batches):
        picked = [prompts[(b * args.groups + g) % len(prompts)] for g in range(args.groups)]
        batch = trainer._generate_and_score_completions([row for row in picked for _ in range(K)])
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        completion_mask = torch.cat([torch.zeros_like(batch["prompt_mask"]), batch["completion_mask"]], 1)
        batches.append((batch, ids, mask, completion_mask))
    advantages = torch.cat([batch["advantages"] for batch, *_ in batches])
    non_zero = int((advantages != 0).sum())
    print(f"\n{size} GRPO: generated {args.batches} batches of {args.groups} x {K} completions in "
          f"{time.perf_counter() - start:.1f}s (not timed); {describe(batches)} (completions of at most "
          f"{args.completion_length}); {non_zero} of {len(advantages)} advantages non-zero")  # fmt: skip
    return trainer, batches


def prepare_dpo(args, size, path, tmp, rows, profiles, tokenizer):
    """A DPO trainer and `args.batches` batches of `args.pairs` pairs from its own data loader."""
    answers = [row["generated"][0] for row in rows]
    pairs = datasets.Dataset.from_list([
        {"role": row["role"], "question": row["question"], "lang": row["lang"], "chosen": answers[i],
         "rejected": answers[(i + 1) % len(answers)]}
        for i, row in enumerate(rows)
    ])  # fmt: skip
    config = RoleDPOConfig(**common_settings(tmp), per_device_train_batch_size=args.pairs, beta=0.1)
    trainer = RoleDPOTrainer(
        str(path), args=config, train_dataset=pairs, processing_class=tokenizer, profiles=profiles
    )
    loader = iter(trainer.get_train_dataloader())
    batches = []
    for _ in range(args.batches):
        batch = trainer._prepare_inputs(next(loader))
        batches.append((batch, batch["input_ids"], batch["attention_mask"], batch["completion_mask"]))
    print(
        f"\n{size} DPO: {args.batches} batches of {args.pairs} pairs (chosen and rejected rows); {describe(batches)}"
    )
    return trainer, batches


def describe(batches):
    prompt = [float((mask * (1 - completion)).sum(1).float().mean()) for _, _, mask, completion in batches]
    completion = [float(completion.sum(1).float().mean()) for _, _, _, completion in batches]
    return (
        f"mean prompt {statistics.mean(prompt):.0f} tokens, mean completion {statistics.mean(completion):.1f} tokens"
    )


def time_sides(args, stage, size, trainer, batches):
    """Alternating timed steps of TRL's forward and the grouped one on the same batches; prints them."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what `Trainer.train` sets before the first step
    tokens = {"trl": 0, "grouped": 0}
    for _, ids, mask, completion_mask in batches:
        tokens["trl"] += ids.numel()
        plan = plan_grouped_rows(ids, mask, completion_mask, trainer._tokenizer.pad_token_id)
        tokens["grouped"] += plan.batch["input_ids"].numel()

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

    sides = SIDES[stage]
    norms = {side: [] for side in sides}
    for side in sides:  # warm-up
        step(side, batches[0][0])
    runs = {side: [0.0] * args.runs for side in sides}
    for run in range(args.runs):
        for i in range(args.rounds):
            batch = batches[(run * args.rounds + i) % len(batches)][0]
            for side in sides:
                seconds, norm = step(side, batch)
                runs[side][run] += seconds / args.rounds
                norms[side].append(norm)
    params = sum(p.numel() for p in trainer.model.parameters())
    gap = max(abs(a - b) / a for a, b in zip(norms["trl"], norms["grouped"]))
    print(f"{size} {stage.upper()} ({params / 1e6:.1f}M parameters): {args.runs} runs of {args.rounds} interleaved "
          f"steps, {torch.get_num_threads()} threads; gradient norms {min(norms['trl']):.3g} to "
          f"{max(norms['trl']):.3g}, largest relative difference between the sides {gap:.1e}")  # fmt: skip
    return summarize(args, stage, size, params, runs, tokens, len(batches),
                     "grouped vs TRL: {speedup:.2f}x faster per step (medians), {token_ratio:.2f}x fewer tokens "
                     "through the model")  # fmt: skip


if __name__ == "__main__":
    main(make_parser().parse_args())
