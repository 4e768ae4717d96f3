"""The model card of a RoCIT model: roles, data, chat template, training setup and the RoleLLM paper.

>>> card = build_model_card(
...     model_name="rolellama-demo", base_model="meta-llama/Llama-2-7b-hf", hub_model_id="me/rolellama-demo",
...     role_stats={"train": {"rows": 3, "samples": {"general": 2, "role_specific": 1}, "roles": ["Jack Sparrow"]}},
...     dataset_name="ZenMoore/RoleBench", chat_template="{{ messages }}",
... )
>>> "Jack Sparrow" in card and "arXiv:2310.00746" in card and "base_model: meta-llama/Llama-2-7b-hf" in card
True
"""

import platform

import yaml

from rolellm import __version__
from rolellm.data.release import CITATION


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
) -> str:
    """Render the `README.md` of a RoCIT model.

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
    """
    dataset_name = dataset_name or "RoleBench"
    metadata = {
        "library_name": "peft" if peft_config is not None else "transformers",
        "model_name": model_name,
        "tags": tags or ["rolellm", "rocit"],
        "datasets": [dataset_name],
    }
    if base_model:
        metadata["base_model"] = base_model
    train = role_stats.get("train", {})
    roles = train.get("roles", [])
    lines = [
        "---",
        yaml.safe_dump(metadata, allow_unicode=True, sort_keys=False).strip(),
        "---",
        "",
        f"# {model_name}",
        "",
        f"A role-playing model fine-tuned from {f'[{base_model}](https://huggingface.co/{base_model})' if base_model else 'a local model'} "
        "with role-conditioned instruction tuning (RoCIT), the method of the RoleLLM paper "
        "([arXiv:2310.00746](https://arxiv.org/abs/2310.00746)), using rolellm "
        f"{__version__}. Each sample puts the paper's role system instruction (name, description, catchphrases) "
        "before a RoleBench question and trains on the role's answer only.",
        "",
        "## Roles",
        "",
        f"{len(roles)} role(s): " + (", ".join(roles) if roles else "none recorded") + ".",
        "",
        "## Data",
        "",
        f"Trained on {dataset_name}.",
        "",
        "| split | rows | general samples | role-specific samples |",
        "|---|---|---|---|",
    ]
    for split, stats in role_stats.items():
        samples = stats.get("samples", {})
        lines.append(
            f"| {split} | {stats.get('rows', 0)} | {samples.get('general', 0)} | {samples.get('role_specific', 0)} |"
        )
    if args is not None:
        lines += [
            "",
            f"Reference answer per row: `{args.reference}`; role-specific fraction of the mix: "
            f"`{args.role_specific_fraction if args.role_specific_fraction is not None else 'as in the data'}`; "
            f"system instruction language: `{args.system_lang or 'the row language'}`.",
            "",
            "## Training",
            "",
            f"- learning rate {args.learning_rate}, {args.num_train_epochs} epoch(s) (max_steps {args.max_steps}), "
            f"per-device batch size {args.per_device_train_batch_size}, gradient accumulation "
            f"{args.gradient_accumulation_steps}, max_length {args.max_length}, packing {args.packing}",
            f"- loss on the assistant turns only: {args.assistant_only_loss}",
        ]
    if peft_config is not None:
        lines.append(
            f"- adapter: {peft_config.peft_type.value}, r={getattr(peft_config, 'r', None)}, "
            f"alpha={getattr(peft_config, 'lora_alpha', None)}, target modules {sorted(peft_config.target_modules or [])}"
        )
    repo = hub_model_id or model_name
    auto_class = "AutoPeftModelForCausalLM" if peft_config is not None else "AutoModelForCausalLM"
    auto_module = "peft" if peft_config is not None else "transformers"
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "from rolellm import RoleProfile, build_system_instruction",
        "from transformers import AutoTokenizer",
        f"from {auto_module} import {auto_class}",
        "",
        f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
        f'model = {auto_class}.from_pretrained("{repo}")',
        'profile = RoleProfile(name="...", lang="en", description="...", catchphrases=["..."])',
        'messages = [{"role": "system", "content": build_system_instruction(profile)},',
        '            {"role": "user", "content": "Who are you?"}]',
        'inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)',
        'print(tokenizer.decode(model.generate(**inputs, max_new_tokens=128)[0, inputs["input_ids"].shape[1]:]))',
        "```",
        "",
        "## Chat template",
        "",
        "The tokenizer carries the template used in training; prompt the model with "
        "`tokenizer.apply_chat_template(messages, add_generation_prompt=True)` where `messages` starts with the role's "
        "system instruction (`rolellm.build_system_instruction(profile)`).",
        "",
        "```jinja",
        (chat_template or "(none)").strip(),
        "```",
        "",
        "## Citation",
        "",
        "```bibtex",
        CITATION.strip(),
        "```",
        "",
        f"Framework: rolellm {__version__}, Python {platform.python_version()}.",
        "",
    ]
    return "\n".join(lines)
