"""The model card of a RoCIT model: roles, data, chat template, training setup and the RoleLLM paper.

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
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from rolellm import __version__
from rolellm.data.release import CITATION


TEMPLATE_PATH = Path(__file__).parent.parent / "prompts" / "model_card.md"


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
) -> ModelCard:
    """The `README.md` of a RoCIT model, rendered from `rolellm/prompts/model_card.md` with `huggingface_hub`.

    Args:
        model_name (`str`): the model's name.
        base_model (`str`, *optional*): the Hub id of the model it was fine-tuned from.
        hub_model_id (`str`, *optional*): where it is pushed.
        role_stats (`dict`): split -> `{"rows", "samples": {subset: count}, "roles": [...]}`, as kept by the trainer.
        dataset_name (`str`, *optional*): the dataset's name or Hub id; defaults to "RoleBench".
        chat_template (`str`, *optional*): the tokenizer's chat template, shown in full.
        args (`RoCITConfig`, *optional*): the training configuration (reference choice, mixing, hyper-parameters).
        peft_config (`peft.PeftConfig`, *optional*): the adapter configuration, when one was trained.
        tags (`list[str]`, *optional*): Hub tags.

    Returns:
        `huggingface_hub.ModelCard`: `str(card)` is the file; `card.data` the metadata; `card.push_to_hub(repo)`.
    """
    dataset_name = dataset_name or "RoleBench"
    card_data = ModelCardData(
        base_model=base_model or None,
        datasets=[dataset_name],
        library_name="peft" if peft_config is not None else "transformers",
        model_name=model_name,
        tags=tags or ["rolellm", "rocit"],
    )
    training = None
    if args is not None:
        training = {
            **{
                key: getattr(args, key)
                for key in (
                    "reference",
                    "learning_rate",
                    "num_train_epochs",
                    "max_steps",
                    "per_device_train_batch_size",
                    "gradient_accumulation_steps",
                    "max_length",
                    "packing",
                    "assistant_only_loss",
                )
            },  # fmt: skip
            "role_specific_fraction": args.role_specific_fraction
            if args.role_specific_fraction is not None
            else "as in the data",
            "system_lang": args.system_lang or "the row language",
        }
    adapter = None
    if peft_config is not None:
        adapter = {
            "peft_type": peft_config.peft_type.value,
            "r": getattr(peft_config, "r", None),
            "lora_alpha": getattr(peft_config, "lora_alpha", None),
            "target_modules": sorted(peft_config.target_modules or []),
        }
    return ModelCard.from_template(
        card_data,
        template_path=str(TEMPLATE_PATH),
        model_name=model_name,
        base_model=base_model,
        roles=role_stats.get("train", {}).get("roles", []),
        dataset_name=dataset_name,
        role_stats=role_stats,
        training=training,
        adapter=adapter,
        repo=hub_model_id or model_name,
        auto_class="AutoPeftModelForCausalLM" if peft_config is not None else "AutoModelForCausalLM",
        auto_module="peft" if peft_config is not None else "transformers",
        chat_template=(chat_template or "(none)").strip(),
        citation=CITATION.strip(),
        version=__version__,
        python_version=platform.python_version(),
    )
