"""Training throughput of prefix-shared role packing against TRL's padding and TRL's packing, side by side, at two
model sizes so the trend with size is visible.

Llamas of about 7M (4 layers, 256 wide) and about 50M parameters (10 layers, 640 wide) with a BPE tokenizer trained on
the Chinese RoleBench texts, on CPU, over a fixed sample of the Chinese RoleBench train rows (general +
role-specific) with the paper's role system instruction:

- (a) `trl.SFTTrainer` with its defaults (padded batches), `assistant_only_loss=True`;
- (b) `trl.SFTTrainer` with `packing=True` (best-fit packing, padding-free rows);
- (c) `rolellm.RoCITTrainer` with `prefix_sharing=True` (its default): same-role samples share one system prompt;
- (c') the same rows with TRL's fused LM head as the loss instead of the compact path (which (c) uses on CPU).

All three get the same conversations, tokenizer, chat template, initial weights and `max_length`, and run through
their own dataset preparation, collator and `training_step` (forward, backward) plus an optimizer step. Steps of the
three are interleaved, so the machine's drift affects them alike, and (b) and (c) get the same number of packed
rows per step. The timed steps form `--runs` runs of `--rounds` steps of each layout; printed per model size are
the minimum and the median over the runs of samples/s and trained tokens/s, tokens processed per sample, and the
ratios of the medians of (c) to (a) and (b), then the ratios of the sizes side by side.

The real model, `--sizes smollm2`: the embedded SmolLM2-135M-Instruct (`rolellm.clients.gguf.embedded_model()`, 135M
parameters, a vocabulary of 49152, tied embeddings), fully fine-tuned in float32, on English RoleBench rows of the
four roles whose descriptions the repository bundles (`examples/data/roles-eng.json`), with its own tokenizer.
(c) uses its own ChatML template; TRL's assistant-only loss needs `{% generation %}` markers that template lacks,
so (a) and (b) get rolellm's ChatML role template, which renders these conversations to the very same tokens (checked
before the timing). A step of that model costs seconds on a CPU, so its defaults are smaller: `--rows 200` (every
row of the four roles), `--max_length 512`, `--batch_size 2`, `--rows_per_step 1`, `--runs 3 --rounds 1` (about 6
minutes on a loaded 2-core machine). What the command line gives applies to every size it names.

    python bench/bench_packing.py [--rows 512] [--rounds 4] [--runs 3] [--max_length 1024] [--sizes 7m 50m]
    python bench/bench_packing.py --sizes smollm2
"""

import argparse
import contextlib
import copy
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
from trl import SFTConfig, SFTTrainer

from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE, set_role_chat_template
from rolellm.roles.resolve import load_profiles
from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer
from rolellm.training import attention as rolellm_attention
from rolellm.training.config import RoCITConfig
from rolellm.training.data import rolebench_to_conversations
from rolellm.training.trainer import RoCITTrainer


# Llama shapes: about 7M and about 50M parameters with the tokenizer trained here (untied input and output embeddings);
# None: the embedded real model
SIZES = {
    "7m": {"hidden_size": 256, "intermediate_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 4},
    "50m": {"hidden_size": 640, "intermediate_size": 1792, "num_hidden_layers": 10, "num_attention_heads": 10},
    "smollm2": None,
}
DEFAULTS = {"rows": 512, "rounds": 4, "runs": 3, "max_length": 1024, "batch_size": 8, "rows_per_step": 2}
REAL_MODEL_DEFAULTS = {"rows": 200, "rounds": 1, "runs": 3, "max_length": 512, "batch_size": 2, "rows_per_step": 1}


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, help="fixed sample of train rows, seed 0 (default 512; smollm2: 200)")
    parser.add_argument("--rounds", type=int, help="timed steps of each layout per run (default 4; smollm2: 1)")
    parser.add_argument("--runs", type=int, help="timed runs after 2 warm-up steps of each layout (default 3)")
    parser.add_argument("--sizes", nargs="+", default=["7m", "50m"], choices=list(SIZES), help="model sizes to run")
    parser.add_argument("--max_length", type=int, help="row length of (b) and (c), truncation of (a) (default 1024; "
                        "smollm2: 512)")  # fmt: skip
    parser.add_argument("--batch_size", type=int, help="samples per step of (a) (default 8; smollm2: 2)")
    parser.add_argument(
        "--rows_per_step", type=int, help="packed rows per step of (b) and (c) (default 2; smollm2: 1)"
    )
    return parser


def settings_for(args, size):
    """The settings of one size: what the command line gave, else the size's defaults."""
    defaults = REAL_MODEL_DEFAULTS if SIZES[size] is None else DEFAULTS
    return argparse.Namespace(**{name: getattr(args, name) or value for name, value in defaults.items()})


