"""The model card of a RoCIT model: what it was trained on and how, stated only from the run's real settings.

The card names the roles and their profiles, the data (its name and configs as given, with row counts), the chat
template and where it put the role's system text, the packing, the quantization and the adapter settings, and shows
a usage example on the injection-safe path (`rolellm.encode_chat`). Nothing is claimed that the run did not record:
a run given no dataset name says so instead of naming RoleBench.

>>> card = build_model_card(
...     model_name="rolellama-demo", base_model="meta-llama/Llama-2-7b-hf", hub_model_id="me/rolellama-demo",
...     role_stats={"train": {"rows": 3, "samples": {"general": 2, "role_specific": 1}, "roles": ["Jack Sparrow"]}},
...     dataset_name="ZenMoore/RoleBench", chat_template="{{ messages }}",
... )
>>> text = str(card)
>>> "Jack Sparrow" in text and "arXiv:2310.00746" in text and card.data.base_model == "meta-llama/Llama-2-7b-hf"
True
"""

import platform
import re
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from rolellm import __version__
from rolellm.clients.gguf import read_gguf_source
from rolellm.data.release import CITATION
from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE
from rolellm.encoding.encode import encode_chat


TEMPLATE_PATH = Path(__file__).parent.parent / "prompts" / "model_card.md"
PACKING_KINDS = {
    "prefix_shared": "prefix-shared (rolellm): samples of one role packed into rows that hold one copy of the role's "
    "system prompt, each sample attending only to that prompt and itself",
    "trl": "TRL's best-fit-decreasing packing (`packing=True`): samples packed into rows, kept apart by their "
    "position ids",
    "none": "none: one sample per row",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_SYSTEM_MARK, _USER_MARK = "SYSTEMTEXTMARK", "USERTEXTMARK"


def describe_base_model(name_or_path: str | None) -> dict:
    """How a card names the model a run started from (`build_model_card`'s `base_model` and `base_gguf`): a Hub id as
    it is; a local folder by the GGUF file it was dequantized from when it was (its `gguf_source.json`: the file's
    name and sha256), else not at all, since a path on the training machine tells a reader nothing.

    >>> describe_base_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    {'base_model': 'HuggingFaceTB/SmolLM2-135M-Instruct', 'base_gguf': None}
    """
    if not name_or_path or not Path(name_or_path).is_dir():
        return {"base_model": name_or_path or None, "base_gguf": None}
    return {"base_model": None, "base_gguf": read_gguf_source(name_or_path)}


def describe_chat_template(tokenizer) -> dict:
    """The template's family and where it puts a conversation's system text, read from a real rendering.

    Returns:
        `dict` with `family` (rolellm's ChatML role template or the model's own), `system_placement` (a sentence)
        and `prompt` (the token text of a system + user conversation ready for the answer, as trained).

    >>> from rolellm.testing.models import train_tiny_tokenizer
    >>> from rolellm.encoding.chat_template import set_role_chat_template
    >>> tokenizer = train_tiny_tokenizer()
    >>> _ = set_role_chat_template(tokenizer)
    >>> describe_chat_template(tokenizer)["system_placement"]
    'in its own `system` turn before the first user turn'
    """
    family = (
        "rolellm's ChatML role template (`<|im_start|>{role}` ... `<|im_end|>`), installed on the base model's "
        "tokenizer"
        if tokenizer.chat_template == ROLE_CHAT_TEMPLATE
        else "the base model's own chat template"
    )

    def rendered(messages):
        return tokenizer.decode(encode_chat(tokenizer, messages, add_generation_prompt=True)["input_ids"])

    user = {"role": "user", "content": _USER_MARK}
    try:
        text = rendered([{"role": "system", "content": _SYSTEM_MARK}, user])
    except Exception as error:  # noqa: BLE001  (the template's own error, reported in the card)
        return {"family": family, "system_placement": f"the template rejects a system message ({error})", "prompt": ""}
    alone = rendered([user])
    user_header = alone[: alone.index(_USER_MARK)].removeprefix(tokenizer.bos_token or "")
    if _SYSTEM_MARK not in text:
        placement = "nowhere: the template drops the system message"
    elif text.index(_SYSTEM_MARK) > text.index(_USER_MARK):
        placement = "after the user's text, in the user turn"
    elif user_header.strip() and text[: text.index(_USER_MARK)].endswith(user_header):
        placement = "in its own `system` turn before the first user turn"
    else:
        placement = "inside the first user turn, before the user's text"
    prompt = text.replace(_SYSTEM_MARK, "{system text}").replace(_USER_MARK, "{question}")
    return {"family": family, "system_placement": placement, "prompt": prompt}


def build_model_card(
    model_name: str,
    base_model: str | None,
    hub_model_id: str | None,
    role_stats: dict,
    dataset_name: str | None,
    chat_template: str | None,
    args=None,
    peft_config=None,
    tags: list[str] | None = None,
    dataset_configs: dict[str, int] | None = None,
    profiles: dict | None = None,
    packing: str = "none",
    quantization: dict | None = None,
    template: dict | None = None,
    steps: int | None = None,
    example_system: str | None = None,
    stage: dict | None = None,
    base_gguf: dict | None = None,
) -> ModelCard:
    """The `README.md` of a RoCIT model, rendered from `rolellm/prompts/model_card.md` with `huggingface_hub`.

    Args:
        model_name (`str`): the model's name.
        base_model (`str`, *optional*): the Hub id of the model it was fine-tuned from.
        hub_model_id (`str`, *optional*): where it is pushed.
        role_stats (`dict`): split -> `{"rows", "samples": {subset: count}, "roles": [...]}`, as kept by the trainer.
        dataset_name (`str`, *optional*): the dataset's name, Hub id or folder as given; `None` says that no name
            was recorded. Only a Hub id goes into the card's `datasets` metadata.
        chat_template (`str`, *optional*): the tokenizer's chat template, shown in full.
        args (`RoCITConfig`, *optional*): the training configuration (reference choice, mixing, hyper-parameters).
        peft_config (`peft.PeftConfig`, *optional*): the adapter configuration, when one was trained.
        tags (`list[str]`, *optional*): Hub tags.
        dataset_configs (`dict[str, int]`, *optional*): the dataset configs trained on -> their row counts.
        profiles (`dict[str, RoleProfile]`, *optional*): the profiles trained with (saved beside the model).
        packing (`str`, *optional*, defaults to `"none"`): `"prefix_shared"`, `"trl"` or `"none"`.
        quantization (`dict`, *optional*): the base model's `quantization_config` as a dict (QLoRA).
        template (`dict`, *optional*): `describe_chat_template(tokenizer)`.
        steps (`int`, *optional*): the optimizer steps taken when the card is written.
        example_system (`str`, *optional*): the system text of one real training sample, shown as it was trained.
        stage (`dict`, *optional*): a preference stage (`RoleDPOTrainer`, `RoleKTOTrainer`): its `name`, `unit`,
            `loss_type`, `beta`, `settings` and per split the rows kept and dropped (`RolePreferenceStats`); the
            card then describes that stage instead of RoCIT.
        base_gguf (`dict`, *optional*): the GGUF file the local base model was dequantized from (`gguf_file`,
            `sha256`; `describe_base_model`), named as the base.

    Returns:
        `huggingface_hub.ModelCard`: `str(card)` is the file; `card.data` the metadata; `card.push_to_hub(repo)`.
    """
    on_hub = dataset_name is not None and bool(_HUB_ID.match(dataset_name)) and not Path(dataset_name).exists()
    card_data = ModelCardData(
        base_model=base_model or None,
        datasets=[dataset_name] if on_hub else None,
        library_name="peft" if peft_config is not None else "transformers",
        model_name=model_name,
        tags=tags or ["rolellm", "rocit"],
    )
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=model_name,
        base_model=base_model,
        base_gguf=base_gguf,
        example_system=example_system,
        stage=stage,
        roles=role_stats.get("train", {}).get("roles", []),
        dataset_name=dataset_name,
        dataset_configs=dataset_configs or {},
        role_stats=role_stats,
        profiles=list((profiles or {}).values()),
        training=_training_settings(args) if args is not None else None,
        packing=PACKING_KINDS[packing],
        quantization=_describe_quantization(quantization),
        adapter=adapter_settings(peft_config) if peft_config is not None else None,
        template=template,
        steps=steps if steps is not None else "unknown",
        repo=hub_model_id,
        auto_class="AutoPeftModelForCausalLM" if peft_config is not None else "AutoModelForCausalLM",
        auto_module="peft" if peft_config is not None else "transformers",
        chat_template=(chat_template or "(none)").strip(),
        citation=CITATION.strip(),
        version=__version__,
        python_version=platform.python_version(),
    )


