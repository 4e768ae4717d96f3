"""Training throughput of `RoCITTrainer` with its defaults against plain `trl.SFTTrainer`, side by side, on CPU.

The tiny two-layer Llama of `rolellm.testing` (tokenizer trained on the Chinese RoleBench texts) trains for one epoch
over the same fixed sample of the Chinese RoleBench train rows (general + role-specific), each row turned into a chat
with the paper's role system instruction:

- `trl.SFTTrainer`, defaults: padded batches, loss on the whole sequence;
- `trl.SFTTrainer`, `packing=True`: best-fit packing into padding-free rows;
- `rolellm.RoCITTrainer`, defaults: loss on the answers only, same-role samples packed with one shared system prompt;
- `rolellm.RoCITTrainer`, `prefix_sharing=False`: loss on the answers only, padded batches (what the answer-only loss
  costs or saves on its own).

Each setup runs its own `trainer.train()` (dataset preparation excluded from the timing) on one CPU thread, and is
timed in CPU seconds of this process, so that other work on a shared machine does not skew the comparison (wall-clock
seconds are printed too). Printed per setup: samples/s,
real input tokens/s (tokens through the model, padding excluded), loss tokens/s (tokens the loss covers), the fraction
of padding in the batches, and the samples/s ratio to `SFTTrainer` defaults. All setups see the same samples, so
samples/s is also answer tokens/s up to a constant. The tiny model is mostly output layer (8000-token vocabulary, 64
wide), so skipping the output projection where no loss is taken weighs far more here than on a 7B model.

    python bench/bench_training.py [--rows 96] [--batch_size 8] [--max_length 1024]
"""

import argparse
import copy
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
from rolellm.roles import load_profiles
from rolellm.testing import build_tiny_llama, train_tiny_tokenizer
from rolellm.training import RoCITConfig, RoCITTrainer, rolebench_to_conversations


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=96, help="fixed sample of Chinese train rows (seed 0)")
    parser.add_argument("--batch_size", type=int, default=8, help="per-device train batch size of every setup")
    parser.add_argument("--max_length", type=int, default=1024, help="max_length of every setup")
    return parser


def batch_padding(trainer, pad_id: int) -> tuple[int, int]:
    """(padding tokens, all tokens) over one epoch of the trainer's own train dataloader."""
    pads = total = 0
    for batch in trainer.get_train_dataloader():
        pads += int((batch["input_ids"] == pad_id).sum())
        total += batch["input_ids"].numel()
    return pads, total


def measure(name, trainer, pad_id, num_samples):
    data = trainer.train_dataset
    loss_tokens = sum(sum(label != -100 for label in labels) for labels in data["labels"])
    pads, total = batch_padding(trainer, pad_id)
    start, start_cpu = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, wall = time.process_time() - start_cpu, time.perf_counter() - start
    return {
        "setup": name, "seconds": seconds, "wall": wall, "samples/s": num_samples / seconds,
        "input tokens/s": (total - pads) / seconds, "loss tokens/s": loss_tokens / seconds,
        "padding": pads / total, "rows": len(data),
    }  # fmt: skip


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
        "per_device_train_batch_size": args.batch_size, "max_length": args.max_length, "report_to": "none",
        "save_strategy": "no", "logging_steps": 1000, "seed": 0, "disable_tqdm": False,
    }  # fmt: skip

    def model():
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    results = []
    setups = [
        ("SFTTrainer defaults", lambda: SFTTrainer(model(), args=SFTConfig(str(folder / "a"), **common),
                                                   train_dataset=chats, processing_class=copy.deepcopy(tokenizer))),
        ("SFTTrainer packing=True", lambda: SFTTrainer(model(), args=SFTConfig(str(folder / "b"), packing=True,
                                                       **common), train_dataset=chats,
                                                       processing_class=copy.deepcopy(tokenizer))),
        ("RoCITTrainer defaults", lambda: RoCITTrainer(model(), args=RoCITConfig(str(folder / "c"), **common),
                                                       train_dataset=rows, profiles=profiles,
                                                       processing_class=copy.deepcopy(tokenizer))),
        ("RoCIT prefix_sharing=False", lambda: RoCITTrainer(model(), args=RoCITConfig(str(folder / "d"),
                                                            prefix_sharing=False, **common), train_dataset=rows,
                                                            profiles=profiles,
                                                            processing_class=copy.deepcopy(tokenizer))),
    ]  # fmt: skip
    for name, build in setups:
        print(f"\n--- {name}")
        results.append(measure(name, build(), tokenizer.pad_token_id, len(rows)))

    base = results[0]["samples/s"]
    print(f"\n{len(rows)} samples, one epoch, batch size {args.batch_size}, max_length {args.max_length}, one CPU "
          "thread; rates per CPU second")  # fmt: skip
    print(f"{'setup':<28}{'rows':>5}{'cpu s':>7}{'wall s':>8}{'samples/s':>11}{'input tok/s':>13}{'loss tok/s':>12}"
          f"{'padding':>9}{'vs SFT':>8}")  # fmt: skip
    for r in results:
        print(f"{r['setup']:<28}{r['rows']:>5}{r['seconds']:>7.1f}{r['wall']:>8.1f}{r['samples/s']:>11.2f}"
              f"{r['input tokens/s']:>13.0f}{r['loss tokens/s']:>12.0f}{r['padding']:>9.1%}"
              f"{r['samples/s'] / base:>7.2f}x")  # fmt: skip
    print("loss tok/s: SFTTrainer defaults train on every token (system prompt and question included); RoCIT on the "
          "answers only.")  # fmt: skip


if __name__ == "__main__":
    main(make_parser().parse_args())