def count(batch, layout):
    """(samples, trained tokens, processed tokens) of one collated batch."""
    trained = int((batch["labels"][:, 1:] != -100).sum())
    if layout.startswith("c"):
        own = (batch["segment_ids"] != batch["prefix_segment_ids"]) & (batch["segment_ids"] >= 0)
        samples = sum(len(torch.unique(row[mask])) for row, mask in zip(batch["segment_ids"], own))
    elif layout == "b":  # padding-free: one flattened row, each sample's positions start at 0
        samples = int((batch["position_ids"] == 0).sum())
    else:
        samples = batch["input_ids"].shape[0]
    return samples, trained, batch["input_ids"].numel()


@contextlib.contextmanager
def trl_fused_head(enabled: bool):
    """Make prefix-shared batches use TRL's fused LM head (what the trainer picks on GPUs with Triton)."""
    original = rolellm_attention._use_fused_lm_head
    if enabled:
        rolellm_attention._use_fused_lm_head = lambda device: True
    try:
        yield
    finally:
        rolellm_attention._use_fused_lm_head = original


def main(args):
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    data_dir = require_rolebench_data()
    torch.manual_seed(0)
    tmp = Path(tempfile.mkdtemp(prefix="bench_packing_"))
    by_size = {}
    for size in args.sizes:
        settings = settings_for(args, size)
        if SIZES[size] is None:
            path, tokenizer = load_real_model()
            rows, profiles = load_english_sample(data_dir, settings.rows)
            conversations = rolebench_to_conversations(rows, profiles, reference="first", seed=0)
            trl_tokenizer = with_generation_markers(tokenizer, conversations)
        else:
            rows, corpus = load_sample(data_dir, settings.rows)
            profiles = load_profiles(data_dir / "rolebench" / "profiles-zh")
            conversations = rolebench_to_conversations(rows, profiles, reference="first", seed=0)
            tokenizer = trl_tokenizer = train_tiny_tokenizer(corpus, vocab_size=6000)
            set_role_chat_template(tokenizer)
            path = build_tiny_llama(
                tmp / size, tokenizer, num_key_value_heads=SIZES[size]["num_attention_heads"],
                max_position_embeddings=4096, **SIZES[size],
            )  # fmt: skip
        tokenizers = {"trl": trl_tokenizer, "rolellm": tokenizer}
        by_size[size] = run_size(settings, size, path, tmp / f"runs-{size}", rows, conversations, profiles, tokenizers)
    print("\nratios of (c) RoCITTrainer prefix sharing, by model size (samples/s; trained tokens/s)")
    print(f"{'size':>7s} {'parameters':>11s} {'(c)/(a) padding':>22s} {'(c)/(b) TRL packing':>22s}")
    for size, (params, results) in by_size.items():
        cells = []
        for base in ("a", "b"):
            samples = results["c"]["samples_per_s"] / results[base]["samples_per_s"]
            trained = results["c"]["trained_tokens_per_s"] / results[base]["trained_tokens_per_s"]
            cells.append(f"{samples:.2f}x; {trained:.2f}x")
        print(f"{size:>7s} {params / 1e6:10.1f}M {cells[0]:>22s} {cells[1]:>22s}")
    return by_size


def with_generation_markers(tokenizer, conversations):
    """A copy of the real model's tokenizer with rolellm's ChatML role template, which has the `{% generation %}`
    markers TRL's assistant-only loss needs; exits unless it renders every conversation to the same tokens as the
    model's own template."""
    marked = copy.deepcopy(tokenizer)
    marked.chat_template = ROLE_CHAT_TEMPLATE
    for messages in conversations["messages"]:
        if marked.apply_chat_template(messages) != tokenizer.apply_chat_template(messages):
            raise SystemExit("rolellm's ChatML role template and the model's own render a conversation differently")
    return marked


