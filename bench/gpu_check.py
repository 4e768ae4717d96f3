"""One check of everything that needs a GPU, printed as one table: `bench/gpu_check.sh` runs this file.

Each row runs in its own process under a hard time limit (`ROWS`: name -> seconds), so a row that fails, hangs or
runs out of memory prints `FAIL` with a one-line reason and the others still run. The rows:

- `gpu tests`: `pytest -m gpu` (pass / fail / skip counts);
- `packing`: bf16 RoCIT with prefix-shared packing (FlexAttention on CUDA) against `trl.SFTTrainer` at its fastest
  configuration that installs here (`PACKING_SETUPS`), on the same tokenized rows, on a Qwen2-0.5B-shaped Llama with
  random weights built here from a config (no download): tokens/s through the model, trained tokens/s, and the MFU
  of the useful FLOPs (`model_flops`);
- `qlora`: RoCIT steps on the same model loaded in 4-bit NF4 (bitsandbytes) with LoRA;
- `vllm`: `vllm.LLM` offline generation on the same model folder, when vllm is installed;
- `two processes`: `accelerate launch` DDP on two GPUs, when there are two.

`--dry-run` runs the same code on the CPU with tiny sizes (a two-layer model, a few steps), so the script is tested
where there is no GPU (`tests/test_gpu_check.py`). The table format is documented in docs/gpu-check.md.

    python bench/gpu_check.py [--dry-run] [--rows packing,qlora] [--packing rocit,trl-flex] [--work DIR]
"""

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "tests" / "fixtures" / "rolebench-slice" / "rolebench"
# row -> hard time limit in seconds on a GPU; together at most 8 minutes
ROWS = {"gpu tests": 170, "packing": 140, "qlora": 45, "vllm": 70, "two processes": 55}
DRY_RUN_SLOWER = 4  # a dry run's limits: a CPU is slower, even at tiny sizes
# a Qwen2-0.5B-shaped Llama (494M parameters with tied embeddings), random weights
HALF_B = {
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 4096, "tie_word_embeddings": True,
    "rope_theta": 1_000_000.0,
}  # fmt: skip
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2}  # fmt: skip
# dense bf16 peak FLOP/s by device name (NVIDIA data sheets, without sparsity)
PEAK_BF16 = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12)]


# ------------------------------------------------------------------------------------------------ the table
def run_row(name: str, args) -> list[dict]:
    """Run one row in a child process under its time limit; its result lines, or one FAIL line saying why."""
    limit = args.row_timeout or ROWS[name] * (DRY_RUN_SLOWER if args.dry_run else 1)
    command = [sys.executable, str(Path(__file__).resolve()), "--row", name, "--work", args.work]
    command += ["--dry-run"] if args.dry_run else []
    command += ["--packing", args.packing]
    start = time.perf_counter()
    # a session of its own: on a timeout the whole group goes (pytest's, torchrun's and vLLM's workers too)
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
        rows = [json.loads(line[len("ROW ") :]) for line in stdout.splitlines() if line.startswith("ROW ")]
        rows.append({"row": name, "status": "FAIL", "result": f"timed out after {limit:g} s"})
        return [{**row, "seconds": limit} for row in rows]
    seconds = time.perf_counter() - start
    rows = [json.loads(line[len("ROW ") :]) for line in stdout.splitlines() if line.startswith("ROW ")]
    if child.returncode != 0 or not rows:
        lines = [line for line in (stderr + stdout).strip().splitlines() if line.strip()]
        reason = lines[-1].strip() if lines else f"exit {child.returncode}, no output"
        rows = [*rows, {"row": name, "status": "FAIL", "result": reason[:200]}]
    for row in rows:
        row.setdefault("seconds", seconds)
    return rows


def format_table(rows: list[dict], header: str) -> str:
    lines = [header, "", "| row | status | result | seconds |", "|---|---|---|---|"]
    lines += [f"| {r['row']} | {r['status']} | {r['result']} | {r['seconds']:.1f} |" for r in rows]
    return "\n".join(lines)


def describe_machine(dry_run: bool) -> str:
    """The table's first line: the GPU and the torch and CUDA versions (asked of torch in a child process, as the
    rows run); a dry run names torch's version from its metadata alone (nothing to probe on the CPU)."""
    if dry_run:
        return f"rolellm GPU check: CPU (dry run on the CPU, tiny sizes); torch {importlib.metadata.version('torch')}"
    probe = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), " + (
        "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA GPU')"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    torch_version, cuda, count, device = (done.stdout.strip().split(" ", 3) + ["?"] * 4)[:4]
    return f"rolellm GPU check: {device} ({count} GPU(s)); torch {torch_version}, CUDA {cuda}"


