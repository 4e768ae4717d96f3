"""The paper's Table 3 on a real model: SmolLM2-135M-Instruct before and after RoCIT, DPO and GRPO, scored with
ROUGE-L on held-out questions. `make reproduce` runs it at the CPU size (under an hour on 2 cores); `--num_roles 0`
takes every role (a GPU run).

Data: the English role-specific questions of the release's instruction-generalization folder (95 roles x 50; the
bundled slice's 4 roles x 25 when the release is not there), each role's questions split into train and held-out
questions (`rolellm.data.heldout`), and the Chinese role-specific release split (its own train and test files).
Every row answers the same held-out questions, greedily, with each role's system instruction:

| row | what |
|---|---|
| base | the embedded model with the role's system instruction |
| few-shot | the same, with three of the role's train exchanges as dialogue turns (retrieved by the question) |
| rocit-lora | RoCIT with LoRA (`examples/recipes/smollm2-cpu.yaml`) |
| rocit-full | RoCIT, full fine-tuning |
| rocit-dpo | rocit-lora, then DPO on pairs of its own samples ranked by reference ROUGE-L (`rolellm generate preferences`) |
| rocit-grpo | rocit-lora, then GRPO with the reference ROUGE-L and catchphrase rewards |

Each step runs a `rolellm` command and is resumable: a finished step leaves `.done` in its folder and is skipped on
the next run; answers already given are in each evaluation's cache. The table (SPE with a 95% bootstrap confidence
interval over the held-out questions, answer length in words, wall time of the row's own steps) is printed and written
to `OUTPUT_DIR/table.md`.

    python examples/reproduce_smollm2.py --output_dir outputs/reproduce   # make reproduce
    python examples/reproduce_smollm2.py --rows base,rocit-lora --langs en
"""

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm


EXAMPLES = Path(__file__).resolve().parent
ROOT = EXAMPLES.parent
RECIPE = EXAMPLES / "recipes" / "smollm2-cpu.yaml"
SLICE = ROOT / "tests" / "fixtures" / "rolebench-slice" / "rolebench"
EN_TEST = Path("rolebench-eng/instruction-generalization/role_specific/test.jsonl")
ZH_FILES = Path("rolebench-zh/role_specific")
ROWS = ("base", "few-shot", "rocit-lora", "rocit-full", "rocit-dpo", "rocit-grpo")
CONFIGS = {"en": "en-instruction-role_specific", "zh": "zh-role_specific"}  # the configs of the written folders
ZH_ROWS = ("base", "rocit-lora")  # a 135M English-centred model: the Chinese rows show where it stands
DONE = ".done"


def find_release(data_dir: str | None) -> Path:
    """The release folder: `--data_dir`, else `$ROLEBENCH_DATA_DIR`, else `../shared/data/rolebench`, else the slice."""
    candidates = [data_dir, os.environ.get("ROLEBENCH_DATA_DIR"), ROOT.parent / "shared" / "data"]
    for candidate in filter(None, candidates):
        for folder in (Path(candidate), Path(candidate) / "rolebench"):
            if (folder / EN_TEST).is_file():
                return folder
    return SLICE


def read_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def first_roles(rows: list[dict], count: int) -> list[dict]:
    """The rows of the first `count` roles of the file (all with 0)."""
    roles = list(dict.fromkeys(row["role"] for row in rows))
    keep = set(roles if count <= 0 else roles[:count])
    return [row for row in rows if row["role"] in keep]


def first_per_role(rows: list[dict], count: int) -> list[dict]:
    seen: dict[str, int] = {}
    kept = []
    for row in rows:
        seen[row["role"]] = seen.get(row["role"], 0) + 1
        if count <= 0 or seen[row["role"]] <= count:
            kept.append(row)
    return kept


def prepare_data(options, release: Path, out: Path) -> dict[str, Path]:
    """Write each language's split as a release folder (with the train exchanges as few-shot dialogue)."""
    from rolellm.data.heldout import split_role_questions, write_split_release

    folders = {}
    if "en" in options.langs:
        rows = first_roles(read_rows(release / EN_TEST), options.num_roles)
        train, held_out = split_role_questions(rows, held_out=options.held_out)
        descriptions = english_descriptions(release, {row["role"] for row in rows})
        folders["en"] = write_split_release(train, held_out, out / "data-en", descriptions, "en", train_dialogue=True)
    if "zh" in options.langs and (release / ZH_FILES / "train.jsonl").is_file():
        train = first_per_role(read_rows(release / ZH_FILES / "train.jsonl"), options.zh_train_per_role)
        test = first_per_role(read_rows(release / ZH_FILES / "test.jsonl"), options.zh_test_per_role)
        descriptions = json.loads((release / "profiles-zh" / "desc.json").read_text(encoding="utf-8"))
        folders["zh"] = write_split_release(train, test, out / "data-zh", descriptions, "zh")
    return folders


