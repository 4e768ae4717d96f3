"""A checkpoint as a GGUF file for llama.cpp and the front ends on top of it, through llama.cpp's own tools.

`export_gguf` is `rolellm export CKPT --gguf TYPE`: the checkpoint (an adapter merged into its base first) goes
through llama.cpp's converter, `convert_hf_to_gguf.py`, which writes `f32`, `f16`, `bf16` or `q8_0` and carries the
tokenizer's chat template, the one the model was trained with, into the file; the other types (`q4_k_m`, `q4_0`,
`q5_k_m`, `q6_k`) are the `f16` file through llama.cpp's quantizer (`llama_model_quantize`, from llama-cpp-python,
`pip install "rolellm[llamacpp]"`). Beside the file go the role files of the checkpoint and, for each role, a
SillyTavern character card (`rolellm.training.sillytavern`) whose system prompt is the text the model was trained on.

The converter is not part of any wheel: it comes from a llama.cpp source folder or from llama-cpp-python's source
archive, whose `vendor/llama.cpp` holds it with the `gguf-py` it is written against (`find_converter`):

```bash
pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d ~/llama-cpp-source
rolellm export runs/rolellama --gguf q8_0 --output_dir runs/rolellama-gguf --llama_cpp_source ~/llama-cpp-source
```

>>> gguf_file_name("runs/rolellama", "q4_k_m")
'rolellama.Q4_K_M.gguf'
"""

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from rolellm.clients.gguf import GGUFError, rolellm_cache_dir


CONVERTER = "convert_hf_to_gguf.py"
# what the converter needs beside itself: its model classes and the gguf-py it is written against
CONVERTER_PARTS = (CONVERTER, "conversion", "gguf-py")
SOURCE_ENV = "ROLELLM_LLAMA_CPP_SOURCE"
SOURCE_ARCHIVE = "llama_cpp_python-*.tar.gz"
LLAMA_CPP_PYTHON = "llama-cpp-python"
DEFAULT_LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the release whose converter and runtime the export is tested with
CONVERTED_TYPES = ("f32", "f16", "bf16", "q8_0")  # written by the converter itself
# written by llama.cpp's quantizer from the f16 file: `llama_cpp.LLAMA_FTYPE_MOSTLY_*`
QUANTIZED_TYPES = {"q6_k": "Q6_K", "q5_k_m": "Q5_K_M", "q4_k_m": "Q4_K_M", "q4_0": "Q4_0"}
GGUF_TYPES = (*CONVERTED_TYPES, *QUANTIZED_TYPES)
QUANTIZER_TYPES = {**QUANTIZED_TYPES, "q8_0": "Q8_0"}  # what `quantize` makes (q8_0 too, which the converter writes)


def gguf_file_name(checkpoint: str | os.PathLike, gguf_type: str) -> str:
    """The exported file's name: the checkpoint folder's, and the type as llama.cpp's files write it."""
    path = Path(checkpoint).resolve()
    name = path.name if not path.name.startswith("checkpoint-") else f"{path.parent.name}-{path.name}"
    return f"{name}.{gguf_type.upper()}.gguf"


def download_hint() -> str:
    version = installed_llama_cpp_python() or DEFAULT_LLAMA_CPP_PYTHON_VERSION
    return f"pip download --no-deps --no-binary :all: {LLAMA_CPP_PYTHON}=={version} -d DIR"


def installed_llama_cpp_python() -> str | None:
    try:
        return importlib.metadata.version(LLAMA_CPP_PYTHON)
    except importlib.metadata.PackageNotFoundError:
        return None


