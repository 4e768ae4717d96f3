"""Load a model folder or Hub id for inference: a full model, or a LoRA/QLoRA adapter checkpoint on its base.

`load_model_and_tokenizer` is the one loading path of `LocalChatClient`, so `rolellm evaluate`, `rolellm chat` and
the generation commands read every kind of checkpoint `rolellm train` writes.

>>> import tempfile
>>> from rolellm.testing.models import build_tiny_llama
>>> model, tokenizer = load_model_and_tokenizer(build_tiny_llama(tempfile.mkdtemp()))
>>> type(model).__name__, len(tokenizer) <= model.get_input_embeddings().num_embeddings
('LlamaForCausalLM', True)
"""

import logging
import os
import warnings
from pathlib import Path

from rolellm.clients.gguf import is_gguf_source, resolve_model_name_or_path
from rolellm.roles.profile import DataFormatError, read_json_object


ADAPTER_CONFIG = "adapter_config.json"

logger = logging.getLogger(__name__)


def cpu_has_bfloat16() -> bool:
    """Whether this CPU computes in bfloat16 itself (AMX or AVX512-BF16). Elsewhere PyTorch emulates bfloat16: a
    matmul of SmolLM2-135M's shapes took six times its float32 time on an AVX2 CPU."""
    import torch

    # PyTorch's own CPU feature checks (private: absent from a build that lacks them, which then counts as no units)
    checks = (getattr(torch.cpu, name, None) for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"))
    return any(check() for check in checks if check is not None)


def warn_if_bfloat16_is_emulated(setting: str) -> None:
    """Log that `setting` (bfloat16 for a model on the CPU) is slower than float32 on this CPU, when it is."""
    if not cpu_has_bfloat16():
        logger.warning(
            "%s on a CPU without bfloat16 units (AMX, AVX512-BF16): PyTorch emulates bfloat16 at about six times "
            "float32's time, so float32 is faster here",
            setting,
        )


def is_adapter_checkpoint(model_name_or_path: str | os.PathLike) -> bool:
    """Whether a local folder holds a PEFT adapter (`adapter_config.json`) rather than a full model."""
    return (Path(model_name_or_path) / ADAPTER_CONFIG).is_file()


def check_model_source(
    model_name_or_path: str | os.PathLike | None, flag: str = "--model_name_or_path", need_base: bool = True
) -> str:
    """A model that names a local path must be there, checked before anything is loaded: a missing folder is a
    `FileNotFoundError` naming it (a Hub id, `org/name`, is left to the Hub); a folder must be a model folder
    (`check_model_folder`); a GGUF file, or a folder holding one, becomes its dequantized folder in the cache
    (`rolellm.clients.gguf.resolve_model_name_or_path`).

    Returns:
        `str`: what to load: the GGUF's cached model folder, or `model_name_or_path` as given.

    A name that is no folder is taken as a Hub id; while the Hub is off (`HF_HUB_OFFLINE=1`) one that is not in the
    Hub cache is a `ModelNotAvailable` naming it.

    >>> check_model_source("./no-such-model")
    Traceback (most recent call last):
    ...
    FileNotFoundError: --model_name_or_path ./no-such-model: no such folder (a local model folder, or a Hub id such as Qwen/Qwen2.5-0.5B-Instruct)
    """
    if model_name_or_path is None:
        raise ValueError(f"{flag} is required: the model folder or Hub id to load")
    if is_gguf_source(model_name_or_path):
        return resolve_model_name_or_path(model_name_or_path, flag)
    name = str(model_name_or_path)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise NotADirectoryError(f"{flag} {name} is a file: give the folder that holds the model or a .gguf file")
        check_model_folder(path, flag, need_base)
        return name
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name:
        raise FileNotFoundError(
            f"{flag} {name}: no such folder (a local model folder, or a Hub id such as Qwen/Qwen2.5-0.5B-Instruct)"
        )
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE and not in_hub_cache(name):
        raise ModelNotAvailable(
            f"{flag} {name}: no folder of that name, so it was taken as a Hugging Face Hub id, and that model is not "
            "in the Hub cache while the Hub is off (HF_HUB_OFFLINE=1): give the model's folder, or download it first"
        )
    return name


class ModelNotAvailable(OSError):
    """A model named by a Hub id that cannot be had: not in the Hub cache, and the Hub off (`HF_HUB_OFFLINE`)."""


def in_hub_cache(repo_id: str) -> bool:
    """Whether the Hub cache holds a model's `config.json` or `adapter_config.json` (any revision's `main`).

    >>> in_hub_cache("nobody/no-such-model")
    False
    """
    from huggingface_hub import try_to_load_from_cache

    try:
        found = [try_to_load_from_cache(repo_id, name) for name in ("config.json", ADAPTER_CONFIG)]
    except ValueError:  # not a valid repository id: nothing of it can be cached
        return False
    return any(isinstance(path, str) for path in found)


def check_model_folder(folder: str | os.PathLike, flag: str = "--model_name_or_path", need_base: bool = True) -> None:
    """A local model folder holds a readable `config.json` (a full model) or `adapter_config.json` (an adapter, whose
    base model must be there too when `need_base`): anything else is an error naming the folder or the file."""
    folder = Path(folder)
    adapter = folder / ADAPTER_CONFIG
    config = adapter if adapter.is_file() else folder / "config.json"
    if not config.is_file():
        raise FileNotFoundError(
            f"{flag} {folder}: not a model folder (no config.json or {ADAPTER_CONFIG}); give the folder "
            "rolellm train wrote, a downloaded model, or a Hub id"
        )
    read_json_object(config, "settings")
    if adapter.is_file() and need_base:
        check_adapter_base(folder)


def check_adapter_base(adapter: str | os.PathLike) -> None:
    """The base model an adapter folder names (`base_model_name_or_path` in `adapter_config.json`) must be there when
    it is a local path: a missing one is a `FileNotFoundError` naming it and the adapter, not an error that blames
    the adapter."""
    config = Path(adapter) / ADAPTER_CONFIG
    if not config.is_file():
        return
    base = read_json_object(config, "settings").get("base_model_name_or_path")
    if not isinstance(base, str) or not base.strip():  # peft loads the base from it: nothing else names it
        raise DataFormatError(
            f"{config}: field 'base_model_name_or_path' must name the base model (a folder or a Hub id), got {base!r}"
        )
    check_model_source(base, f"the base model of {adapter} ({ADAPTER_CONFIG}: base_model_name_or_path)")


def contiguous_lm_head_input(model) -> None:
    """Give `model`'s output layer a contiguous input. `generate` hands it the last position's hidden states, a
    slice that is not contiguous; on a CPU, PyTorch multiplies such a slice by a weight that needs no gradient (a base
    model frozen under LoRA) as a batched matmul that first copies the whole weight once per row: 5.6 times slower in
    float32 and 150 times slower in bfloat16 for SmolLM2-135M's 49,152 x 576 head, every prompt. A contiguous
    input takes the plain matmul, with the same result."""
    head = model.get_output_embeddings()
    if head is not None:
        head.register_forward_pre_hook(lambda module, args: (args[0].contiguous(), *args[1:]))


def load_model_and_tokenizer(
    model_name_or_path: str | os.PathLike, dtype: str | None = None, is_trainable: bool = False, **kwargs
):
    """Load a causal LM and the tokenizer saved with it, ready for `generate`.

    An adapter checkpoint (a folder or Hub repo with `adapter_config.json`, as `rolellm train` writes for LoRA and
    QLoRA) is loaded with `peft.AutoPeftModelForCausalLM`: the base model named in `adapter_config.json`
    (`base_model_name_or_path`), its embeddings resized to the checkpoint's tokenizer when training added tokens
    (the role template's `<|im_start|>` / `<|im_end|>`), then the adapter with the saved embedding and output rows,
    and the checkpoint's `generation_config.json` (which stops at the template's end of turn).
    The tokenizer always comes from `model_name_or_path`, so the role chat template trained with is the one used.

    Args:
        model_name_or_path (`str` or `os.PathLike`): a Hub id, a model folder or an adapter checkpoint folder.
        dtype (`str`, *optional*): the `dtype` passed to `from_pretrained` (`"bfloat16"`, ...).
        is_trainable (`bool`, *optional*, defaults to `False`): load an adapter's weights trainable, in train mode
            (a preference stage going on from a RoCIT adapter).
        **kwargs: more `from_pretrained` keywords (`revision`, `device_map`, ...).

    Returns:
        `tuple`: `(model, tokenizer)`; an adapter checkpoint's model is a `peft.PeftModel`, in eval mode unless
        `is_trainable`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import find_adapter_config_file

    model_name_or_path = check_model_source(model_name_or_path, "the model")
    if dtype is not None:
        kwargs["dtype"] = dtype
    tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, **{k: v for k, v in kwargs.items() if k != "dtype"})
    if find_adapter_config_file(str(model_name_or_path)) is not None:
        check_adapter_base(model_name_or_path)
        from peft import AutoPeftModelForCausalLM
        from transformers.utils import logging as hf_logging

        # peft resizes the base to the checkpoint's tokenizer, and transformers announces how it initialises the new
        # rows; the adapter then overwrites them with the trained ones, so the announcement would only mislead.
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            with warnings.catch_warnings():  # peft reads transformers' deprecated `is_gradient_checkpointing`
                warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
                model = AutoPeftModelForCausalLM.from_pretrained(
                    model_name_or_path, is_trainable=is_trainable, **kwargs
                )
        finally:
            hf_logging.set_verbosity(verbosity)
        if (Path(model_name_or_path) / "generation_config.json").is_file():  # the end-of-turn ids trained with
            model.get_base_model().generation_config = GenerationConfig.from_pretrained(model_name_or_path)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_name_or_path, **kwargs)
    contiguous_lm_head_input(model)
    return (model.train() if is_trainable else model.eval()), tokenizer
