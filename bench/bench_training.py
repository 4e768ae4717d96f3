"""Training throughput of `RoCITTrainer` against plain `trl.SFTTrainer`, like for like, side by side, on CPU.

The tiny two-layer Llama of `rolellm.testing` (tokenizer trained on the Chinese RoleBench texts) trains for one epoch
over the same fixed sample of the Chinese RoleBench train rows (general + role-specific), each row turned into a chat
with the paper's role system instruction. Every setup trains the same tokens (the answers and their end-of-turn:
`assistant_only_loss=True` for TRL) in the same number of optimizer steps (`--steps`; each setup's batch size is
the smallest that covers its dataset in exactly that many steps):

- `trl.SFTTrainer`, `assistant_only_loss=True`: padded batches;
- `trl.SFTTrainer`, `assistant_only_loss=True`, `packing=True`: best-fit packing into padding-free rows;
- `rolellm.RoCITTrainer`, defaults: same-role samples packed with one shared system prompt;
- `rolellm.RoCITTrainer`, `prefix_sharing=False`: padded batches.

Each setup runs its own `trainer.train()` (dataset preparation excluded from the timing) on one CPU thread, and is
timed in CPU seconds of this process, so that other work on a shared machine does not skew the comparison (wall-clock
seconds are printed too). The setups run in turns, `--runs` times each; printed are the minimum and the median CPU
seconds, and the rates from the medians. Printed per setup: optimizer steps, loss tokens (the same for all when like for like),
samples/s, real input tokens/s (tokens through the model, padding excluded), loss tokens/s, the fraction of padding in
the batches, and the samples/s ratio to the first setup. The tiny model is mostly output layer (8000-token vocabulary,
64 wide), so skipping the output projection where no loss is taken weighs far more here than on a 7B model.

    python bench/bench_training.py [--rows 96] [--steps 4] [--runs 3] [--max_length 1024]
"""

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

from _common import load_sample, require_rolebench_data  # sets the offline environment: before the HF imports


# isort: split
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging
from trl import SFTConfig, SFTTrainer

from rolellm.encoding.chat_template import set_role_chat_template
from rolellm.roles.resolve import load_profiles
from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer
from rolellm.training.config import RoCITConfig
from rolellm.training.data import rolebench_to_conversations
from rolellm.training.trainer import RoCITTrainer


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=96, help="fixed sample of Chinese train rows (seed 0)")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps of every setup (one epoch)")
    parser.add_argument("--max_length", type=int, default=1024, help="max_length of every setup")
    parser.add_argument("--runs", type=int, default=3, help="runs of every setup, in turns")
    return parser


def batch_counts(trainer, pad_id: int) -> dict:
    """Steps, loss tokens, padding and all tokens over one epoch of the trainer's own train dataloader."""
    counts = {"steps": 0, "loss_tokens": 0, "pads": 0, "total": 0}
    for batch in trainer.get_train_dataloader():
        counts["steps"] += 1
        counts["loss_tokens"] += int((batch["labels"][:, 1:] != -100).sum())
        if "position_ids" not in batch or batch["input_ids"].shape[0] > 1:  # padding-free rows have no padding
            counts["pads"] += int((batch["input_ids"] == pad_id).sum())
        counts["total"] += batch["input_ids"].numel()
    return counts


