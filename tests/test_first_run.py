"""The first hour on a CPU: what a new user sees when a flag is off, before anything is loaded, in one or two lines."""

import subprocess
import sys
from pathlib import Path

import pytest

from rolellm.scripts.cli import main


DEMO = Path(__file__).resolve().parents[1] / "examples" / "data" / "demo-rolebench"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--model_name_or_path", "./no-such-model", "--data_dir", str(DEMO)],
         "--model_name_or_path ./no-such-model: no such folder"),
        (["train", "--model_name_or_path", "./no-such-model", "--per_device_train_batch_size", "0"],
         "per_device_train_batch_size=0 must be at least 1"),
        (["evaluate", "--model", "./no-such-model", "--data_dir", str(DEMO), "--dataset_name", "zh"],
         "--model ./no-such-model: no such folder"),
    ],
)  # fmt: skip
def test_a_missing_model_folder_or_a_zero_batch_is_exit_2_naming_it(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([*argv, "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "bug in rolellm" not in err and "Traceback" not in err
    assert not (tmp_path / "out" / "results.json").exists()


@pytest.mark.exhaustive  # a new interpreter importing torch and bitsandbytes, for one logging filter
def test_no_library_notice_that_reads_like_an_error():
    # bitsandbytes logs "Failed to load CPU gemm_4bit_forward ... pip install kernels" when it is imported on a CPU
    # with AVX-512 BF16; a command imports it (through peft) after `quiet_library_notices`, as `main` does
    script = (
        "from rolellm.scripts.cli import quiet_library_notices; quiet_library_notices(); import bitsandbytes; "
        "import logging; logging.getLogger('bitsandbytes.backends.cpu.ops').warning('other notices still show')"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "gemm_4bit_forward" not in run.stderr and "pip install kernels" not in run.stderr
    assert "other notices still show" in run.stderr


def test_a_heavy_library_imports_without_the_collector_and_what_it_built_is_frozen(tmp_path, monkeypatch):
    """`lighten_imports`' finder, on two packages written here: the first is imported with the garbage collector off,
    with what it imports, what it built is frozen, and the collector is on again after; the module is the one the
    usual finders give."""
    import gc

    from rolellm.scripts.cli import HeavyImportFinder

    (tmp_path / "heavy_lib").mkdir()
    (tmp_path / "heavy_lib" / "__init__.py").write_text(
        "import gc\ncollecting = gc.isenabled()\nimport quantizer_lib\ntables = [{'row': [i]} for i in range(1000)]\n"
    )
    (tmp_path / "quantizer_lib.py").write_text("import gc\ncollecting = gc.isenabled()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = HeavyImportFinder({"heavy_lib"})
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    frozen = gc.get_freeze_count()
    try:
        import heavy_lib  # its 1,000 dicts hold lists, so the collector tracks them (a dict of ints it would not)

        assert heavy_lib.collecting is False and heavy_lib.quantizer_lib.collecting is False
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + 1000
        assert "exec_module" not in vars(heavy_lib.__spec__.loader)  # the loader's own method again
        assert heavy_lib.__file__ == str(tmp_path / "heavy_lib" / "__init__.py")
    finally:
        sys.modules.pop("heavy_lib", None)
        sys.modules.pop("quantizer_lib", None)
