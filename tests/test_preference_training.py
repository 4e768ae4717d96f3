"""The preference stages: `RoleDPOTrainer` and `RoleKTOTrainer` on role preference rows, on the tiny model.

DPO raises the chosen-minus-rejected log-probability margin on held-out pairs; the prompt is the role's system text
and the question, shared by chosen and rejected token for token; every oddity of the rows is counted, never a NaN
loss; checkpoints work on their own and their card says what was trained.
"""

import json
import logging
import math
import warnings

import datasets
import pytest
import torch

from rolellm import RoleProfile
from rolellm.encoding.chat_template import set_role_chat_template
from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer
from rolellm.training.preference import (
    RoleDPOConfig,
    RoleDPOTrainer,
    RoleKTOConfig,
    RoleKTOTrainer,
    encode_preference,
)


PROFILES = {
    "Po": RoleProfile("Po", "en", "The Dragon Warrior, a panda who loves dumplings.", catchphrases=["Skadoosh!"]),
    "Shifu": RoleProfile("Shifu", "en", "A red panda, master of kung fu.", catchphrases=["Inner peace."]),
}
QUESTIONS = [
    "What do you eat?", "Who trained you?", "Where do you live?", "What is kung fu?", "Are you strong?",
    "Tell me a secret.", "Why do you fight?", "What is your dream?", "Do you like noodles?", "How old are you?",
    "What scares you?", "Who is your friend?",
]  # fmt: skip


def pairs(questions, roles=("Po", "Shifu")):
    """Chosen answers in the role's voice (its catchphrase), rejected ones flat."""
    return [
        {
            "role": role,
            "question": question,
            "chosen": f"{PROFILES[role].catchphrases[0]} {question.rstrip('?.')}, {role} says.",
            "rejected": "I am a language model and cannot say.",
            "lang": "en",
        }
        for role in roles
        for question in questions
    ]


@pytest.fixture(scope="module")
def chat_model_path(tmp_path_factory):
    """The tiny model with the role chat template, as a RoCIT checkpoint has it."""
    tokenizer = train_tiny_tokenizer()
    set_role_chat_template(tokenizer)
    return str(build_tiny_llama(tmp_path_factory.mktemp("chat-llama"), tokenizer=tokenizer))


def dpo_args(output_dir, **overrides):
    settings = {
        "use_cpu": True, "max_steps": 4, "per_device_train_batch_size": 4, "learning_rate": 5e-3, "beta": 0.1,
        "report_to": "none", "save_strategy": "no", "disable_tqdm": True, "logging_steps": 1, "max_length": 1024,
        "activation_checkpointing": False, "seed": 0,
    }  # fmt: skip
    return RoleDPOConfig(str(output_dir), **{**settings, **overrides})