def fit_batch_size(build, steps: int):
    """The trainer `build(batch_size)` with the smallest batch size whose epoch is exactly `steps` batches."""
    trainer = build(1)
    items = len(trainer.train_dataset)
    for batch_size in range(-(-items // steps), items + 1):
        if -(-items // batch_size) == steps:
            return build(batch_size) if batch_size != 1 else trainer
        if -(-items // batch_size) < steps:
            break
    raise SystemExit(f"{items} dataset items cannot be split into exactly {steps} batches: choose another --steps")


def measure(name, trainer, pad_id, num_samples):
    counts = batch_counts(trainer, pad_id)
    start, start_cpu = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, wall = time.process_time() - start_cpu, time.perf_counter() - start
    return {
        "setup": name, "seconds": seconds, "wall": wall, "samples/s": num_samples / seconds,
        "input tokens/s": (counts["total"] - counts["pads"]) / seconds,
        "loss tokens/s": counts["loss_tokens"] / seconds, "padding": counts["pads"] / counts["total"],
        "rows": len(trainer.train_dataset), "steps": counts["steps"], "loss tokens": counts["loss_tokens"],
        "batch": trainer.args.per_device_train_batch_size,
    }  # fmt: skip


def median_run(per_run: list[dict]) -> dict:
    """One setup's figures over its runs: rates from the median CPU seconds, with the minimum beside them."""
    seconds = statistics.median(r["seconds"] for r in per_run)
    figures = dict(per_run[0])
    scale = per_run[0]["seconds"] / seconds
    for key in ("samples/s", "input tokens/s", "loss tokens/s"):
        figures[key] = per_run[0][key] * scale
    figures.update(seconds=seconds, min_seconds=min(r["seconds"] for r in per_run),
                   wall=statistics.median(r["wall"] for r in per_run))  # fmt: skip
    return figures


def main(args):
    data_dir = require_rolebench_data()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)  # CPU seconds then equal wall seconds on an idle machine
    rows, corpus = load_sample(data_dir, args.rows)
    profiles = load_profiles(data_dir / "rolebench")
    tokenizer = train_tiny_tokenizer(corpus, vocab_size=8000)
    set_role_chat_template(tokenizer)
    folder = Path(tempfile.mkdtemp())
    model_path = build_tiny_llama(folder / "tiny", tokenizer=tokenizer)
    chats = rolebench_to_conversations(rows, profiles).select_columns(["messages"])
    common = {
        "use_cpu": True, "bf16": False, "activation_checkpointing": False, "num_train_epochs": 1,
        "max_length": args.max_length, "report_to": "none", "save_strategy": "no", "logging_steps": 1000, "seed": 0,
        "disable_tqdm": True, "dataset_num_proc": None,
    }  # fmt: skip

    def model():
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    def sft(out, **kwargs):
        return lambda batch_size: SFTTrainer(
            model(), args=SFTConfig(str(folder / out), assistant_only_loss=True, per_device_train_batch_size=batch_size,
                                    **kwargs, **common),
            train_dataset=chats, processing_class=copy.deepcopy(tokenizer),
        )  # fmt: skip

    def rocit(out, **kwargs):
        return lambda batch_size: RoCITTrainer(
            model(), args=RoCITConfig(str(folder / out), per_device_train_batch_size=batch_size, **kwargs, **common),
            train_dataset=rows, profiles=profiles, processing_class=copy.deepcopy(tokenizer),
        )  # fmt: skip

    setups = [
        ("SFTTrainer answers only", sft("a")),
        ("SFTTrainer packing=True", sft("b", packing=True)),
        ("RoCITTrainer defaults", rocit("c")),
        ("RoCIT prefix_sharing=False", rocit("d", prefix_sharing=False)),
    ]
    runs = {name: [] for name, _ in setups}
    for run in range(args.runs):  # in turns: every setup sees the same machine load
        for name, build in setups:
            print(f"--- {name} (run {run + 1} of {args.runs})")
            runs[name].append(measure(name, fit_batch_size(build, args.steps), tokenizer.pad_token_id, len(rows)))
    results = [median_run(per_setup) for per_setup in runs.values()]

    base = results[0]["samples/s"]
    print(f"\n{len(rows)} samples, one epoch of {args.steps} optimizer steps per setup, max_length {args.max_length}, "
          f"one CPU thread; {args.runs} runs in turns; CPU seconds min / median, rates per median CPU second")  # fmt: skip
    print(f"{'setup':<28}{'rows':>5}{'batch':>6}{'steps':>6}{'loss tok':>9}{'cpu s':>12}{'wall s':>8}{'samples/s':>11}"
          f"{'input tok/s':>13}{'loss tok/s':>12}{'padding':>9}{'vs SFT':>8}")  # fmt: skip
    for r in results:
        cpu = f"{r['min_seconds']:.1f} / {r['seconds']:.1f}"
        print(f"{r['setup']:<28}{r['rows']:>5}{r['batch']:>6}{r['steps']:>6}{r['loss tokens']:>9}{cpu:>12}"
              f"{r['wall']:>8.1f}{r['samples/s']:>11.2f}{r['input tokens/s']:>13.0f}{r['loss tokens/s']:>12.0f}"
              f"{r['padding']:>9.1%}{r['samples/s'] / base:>7.2f}x")  # fmt: skip
    same_tokens = len({r["loss tokens"] for r in results}) == 1
    same_steps = len({r["steps"] for r in results}) == 1
    print(f"like for like: same loss tokens {'yes' if same_tokens else 'NO'}, same optimizer steps "
          f"{'yes' if same_steps else 'NO'}")  # fmt: skip


if __name__ == "__main__":
    main(make_parser().parse_args())
