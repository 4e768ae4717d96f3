"""Export a RoCIT checkpoint as a clean model folder, merging a LoRA/QLoRA adapter into its base, and push it.

`export_checkpoint` is `rolellm export`: it reads a folder written by `rolellm train` (the `output_dir` or a
`checkpoint-N` folder) and writes a folder that loads in plain `transformers`, with the tokenizer and its chat
template (also `chat_template.jinja`), the role profiles (`role_profiles.jsonl`) and the model card; the trainer's
resume state (optimizer, scheduler, RNG) is left behind.
"""

import re
import shutil
from pathlib import Path

from huggingface_hub import ModelCard

from rolellm.clients.loading import (
    ADAPTER_CONFIG,
    check_model_folder,
    is_adapter_checkpoint,
    load_model_and_tokenizer,
)
from rolellm.roles.profile import read_json_file


# what `Trainer._save_checkpoint` adds to resume a run: not part of the model
TRAINER_STATE = re.compile(r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state.*\.pth|trainer_state\.json|"
                           r"training_args\.bin|global_step\d+|latest|zero_to_fp32\.py)$")  # fmt: skip
ROLE_FILES = ("role_profiles.jsonl", "system_template.jinja", "chat_template.jinja", "rolellm_inference.json")


class BaseModelNotFound(OSError):
    """The base model named in an adapter checkpoint's `adapter_config.json` cannot be loaded (offline, moved)."""


def export_checkpoint(
    checkpoint: str | Path,
    output_dir: str | Path,
    merge: bool = False,
    push_to_hub: str | None = None,
    private: bool | None = None,
    api=None,
) -> Path:
    """Write `checkpoint` as a model folder in `output_dir`, merged into a full model when `merge` is set.

    Args:
        checkpoint (`str` or `os.PathLike`): a folder written by `rolellm train` / `RoCITTrainer` (full or adapter).
        output_dir (`str` or `os.PathLike`): the folder to write; it must not exist or be empty.
        merge (`bool`, *optional*, defaults to `False`): merge an adapter into its base model (resized embeddings
            included), so the folder loads with `AutoModelForCausalLM` alone. A QLoRA adapter is merged into the
            base's full-precision weights. Without it, the adapter is exported as an adapter.
        push_to_hub (`str`, *optional*): a Hub repo id to upload the folder to, in one commit.
        private (`bool`, *optional*): create the Hub repo private.
        api (`huggingface_hub.HfApi`, *optional*): the Hub client (default: `HfApi()`).

    Returns:
        `pathlib.Path`: `output_dir`.

    Raises:
        `ValueError`: `checkpoint` is not a model checkpoint, or `output_dir` exists and is not empty.
        `BaseModelNotFound`: the adapter's base model cannot be loaded.
    """
    checkpoint, output_dir = Path(checkpoint), Path(output_dir)
    check_export_folders(checkpoint, output_dir, merge)
    merged = merge and is_adapter_checkpoint(checkpoint)
    if merged:
        _merge_adapter(checkpoint, output_dir)
        for name in ROLE_FILES:
            if (checkpoint / name).is_file() and not (output_dir / name).is_file():
                shutil.copy2(checkpoint / name, output_dir / name)
    else:
        shutil.copytree(checkpoint, output_dir, dirs_exist_ok=True, ignore=_trainer_state)
    if (checkpoint / "README.md").is_file():
        card = ModelCard.load(checkpoint / "README.md")
        _update_card(card, merged, push_to_hub, output_dir).save(output_dir / "README.md")
    if push_to_hub is not None:
        from huggingface_hub import HfApi

        api = api or HfApi()
        api.create_repo(push_to_hub, private=private, exist_ok=True)
        api.upload_folder(
            repo_id=push_to_hub, folder_path=str(output_dir), commit_message="Upload with rolellm export"
        )
    return output_dir


def check_export_folders(checkpoint: Path, output_dir: Path, merge: bool) -> None:
    """A `ValueError` for a `checkpoint` that is not a model checkpoint (or whose files or base cannot be read) and
    for an `output_dir` inside it or not empty, before anything is written."""
    if not (checkpoint / "config.json").is_file() and not is_adapter_checkpoint(checkpoint):
        raise ValueError(
            f"{checkpoint}: not a model checkpoint (no config.json or {ADAPTER_CONFIG}); pass the output_dir of "
            "rolellm train or one of its checkpoint-N folders"
        )
    check_model_folder(checkpoint, "the checkpoint", need_base=merge)  # its JSON files, and the base of a merge
    if output_dir.resolve().is_relative_to(checkpoint.resolve()):
        raise ValueError(
            f"--output_dir {output_dir} is inside the checkpoint {checkpoint}: export to a folder outside it"
        )
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise ValueError(f"{output_dir}: exists and is not empty; pass a new --output_dir or empty it first")


def _merge_adapter(checkpoint: Path, output_dir: Path) -> None:
    base = read_json_file(checkpoint / ADAPTER_CONFIG).get("base_model_name_or_path")  # checked by check_model_folder
    try:
        model, tokenizer = load_model_and_tokenizer(checkpoint)
    except OSError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BaseModelNotFound(
            f"the base model {base!r} named in {checkpoint / ADAPTER_CONFIG} cannot be loaded ({reason}); download "
            "it, go online (unset HF_HUB_OFFLINE) or set base_model_name_or_path to where it is"
        ) from None
    model = model.merge_and_unload()
    model.config.name_or_path = base  # the merged model's `_name_or_path` names its base, not the adapter folder
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)


def _trainer_state(folder, names):
    return [name for name in names if TRAINER_STATE.match(name)]


# what a merged folder's card adds to the adapter card's lines
_MERGED_NOTES = (
    (
        r"^(- adapter: .*)$",
        "; merged into the base model's weights by `rolellm export --merge` (the folder holds the full model)",
    ),
    (r"^(- quantization: (4|8)-bit .*)$", " during training; the merged weights are not quantized"),
)


def _update_card(card: ModelCard, merged: bool, repo: str | None, output_dir: Path) -> ModelCard:
    text = card.text
    if merged:
        card.data.library_name = "transformers"
        text = text.replace(
            "from peft import AutoPeftModelForCausalLM", "from transformers import AutoModelForCausalLM"
        )
        text = text.replace("AutoPeftModelForCausalLM.from_pretrained", "AutoModelForCausalLM.from_pretrained")
        for line, note in _MERGED_NOTES:
            text = re.sub(line, rf"\g<1>{note}", text, count=1, flags=re.MULTILINE)
    if repo is None:
        folder = f'folder = "{output_dir.name}"  # this folder'
    else:
        folder = f'folder = snapshot_download("{repo}")'
    text = re.sub(r"^folder = .*$", folder.replace("\\", "\\\\"), text, count=1, flags=re.MULTILINE)
    if repo is not None and "from huggingface_hub import snapshot_download" not in text:
        text = text.replace("import torch\n", "import torch\nfrom huggingface_hub import snapshot_download\n", 1)
    card.text = text
    return card