def english_descriptions(release: Path, roles: set[str]) -> dict[str, str]:
    """The release's English descriptions where it has them (`profiles-eng/desc.json`), else the bundled ones
    (`examples/data/roles-eng.json`), else the paper's instruction with the name alone."""
    found = {}
    for path in (release / "profiles-eng" / "desc.json", EXAMPLES / "data" / "roles-eng.json"):
        if path.is_file():
            found = {**json.loads(path.read_text(encoding="utf-8")), **found}
    return {role: found.get(role) or f"{role}, the character." for role in roles}


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Runner:
    """Runs `rolellm` commands as steps: a step whose folder holds `.done` is skipped; the wall-clock and CPU
    seconds each took are kept in `timings.json`, so a resumed run still reports them. CPU seconds do not depend on
    what else the machine runs; wall time does."""

    def __init__(self, out: Path):
        self.timings_path = out / "timings.json"
        self.timings = json.loads(self.timings_path.read_text()) if self.timings_path.is_file() else {}

    def step(self, name: str, folder: Path, args: list[str]) -> dict:
        if (folder / DONE).is_file():
            return self.timings.get(name, {})
        tqdm.write(f"[{name}] rolellm {' '.join(args)}")
        start, cpu = time.monotonic(), children_cpu_seconds()
        result = subprocess.run([sys.executable, "-m", "rolellm", *args], check=False)
        if result.returncode != 0:
            raise SystemExit(f"reproduce: step {name} failed (exit {result.returncode}); run again to go on from it")
        self.timings[name] = {"wall": time.monotonic() - start, "cpu": children_cpu_seconds() - cpu}
        self.timings_path.write_text(json.dumps(self.timings, indent=1))
        (folder / DONE).write_text("")
        return self.timings[name]


def train_steps(row: str, model: str, data: Path, out: Path, options) -> list[tuple[str, Path, list[str]]]:
    """The training steps of a row, as (step name, output folder, `rolellm` arguments); the row's model is the
    output folder of the last one (`model` when there is none)."""
    lora, lang = out / "rocit-lora", "zh" if data.name.endswith("zh") else "en"
    rocit = ["train", "--config", str(RECIPE), "--model_name_or_path", model, "--data_dir", str(data),
             "--dataset_configs", CONFIGS[lang], "--system_lang", lang]  # fmt: skip
    if row == "rocit-lora":
        return [("train", lora, [*rocit, "--output_dir", str(lora)])]
    if row == "rocit-full":
        full = out / "rocit-full"
        return [("train", full, [*rocit, "--use_peft", "false", "--learning_rate", str(options.full_learning_rate),
                                 "--output_dir", str(full)])]  # fmt: skip
    if row == "rocit-dpo":
        pairs, dpo = out / "dpo-pairs", out / "rocit-dpo"
        return [
            ("generate preferences", pairs, [
                "generate", "preferences", "--model", str(lora), "--backend", "local", "--data_dir", str(data),
                "--profiles", str(data),
                "--dataset_configs", CONFIGS[lang],
                "--num_samples", "4", "--temperature", "1.0", "--max_tokens", str(options.max_new_tokens),
                "--judge", "rouge_l", "--max_questions", str(options.dpo_questions), "--batch_size", "16",
                "--output_dir", str(pairs), "--no_progress"]),
            ("train dpo", dpo, [
                "train", "--stage", "dpo", "--model_name_or_path", str(lora), "--data_dir", str(pairs),
                "--profiles", str(data), "--loss_type", "sigmoid", "--beta", "0.1", "--learning_rate", "5e-5",
                "--num_train_epochs", "1", "--per_device_train_batch_size", "4", "--max_length", "512",
                "--use_cpu", "true", "--bf16", "false", "--logging_steps", "5", "--save_strategy", "no",
                "--report_to", "none", "--output_dir", str(dpo)]),
        ]  # fmt: skip
    if row == "rocit-grpo":
        grpo = out / "rocit-grpo"
        return [("train grpo", grpo, [
            "train", "--stage", "grpo", "--model_name_or_path", str(lora), "--data_dir", str(data),
            "--dataset_configs", CONFIGS[lang], "--rewards", "reference_rouge_l", "catchphrase",
            "--reward_weights", "1.0", "0.25", "--num_generations", "4", "--per_device_train_batch_size", "8",
            "--max_completion_length", "64", "--temperature", "1.0", "--beta", "0.0", "--loss_type", "dapo",
            "--learning_rate", "5e-5", "--max_steps", str(options.grpo_steps), "--use_cpu", "true", "--bf16", "false",
            "--activation_checkpointing", "false", "--logging_steps", "5", "--save_strategy", "no",
            "--report_to", "none", "--output_dir", str(grpo)])]  # fmt: skip
    return []


def evaluate_args(model: str, label: str, lang: str, data: Path, folder: Path, mode: str, options) -> list[str]:
    return ["evaluate", "--model", model, "--model_label", label, "--dataset_name", CONFIGS[lang], "--data_dir", str(data),
            "--mode", mode, "--max_new_tokens", str(options.max_new_tokens), "--batch_size", "16",
            "--output_dir", str(folder), "--no_progress"]  # fmt: skip