def _training_settings(args) -> dict:
    keys = (
        "reference", "learning_rate", "num_train_epochs", "max_steps", "per_device_train_batch_size",
        "gradient_accumulation_steps", "max_length", "assistant_only_loss", "system_lang", "seed",
    )  # fmt: skip
    settings = {key: getattr(args, key) for key in keys}
    settings["role_specific_fraction"] = args.role_specific_fraction
    settings["custom_system_template"] = args.system_template_path is not None
    return settings


def adapter_settings(peft_config) -> dict:
    return {
        "peft_type": peft_config.peft_type.value,
        "r": getattr(peft_config, "r", None),
        "lora_alpha": getattr(peft_config, "lora_alpha", None),
        "lora_dropout": getattr(peft_config, "lora_dropout", None),
        "target_modules": sorted(peft_config.target_modules or []),
        "modules_to_save": sorted(peft_config.modules_to_save or []),
        "trainable_token_indices": getattr(peft_config, "trainable_token_indices", None),
    }


def _describe_quantization(config: dict | None) -> str:
    if not config:
        return "none: the base model's weights were trained or adapted in their own precision"
    if config.get("load_in_4bit"):
        return (
            f"4-bit (bitsandbytes `{config.get('bnb_4bit_quant_type')}`, compute dtype "
            f"`{config.get('bnb_4bit_compute_dtype')}`, double quantization "
            f"`{config.get('bnb_4bit_use_double_quant')}`): QLoRA, the frozen base weights quantized"
        )
    if config.get("load_in_8bit"):
        return "8-bit (bitsandbytes LLM.int8): the frozen base weights quantized"
    return f"{config.get('quant_method', 'unknown')} quantization"
