"""Packing never lets one role's sample see another's: per-sample log-probs of a packed row equal those alone."""

import datasets
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rolellm import RoleProfile, to_role_messages
from rolellm.encoding.chat_template import set_role_chat_template
from rolellm.encoding.encode import encode_chat
from rolellm.training.config import RoCITConfig
from rolellm.training.trainer import RoCITTrainer, check_no_cross_sample_attention


PROFILES = {
    "Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A witty pirate captain.", ["Savvy?"]),
    "张飞": RoleProfile("张飞", "zh", "一位重情重义的猛将。", ["我乃燕人张翼德"]),
    "Walt Kowalski": RoleProfile("Walt Kowalski", "en", "A grumpy Korean War veteran."),
}
ROWS = [
    {"role": "Jack Sparrow", "question": "Why is the rum gone?", "generated": ["Arr, savvy?"], "type": [],
     "subset": "general", "lang": "en"},
    {"role": "张飞", "question": "你是谁？", "generated": ["我乃燕人张翼德！"], "type": ["script_agnostic"],
     "subset": "role_specific", "lang": "zh"},
    {"role": "Walt Kowalski", "question": "Can I borrow your car?", "generated": ["Get off my lawn."], "type": [],
     "subset": "general", "lang": "en"},
]  # fmt: skip


def token_log_probs(model, input_ids, position_ids=None, use_cache=False):
    """log p(token t+1 | ...) for every position of a single row, in fp32."""
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([input_ids]),
            position_ids=None if position_ids is None else torch.tensor([position_ids]),
            use_cache=use_cache,
        ).logits[0]
    return logits[:-1].log_softmax(-1).gather(-1, torch.tensor(input_ids[1:])[:, None])[:, 0]


@pytest.fixture(scope="module")
def samples(tiny_model_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path)
    set_role_chat_template(tokenizer)
    return [encode_chat(tokenizer, to_role_messages(row, PROFILES[row["role"]])[0])["input_ids"] for row in ROWS]


@pytest.fixture(scope="module")
def model(tiny_model_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32, attn_implementation="sdpa")
    model.config.use_cache = True  # the inference default, which is what makes packing unsafe
    return model.eval()


def packed_row(samples):
    ids = [t for sample in samples for t in sample]
    positions = [p for sample in samples for p in range(len(sample))]
    return ids, positions


def split_packed(log_probs, samples):
    """Per-sample slices of a packed row's log-probs, without the cross-boundary predictions."""
    out, start = [], 0
    for sample in samples:
        out.append(log_probs[start : start + len(sample) - 1])
        start += len(sample)
    return out


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_row_log_probs_equal_each_sample_alone(tiny_model_path, samples, attn):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32, attn_implementation=attn).eval()
    ids, positions = packed_row(samples)
    packed = split_packed(token_log_probs(model, ids, positions, use_cache=False), samples)
    for sample, got in zip(samples, packed):
        torch.testing.assert_close(got, token_log_probs(model, sample), rtol=0, atol=1e-5)


def test_use_cache_in_the_forward_contaminates_packed_samples(model, samples):
    # The hazard this library guards against: with a cache, transformers ignores the position_ids restarts.
    ids, positions = packed_row(samples)
    packed = split_packed(token_log_probs(model, ids, positions, use_cache=True), samples)
    assert (packed[1] - token_log_probs(model, samples[1])).abs().max() > 1e-3


def test_trainer_packed_loss_equals_the_loss_of_samples_alone(tmp_path, tiny_model_path, model, samples):
    args = RoCITConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, activation_checkpointing=False, packing=True,
        prefix_sharing=False, max_length=2048, per_device_train_batch_size=3, report_to="none", max_steps=1,
    )  # fmt: skip
    trainer_model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float32)
    trainer_model.config.use_cache = True
    trainer = RoCITTrainer(trainer_model, args=args, train_dataset=datasets.Dataset.from_list(ROWS),
                           profiles=PROFILES)  # fmt: skip
    assert trainer.model.config.use_cache is False
    assert len(trainer.train_dataset) == 1  # the three samples share one packed row
    batch = next(iter(trainer.get_train_dataloader()))
    assert "attention_mask" not in batch and batch["position_ids"].shape == batch["input_ids"].shape
    trainer.model.eval()
    with torch.no_grad():
        packed_loss = trainer.compute_loss(trainer.model, dict(batch))
    # the same loss computed sample by sample, each alone, on the assistant tokens only
    labels = {tuple(s): list(lab) for s, lab in zip(*_unpack(batch))}
    total, count = 0.0, 0
    for sample in samples:
        sample_labels = labels[tuple(sample)]
        log_probs = token_log_probs(model, sample)
        trained = torch.tensor([label != -100 for label in sample_labels[1:]])
        total += -log_probs[trained].sum().item()
        count += int(trained.sum())
    torch.testing.assert_close(packed_loss.item(), total / count, rtol=0, atol=1e-5)
    # a loader that added an attention mask to packed rows would be refused
    with pytest.raises(RuntimeError, match="would attend to each other"):
        trainer.compute_loss(trainer.model, {**batch, "attention_mask": torch.ones_like(batch["input_ids"])})


def _unpack(batch):
    """Split a padding-free packed batch back into (input_ids, labels) per sample from its position_ids."""
    ids, labels, positions = batch["input_ids"][0].tolist(), batch["labels"][0].tolist(), batch["position_ids"][0]
    starts = [i for i, p in enumerate(positions.tolist()) if p == 0] + [len(ids)]
    return [ids[a:b] for a, b in zip(starts, starts[1:])], [labels[a:b] for a, b in zip(starts, starts[1:])]


def test_guard_accepts_unpacked_padded_batches():
    batch = {"input_ids": torch.ones(2, 4, dtype=torch.long), "position_ids": torch.tensor([[0, 1, 2, 3], [0, 1, 0, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])}  # fmt: skip
    check_no_cross_sample_attention(batch)  # padding after a shorter sample is not a packed restart