def completion_logp(model, prompt_ids, completion_ids) -> float:
    """log p(completion | prompt), summed over the completion tokens."""
    ids = torch.tensor([prompt_ids + completion_ids])
    logps = model(input_ids=ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
    return logps[len(prompt_ids) - 1 :].sum().item()


def margins(trainer, rows) -> list[float]:
    """log p(chosen | prompt) - log p(rejected | prompt) of each row, summed over the completion tokens."""
    prepared = trainer._prepare_role_rows(datasets.Dataset.from_list(rows), trainer.args, "held_out")
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    out = []
    with torch.no_grad():
        for row in prepared:
            chosen, rejected = (
                completion_logp(model, row["prompt_ids"], c) for c in (row["chosen_ids"], row["rejected_ids"])
            )
            out.append(chosen - rejected)
    return out


def test_dpo_raises_the_margin_on_held_out_pairs(chat_model_path, tmp_path):
    train_rows, held_out = pairs(QUESTIONS[:9]), pairs(QUESTIONS[9:])
    trainer = RoleDPOTrainer(
        chat_model_path, args=dpo_args(tmp_path / "dpo"), train_dataset=datasets.Dataset.from_list(train_rows),
        profiles=PROFILES,
    )  # fmt: skip
    before = margins(trainer, held_out)
    result = trainer.train()
    after = margins(trainer, held_out)
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    print(f"held-out margin: before {sum(before) / len(before):.3f}, after {sum(after) / len(after):.3f}")
    assert all(math.isfinite(loss) for loss in losses) and result.global_step == 4
    assert sum(after) / len(after) > sum(before) / len(before) + 1.0
    assert sum(a > b for a, b in zip(after, before)) == len(after)


def test_chosen_and_rejected_share_the_prompt_tokens_exactly(chat_model_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(chat_model_path)
    prompt = [{"role": "system", "content": "You are Po."}, {"role": "user", "content": "Say <|im_start|>system"}]
    prompt_ids, (chosen, rejected) = encode_preference(tokenizer, prompt, ["Skadoosh!", "No."])
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert prompt_ids.count(im_start) == 3  # system, user, assistant header: the question's text stays plain text
    assert tokenizer.decode(chosen) == "Skadoosh!<|im_end|>" and tokenizer.decode(rejected) == "No.<|im_end|>"
    full = tokenizer.apply_chat_template([*prompt, {"role": "assistant", "content": "No."}], tokenize=False)
    assert full.startswith(tokenizer.decode(prompt_ids))


def test_bad_rows_are_counted_and_dropped_never_a_nan_loss(chat_model_path, tmp_path, caplog):
    rows = pairs(QUESTIONS[:4])
    rows[0]["rejected"] = rows[0]["chosen"]  # chosen equal to rejected
    rows[1]["chosen"] = "   "  # an empty answer
    rows[2]["question"] = "tell me everything " * 400  # a prompt that fills max_length
    with caplog.at_level(logging.WARNING, logger="rolellm.training.preference"):
        trainer = RoleDPOTrainer(
            chat_model_path, args=dpo_args(tmp_path / "dpo", max_steps=2),
            train_dataset=datasets.Dataset.from_list(rows), profiles=PROFILES,
        )  # fmt: skip
    stats = trainer.preference_stats["train"]
    assert (stats.rows, stats.kept, stats.identical, stats.empty, stats.too_long) == (8, 5, 1, 1, 1)
    assert "3 of 8 train pairs dropped: 1 with chosen equal to rejected, 1 with an empty answer, 1 with a prompt" in (
        caplog.text
    )
    trainer.train()
    assert all(math.isfinite(log["loss"]) for log in trainer.state.log_history if "loss" in log)

    same = [{**row, "rejected": row["chosen"]} for row in pairs(QUESTIONS[:2])]
    with pytest.raises(ValueError, match="none of the 4 train pairs is left to train on: 4 with chosen equal"):
        RoleDPOTrainer(chat_model_path, args=dpo_args(tmp_path / "x"), train_dataset=datasets.Dataset.from_list(same),
                       profiles=PROFILES)  # fmt: skip
    with pytest.raises(ValueError, match=r"no profile for 1 role\(s\) of the train preference rows: \['Tigress'\]"):
        RoleDPOTrainer(chat_model_path, args=dpo_args(tmp_path / "y"),
                       train_dataset=datasets.Dataset.from_list(pairs(QUESTIONS[:1], roles=("Po",)) + [
                           {**pairs(QUESTIONS[:1], roles=("Po",))[0], "role": "Tigress"}]),
                       profiles=PROFILES)  # fmt: skip


def test_dpo_from_an_adapter_writes_a_self_contained_checkpoint(chat_model_path, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rolellm.clients.loading import load_model_and_tokenizer

    adapter = tmp_path / "rocit-adapter"
    base = AutoModelForCausalLM.from_pretrained(chat_model_path)
    get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"])).save_pretrained(adapter)
    AutoTokenizer.from_pretrained(chat_model_path).save_pretrained(adapter)
    out = tmp_path / "dpo-adapter"
    trainer = RoleDPOTrainer(
        str(adapter), args=dpo_args(out, max_steps=2, loss_type=["sigmoid"], ld_alpha=0.5),
        train_dataset=datasets.Dataset.from_list(pairs(QUESTIONS[:4])), profiles=PROFILES,
    )  # fmt: skip
    trainer.train()
    trainer.save_model(str(out))
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "with DPO (TRL, loss `['sigmoid']`, beta 0.1) on pairs of role answers" in card
    assert "| train | 8 | 8 | 0 |" in card and "ld_alpha 0.5" in card and "RoCIT trains with" in card
    assert "Skadoosh!" in card  # the system text of a real training sample, as trained
    assert sorted(json.loads(line)["name"] for line in (out / "role_profiles.jsonl").open()) == ["Po", "Shifu"]
    model, tokenizer = load_model_and_tokenizer(out)  # works on its own: adapter, tokenizer, template
    assert type(model).__name__.startswith("Peft") and tokenizer.chat_template is not None


def test_kto_trains_on_labelled_answers(chat_model_path, tmp_path):
    rows = [
        {"role": row["role"], "question": row["question"], "completion": answer, "label": label, "lang": "en"}
        for row in pairs(QUESTIONS[:4])
        for answer, label in ((row["chosen"], True), (row["rejected"], False))
    ]
    rows.append({**rows[0], "completion": ""})  # counted, dropped
    args = RoleKTOConfig(str(tmp_path / "kto"), use_cpu=True, max_steps=2, per_device_train_batch_size=4,
                         report_to="none", save_strategy="no", disable_tqdm=True, logging_steps=1,
                         activation_checkpointing=False)  # fmt: skip
    trainer = RoleKTOTrainer(chat_model_path, args=args, train_dataset=datasets.Dataset.from_list(rows),
                             profiles=PROFILES)  # fmt: skip
    assert trainer.preference_stats["train"].empty == 1 and trainer.preference_stats["train"].kept == 16
    trainer.train()
    assert all(math.isfinite(log["loss"]) for log in trainer.state.log_history if "loss" in log)
    trainer.save_model(str(tmp_path / "kto"))
    assert "with KTO (TRL" in (tmp_path / "kto" / "README.md").read_text(encoding="utf-8")


def unpaired(rows) -> list[dict]:
    """Each pair as two labelled answers for KTO: the chosen one desirable, the rejected one not."""
    return [
        {"role": row["role"], "question": row["question"], "completion": answer, "label": label, "lang": "en"}
        for row in rows
        for answer, label in ((row["chosen"], True), (row["rejected"], False))
    ]


def completion_logps(trainer, rows) -> list[float]:
    """log p(completion | prompt) of each labelled row, summed over the completion tokens."""
    prepared = trainer._prepare_role_rows(datasets.Dataset.from_list(rows), trainer.args, "held_out")
    model = trainer.accelerator.unwrap_model(trainer.model).eval()
    out = []
    with torch.no_grad():
        for row in prepared:
            out.append(completion_logp(model, row["prompt_ids"], row["completion_ids"]))
    return out


def test_kto_raises_desirable_answers_over_undesirable_ones_on_held_out_questions(chat_model_path, tmp_path):
    """KTO from the model itself (the reference): on answers to questions it never trained on, the log-probability
    of the desirable answer rises against the undesirable one's, so KTO's implicit reward,
    beta * (log p_policy - log p_reference), ends higher for the desirable answers than for the undesirable ones."""
    held_out = unpaired(pairs(QUESTIONS[9:]))
    args = RoleKTOConfig(str(tmp_path / "kto"), use_cpu=True, max_steps=4, per_device_train_batch_size=4,
                         learning_rate=5e-3, beta=0.1, report_to="none", save_strategy="no", disable_tqdm=True,
                         logging_steps=1, activation_checkpointing=False, seed=0)  # fmt: skip
    trainer = RoleKTOTrainer(chat_model_path, args=args, train_dataset=datasets.Dataset.from_list(
        unpaired(pairs(QUESTIONS[:9]))), profiles=PROFILES)  # fmt: skip
    before = completion_logps(trainer, held_out)
    result = trainer.train()
    after = completion_logps(trainer, held_out)
    margin_before = [before[i] - before[i + 1] for i in range(0, len(before), 2)]  # desirable - undesirable
    margin_after = [after[i] - after[i + 1] for i in range(0, len(after), 2)]
    rewards = [args.beta * (a - b) for a, b in zip(after, before)]
    desirable, undesirable = rewards[0::2], rewards[1::2]
    print(f"held-out margin: before {sum(margin_before) / len(margin_before):.3f}, after "
          f"{sum(margin_after) / len(margin_after):.3f}; KTO reward: desirable {sum(desirable) / len(desirable):.3f}, "
          f"undesirable {sum(undesirable) / len(undesirable):.3f}")  # fmt: skip
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert all(math.isfinite(loss) for loss in losses) and result.global_step == 4
    assert sum(margin_after) / len(margin_after) > sum(margin_before) / len(margin_before) + 1.0
    assert sum(a > b for a, b in zip(margin_after, margin_before)) == len(margin_after)
    assert min(desirable) > max(undesirable)


def test_rolellm_train_stage_dpo_on_a_release_folder(chat_model_path, tmp_path, capsys):
    from rolellm.data.layout import get_spec
    from rolellm.data.preference import write_preference_rows
    from rolellm.scripts.cli import main

    data = tmp_path / "data"
    folder = data / get_spec("en-instruction-preference").release_dir
    rows = [{**row, "source": "judge:pairwise"} for row in pairs(QUESTIONS[:4])]
    write_preference_rows(folder / "train.jsonl", rows, "preference")
    from rolellm.roles.resolve import PROFILES_FILE, write_profiles_jsonl

    (tmp_path / "profiles").mkdir()
    write_profiles_jsonl(PROFILES, tmp_path / "profiles" / PROFILES_FILE)
    out = tmp_path / "dpo"
    with warnings.catch_warnings(record=True) as caught:  # activation checkpointing on, as by default
        warnings.simplefilter("always")
        code = main(["train", "--stage", "dpo", "--model_name_or_path", chat_model_path, "--data_dir", str(data),
                     "--profiles", str(tmp_path / "profiles"), "--output_dir", str(out), "--max_steps", "2",
                     "--per_device_train_batch_size", "4", "--report_to", "none", "--save_strategy", "no",
                     "--max_length", "1024", "--disable_tqdm", "true"])  # fmt: skip
    # nothing a user cannot act on: TRL's use of transformers' deprecated names, torch's pinned memory on a CPU
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "gradient_checkpointing" in m or "pin_memory" in m], said
    captured = capsys.readouterr()
    text = captured.out
    assert code == 0, captured.err
    assert "training on the preference configs in" in text and "en-instruction-preference" in text
    assert "Trained with DPO on 8 pairs of 2 roles in 2 steps" in text
    assert (out / "model.safetensors").is_file() and (out / "role_profiles.jsonl").is_file()
    assert main(["train", "--stage", "kto", "--model_name_or_path", chat_model_path, "--data_dir", str(data),
                 "--output_dir", str(out)]) == 2  # fmt: skip
    assert "holds no unpaired train split for --stage kto" in capsys.readouterr().err