def run_size(args, size, path, tmp, rows, conversations, profiles, tokenizers):
    """Interleaved timed steps of the four layouts on the model at `path`; prints them, returns (params, figures).

    (c') is the trainer of (c), with its own pass over the rows: the same weights, and one model less in memory."""
    common = {
        "use_cpu": True, "bf16": False, "activation_checkpointing": False, "report_to": "none",
        "save_strategy": "no", "disable_tqdm": True, "seed": 0, "dataset_num_proc": None,
        "max_length": args.max_length, "learning_rate": 1e-4, "assistant_only_loss": True,
    }  # fmt: skip
    layouts = {
        "a": SFTTrainer(
            str(path),
            args=SFTConfig(str(tmp / "a"), per_device_train_batch_size=args.batch_size, **common),
            train_dataset=conversations,
            processing_class=tokenizers["trl"],
        ),
        "b": SFTTrainer(
            str(path),
            args=SFTConfig(str(tmp / "b"), packing=True, per_device_train_batch_size=args.rows_per_step, **common),
            train_dataset=conversations,
            processing_class=tokenizers["trl"],
        ),
        "c": RoCITTrainer(
            str(path),
            args=RoCITConfig(str(tmp / "c"), per_device_train_batch_size=args.rows_per_step, **common),
            train_dataset=rows,
            processing_class=tokenizers["rolellm"],
            profiles=profiles,
        ),
    }
    layouts["c'"] = layouts["c"]
    names = {
        "a": "trl.SFTTrainer (padding)",
        "b": "trl.SFTTrainer packing=True",
        "c": f"RoCITTrainer prefix sharing ({layouts['c']._attention_backend})",
        "c'": "(c) with TRL's fused LM head as the loss",
    }
    for key in ("a", "b", "c"):
        data = layouts[key].train_dataset
        groups = f" ({sum(map(len, data['prefix_lengths']))} prefix groups)" if key == "c" else ""
        print(f"({key}) {len(data)} dataset items{groups}, {sum(map(len, data['input_ids']))} tokens before padding")
    loaders, runs = {}, {}
    for key, trainer in layouts.items():
        trainer.create_optimizer_and_scheduler(num_training_steps=args.runs * args.rounds + 2)
        trainer.model.train()
        loaders[key] = iter(trainer.get_train_dataloader())
        runs[key] = [{"seconds": 0.0, "samples": 0, "trained": 0, "processed": 0} for _ in range(args.runs)]

    def next_batch(key):
        try:
            return next(loaders[key])
        except StopIteration:  # a new epoch of the same rows
            loaders[key] = iter(layouts[key].get_train_dataloader())
            return next(loaders[key])

    def step(key, run):
        trainer = layouts[key]
        start = time.perf_counter()
        batch = trainer._prepare_inputs(next_batch(key))
        samples, trained, processed = count(batch, key)
        with trl_fused_head(key == "c'"):
            trainer.training_step(trainer.model, batch, torch.tensor(trained))
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()
        if run is not None:
            elapsed = time.perf_counter() - start
            for name, value in zip(
                ("seconds", "samples", "trained", "processed"), (elapsed, samples, trained, processed)
            ):
                runs[key][run][name] += value

    for _ in range(2):  # warm-up
        for key in layouts:
            step(key, None)
    for run in range(args.runs):
        for _ in range(args.rounds):
            for key in layouts:
                step(key, run)
    results = {}
    params = sum(p.numel() for p in layouts["c"].model.parameters())
    print(f"\n{size} model ({params / 1e6:.1f}M parameters): {args.runs} runs of {args.rounds} interleaved steps "
          f"each, max_length {args.max_length}, (a) {args.batch_size} samples and (b), (c) {args.rows_per_step} rows "
          f"per step, {torch.get_num_threads()} threads; min / median over the runs")  # fmt: skip
    print(f"{'layout':44s} {'samples/s':>14s} {'trained tok/s':>14s} {'tokens/sample':>14s}")
    for key, per_run in runs.items():
        samples = [r["samples"] / r["seconds"] for r in per_run]
        trained = [r["trained"] / r["seconds"] for r in per_run]
        results[key] = {
            "samples_per_s": statistics.median(samples),
            "samples_per_s_min": min(samples),
            "trained_tokens_per_s": statistics.median(trained),
            "trained_tokens_per_s_min": min(trained),
            "tokens_per_sample": sum(r["processed"] for r in per_run) / sum(r["samples"] for r in per_run),
        }
        r = results[key]
        figures = (
            f"{r['samples_per_s_min']:6.1f} / {r['samples_per_s']:5.1f} "
            f"{r['trained_tokens_per_s_min']:6.0f} / {r['trained_tokens_per_s']:5.0f} {r['tokens_per_sample']:14.1f}"
        )
        print(f"({key}) {names[key]:40s} {figures}")
    for base in ("a", "b"):
        print(
            f"(c) vs ({base}): {results['c']['samples_per_s'] / results[base]['samples_per_s']:.2f}x samples/s, "
            f"{results['c']['trained_tokens_per_s'] / results[base]['trained_tokens_per_s']:.2f}x trained tokens/s, "
            f"{results[base]['tokens_per_sample'] / results['c']['tokens_per_sample']:.2f}x fewer tokens per sample "
            "(medians)"
        )
    loss_gain = results["c"]["samples_per_s"] / results["c'"]["samples_per_s"]
    print(f"(c) vs (c'): {loss_gain:.2f}x samples/s from the compact loss path alone (same rows)")
    print(json.dumps({"size": size, "parameters": params, **vars(args), **results}))
    return params, results


if __name__ == "__main__":
    main(make_parser().parse_args())
