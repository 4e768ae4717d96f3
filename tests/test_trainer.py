"""RoCITTrainer on the tiny Llama: conversion, LoRA training, per-subset losses, checkpoints, resume, card, QLoRA."""

import datasets
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rolellm import RoleProfile
from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE
from rolellm.encoding.encode import encode_chat
from rolellm.training.config import RoCITConfig
from rolellm.training.trainer import RoCITTrainer


PROFILES = {
    "Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A witty pirate captain.", ["Savvy?"]),
    "孙悟空": RoleProfile("孙悟空", "zh", "齐天大圣，桀骜不驯。", ["俺老孙来也"]),
}
ROWS = [
    {"role": "Jack Sparrow", "question": " Why is the rum gone?", "generated": [" Arr, matey.", " Savvy?"],
     "type": [], "subset": "general", "lang": "en"},
    {"role": "Jack Sparrow", "question": " Who are you?", "generated": [" Captain Jack Sparrow."],
     "type": ["script_agnostic"], "subset": "role_specific", "lang": "en"},
    {"role": "孙悟空", "question": "你是谁？", "generated": ["俺老孙来也！", "齐天大圣是也！", "俺是美猴王！"],
     "type": [], "subset": "general", "lang": "zh"},
    {"role": "孙悟空", "question": "你师父是谁？", "generated": ["唐僧。"],
     "type": ["script_based"], "subset": "role_specific", "lang": "zh"},
]  # fmt: skip


def rows():
    return datasets.Dataset.from_list(ROWS)


def config(tmp_path, **overrides):
    defaults = {
        "output_dir": str(tmp_path / "out"), "use_cpu": True, "bf16": False, "activation_checkpointing": False,
        "per_device_train_batch_size": 4, "per_device_eval_batch_size": 4, "learning_rate": 1e-2, "max_steps": 6,
        "logging_steps": 1, "save_strategy": "no", "report_to": "none", "disable_tqdm": True, "seed": 0,
        "prefix_sharing": False,  # one sample per row, to inspect; prefix sharing has its own tests
    }  # fmt: skip
    return RoCITConfig(**{**defaults, **overrides})


def lora():
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def test_rows_become_role_chats_with_exact_labels(tmp_path, tiny_model_path):
    args = config(tmp_path, reference="all", prefix_sharing=False)  # one sample per dataset row, to inspect
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES)
    assert trainer.role_stats["train"] == {
        "rows": 4, "samples": {"general": 5, "role_specific": 2}, "roles": ["Jack Sparrow", "孙悟空"]
    }  # fmt: skip
    tokenizer = trainer.processing_class
    assert tokenizer.chat_template == ROLE_CHAT_TEMPLATE  # the base model's tokenizer got the role template
    prepared = {tuple(ids): labels for ids, labels in zip(trainer.train_dataset["input_ids"],
                                                          trainer.train_dataset["labels"])}  # fmt: skip
    assert len(prepared) == 7
    first = trainer.build_role_dataset(rows().select([0]), "check")[0]["messages"]
    assert first[0]["content"].startswith("You are Jack Sparrow, your description is: A witty pirate captain.")
    assert first[1:] == [{"role": "user", "content": "Why is the rum gone?"},
                         {"role": "assistant", "content": "Arr, matey."}]  # fmt: skip
    encoded = encode_chat(tokenizer, first)
    labels = prepared[tuple(encoded["input_ids"])]
    answer = tokenizer("Arr, matey.<|im_end|>", add_special_tokens=False)["input_ids"]
    assert [t for t in labels if t != -100] == answer
    assert labels == [i if m else -100 for i, m in zip(encoded["input_ids"], encoded["assistant_masks"])]


def test_mixing_and_reference_choice(tmp_path, tiny_model_path):
    trainer = RoCITTrainer(str(tiny_model_path), args=config(tmp_path, role_specific_fraction=1.0),
                           train_dataset=rows(), profiles=PROFILES)  # fmt: skip
    assert trainer.role_stats["train"]["samples"] == {"role_specific": 2}
    with pytest.raises(ValueError, match="role_specific_fraction=1.5"):
        config(tmp_path, role_specific_fraction=1.5)
    with pytest.raises(ValueError, match="'wrapped' lets samples of different roles"):
        config(tmp_path, packing=True, packing_strategy="wrapped")


def test_missing_profiles_are_named(tmp_path, tiny_model_path):
    with pytest.raises(ValueError, match=r"no profile for 1 role\(s\) of the data: \['孙悟空'\]"):
        RoCITTrainer(str(tiny_model_path), args=config(tmp_path), train_dataset=rows(),
                     profiles={"Jack Sparrow": PROFILES["Jack Sparrow"]})  # fmt: skip
    with pytest.raises(ValueError, match="need role profiles"):
        RoCITTrainer(str(tiny_model_path), args=config(tmp_path), train_dataset=rows())