def find_converter(source: str | os.PathLike | None = None) -> Path:
    """llama.cpp's `convert_hf_to_gguf.py`, from `source`, else `$ROLELLM_LLAMA_CPP_SOURCE`.

    `source` is a llama.cpp source folder (it holds `convert_hf_to_gguf.py`), an unpacked llama-cpp-python source
    archive (`vendor/llama.cpp`), the archive itself (`llama_cpp_python-X.tar.gz`, unpacked once into
    `$ROLELLM_CACHE/llama.cpp`: the converter, its `conversion` package and its `gguf-py`), or a folder holding such
    archives (the one of the installed llama-cpp-python's version, else the only one).

    Raises:
        `GGUFError`: no source given, or none of those is there; the message says how to fetch the archive.
    """
    flag = "--llama_cpp_source" if source is not None else f"${SOURCE_ENV}"
    source = source if source is not None else os.environ.get(SOURCE_ENV)
    if not source:
        raise GGUFError(
            f"--gguf needs llama.cpp's converter ({CONVERTER}): pass --llama_cpp_source with a llama.cpp source "
            f"folder or llama-cpp-python's source archive, which `{download_hint()}` fetches (or set ${SOURCE_ENV})"
        )
    path = Path(source).expanduser()
    if path.is_dir():
        for folder in (path, path / "vendor" / "llama.cpp"):
            if (folder / CONVERTER).is_file():
                return (folder / CONVERTER).resolve()
        archives = sorted(path.glob(SOURCE_ARCHIVE))
        version = installed_llama_cpp_python()
        matching = [archive for archive in archives if archive.name == f"llama_cpp_python-{version}.tar.gz"]
        if matching or len(archives) == 1:
            path = (matching or archives)[0]
        else:
            found = f"{len(archives)} archives ({', '.join(a.name for a in archives)})" if archives else "no archive"
            raise GGUFError(
                f"{flag} {path}: holds no {CONVERTER}, no vendor/llama.cpp and {found} of llama-cpp-python's source"
                f"{f' for the installed version {version}' if version and archives else ''}; fetch it with "
                f"`{download_hint()}`"
            )
    if not path.is_file():
        raise GGUFError(f"{flag} {path}: no such folder or file; fetch llama.cpp's converter with `{download_hint()}`")
    return unpack_converter(path, flag)


def unpack_converter(archive: Path, flag: str) -> Path:
    """The converter out of llama-cpp-python's source archive, unpacked once into the cache (whole or not at all)."""
    digest = hashlib.sha256()
    with open(archive, "rb") as stream:
        while chunk := stream.read(1 << 22):
            digest.update(chunk)
    stem = archive.name.removesuffix(".tar.gz")
    folder = rolellm_cache_dir() / "llama.cpp" / f"{stem}-{digest.hexdigest()[:16]}"
    if (folder / CONVERTER).is_file():
        return folder / CONVERTER
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        try:
            with tarfile.open(archive) as tar:
                members = []
                for member in tar:
                    parts = Path(member.name).parts
                    if len(parts) > 3 and parts[1:3] == ("vendor", "llama.cpp") and parts[3] in CONVERTER_PARTS:
                        member.name = str(Path(*parts[3:]))
                        members.append(member)
                if not any(member.name == CONVERTER for member in members):
                    raise GGUFError(
                        f"{flag} {archive}: holds no vendor/llama.cpp/{CONVERTER}; is it llama-cpp-python's?"
                    )
                tar.extractall(staging, members=members, filter="data")
        except (tarfile.TarError, EOFError, OSError) as error:
            raise GGUFError(f"{flag} {archive}: not a readable source archive ({error}); fetch it again") from None
        try:
            staging.rename(folder)
        except OSError:  # another process unpacked it first
            if not (folder / CONVERTER).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder / CONVERTER