def main(args):
    names = [name.strip() for name in args.rows.split(",")] if args.rows else list(ROWS)
    unknown = sorted(set(names) - set(ROWS))
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; the rows: {', '.join(ROWS)}")
    own_work = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="gpu-check-")
    try:
        header = describe_machine(args.dry_run)
        rows = []
        for name in names:
            rows += run_row(name, args)
            print(f"{name}: {rows[-1]['status']} ({rows[-1]['seconds']:.1f} s)", file=sys.stderr, flush=True)
        print(format_table(rows, header))
    finally:
        if own_work:
            shutil.rmtree(args.work, ignore_errors=True)
    return 1 if any(row["status"] == "FAIL" for row in rows) else 0


# ------------------------------------------------------------------------------------------------ the rows
def report(row: str, status: str, result: str) -> None:
    print("ROW " + json.dumps({"row": row, "status": status, "result": result}), flush=True)


def on_gpu(dry_run: bool) -> bool:
    import torch

    return not dry_run and torch.cuda.is_available()


def row_gpu_tests(args):
    """`pytest -m gpu` over the test files that hold gpu-marked tests (a dry run: tests/test_packing.py, where they
    skip on a CPU). Naming the files keeps a test file whose optional extra is absent from failing the collection."""
    marked = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "tests").glob("test_*.py")
                    if "mark.gpu" in path.read_text(encoding="utf-8"))  # fmt: skip
    targets = ["tests/test_packing.py"] if args.dry_run else marked
    command = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *targets]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    counts = dict.fromkeys(("passed", "failed", "errors", "skipped", "deselected"), 0)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    for number, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", summary):
        counts["errors" if kind.startswith("error") else kind] = int(number)
    if done.returncode not in (0, 5) or not summary:  # 5: nothing collected
        failed = [line.split(" ")[1] for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        detail = f"; first: {failed[0]}" if failed else ""
        return report("gpu tests", "FAIL", f"{counts['passed']} passed, {counts['failed']} failed, "
                      f"{counts['errors']} errors, {counts['skipped']} skipped{detail}")  # fmt: skip
    report("gpu tests", "PASS", f"{counts['passed']} passed, 0 failed, {counts['skipped']} skipped")


def build_model(work: str, dry_run: bool) -> Path:
    """The model folder every row uses: Qwen2-0.5B-shaped (tiny in a dry run), random weights, the tiny tokenizer
    with rolellm's ChatML role template, built once per check."""
    folder = Path(work) / ("tiny-model" if dry_run else "half-b-model")
    if not (folder / "config.json").is_file():
        from rolellm.encoding.chat_template import set_role_chat_template
        from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer

        tokenizer = train_tiny_tokenizer()
        set_role_chat_template(tokenizer)
        shape = TINY if dry_run else HALF_B
        staging = Path(tempfile.mkdtemp(dir=work))
        build_tiny_llama(staging, tokenizer=tokenizer, **shape)
        staging.rename(folder)
    return folder


# The packing row's setups. RoCIT packs a role's samples behind one copy of its system prompt (prefix-shared rows,
# FlexAttention on CUDA). TRL's side is `trl.SFTTrainer` at its fastest documented configuration that installs without
# a download or a source build: best-fit packing, which is padding-free (one flat row of samples told apart by
# `position_ids`), TRL's chunked LM head (always on), Liger's kernels (RMSNorm, RoPE, SwiGLU), no activation
# checkpointing. The attention TRL documents for padding-free rows, FlashAttention 2/3, installs only as a source build
# (`flash-attn`) or from the Hub (`kernels-community/...`), so TRL runs on the faster of FlexAttention and SDPA, which
# both read the sample boundaries from `position_ids`. Both sides see the same tokenized rows and the same row budget.
PACKING_SETUPS = {
    "rocit": {"trainer": "rocit", "rows": 16, "liger": True},
    "rocit-compile": {"trainer": "rocit", "rows": 16, "liger": True, "compile": True},
    "rocit-4": {"trainer": "rocit", "rows": 4},
    "rocit-32": {"trainer": "rocit", "rows": 32, "liger": True},
    "trl-flex": {"trainer": "trl", "rows": 16, "liger": True, "attention": "flex_attention"},
    "trl-sdpa": {"trainer": "trl", "rows": 16, "liger": True, "attention": "sdpa"},
    "trl-flex-compile": {"trainer": "trl", "rows": 16, "liger": True, "attention": "flex_attention", "compile": True},
}
DEFAULT_PACKING = "rocit,trl-flex-compile"  # the fastest of each side on an H200 (docs/gpu-check.md)


def base_settings(output_dir, gpu: bool, dry_run: bool) -> dict:
    return {
        "output_dir": str(output_dir), "use_cpu": not gpu, "bf16": gpu, "activation_checkpointing": False,
        "per_device_train_batch_size": 2 if dry_run else 4, "max_length": 512 if dry_run else 2048,
        "max_steps": 3 if dry_run else 12, "learning_rate": 1e-4, "logging_steps": 1, "save_strategy": "no",
        "report_to": "none", "disable_tqdm": True, "seed": 0,
        "model_init_kwargs": {"dtype": "bfloat16" if gpu else "float32"},
    }  # fmt: skip


def rocit_trainer(model_dir, output_dir, gpu: bool, dry_run: bool, **overrides):
    from rolellm.data.builder import load_rolebench, load_rolebench_profiles
    from rolellm.training.config import RoCITConfig
    from rolellm.training.trainer import RoCITTrainer

    rows = load_rolebench("zh", data_dir=SLICE, splits=["train"])["train"]
    rows = rows.shuffle(seed=0).select(range(48)) if dry_run else rows  # general and role-specific rows
    settings = {**base_settings(output_dir, gpu, dry_run), "reference": "all"}
    settings.update(overrides.pop("config", {}))
    args = RoCITConfig(**settings)
    profiles = load_rolebench_profiles("zh", data_dir=SLICE)
    return RoCITTrainer(str(model_dir), args=args, train_dataset=rows, profiles=profiles, **overrides)


@functools.cache  # once per check: every TRL setup trains on the same rows
def role_token_rows(model_dir, work, gpu: bool, dry_run: bool):
    """RoCIT's tokenized samples, one a row (its system prompt, question, answer; `labels` -100 outside the answer):
    the rows TRL's side trains on, so both sides see the same tokens and train the same ones."""
    trainer = rocit_trainer(model_dir, Path(work) / "tokens-out", gpu, dry_run,
                            config={"prefix_sharing": False, "packing": False})  # fmt: skip
    rows = trainer.train_dataset.select_columns(["input_ids", "labels"])
    free_trainer(trainer)
    return rows, trainer.processing_class


def packing_trainer(name: str, model_dir, work, gpu: bool, dry_run: bool, max_steps: int | None = None):
    """The trainer of one setup of `PACKING_SETUPS`, and what it used (Liger and compile need Triton, FlexAttention's
    backward a GPU: a dry run on a CPU leaves them out, and says so for Liger)."""
    setup = PACKING_SETUPS[name]
    triton = gpu and importlib.util.find_spec("triton") is not None
    liger = setup.get("liger", False) and triton and importlib.util.find_spec("liger_kernel") is not None
    compiled = setup.get("compile", False) and triton
    notes = [f"Liger {'on' if liger else 'off'}" + ("" if liger or not setup.get("liger") else " (not installed)")]
    notes += ["torch.compile"] if compiled else []
    config = {"per_device_train_batch_size": 2 if dry_run else setup["rows"], "use_liger_kernel": liger,
              "torch_compile": compiled, **({"max_steps": max_steps} if max_steps else {})}  # fmt: skip
    output_dir = Path(work) / f"packing-{name}"
    if setup["trainer"] == "rocit":
        return rocit_trainer(model_dir, output_dir, gpu, dry_run, config=config), notes
    from trl import SFTConfig, SFTTrainer

    rows, tokenizer = role_token_rows(model_dir, work, gpu, dry_run)
    settings = {**base_settings(output_dir, gpu, dry_run), **config, "packing": True, "packing_strategy": "bfd"}
    attention = setup["attention"] if gpu else "sdpa"  # FlexAttention has no backward on a CPU
    settings["model_init_kwargs"] = {**settings["model_init_kwargs"], "attn_implementation": attention}
    trainer = SFTTrainer(str(model_dir), args=SFTConfig(**settings), train_dataset=rows, processing_class=tokenizer)
    return trainer, notes


class BatchCounter:
    """Wraps a data collator and counts, per batch, the tokens through the model, the trained tokens and the
    (query, key) pairs the attention computes (causal, within a sample, plus its shared prefix)."""

    def __init__(self, collator):
        self.collator, self.batches = collator, []

    def __call__(self, examples):
        batch = self.collator(examples)
        if "segment_ids" in batch:  # prefix-shared rows: padding has segment -1
            real = int((batch["segment_ids"] >= 0).sum())
            pairs = prefix_shared_pairs(batch["segment_ids"], batch["prefix_segment_ids"])
        elif "position_ids" in batch:  # padding-free rows: positions restart at 0 with each sample
            real = batch["input_ids"].numel()
            pairs = int((batch["position_ids"] + 1).sum())
        else:  # padded rows
            mask = batch["attention_mask"]
            real, pairs = int(mask.sum()), int((mask.cumsum(-1) * mask).sum())
        self.batches.append((real, int((batch["labels"][:, 1:] != -100).sum()), pairs))
        return batch


def prefix_shared_pairs(segment_ids, prefix_segment_ids) -> int:
    """Attended (query, key) pairs in prefix-shared rows: each token sees the earlier tokens of its own segment and,
    when its segment has a shared prefix, the whole prefix."""
    import torch

    pairs = 0
    for segments, prefixes in zip(segment_ids.tolist(), prefix_segment_ids.tolist(), strict=True):
        ids, counts = torch.unique_consecutive(torch.tensor(segments), return_counts=True)
        length = {}
        for segment, count in zip(ids.tolist(), counts.tolist(), strict=True):
            length[segment] = length.get(segment, 0) + count
        start = 0
        for segment, count in zip(ids.tolist(), counts.tolist(), strict=True):
            if segment >= 0:
                prefix = prefixes[start]
                pairs += count * (count + 1) // 2 + (
                    count * length.get(prefix, 0) if prefix not in (-1, segment) else 0
                )
            start += count
    return pairs