def test_lora_training_changes_adapters_lowers_loss_and_logs_subsets(tmp_path, tiny_model_path):
    trainer = RoCITTrainer(str(tiny_model_path), args=config(tmp_path, max_steps=5), train_dataset=rows(),
                           eval_dataset=rows(), profiles=PROFILES, peft_config=lora())  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    base_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "base_layer" in n}
    first_eval = trainer.evaluate()["eval_loss"]
    trainer.train()
    assert all(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters() if n in before)
    assert all(torch.equal(p, base_before[n]) for n, p in trainer.model.named_parameters() if n in base_before)
    train_logs = [h for h in trainer.state.log_history if "loss" in h]
    assert train_logs[-1]["loss"] < train_logs[0]["loss"]
    assert {"loss_general", "loss_role_specific"} <= set(train_logs[0])
    last_eval = trainer.evaluate()
    assert last_eval["eval_loss"] < first_eval  # the same repeated batch
    # the two subsets' losses bracket the overall loss (its token-weighted mean)
    low, high = sorted([last_eval["eval_loss_general"], last_eval["eval_loss_role_specific"]])
    assert low - 1e-4 <= last_eval["eval_loss"] <= high + 1e-4


def test_checkpoint_carries_the_chat_template_and_the_inference_prefix(tmp_path, tiny_model_path):
    token = "hf_NotARealTokenButKeptOutOfCheckpoints"
    args = config(tmp_path, max_steps=2, save_strategy="steps", save_steps=2, prefix_sharing=False, hub_token=token)
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES)
    trainer.train()
    trainer.save_model()
    checkpoint = tmp_path / "out" / "checkpoint-2"
    # no file of a checkpoint (the pickled arguments included) holds the Hub token; resuming still reads them
    written = [path for path in (tmp_path / "out").rglob("*") if path.is_file()]
    assert (checkpoint / "training_args.bin") in written and (tmp_path / "out" / "training_args.bin") in written
    assert not [path for path in written if token.encode() in path.read_bytes()]
    assert torch.load(checkpoint / "training_args.bin", weights_only=False).hub_token is None
    assert args.hub_token == token  # the run's own arguments keep it (a push needs it)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert tokenizer.chat_template == ROLE_CHAT_TEMPLATE
    messages = trainer.build_role_dataset(rows(), "check")[2]["messages"]
    prompt = tokenizer.apply_chat_template(messages[:2], add_generation_prompt=True, return_dict=True)["input_ids"]
    trained = [ids for ids in trainer.train_dataset["input_ids"] if ids[: len(prompt)] == prompt]
    assert len(trained) == 1 and len(trained[0]) > len(prompt)
    labels = trainer.train_dataset[trainer.train_dataset["input_ids"].index(trained[0])]["labels"]
    assert set(labels[: len(prompt)]) == {-100} and labels[len(prompt)] != -100
    card = (tmp_path / "out" / "README.md").read_text()
    assert "孙悟空" in card and "Jack Sparrow" in card and "<|im_start|>" in card and "2310.00746" in card


@pytest.mark.slow
def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path, tiny_model_path):
    def trainer(folder):
        args = config(folder, max_steps=4, save_strategy="steps", save_steps=2, per_device_train_batch_size=2)
        return RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES)

    full = trainer(tmp_path / "full")
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    resumed = trainer(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 4
    losses = [h["loss"] for h in full.state.log_history if "loss" in h]
    assert len(losses) == 4  # steps 1-2 come from the checkpoint's state, 3-4 are trained again
    torch.testing.assert_close([h["loss"] for h in resumed.state.log_history if "loss" in h], losses)
    for (name, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


def test_model_card_names_roles_data_template_and_paper(tmp_path, tiny_model_path):
    args = config(tmp_path, hub_model_id="someone/rolellama-tiny")
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES,
                           peft_config=lora())  # fmt: skip
    trainer.create_model_card(model_name="rolellama-tiny", dataset_name="ZenMoore/RoleBench")
    card = (tmp_path / "out" / "README.md").read_text()
    assert "# rolellama-tiny" in card
    assert "2 role(s): Jack Sparrow, 孙悟空." in card
    assert "Trained on `ZenMoore/RoleBench`." in card and "| train | 4 | 2 | 2 |" in card
    assert ROLE_CHAT_TEMPLATE.strip() in card
    assert "arXiv:2310.00746" in card and "@article{wang2023rolellm" in card
    assert "library_name: peft" in card and "adapter: LORA, r=8" in card
    assert 'folder = snapshot_download("someone/rolellama-tiny")' in card
    assert "model = AutoPeftModelForCausalLM.from_pretrained(folder)" in card


def test_qlora_4bit_on_cpu(tmp_path, tiny_model_path):
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                      bnb_4bit_compute_dtype=torch.float32)  # fmt: skip
    trainer = RoCITTrainer(str(tiny_model_path), args=config(tmp_path, max_steps=3), train_dataset=rows(),
                           profiles=PROFILES, peft_config=lora(), quantization_config=quantization)  # fmt: skip
    import bitsandbytes as bnb

    assert any(isinstance(m, bnb.nn.Linear4bit) for m in trainer.model.modules())
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert all(not torch.equal(p, before[n]) for n, p in trainer.model.named_parameters() if n in before)
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in trainer.state.log_history if "loss" in h)


