"""`make demo`: run the rolellm pipeline on embedded defaults, offline, in a few minutes on a CPU.

1. Build a tiny local model (a byte-level BPE tokenizer and a random two-layer Llama): no download.
2. RoCIT: train it with `RoCITTrainer` on the bundled RoleBench-format sample (`examples/data/demo-rolebench`: two
   English and two Chinese roles) with the tiny CPU recipe (`examples/recipes/tiny-cpu.yaml`).
3. Ask every role a question it was trained on and one it was not, with the role's system instruction, and print the
   answers.
4. Evaluate: the benchmark runner answers the sample's test splits and scores CUS and SPE (the paper's ROUGE-L).
"""

import tempfile
from pathlib import Path

from rolellm.testing import models as testing


EXAMPLES = Path(__file__).resolve().parent
DEMO_DATA = EXAMPLES / "data" / "demo-rolebench"
RECIPE = EXAMPLES / "recipes" / "tiny-cpu.yaml"


def train_tiny_rocit(model_path: Path, output_dir: Path):
    """Train the tiny model with the tiny CPU recipe on the bundled sample; returns the `RoCITTrainer`."""
    from rolellm.scripts.train import make_parser, train  # the script of examples/train_rolellama.py

    args = ["--config", str(RECIPE), "--model_name_or_path", str(model_path), "--output_dir", str(output_dir),
            "--data_dir", str(DEMO_DATA)]  # fmt: skip
    return train(*make_parser().parse_args_into_dataclasses(args))


def answer(model, tokenizer, messages: list[dict], max_new_tokens: int = 48) -> str:
    """Greedy answer of the model to a conversation, with the chat template used in training."""
    import torch

    from rolellm.encoding.encode import encode_chat

    input_ids = torch.tensor([encode_chat(tokenizer, messages, add_generation_prompt=True)["input_ids"]])
    with torch.no_grad():
        output = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True).strip()


def ask_every_role(trainer, split_rows) -> list[dict]:
    """One question per role and subset from `split_rows`, answered in role; returns rows with a `prediction`."""
    from rolellm import to_role_messages

    model, tokenizer = trainer.model.eval(), trainer.processing_class
    seen, answers = set(), []
    for row in split_rows:
        if (row["role"], row["subset"]) in seen:
            continue
        seen.add((row["role"], row["subset"]))
        messages = to_role_messages(row, trainer.profiles[row["role"]])[0][:2]  # system + user
        answers.append({**row, "prediction": answer(model, tokenizer, messages)})
    return answers


def print_answers(title: str, answers: list[dict]):
    print(f"\n{title}")
    for row in answers:
        print(f"  [{row['role']}] ({row['subset']}) Q: {row['question'].strip()}")
        print(f"      model:     {row['prediction']}")
        print(f"      reference: {row['generated'][0].strip()}")


def main():
    import datasets

    from rolellm.data.builder import load_rolebench

    with tempfile.TemporaryDirectory() as folder:
        print("1. Building a tiny local model (byte-level BPE tokenizer + 2-layer Llama)...")
        model_path = testing.build_tiny_llama(Path(folder) / "tiny-llama")
        print(f"   saved to {model_path}")

        print(f"\n2. RoCIT: training it on the bundled sample {DEMO_DATA.relative_to(EXAMPLES.parent)}")
        print(f"   with {RECIPE.relative_to(EXAMPLES.parent)} (two English and two Chinese roles)...")
        trainer = train_tiny_rocit(model_path, Path(folder) / "rocit")
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        print(f"   training loss {losses[0]:.2f} -> {losses[-1]:.2f} in {trainer.state.global_step} steps")

        print("\n3. Role-conditioned answers (system instruction of each role + question, greedy decoding)")
        splits = {
            split: datasets.concatenate_datasets(
                [load_rolebench(name, data_dir=DEMO_DATA, splits=[split])[split] for name in ("en-instruction", "zh")]
            )
            for split in ("train", "test")
        }
        print_answers("Questions seen in training:", ask_every_role(trainer, splits["train"]))
        test_answers = ask_every_role(trainer, splits["test"])
        print_answers("Held-out questions (test split):", test_answers)

        # ---- 4. Evaluation ---------------------------------------------------------------------------------------
        from rolellm.clients.config import ClientConfig
        from rolellm.evaluation.benchmark.report import format_table
        from rolellm.evaluation.benchmark.runner import EvaluateConfig, run_benchmark

        print("\n4. Evaluation: the benchmark runner answers the test splits with the trained model and scores them")
        print("   with the paper's ROUGE-L (CUS: general rows vs RoleGPT references; SPE: role-specific rows)")
        results = [
            run_benchmark(
                EvaluateConfig(
                    # the model and tokenizer saved by step 2
                    client=ClientConfig(str(Path(folder) / "rocit"), max_new_tokens=48),
                    model_label="tiny RoCIT",
                    dataset_name=name,
                    data_dir=str(DEMO_DATA),
                    mode="system",
                    output_dir=str(Path(folder) / f"evaluate-{name}"),
                )
            )
            for name in ("en-instruction", "zh")
        ]
        print(format_table(results))


if __name__ == "__main__":
    main()