def model_flops(model, real: int, trained: int, pairs: int) -> float:
    """Training FLOPs of the useful work: 6 x the non-embedding parameters per token through the model, 6 x width x
    vocabulary per trained token (the output layer, needed only where there is a loss), and 12 x layers x attention
    width per attended (query, key) pair (scores and weighted values, forward and backward)."""
    config = model.config
    width, vocab = config.hidden_size, config.vocab_size
    head_dim = getattr(config, "head_dim", None) or width // config.num_attention_heads
    embedding = width * vocab * (1 if config.tie_word_embeddings else 2)
    body = sum(p.numel() for p in model.parameters()) - embedding
    attention = 12 * config.num_hidden_layers * config.num_attention_heads * head_dim
    return 6 * body * real + 6 * width * vocab * trained + attention * pairs


def timed_train(trainer, warmup: int, gpu: bool) -> tuple[float, list[float]]:
    """Train; the seconds from the end of step `warmup` to the end, and the logged losses."""
    import torch
    from transformers import TrainerCallback

    marks = {}

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if gpu:
                torch.cuda.synchronize()
            marks[state.global_step] = time.perf_counter()

    trainer.add_callback(Clock())
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return marks[trainer.state.global_step] - marks[warmup], losses


def free_trainer(trainer) -> None:
    """Let the next setup start with the GPU memory this trainer held (model, optimizer states, compiled kernels)."""
    import gc

    import torch

    trainer.accelerator.free_memory()
    trainer.model = trainer.model_wrapped = trainer.optimizer = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peak_flops() -> float | None:
    import torch

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
    return next((peak for key, peak in PEAK_BF16 if key in name), None)