def test_a_model_object_and_messages_dataset_are_accepted(tmp_path, tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    chats = RoCITTrainer(str(tiny_model_path), args=config(tmp_path), train_dataset=rows(), profiles=PROFILES)
    messages = chats.build_role_dataset(rows(), "check")
    trainer = RoCITTrainer(model, args=config(tmp_path, max_steps=1), train_dataset=messages,
                           processing_class=tokenizer)  # fmt: skip
    assert trainer.train().global_step == 1


def test_samples_truncated_to_no_answer_are_counted(tmp_path, tiny_model_path, caplog):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    tokenizer.chat_template = ROLE_CHAT_TEMPLATE
    from rolellm import to_role_messages

    prompts = [
        len(
            encode_chat(tokenizer, to_role_messages(row, PROFILES[row["role"]])[0][:2], add_generation_prompt=True)[
                "input_ids"
            ]
        )
        for row in ROWS
    ]
    max_length = sorted(prompts)[1] + 2  # the two longest prompts leave no room for their answers
    with caplog.at_level("WARNING", logger="rolellm.training.trainer"):
        trainer = RoCITTrainer(str(tiny_model_path), args=config(tmp_path, max_length=max_length),
                               train_dataset=rows(), profiles=PROFILES)  # fmt: skip
    dropped = sum(p >= max_length for p in prompts)
    assert dropped == 2 and len(trainer.train_dataset) == 2
    assert f"{dropped} of 4 train samples were dropped" in caplog.text


def test_base_tokenizer_without_chatml_tokens_gets_them_trained_with_lora(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from rolellm.testing.models import build_tiny_llama

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_tokens(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="~", pad_token="!")
    path = build_tiny_llama(tmp_path / "base", tokenizer=tokenizer)  # a base model: no chat template, no ChatML
    trainer = RoCITTrainer(str(path), args=config(tmp_path, max_steps=2, per_device_train_batch_size=2),
                           train_dataset=rows(), profiles=PROFILES, peft_config=lora())  # fmt: skip
    added = trainer.processing_class.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert added == [len(tokenizer), len(tokenizer) + 1]
    assert trainer.model.get_base_model().config.vocab_size == len(tokenizer) + 2  # embeddings resized
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert any("trainable_tokens_delta" in n for n in trainable) and any("lm_head" in n for n in trainable)
    assert trainer.train().global_step == 2


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # plain rows, assistant-only loss from prefix-rendered spans
        {"packing": True, "max_length": 512},  # TRL's packing
        {"prefix_sharing": True, "max_length": 512},  # prefix-shared rows with their own attention mask
        {"assistant_only_loss": False},  # the whole sequence trained
    ],
    ids=["plain", "packing", "prefix_sharing", "full_sequence"],
)
def test_the_users_config_is_never_changed(tmp_path, tiny_model_path, overrides):
    args = config(tmp_path, max_steps=1, model_init_kwargs={"dtype": "float32"}, **overrides)
    before = args.to_dict()
    trainer = RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES)
    trainer.train()
    assert args.to_dict() == before
    assert trainer.args is not args  # the trainer works on its own copy...
    assert trainer.args.assistant_only_loss == args.assistant_only_loss  # ...which says what was trained
    assert trainer.state.log_history[0]["num_tokens"] > 0


@pytest.mark.parametrize(
    "overrides", [{"packing": True}, {"prefix_sharing": True}, {}], ids=["packing", "prefix", "plain"]
)
def test_a_window_too_short_for_any_answer_is_a_clear_error(tmp_path, tiny_model_path, overrides):
    args = config(tmp_path, max_length=16, **overrides)
    with pytest.raises(
        ValueError, match=r"all 4 train samples were dropped: truncated to max_length=16 .* raise max_length"
    ):
        RoCITTrainer(str(tiny_model_path), args=args, train_dataset=rows(), profiles=PROFILES)