def convert(model_dir: Path, outfile: Path, outtype: str, converter: Path) -> None:
    """`convert_hf_to_gguf.py model_dir --outtype outtype --outfile outfile`, in a process of its own (it imports
    its own gguf-py); its last error line when it fails.

    Raises:
        `GGUFError`: the converter failed (an architecture it does not know, a tokenizer it cannot place, ...).
    """
    command = [sys.executable, str(converter), str(model_dir), "--outtype", outtype, "--outfile", str(outfile)]
    environment = {name: value for name, value in os.environ.items() if name != "NO_LOCAL_GGUF"}  # its own gguf-py
    done = subprocess.run(command, capture_output=True, text=True, env=environment)
    if done.returncode != 0 or not outfile.is_file():
        lines = [line for line in done.stderr.splitlines() + done.stdout.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR:") or re.match(r"^\w+(Error|Exception):", line)]
        reason = (errors or lines or [f"exit code {done.returncode}"])[-1]
        reason = re.sub(r"^ERROR:[\w-]+:", "", reason).strip()
        raise GGUFError(f"{model_dir}: llama.cpp's converter ({converter.name}) cannot convert it: {reason}")


def quantize(f16_file: Path, outfile: Path, gguf_type: str) -> None:
    """`f16_file` as `gguf_type` through llama.cpp's quantizer (`llama_model_quantize` of llama-cpp-python).

    Raises:
        `EngineUnavailable`: llama-cpp-python is not installed (the extra `rolellm[llamacpp]`).
    """
    import ctypes

    from rolellm.clients.engines import require_engine

    llama_cpp = require_engine("llamacpp", f"--gguf {gguf_type}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{QUANTIZER_TYPES[gguf_type]}")
    params.nthread = len(os.sched_getaffinity(0))
    if llama_cpp.llama_model_quantize(str(f16_file).encode(), str(outfile).encode(), ctypes.byref(params)) != 0:
        raise GGUFError(f"{f16_file}: llama.cpp's quantizer could not write {gguf_type}")


def export_gguf(
    checkpoint: str | os.PathLike,
    output_dir: str | os.PathLike,
    gguf_type: str = "f16",
    llama_cpp_source: str | os.PathLike | None = None,
) -> Path:
    """Write `checkpoint` as one GGUF file of `gguf_type` in `output_dir`, with the checkpoint's role files and a
    SillyTavern character card per role beside it.

    Args:
        checkpoint (`str` or `os.PathLike`): a folder written by `rolellm train` (a full model, or an adapter, which
            is merged into its base first), or any transformers model folder llama.cpp's converter knows.
        output_dir (`str` or `os.PathLike`): the folder to write; it must not exist or be empty. It appears whole or
            not at all.
        gguf_type (`str`, *optional*, defaults to `"f16"`): one of `GGUF_TYPES`.
        llama_cpp_source (`str` or `os.PathLike`, *optional*): where llama.cpp's converter is (`find_converter`).

    Returns:
        `pathlib.Path`: the GGUF file.

    Raises:
        `ValueError`: an unknown `gguf_type`, a checkpoint that is not one, an `output_dir` that is not empty.
        `GGUFError`: no converter, or the converter cannot convert the model (its own words).
        `EngineUnavailable`: a quantized type without llama-cpp-python.
    """
    from rolellm.training.export import ROLE_FILES, check_export_folders, export_checkpoint
    from rolellm.training.sillytavern import write_role_cards

    if gguf_type not in GGUF_TYPES:
        raise ValueError(f"--gguf {gguf_type!r} is not one of {list(GGUF_TYPES)}")
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    check_export_folders(checkpoint, output_dir, merge=True)
    if gguf_type in QUANTIZED_TYPES:
        from rolellm.clients.engines import require_engine

        require_engine("llamacpp", f"--gguf {gguf_type}")  # before anything is converted
    converter = find_converter(llama_cpp_source)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    staging.chmod(0o755)  # an ordinary folder once renamed, not a private temporary one
    try:
        model_dir = checkpoint
        from rolellm.clients.loading import is_adapter_checkpoint

        if is_adapter_checkpoint(checkpoint):
            model_dir = staging / "merged"
            export_checkpoint(checkpoint, model_dir, merge=True)
        outfile = staging / gguf_file_name(checkpoint, gguf_type)
        if gguf_type in CONVERTED_TYPES:
            convert(model_dir, outfile, gguf_type, converter)
        else:
            f16_file = staging / "f16.gguf"
            convert(model_dir, f16_file, "f16", converter)
            quantize(f16_file, outfile, gguf_type)
            f16_file.unlink()
        for name in ROLE_FILES:
            if (checkpoint / name).is_file():
                shutil.copy2(checkpoint / name, staging / name)
        write_role_cards(checkpoint, staging, outfile.name)
        shutil.rmtree(staging / "merged", ignore_errors=True)
        if output_dir.exists():
            output_dir.rmdir()  # empty: checked above
        staging.rename(output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir / outfile.name