def row_packing(args):
    """RoCIT prefix-shared packing against TRL's fastest packing (`PACKING_SETUPS`): the same rows, the same number
    of rows per step; tokens per second, trained tokens per second, MFU (`model_flops` / time / the GPU's peak)."""
    import math

    gpu = on_gpu(args.dry_run)
    if not gpu and not args.dry_run:
        return report("packing", "SKIP", "no CUDA GPU (run with --dry-run on a CPU)")
    names = [name.strip() for name in args.packing.split(",")]
    unknown = sorted(set(names) - set(PACKING_SETUPS))
    if unknown:
        return report("packing", "FAIL", f"unknown setups {unknown}; the setups: {', '.join(PACKING_SETUPS)}")
    model_dir = build_model(args.work, args.dry_run)
    warmup = 1 if args.dry_run else 2  # FlexAttention (and torch.compile) compile during the first steps
    # the process's first training compiles kernels (Triton, FlexAttention, Liger) for several more steps than the
    # untimed ones: an untimed run of the first setup first
    trainer, _ = packing_trainer(names[0], model_dir, args.work, gpu, args.dry_run, max_steps=1 if args.dry_run else 4)
    trainer.train()
    free_trainer(trainer)
    rates = {}
    for name in names:
        try:
            trainer, notes = packing_trainer(name, model_dir, args.work, gpu, args.dry_run)
            counter = BatchCounter(trainer.data_collator)
            trainer.data_collator = counter
            seconds, losses = timed_train(trainer, warmup, gpu)
        except Exception as error:  # one setup failing (a kernel that does not build) leaves the others to run
            report(f"packing: {name}", "FAIL", f"{type(error).__name__}: {str(error).splitlines()[0][:160]}")
            continue
        steps = trainer.state.global_step
        real, trained, pairs = (sum(b[i] for b in counter.batches[warmup:steps]) for i in range(3))
        if not all(math.isfinite(loss) for loss in losses):
            report(f"packing: {name}", "FAIL", f"loss not finite: {losses}")
            continue
        model = trainer.accelerator.unwrap_model(trainer.model)
        model = getattr(model, "_orig_mod", model)  # a compiled model's own module
        peak = peak_flops() if gpu else None
        flops = model_flops(model, real, trained, pairs)
        mfu = f"MFU {flops / seconds / peak:.1%}" if peak else "MFU n/a (no known peak)"
        parameters = sum(p.numel() for p in model.parameters())
        backend = model.config._attn_implementation
        rates[name] = trained / seconds
        del model
        free_trainer(trainer)
        report(
            f"packing: {name} ({backend})",
            "PASS",
            f"{real / seconds:,.0f} tok/s, {trained / seconds:,.0f} trained tok/s, {mfu}; {', '.join(notes)}; "
            f"{steps - warmup} timed steps of {trainer.args.per_device_train_batch_size} rows x "
            f"{trainer.args.max_length}, {parameters / 1e6:,.1f}M params, loss {losses[0]:.3f} -> {losses[-1]:.3f}",
        )
    for rows in sorted({PACKING_SETUPS[name]["rows"] for name in rates}):  # like with like: the same rows a step
        alike = [name for name in rates if PACKING_SETUPS[name]["rows"] == rows]
        ours = [name for name in alike if PACKING_SETUPS[name]["trainer"] == "rocit"]
        theirs = [name for name in alike if PACKING_SETUPS[name]["trainer"] == "trl"]
        if ours and theirs:
            best_ours, best_theirs = max(ours, key=rates.get), max(theirs, key=rates.get)
            ratio = rates[best_ours] / rates[best_theirs]
            report("packing: ratio", "PASS", f"{best_ours} / {best_theirs} (TRL's fastest here), {rows} rows a step, "
                   f"trained tokens per second: {ratio:.2f}x")  # fmt: skip


