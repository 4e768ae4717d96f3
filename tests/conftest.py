"""The test kit: offline environment, a locally trained tokenizer, a tiny Llama on disk, the real data folder."""

import os


# Set before any Hugging Face library is imported by a test module.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

import pytest  # noqa: E402

from rolellm.testing import data as testing_data  # noqa: E402
from rolellm.testing import models as testing


@pytest.fixture(autouse=True)
def _isolated_hf_cache(tmp_path_factory, monkeypatch):
    """Keep `datasets`/`transformers` caches of a test session out of the user's home."""
    cache = tmp_path_factory.getbasetemp() / "hf_cache"
    monkeypatch.setenv("HF_HOME", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache / "datasets"))


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A byte-level BPE tokenizer trained on a built-in English + Chinese corpus (no chat template)."""
    return testing.train_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory, tiny_tokenizer):
    """A folder holding a random two-layer `LlamaForCausalLM` and its tokenizer, laid out like a Hub repo."""
    return testing.build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer=tiny_tokenizer)


@pytest.fixture(scope="session")
def shared_data_dir():
    """The real RoleBench files (`$ROLEBENCH_DATA_DIR` or `../shared/data`); skips the test when absent."""
    path = testing_data.find_rolebench_data()
    if path is None:
        pytest.skip("real RoleBench data not found: set ROLEBENCH_DATA_DIR or place it at ../shared/data")
    return path


@pytest.fixture(scope="session")
def rolebench_dir(shared_data_dir):
    """`<data>/rolebench`: the release files in the Hub layout."""
    path = shared_data_dir / "rolebench"
    if not path.is_dir():
        pytest.skip(f"{path} not found: the real RoleBench release files are needed")
    return path


@pytest.fixture(scope="session")
def screenplay_dir(shared_data_dir):
    """`<data>/roleglm-screenplay`: the RoleGLM screenplay profiles (`profile_zhenhuan`, `profile_xiyou`)."""
    path = shared_data_dir / "roleglm-screenplay"
    if not path.is_dir():
        pytest.skip(f"{path} not found: the RoleGLM screenplay profiles are needed")
    return path


@pytest.fixture(scope="module")
def zhenhuan(screenplay_dir):
    """The 甄嬛传 profiles with their script dialogue, `{name: RoleProfile}` (read again for each test module)."""
    from rolellm.roles.release import read_screenplay_folder

    return read_screenplay_folder(screenplay_dir / "profile_zhenhuan")
