"""One check of everything that needs a GPU, printed as one table: `bench/gpu_check.sh` runs this file.

Each row runs in its own process under a hard time limit (`ROWS`: name -> seconds), so a row that fails, hangs or
runs out of memory prints `FAIL` with a one-line reason and the others still run. The rows:

- `gpu tests`: `pytest -m gpu` (pass / fail / skip counts);
- `packing`: bf16 RoCIT with prefix-shared packing (FlexAttention on CUDA) against TRL's best-fit packing, the same
  packed rows per step, on a Qwen2-0.5B-shaped Llama with random weights built here from a config (no download):
  tokens/s through the model, trained tokens/s, and an MFU estimate (6 x parameters x tokens/s / the GPU's peak);
- `qlora`: RoCIT steps on the same model loaded in 4-bit NF4 (bitsandbytes) with LoRA;
- `vllm`: `vllm.LLM` offline generation on the same model folder, when vllm is installed;
- `two processes`: `accelerate launch` DDP on two GPUs, when there are two.

`--dry-run` runs the same code on the CPU with tiny sizes (a two-layer model, a few steps), so the script is tested
where there is no GPU (`tests/test_gpu_check.py`). The table format is documented in docs/gpu-check.md.

    python bench/gpu_check.py [--dry-run] [--rows packing,qlora] [--work DIR]
"""

import argparse
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
    probe = "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.device_count(), " + (
        "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA GPU')"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    torch_version, cuda, count, device = (done.stdout.strip().split(" ", 3) + ["?"] * 4)[:4]
    mode = "dry run on the CPU, tiny sizes" if dry_run else f"{count} GPU(s)"
    return f"rolellm GPU check: {device} ({mode}); torch {torch_version}, CUDA {cuda}"


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


def rocit_trainer(model_dir, output_dir, gpu: bool, dry_run: bool, **overrides):
    from rolellm.data.builder import load_rolebench, load_rolebench_profiles
    from rolellm.training.config import RoCITConfig
    from rolellm.training.trainer import RoCITTrainer

    rows = load_rolebench("zh", data_dir=SLICE, splits=["train"])["train"]
    rows = rows.shuffle(seed=0).select(range(48)) if dry_run else rows  # general and role-specific rows
    settings = {
        "output_dir": str(output_dir), "use_cpu": not gpu, "bf16": gpu, "activation_checkpointing": False,
        "reference": "all", "per_device_train_batch_size": 2 if dry_run else 4,
        "max_length": 512 if dry_run else 2048, "max_steps": 3 if dry_run else 12, "learning_rate": 1e-4,
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True, "seed": 0,
        "model_init_kwargs": {"dtype": "bfloat16" if gpu else "float32"},
    }  # fmt: skip
    settings.update(overrides.pop("config", {}))
    args = RoCITConfig(**settings)
    profiles = load_rolebench_profiles("zh", data_dir=SLICE)
    return RoCITTrainer(str(model_dir), args=args, train_dataset=rows, profiles=profiles, **overrides)


class BatchCounter:
    """Wraps a data collator and counts, per batch, the tokens through the model and the trained tokens."""

    def __init__(self, collator):
        self.collator, self.batches = collator, []

    def __call__(self, examples):
        batch = self.collator(examples)
        if "segment_ids" in batch:  # prefix-shared rows: padding has segment -1
            real = int((batch["segment_ids"] >= 0).sum())
        elif "attention_mask" in batch:
            real = int(batch["attention_mask"].sum())
        else:  # padding-free rows
            real = batch["input_ids"].numel()
        self.batches.append((real, int((batch["labels"][:, 1:] != -100).sum())))
        return batch


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
    """RoCIT prefix-shared packing against TRL's packing: the same packed rows of `max_length` per step."""
    import math

    gpu = on_gpu(args.dry_run)
    if not gpu and not args.dry_run:
        return report("packing", "SKIP", "no CUDA GPU (run with --dry-run on a CPU)")
    model_dir = build_model(args.work, args.dry_run)
    warmup = 1 if args.dry_run else 2  # FlexAttention compiles during the first steps
    setups = [("RoCIT prefix-shared", {}), ("TRL packing", {"config": {"prefix_sharing": False, "packing": True}})]
    rates = {}
    for label, overrides in setups:
        trainer = rocit_trainer(model_dir, Path(args.work) / "packing-out", gpu, args.dry_run, **overrides)
        counter = BatchCounter(trainer.data_collator)
        trainer.data_collator = counter
        seconds, losses = timed_train(trainer, warmup, gpu)
        steps = trainer.state.global_step
        real, trained = (sum(b[i] for b in counter.batches[warmup:steps]) for i in (0, 1))
        if not all(math.isfinite(loss) for loss in losses):
            report(f"packing: {label}", "FAIL", f"loss not finite: {losses}")
            continue
        model = trainer.accelerator.unwrap_model(trainer.model)
        parameters = sum(p.numel() for p in model.parameters())
        peak = peak_flops() if gpu else None
        mfu = f"MFU {6 * parameters * real / seconds / peak:.1%}" if peak else "MFU n/a (no known peak)"
        backend = model.config._attn_implementation
        rates[label] = trained / seconds
        del model
        free_trainer(trainer)
        report(
            f"packing: {label} ({backend})",
            "PASS",
            f"{real / seconds:,.0f} tok/s, {trained / seconds:,.0f} trained tok/s, {mfu}; {steps - warmup} timed "
            f"steps of {trainer.args.per_device_train_batch_size} rows x {trainer.args.max_length}, "
            f"{parameters / 1e6:,.1f}M params, loss {losses[0]:.3f} -> {losses[-1]:.3f}",
        )
    if len(rates) == 2:
        ratio = rates["RoCIT prefix-shared"] / rates["TRL packing"]
        report("packing: ratio", "PASS", f"prefix-shared / TRL packing, trained tokens per second: {ratio:.2f}x")


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