def row_qlora(args):
    """RoCIT steps with the model loaded in 4-bit NF4 and LoRA adapters."""
    import math

    import bitsandbytes as bnb
    import torch
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    gpu = on_gpu(args.dry_run)
    if not gpu and not args.dry_run:
        return report("qlora", "SKIP", "no CUDA GPU (run with --dry-run on a CPU)")
    model_dir = build_model(args.work, args.dry_run)
    compute = torch.bfloat16 if gpu else torch.float32
    quantization = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute, bnb_4bit_use_double_quant=True
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    config = {"max_steps": 3, "per_device_train_batch_size": 2, "max_length": 512 if args.dry_run else 1024}
    trainer = rocit_trainer(model_dir, Path(args.work) / "qlora-out", gpu, args.dry_run, config=config,
                            peft_config=lora, quantization_config=quantization)  # fmt: skip
    quantized = sum(isinstance(m, bnb.nn.Linear4bit) for m in trainer.model.modules())  # bitsandbytes' layers
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    seconds, losses = timed_train(trainer, 1, gpu)
    if not quantized or not all(math.isfinite(loss) for loss in losses):
        return report("qlora", "FAIL", f"{quantized} 4-bit layers, losses {losses}")
    memory = f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if gpu else ""
    report("qlora", "PASS", f"{quantized} 4-bit NF4 layers + LoRA r=16, {seconds / 2:.2f} s/step after the first, "
           f"loss {losses[0]:.3f} -> {losses[-1]:.3f}{memory}")  # fmt: skip


