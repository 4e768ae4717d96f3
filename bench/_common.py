"""What the training benchmarks share: an offline Hugging Face environment, the fixed Chinese RoleBench sample, and
for the real model (the embedded SmolLM2-135M-Instruct) a fixed sample of English rows of the roles it is shown with.

Importing this module sets the environment (and where llama.cpp's converter is), so import it before `datasets`,
`transformers` or `trl`.
"""

import json
import os
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# llama.cpp's converter (`rolellm export --gguf`): where `make install` downloads llama-cpp-python's source archive,
# unless set otherwise
_LLAMA_CPP_SOURCE = Path(__file__).resolve().parents[1] / ".cache" / "llama-cpp-python"
if _LLAMA_CPP_SOURCE.is_dir():
    os.environ.setdefault("ROLELLM_LLAMA_CPP_SOURCE", str(_LLAMA_CPP_SOURCE))

import datasets  # noqa: E402

from rolellm.data.readers import read_rolebench_jsonl  # noqa: E402
from rolellm.roles.profile import RoleProfile, parse_description  # noqa: E402
from rolellm.testing.data import find_rolebench_data  # noqa: E402


# the English roles whose release descriptions the repository bundles (those of `make demo`)
ENGLISH_DESCRIPTIONS = Path(__file__).resolve().parents[1] / "examples" / "data" / "roles-eng.json"
ENGLISH_ROWS = "rolebench/rolebench-eng/instruction-generalization/role_specific/test.jsonl"


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


def load_real_model():
    """(folder, tokenizer) of the embedded real model, SmolLM2-135M-Instruct: its dequantized cached folder
    (`rolellm.clients.gguf`) and its own tokenizer, with its own (ChatML) chat template."""
    from transformers import AutoTokenizer

    from rolellm.clients.gguf import embedded_model

    path = embedded_model()
    return path, AutoTokenizer.from_pretrained(path)


def load_english_sample(data_dir: Path, rows: int) -> tuple[datasets.Dataset, dict[str, RoleProfile]]:
    """A fixed sample (seed 0) of `rows` English RoleBench rows of the four roles with a bundled description (Jack
    Sparrow, Sheldon Cooper, John Coffey, Dr. Frank-N-Furter: 50 questions each in the release's instruction-
    generalization file, 25 in the repository's slice), and their profiles: what the real model trains on."""
    descriptions = json.loads(ENGLISH_DESCRIPTIONS.read_text(encoding="utf-8"))
    records = read_rolebench_jsonl(data_dir / ENGLISH_ROWS, "role_specific", "en")
    records = [record for record in records if record["role"] in descriptions]
    dataset = datasets.Dataset.from_list(records).shuffle(seed=0).select(range(min(rows, len(records))))
    profiles = {}
    for role, text in descriptions.items():
        description, catchphrases, extra = parse_description(text, "en")
        profiles[role] = RoleProfile(role, "en", description, catchphrases, extra=extra)
    print(
        f"English RoleBench rows of {len(descriptions)} roles: {len(records)}; fixed sample of {len(dataset)} (seed 0)"
    )
    return dataset, profiles
