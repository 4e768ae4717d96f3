"""What a RoCIT checkpoint holds besides the weights, so that the folder works on its own.

Every folder `RoCITTrainer` saves (the final `output_dir` and each intermediate `checkpoint-N`) holds:

| file | what it is | read by |
|---|---|---|
| `model.safetensors` + `config.json`, or `adapter_model.safetensors` + `adapter_config.json` | the weights (an adapter also holds the embedding and output rows of tokens the role template added) | `transformers`, `peft` |
| `tokenizer.json`, `tokenizer_config.json`, `chat_template.jinja` | the tokenizer with the chat template trained with (`chat_template.jinja` also serves vLLM's `--chat-template`) | `AutoTokenizer`, vLLM |
| `generation_config.json` | the token ids that end generation, the template's end of turn included | `generate` |
| `role_profiles.jsonl` | the profiles of the roles trained on, one `RoleProfile.to_dict()` per line | `rolellm.load_profiles(folder)` |
| `system_template.jinja` | the custom system text template, when the run used one | `build_chat_messages(..., system_template=...)` |
| `rolellm_inference.json` | the inference settings trained with: `keep_think` and `chat_template_family` (`"rolellm-chatml"`, the role template `rolellm train` installs, or `"model"`, the base model's own) | `make_client` (`rolellm chat`, `evaluate`, `dialogue`) |
| `README.md` | the model card (`rolellm.training.card`) | the Hub |
"""

import json
from pathlib import Path

from rolellm.clients.inference_settings import INFERENCE_FILE, ROLE_TEMPLATE_FAMILY, SYSTEM_TEMPLATE_FILE
from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile
from rolellm.roles.resolve import PROFILES_FILE, write_profiles_jsonl


CHAT_TEMPLATE_FILE = "chat_template.jinja"


def trained_profiles(profiles: dict[str, RoleProfile] | None, role_stats: dict) -> dict[str, RoleProfile]:
    """The profiles of the roles seen in the data (`role_stats` of the trainer); all of them when no role was seen.

    >>> profiles = {"Po": RoleProfile("Po", "en"), "Shifu": RoleProfile("Shifu", "en")}
    >>> list(trained_profiles(profiles, {"train": {"roles": ["po"]}}))
    ['Po']
    """
    profiles = Profiles(profiles or {})
    seen = {profiles.find(role) for stats in role_stats.values() for role in stats.get("roles", [])}
    return {name: profile for name, profile in profiles.items() if name in seen} or dict(profiles)


def inference_settings(tokenizer, keep_think: bool) -> dict:
    """What a checkpoint records for inference (`rolellm_inference.json`), read by `make_client`.

    >>> from rolellm.testing.models import train_tiny_tokenizer
    >>> from rolellm.encoding.chat_template import set_role_chat_template
    >>> tokenizer = train_tiny_tokenizer()
    >>> _ = set_role_chat_template(tokenizer)
    >>> inference_settings(tokenizer, keep_think=True)
    {'keep_think': True, 'chat_template_family': 'rolellm-chatml', 'card_extras': False}
    """
    family = ROLE_TEMPLATE_FAMILY if tokenizer.chat_template == ROLE_CHAT_TEMPLATE else "model"
    return {"keep_think": keep_think, "chat_template_family": family, "card_extras": False}


SECRET_ARGUMENTS = ("hub_token", "push_to_hub_token")  # `TrainingArguments` fields that hold a Hub token


def save_training_args(args, folder) -> None:
    """Write `training_args.bin` (what `Trainer` saves, read by `Trainer` on resume) with no Hub token in it: a
    checkpoint may be pushed or shared, and the token would be pickled in plain text."""
    import copy

    import torch

    path = Path(folder) / "training_args.bin"
    if not path.is_file() or not any(getattr(args, name, None) for name in SECRET_ARGUMENTS):
        return
    kept = copy.copy(args)
    for name in SECRET_ARGUMENTS:
        if getattr(kept, name, None):
            object.__setattr__(kept, name, None)
    torch.save(kept, path)


def save_role_files(
    folder, profiles, system_template, tokenizer, generation_config=None, card=None, inference=None
) -> Path:
    """Write the role files of a checkpoint (see the module docstring) into `folder`; returns the folder.

    Args:
        folder (`str` or `os.PathLike`): the checkpoint folder.
        profiles (`dict[str, RoleProfile]`): the role profiles; none written when empty.
        system_template (`str`, *optional*): a custom system text template.
        tokenizer (`PreTrainedTokenizerBase`): its chat template goes to `chat_template.jinja` when the tokenizer's
            own saving did not write it.
        generation_config (`GenerationConfig`, *optional*): saved for adapters, whose base model does not carry it.
        card (`huggingface_hub.ModelCard`, *optional*): saved as `README.md`.
        inference (`dict`, *optional*): `inference_settings(...)`, saved as `rolellm_inference.json`.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if profiles:
        write_profiles_jsonl(profiles, folder / PROFILES_FILE)
    if system_template is not None:
        (folder / SYSTEM_TEMPLATE_FILE).write_text(system_template, encoding="utf-8")
    if generation_config is not None:
        generation_config.save_pretrained(folder)
    if isinstance(tokenizer.chat_template, str) and not (folder / CHAT_TEMPLATE_FILE).is_file():
        (folder / CHAT_TEMPLATE_FILE).write_text(tokenizer.chat_template, encoding="utf-8")
    if card is not None:
        card.save(folder / "README.md")
    if inference is not None:
        (folder / INFERENCE_FILE).write_text(json.dumps(inference, indent=2) + "\n", encoding="utf-8")
    return folder


def save_stage_checkpoint(trainer, folder: str | Path, tokenizer, keep_think: bool) -> None:
    """What makes the checkpoint folder of any training stage usable on its own, once `Trainer._save` wrote the model
    and tokenizer: `training_args.bin` again without the Hub token, the profiles of the roles trained (their prompt
    text only unless `keep_card_metadata`), a custom system template, `chat_template.jinja`, the inference settings
    and the model card (`save_role_files`).

    `trainer` is one of rolellm's trainers (`RoCITTrainer`, the preference trainers, `RoleGRPOTrainer`): it has
    `profiles`, `role_stats`, `_system_template` and `build_model_card`.
    """
    from accelerate.utils import is_peft_model

    from rolellm.roles.card_prompts import prompt_only

    save_training_args(trainer.args, folder)
    unwrapped = trainer.accelerator.unwrap_model(trainer.model)
    # an adapter's base model does not carry the end-of-turn ids `set_role_chat_template` added
    generation_config = unwrapped.get_base_model().generation_config if is_peft_model(unwrapped) else None
    profiles = trained_profiles(trainer.profiles, trainer.role_stats)
    if not trainer.args.keep_card_metadata:
        profiles = {name: prompt_only(profile) for name, profile in profiles.items()}
    card = trainer.build_model_card(Path(trainer.args.output_dir).name)
    inference = inference_settings(tokenizer, keep_think)
    save_role_files(folder, profiles, trainer._system_template, tokenizer, generation_config, card, inference)
