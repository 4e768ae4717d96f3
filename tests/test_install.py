"""How `make install` builds llama.cpp (the llamacpp extra): for the vector extensions the CPU lists, never AMX, and
into a wheel folder of its own for each set of cmake arguments. Read from `make -n` (what make would run), with the
CPU's flags given."""

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
    pytest.mark.skipif(platform.machine() != "x86_64", reason="the extensions are chosen on x86-64 only"),
]

ZEN3 = "fpu sse4_2 avx avx2 fma f16c bmi2"
ZEN4 = f"{ZEN3} avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16"
SAPPHIRE_RAPIDS = f"{ZEN4} avx_vnni amx_bf16 amx_tile amx_int8"


def planned_install(tmp_path, **variables) -> str:
    """The commands `make install` would run for a new virtual environment in `tmp_path`, a line each."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "MFLAGS", "LLAMA_CPP_"))}
    assignments = [f"{name}={value}" for name, value in {"VENV": tmp_path / "venv", **variables}.items()]
    return subprocess.run(
        ["make", "--no-print-directory", "-n", "install", *assignments],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout.replace("\\\n", "")  # fmt: skip


def ggml_options(plan: str) -> dict[str, str]:
    (cmake_args,) = set(re.findall(r'CMAKE_ARGS="([^"]*)"', plan))
    return dict(re.findall(r"-DGGML_(\w+)=(ON|OFF)", cmake_args))


def wheel_folder(plan: str) -> str:
    (folder,) = set(re.findall(r"--find-links (\S+)", plan))
    return folder


@pytest.mark.parametrize(
    ("flags", "on", "off"),
    [
        (ZEN3, {"AVX", "AVX2", "FMA", "F16C", "BMI2"}, {"AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI"}),
        (ZEN4, {"AVX2", "AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"}, {"AVX_VNNI"}),
        (SAPPHIRE_RAPIDS, {"AVX512", "AVX512_VNNI", "AVX512_BF16", "AVX_VNNI"}, set()),
        ("fpu sse4_2 avx", {"SSE42", "AVX"}, {"AVX2", "FMA", "F16C", "BMI2", "AVX512"}),
        # AVX-512 without its byte and word part (Knights Landing): no AVX-512 at all, nor its extensions
        (f"{ZEN3} avx512f avx512cd avx512_vnni", {"AVX2"}, {"AVX512", "AVX512_VNNI"}),
    ],
    ids=["zen3", "zen4", "sapphire-rapids", "avx-only", "avx512-without-bw"],
)
def test_llama_cpp_is_built_for_the_extensions_the_cpu_lists(tmp_path, flags, on, off):
    plan = planned_install(tmp_path, LLAMA_CPP_CPU_FLAGS=flags)
    options = ggml_options(plan)
    assert options["NATIVE"] == "OFF"
    assert {name for name in on if options[name] == "ON"} == on
    assert {name for name in off if options[name] == "OFF"} == off
    assert not any(name.startswith("AMX") for name in options), "AMX kernels fault where the VM does not enable AMX"
    assert f"-w {wheel_folder(plan)} " in plan  # the wheel is built into the folder it is installed from


def test_each_set_of_cmake_arguments_keeps_a_wheel_folder_of_its_own(tmp_path):
    zen3, zen3_again, zen4 = (
        planned_install(tmp_path, LLAMA_CPP_CPU_FLAGS=flags) for flags in (ZEN3, ZEN3, ZEN4)
    )  # fmt: skip
    assert wheel_folder(zen3) == wheel_folder(zen3_again) != wheel_folder(zen4)
    assert wheel_folder(zen3).startswith(".cache/llama-cpp-python/wheels/")
    assert "--no-cache-dir" in zen3, "pip's cache keys a built wheel by its source only"
    given = planned_install(tmp_path, LLAMA_CPP_CMAKE_ARGS="-DGGML_NATIVE=ON")
    assert ggml_options(given) == {"NATIVE": "ON"}
    assert wheel_folder(given) not in {wheel_folder(zen3), wheel_folder(zen4)}


def test_the_pinned_version_is_installed_from_the_wheel_folder(tmp_path):
    plan = planned_install(tmp_path, LLAMA_CPP_CPU_FLAGS=ZEN3)
    (install,) = [line for line in plan.splitlines() if '-e ".[' in line]
    assert "--find-links" in install and install.endswith('"llama-cpp-python==0.3.36"')
    assert "llama_cpp_python-0.3.36.tar.gz" in plan  # the wheel is built from the archive that carries the converter


def test_without_the_llamacpp_extra_llama_cpp_is_not_built(tmp_path):
    plan = planned_install(tmp_path, EXTRAS="train,dev", LLAMA_CPP_CPU_FLAGS=ZEN4)
    (install,) = [line for line in plan.splitlines() if '-e ".[' in line]
    assert "CMAKE_ARGS" not in plan and "--find-links" not in install and "llama-cpp-python" not in install
    assert "pip download" in plan  # the source archive still comes, for `rolellm export --gguf`
