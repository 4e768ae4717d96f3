"""What the training benchmarks share: an offline Hugging Face environment and the fixed Chinese RoleBench sample.

Importing this module sets the environment, so import it before `datasets`, `transformers` or `trl`.
"""

import os
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import datasets  # noqa: E402

from rolellm.data.readers import read_rolebench_jsonl  # noqa: E402
from rolellm.testing.data import find_rolebench_data  # noqa: E402


def require_rolebench_data() -> Path:
    """The real data folder (`ROLEBENCH_DATA_DIR` or `../shared/data`); exits with a message when it is missing."""
    data_dir = find_rolebench_data()
    if data_dir is None:
        raise SystemExit("real RoleBench data not found: set ROLEBENCH_DATA_DIR or place it at ../shared/data")
    return data_dir


def load_sample(data_dir: Path, rows: int) -> tuple[datasets.Dataset, list[str]]:
    """A fixed sample (seed 0) of `rows` Chinese RoleBench train rows (general + role-specific), and the sorted set
    of all their questions and answers: the corpus a tiny tokenizer is trained on.

    The corpus holds no system prompt: trained on the repeated system prompts, BPE would merge them into a few tokens.
    This gives ~1.4 Chinese characters per token, like current open models.
    """
    root = data_dir / "rolebench" / "rolebench-zh"
    records = read_rolebench_jsonl(root / "general" / "train.jsonl", "general", "zh")
    records += read_rolebench_jsonl(root / "role_specific" / "train.jsonl", "role_specific", "zh")
    dataset = datasets.Dataset.from_list(records).shuffle(seed=0).select(range(min(rows, len(records))))
    corpus = sorted({text for record in records for text in [record["question"], *record["generated"]]})
    print(f"Chinese RoleBench train rows: {len(records)}; fixed sample of {len(dataset)} (seed 0)")
    return dataset, corpus
