"""The model card states the run's real settings: packing, quantization, adapter, template and system placement, data,
profiles; its usage example runs; it holds no secret and claims no data the run was not given."""

import re

import datasets
import pytest
import torch
import yaml
from test_trainer import PROFILES, ROWS, config, lora
from transformers import AutoTokenizer

from rolellm.training.card import build_model_card
from rolellm.training.trainer import RoCITTrainer


LLAMA2_LIKE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set sys = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{%- set msgs = messages[1:] %}{%- else %}{%- set sys = '' %}{%- set msgs = messages %}{%- endif %}"
    "{%- for m in msgs %}{%- if m['role'] == 'user' %}{{ '[INST] ' + (sys if loop.first else '') + m['content'] + "
    "' [/INST]' }}{%- else %}{{ ' ' + m['content'] + eos_token }}{%- endif %}{%- endfor %}"
)


def rows():
    return datasets.Dataset.from_list(ROWS)


def card_of(trainer, folder):
    trainer.save_role_files(folder)
    text = (folder / "README.md").read_text(encoding="utf-8")
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


def test_lora_prefix_sharing_card_and_its_usage_example_runs(tmp_path, tiny_model_path, monkeypatch):
    args = config(tmp_path, prefix_sharing=True, max_length=512, max_steps=1, per_device_train_batch_size=2)
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES, peft_config=lora(),
                           dataset_name="ZenMoore/RoleBench", dataset_configs={"zh": 2, "en": 2})  # fmt: skip
    trainer.train()
    trainer.save_model()
    meta, body = card_of(trainer, tmp_path / "out")
    assert meta["datasets"] == ["ZenMoore/RoleBench"] and meta["library_name"] == "peft"
    assert "Trained on `ZenMoore/RoleBench`, configs `zh` (2 rows), `en` (2 rows)." in body
    assert "- packing: prefix-shared (rolellm)" in body and "- quantization: none" in body
    assert "- adapter: LORA, r=8, alpha=16, dropout=0.0, target modules ['q_proj', 'v_proj']" in body
    assert "- 1 optimizer step(s) (max_steps 1)" in body
    assert "rolellm's ChatML role template" in body and "placed in its own `system` turn" in body
    assert "<|im_start|>system\n{system text}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>" in body
    assert "- **Jack Sparrow** (en): A witty pirate captain." in body
    assert "the role's system text, built from its profile by the paper's instruction" in body
    [shown] = re.findall(r"as it was trained:\n\n```text\n(.*?)\n```", body, flags=re.DOTALL)
    samples = {c["messages"][0]["content"] for c in trainer.build_role_dataset(rows(), "check")}
    assert shown in samples  # the system text of a real sample, rendered by the training builder
    assert "encode_chat(tokenizer, messages, add_generation_prompt=True)" in body
    assert "apply_chat_template(messages" not in body
    [example] = re.findall(r"```python\n(.*?)```", body, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)  # the example names its folder relative to where the card is
    exec(
        compile(example, "README.md usage example", "exec"), {"__name__": "__main__"}
    )  # in this process: no imports to pay again


def test_trl_packing_full_training_custom_system_template_card(tmp_path, tiny_model_path):
    template = tmp_path / "system.jinja"
    template.write_text("You are {{ role }}. Stay in character.", encoding="utf-8")
    args = config(tmp_path, packing=True, max_length=512, system_template_path=str(template), system_lang="en")
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES)
    meta, body = card_of(trainer, tmp_path / "out")
    assert meta["library_name"] == "transformers" and "datasets" not in meta
    assert "- packing: TRL's best-fit-decreasing packing" in body and "- adapter: none, all weights trained" in body
    assert "a custom system text (from the run's `system_template_path`" in body
    assert "built from its profile by the paper's instruction" not in body
    assert "```text\nYou are " in body and "Stay in character.\n```" in body  # the custom text, as trained
    assert "system text language: `en`" in body and 'lang="en"' in body
    assert (tmp_path / "out" / "system_template.jinja").read_text() == template.read_text()
    assert 'system_template=open(f"{folder}/system_template.jinja").read()' in body


def test_qlora_card_states_the_4bit_quantization(tmp_path, tiny_model_path):
    from peft import LoraConfig
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                      bnb_4bit_compute_dtype=torch.float32)  # fmt: skip
    peft_config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=["q_proj", "k_proj", "o_proj"])
    trainer = RoCITTrainer(str(tiny_model_path), args=config(tmp_path), train_dataset=rows(), profiles=PROFILES,
                           peft_config=peft_config, quantization_config=quantization)  # fmt: skip
    _, body = card_of(trainer, tmp_path / "out")
    assert "- quantization: 4-bit (bitsandbytes `nf4`, compute dtype `float32`" in body and "QLoRA" in body
    assert "- adapter: LORA, r=4, alpha=8, dropout=0.1, target modules ['k_proj', 'o_proj', 'q_proj']" in body
    assert "- packing: none: one sample per row" in body


def test_8bit_quantization_is_named():
    card = build_model_card("m", None, None, {}, None, None, quantization={"load_in_8bit": True, "quant_method": "x"})
    assert "8-bit (bitsandbytes LLM.int8)" in str(card)


def test_a_model_template_that_folds_the_system_text_is_described(tmp_path, tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.chat_template = LLAMA2_LIKE
    trainer = RoCITTrainer(str(tiny_model_path), args=config(tmp_path), train_dataset=rows(), profiles=PROFILES,
                           processing_class=tokenizer)  # fmt: skip
    _, body = card_of(trainer, tmp_path / "out")
    assert "Template: the base model's own chat template." in body
    assert "placed inside the first user turn, before the user's text" in body
    assert "[INST] <<SYS>>\n{system text}\n<</SYS>>\n\n{question} [/INST]" in body


def test_no_secret_and_no_claimed_dataset_or_profiles(tmp_path, tiny_model_path):
    args = config(tmp_path, hub_token="hf_SECRETTOKEN123", max_steps=1)
    chats = RoCITTrainer(str(tiny_model_path), args=config(tmp_path), train_dataset=rows(), profiles=PROFILES)
    messages = chats.build_role_dataset(rows(), "check")
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=messages)  # ready samples, no profiles
    trainer.train()
    trainer.save_model()
    folder = tmp_path / "out"
    meta, body = card_of(trainer, folder)
    assert "no dataset name was recorded" in body and "RoleBench" not in body.split("## Data")[1].split("##")[0]
    assert "datasets" not in meta and "No role profiles were saved with the model" in body
    assert "given as ready conversations (`messages`)" in body and "built from its profile" not in body
    assert not (folder / "role_profiles.jsonl").exists()
    for path in folder.iterdir():
        if path.suffix in (".md", ".json", ".jinja", ".jsonl"):
            assert "hf_SECRETTOKEN123" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("name", ["./my-data", "/abs/folder"])
def test_a_local_dataset_is_named_but_never_put_in_the_hub_metadata(name, tmp_path):
    card = build_model_card("m", None, None, {}, name, None)
    assert card.data.datasets is None and f"Trained on `{name}`" in str(card)
