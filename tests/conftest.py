"""The test kit: offline environment, a locally trained tokenizer, a tiny Llama on disk, the real data folder."""

import gc
import os
import re
import shutil
import threading
from pathlib import Path


# Set before any Hugging Face library is imported by a test module.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
# One torch (OpenMP) thread per process, the test processes and the commands they start: `make test` runs a worker
# per core, and a worker's extra threads spinning while they wait for a core another worker holds cost four times the
# CPU of the suite's tiny models on one thread (the same three files: 106 s of CPU with two threads, 26 s with one).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# GGUF models dequantized into the cache (the embedded SmolLM2: 20 s) are kept from one test run to the next, for every
# worker alike: the sessions' own HF_HOME (`_isolated_hf_cache`) is a new temporary folder each time.
os.environ.setdefault("ROLELLM_CACHE", str(Path(__file__).resolve().parent.parent / ".cache" / "rolellm-tests"))
# llama.cpp's GGUF converter comes from llama-cpp-python's source archive, which `make install` downloads here
_LLAMA_CPP_SOURCE = Path(__file__).resolve().parent.parent / ".cache" / "llama-cpp-python"
if _LLAMA_CPP_SOURCE.is_dir():
    os.environ.setdefault("ROLELLM_LLAMA_CPP_SOURCE", str(_LLAMA_CPP_SOURCE))

import pytest  # noqa: E402

from rolellm.scripts.cli import lighten_imports  # noqa: E402
from rolellm.testing import data as testing_data  # noqa: E402
from rolellm.testing import models as testing  # noqa: E402


# the heavy libraries imported as in a `rolellm` command: the collector's walks over them during the collection cost
# 6.2 s of CPU per test process, 0.3 s with it
lighten_imports()


_NUMBERED_RUN = re.compile(r"pytest-(\d+)")  # pytest's folder of one session's temporary folders
_EARLIER_RUNS_REMOVER = pytest.StashKey[threading.Thread]()


def pytest_sessionstart(session):
    """In the process that runs the session (not in a pytest-xdist worker), the temporary folders of earlier runs that
    pytest removes after the last test (all but the newest `tmp_path_retention_count`, unlocked) are removed now, in
    a thread, while the tests run: a run of the suite leaves some 14,000 files, which took 2.5 s to remove after the
    last test."""
    config = session.config
    if hasattr(config, "workerinput") or config.option.basetemp is not None:
        return
    current = config._tmp_path_factory.getbasetemp()  # pytest-N, made now rather than later
    if (number := _NUMBERED_RUN.fullmatch(current.name)) is None:
        return
    last_removed = int(number[1]) - int(config.getini("tmp_path_retention_count"))
    earlier = [
        path
        for path in current.parent.iterdir()
        if (found := _NUMBERED_RUN.fullmatch(path.name)) is not None
        and int(found[1]) <= last_removed
        and path.is_dir()
        and not path.is_symlink()
        and not (path / ".lock").exists()  # a session still running, or one that crashed: pytest's own rule then
    ]

    def remove() -> None:
        for path in earlier:
            shutil.rmtree(path, ignore_errors=True)

    config.stash[_EARLIER_RUNS_REMOVER] = threading.Thread(target=remove, daemon=True)
    config.stash[_EARLIER_RUNS_REMOVER].start()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    """The removal of earlier runs' folders (`pytest_sessionstart`) done before pytest's own clean-up looks at them."""
    remover = session.config.stash.get(_EARLIER_RUNS_REMOVER, None)
    if remover is not None:
        remover.join()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Files with `slow` tests run first (a stable sort: a file's tests stay together and in their order), so under
    pytest-xdist (`make test`) the long tests start early and the short ones fill the end, instead of one worker
    finishing the last long test alone."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """The objects of the collection (the libraries, the test modules) move out of the garbage collector's sight:
    each full collection walks every tracked object, some 700,000 once torch, transformers and TRL are imported, and
    a test file that trains runs dozens of them (`Trainer.train` asks for one too)."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After a test file's last test: its garbage collected, and what is left (the modules it imported lazily, the
    session fixtures it built) frozen as above."""
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


def shares_module_fixtures(path: Path) -> bool:
    """Whether a test file defines a module-scoped fixture (a trained checkpoint, a Ray cluster, a built dataset) or
    uses conftest's (`zhenhuan`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return False
    return 'scope="module"' in text or re.search(r"\bzhenhuan\b", text) is not None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`-n N` (`make test`): each test is scheduled on its own, as with `--dist load`, except that the tests of a file
    with module-scoped fixtures go to one worker together, so the fixture is built once, not once per worker (and not
    again after another file's test ran in between). Units keep the collection order above (no reordering).
    pytest-xdist's own `--dist loadgroup` does not group under pytest 9, whose node ids it cannot suffix."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    grouped = {}

    class ModuleFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            file = nodeid.split("::", 1)[0]
            if file not in grouped:
                grouped[file] = shares_module_fixtures(config.rootpath / file)
            return file if grouped[file] else nodeid

    config.option.loadscopereorder = False
    return ModuleFixtureScheduling(config, log)


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


FULL_RELEASE_MISSING = "needs the full RoleBench release (the paper's exact figures): set ROLEBENCH_DATA_DIR or place it at ../shared/data"


@pytest.fixture(scope="session")
def shared_data_dir():
    """The real data folder: `$ROLEBENCH_DATA_DIR` or `../shared/data`, else the slice of it in
    `tests/fixtures/rolebench-slice` (a few hundred real rows per file, same layout)."""
    path = testing_data.find_test_data()
    if path is None:
        pytest.skip("no RoleBench data: neither ROLEBENCH_DATA_DIR, ../shared/data nor tests/fixtures/rolebench-slice")
    return path


@pytest.fixture(scope="session")
def full_release_dir():
    """The full data folder (`$ROLEBENCH_DATA_DIR` or `../shared/data`), for the few tests of the paper's exact
    figures; skips the test when only the slice is there."""
    path = testing_data.find_rolebench_data()
    if path is None or not (path / "rolebench").is_dir() or path.resolve() == testing_data.ROLEBENCH_SLICE.resolve():
        pytest.skip(FULL_RELEASE_MISSING)
    return path


@pytest.fixture(scope="session")
def slice_data_dir():
    """`tests/fixtures/rolebench-slice` even when the full data is there: real rows for tests whose assertions do not
    depend on the data's size, at a fraction of the cost (same layout as the full data folder)."""
    path = testing_data.find_rolebench_slice()
    if path is None:
        pytest.skip("tests/fixtures/rolebench-slice not found (not a source checkout)")
    return path


@pytest.fixture(scope="session")
def rolebench_slice_dir(slice_data_dir):
    """`tests/fixtures/rolebench-slice/rolebench`: the release files of the slice."""
    return slice_data_dir / "rolebench"


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
def zhenhuan(slice_data_dir):
    """The 甄嬛传 profiles with their script dialogue, `{name: RoleProfile}` (read again for each test module), from
    the slice: 华妃's script whole, the first acts of the others."""
    from rolellm.roles.release import read_screenplay_folder

    return read_screenplay_folder(slice_data_dir / "roleglm-screenplay" / "profile_zhenhuan")