def row_vllm(args):
    """vLLM offline generation (`vllm.LLM`) on the model folder."""
    if importlib.util.find_spec("vllm") is None:
        return report("vllm", "SKIP", "vllm not installed")
    if not on_gpu(args.dry_run):
        return report("vllm", "SKIP", "vLLM needs a GPU")
    from vllm import LLM, SamplingParams

    model_dir = build_model(args.work, args.dry_run)
    llm = LLM(model=str(model_dir), dtype="bfloat16", gpu_memory_utilization=0.4, max_model_len=2048, seed=0)
    prompts = [[{"role": "user", "content": f"Question {i}: who are you?"}] for i in range(64)]
    start = time.perf_counter()
    outputs = llm.chat(prompts, SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True))
    seconds = time.perf_counter() - start
    tokens = sum(len(out.outputs[0].token_ids) for out in outputs)
    status = "PASS" if tokens == 64 * 64 else "FAIL"
    report("vllm", status, f"{len(outputs)} chats, {tokens} tokens generated, {tokens / seconds:,.0f} tok/s")


def row_two_processes(args):
    """Two training processes with DDP: two GPUs with accelerate, or in a dry run two CPU processes over gloo."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not args.dry_run and gpus < 2:
        return report("two processes", "SKIP", f"{gpus} GPU(s): needs two")
    model_dir = build_model(args.work, args.dry_run)
    output_dir = Path(args.work) / "ddp-out"
    if args.dry_run:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29561"]
        env = {"ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
        extra = ["--use_cpu", "true", "--bf16", "false", "--max_length", "512"]
    else:
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                    str(ROOT / "examples" / "accelerate_configs" / "multi_gpu.yaml"), "--num_processes", "2",
                    "--main_process_port", "29561"]  # fmt: skip
        env, extra = {}, ["--use_cpu", "false", "--bf16", "true", "--max_length", "2048"]
    command = [
        *launcher, str(ROOT / "examples" / "train_rolellama.py"), "--config",
        str(ROOT / "examples" / "recipes" / "tiny-cpu.yaml"), "--model_name_or_path", str(model_dir),
        "--data_dir", str(SLICE), "--dataset_configs", "zh", "--max_steps", "4", "--per_device_train_batch_size", "2",
        "--learning_rate", "1e-4", "--logging_steps", "1", "--output_dir", str(output_dir), "--disable_tqdm", "true",
        *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    seconds = time.perf_counter() - start
    line = next((x for x in done.stdout.splitlines() if "on 2 process(es) (DDP)" in x), None)
    if done.returncode != 0 or line is None:
        lines = [x for x in done.stderr.strip().splitlines() if x.strip()]
        return report("two processes", "FAIL", (lines[-1] if lines else f"exit {done.returncode}")[:200])
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    report("two processes", "PASS", f"DDP, 2 processes, 4 steps in {seconds:.0f} s (launch included), "
           f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")  # fmt: skip


ROW_FUNCTIONS = {"gpu tests": row_gpu_tests, "packing": row_packing, "qlora": row_qlora, "vllm": row_vllm,
                 "two processes": row_two_processes}  # fmt: skip


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="the same code on the CPU with tiny sizes")
    parser.add_argument("--rows", help=f"comma-separated rows to run (default: all): {', '.join(ROWS)}")
    parser.add_argument("--work", help="a folder for the model and outputs (default: a temporary one)")
    parser.add_argument("--row-timeout", type=float, help="one time limit for every row, in seconds")
    parser.add_argument(
        "--packing",
        default=DEFAULT_PACKING,
        help=f"the packing row's setups, comma-separated (default: {DEFAULT_PACKING}); the setups: "
        f"{', '.join(PACKING_SETUPS)}",
    )
    parser.add_argument("--row", help=argparse.SUPPRESS)  # the child process of one row
    return parser


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: the GPU machine may have no network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    arguments = make_parser().parse_args()
    if arguments.row is not None:
        sys.path.insert(0, str(ROOT))
        ROW_FUNCTIONS[arguments.row](arguments)
    else:
        sys.exit(main(arguments))