def bootstrap(scores: list[float], samples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """The 95% percentile bootstrap interval of the mean of `scores`."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(scores, k=len(scores))) / len(scores) for _ in range(samples))
    return means[int(0.025 * samples)], means[int(0.975 * samples) - 1]


def score_row(folder: Path, data: Path, lang: str) -> dict:
    """SPE (mean, 95% bootstrap interval) and answer length of one evaluation, from its generations."""
    from rolellm.evaluation.benchmark.scoring import sample_scores

    tests = read_rows(next(data.rglob("role_specific/test.jsonl")))
    answers = read_rows(folder / "generations.jsonl")
    scores = sample_scores([a["prediction"] for a in answers], [tests[a["index"]]["generated"] for a in answers], lang)
    low, high = bootstrap(scores)
    length = [len(a["prediction"]) if lang == "zh" else len(a["prediction"].split()) for a in answers]
    return {"spe": sum(scores) / len(scores), "low": low, "high": high, "length": sum(length) / len(length),
            "questions": len(answers)}  # fmt: skip


def add_time(spent: dict, step: dict) -> None:
    """Add a step's seconds to a row's; a step timed before CPU time was kept (a number: wall seconds) has no CPU
    figure, and the row's becomes None."""
    step = step if isinstance(step, dict) else {"wall": step, "cpu": None}
    spent["wall"] += step.get("wall", 0.0)
    spent["cpu"] = None if spent["cpu"] is None or step.get("cpu") is None else spent["cpu"] + step["cpu"]


def format_results(results: list[dict]) -> str:
    lines = [
        "| lang | row | SPE (95% CI) | answer length | questions | wall time | CPU time |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        unit = "chars" if r["lang"] == "zh" else "words"
        cpu = "n/a" if r["cpu"] is None else f"{r['cpu'] / 60:.1f} min"
        lines.append(
            f"| {r['lang']} | {r['row']} | {r['spe']:.4f} ({r['low']:.4f}-{r['high']:.4f}) | {r['length']:.0f} {unit} "
            f"| {r['questions']} | {r['wall'] / 60:.1f} min | {cpu} |"
        )
    total = sum(r["wall"] for r in results)
    lines.append(f"\nwall time of every step: {total / 60:.1f} min")
    return "\n".join(lines)


def main(options):
    from rolellm.clients.gguf import embedded_model_file

    out = options.output_dir
    out.mkdir(parents=True, exist_ok=True)
    release = find_release(options.data_dir)
    model = str(embedded_model_file())
    folders = prepare_data(options, release, out)
    print(f"reproduce: data from {release}; model {Path(model).name}; outputs in {out}")
    runner, results = Runner(out), []
    plan = [(lang, row) for lang in folders for row in options.rows if lang == "en" or row in ZH_ROWS]
    for lang, row in tqdm(plan, desc="reproduce", unit="row"):
        data, work = folders[lang], out / lang
        spent, trained = {"wall": 0.0, "cpu": 0.0}, model
        for name, folder, args in train_steps(row, model, data, work, options):
            add_time(spent, runner.step(f"{lang}/{row}/{name}", folder, args))
            trained = str(folder)
        if row in ("rocit-dpo", "rocit-grpo"):  # built on rocit-lora's adapter: its time is counted there
            lora_steps = train_steps("rocit-lora", model, data, work, options)
            runner.step(f"{lang}/rocit-lora/train", lora_steps[0][1], lora_steps[0][2])
        folder = work / f"eval-{row}"
        mode = "few-shot" if row == "few-shot" else "system"
        add_time(spent, runner.step(f"{lang}/{row}/evaluate", folder, evaluate_args(trained, row, lang, data, folder,
                                                                                     mode, options)))  # fmt: skip
        results.append({"lang": lang, "row": row, **spent, **score_row(folder, data, lang)})
    table = format_results(results)
    (out / "table.md").write_text(table + "\n", encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(table)


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/reproduce-smollm2"))
    parser.add_argument("--data_dir", help="the RoleBench release (default: $ROLEBENCH_DATA_DIR, ../shared/data)")
    parser.add_argument("--rows", type=lambda text: text.split(","), default=list(ROWS), help=",".join(ROWS))
    parser.add_argument("--langs", type=lambda text: text.split(","), default=["en", "zh"])
    parser.add_argument("--num_roles", type=int, default=5, help="English roles, first in the file (0: all 95)")
    parser.add_argument("--held_out", type=int, default=10, help="held-out questions per English role")
    parser.add_argument("--zh_train_per_role", type=int, default=6, help="Chinese train rows per role (0: all)")
    parser.add_argument("--zh_test_per_role", type=int, default=6, help="Chinese test rows per role (0: all)")
    parser.add_argument("--max_new_tokens", type=int, default=96)
    parser.add_argument("--full_learning_rate", type=float, default=5e-5)
    parser.add_argument("--dpo_questions", type=int, default=40, help="train questions sampled for DPO pairs")
    parser.add_argument("--grpo_steps", type=int, default=10)
    return parser


if __name__ == "__main__":
    options = make_parser().parse_args()
    unknown = sorted(set(options.rows) - set(ROWS))
    if unknown:
        raise SystemExit(f"reproduce: --rows {','.join(unknown)}: not a row; the rows are {','.join(ROWS)}")
    main(options)
