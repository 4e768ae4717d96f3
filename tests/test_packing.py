"""Prefix-shared role packing: every sample in a packed row sees and trains exactly what it would alone."""

import json

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

from rolellm.training.attention import build_attention_mask, causal_lm_loss, choose_attention_backend
from rolellm.training.packing import (
    DataCollatorForPrefixSharing,
    pack_samples,
    pack_with_shared_prefix,
    plan_rows,
    shared_prefix_length,
)


# A ChatML-style template with generation markers, so labels cover exactly the assistant turns.
TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}<|im_start|>assistant\n{% generation %}"
    "{{ m['content'] }}<|im_end|>{% endgeneration %}\n{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endif %}{% endfor %}"
)

ENGLISH = {
    "Jack Sparrow": [
        ("Why is the rum gone?", "Arr, matey, the rum is always gone when you need it most. Savvy?"),
        ("Write a short poem about the sea.", "The sea is a cruel mistress, and I am her most devoted captain."),
        ("Give three tips for staying healthy.", "Drink rum, avoid the navy, and keep your compass close."),
    ],
    "John Keating": [
        ("What is poetry for?", "Carpe diem, boys. Seize the day and make your lives extraordinary."),
        ("Summarize the plot of the story.", "A good teacher opens the door; you must enter by yourself."),
    ],
}


def tokenize(tokenizer, system, question, answer, role):
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer},
    ]
    out = tokenizer.apply_chat_template(
        messages, chat_template=TEMPLATE, return_dict=True, return_assistant_tokens_mask=True
    )
    labels = [token if bit else -100 for token, bit in zip(out["input_ids"], out["assistant_masks"])]
    return {"input_ids": out["input_ids"], "labels": labels, "role": role}


@pytest.fixture(scope="module")
def chinese_samples(rolebench_dir, tiny_tokenizer):
    """Real Chinese RoleBench rows (general and role-specific, three roles) tokenized with the role instruction."""
    from rolellm.data.readers import read_rolebench_jsonl

    root = rolebench_dir / "rolebench-zh"
    descriptions = json.loads((rolebench_dir / "profiles-zh" / "desc.json").read_text(encoding="utf-8"))
    rows = read_rolebench_jsonl(root / "general" / "train.jsonl", "general", "zh")
    rows += read_rolebench_jsonl(root / "role_specific" / "train.jsonl", "role_specific", "zh")
    picked, seen = [], {}
    for row in rows:
        key = (row["role"], row["subset"])
        if row["role"] in ("孙悟空", "李白", "华妃") and seen.get(key, 0) < 2:
            seen[key] = seen.get(key, 0) + 1
            picked.append(row)
    system = "你是{role}，你的性格和背景是“{desc}”。现在请你回答我的一些问题，以准确展现你的人格特征！"
    return [
        tokenize(
            tiny_tokenizer,
            system.format(role=row["role"], desc=descriptions[row["role"]]),
            row["question"],
            row["generated"][0],
            row["role"],
        )
        for row in picked
    ]


@pytest.fixture(scope="module")
def english_samples(tiny_tokenizer):
    system = "You are {role}, your description is: a character of the screen. Now please answer some questions."
    return [
        tokenize(tiny_tokenizer, system.format(role=role), question, answer, role)
        for role, pairs in ENGLISH.items()
        for question, answer in pairs
    ]


def trained_log_probs(model, batch):
    """Log-probabilities of every trained label of `batch`, in row order."""
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}, use_cache=False).logits.float()
    log_probs = F.log_softmax(logits[:, :-1], dim=-1)
    targets = batch["labels"][:, 1:]
    mask = targets != -100
    return log_probs[mask].gather(-1, targets[mask][:, None])[:, 0]


def alone_log_probs(model, samples):
    return torch.cat(
        [
            trained_log_probs(
                model, {"input_ids": torch.tensor([s["input_ids"]]), "labels": torch.tensor([s["labels"]])}
            )
            for s in samples
        ]
    )


def packed_batch(samples, max_length, attn_implementation, pad_token_id):
    """Pack `samples` by role and collate every row into one batch; returns the batch and the samples in row order."""
    from datasets import Dataset

    dataset = Dataset.from_list([{**s, "index": i} for i, s in enumerate(samples)])
    rows, stats = pack_with_shared_prefix(dataset, max_length, sample_columns=("index",))
    order = [samples[i] for row in rows for i in row["index"]]
    batch = DataCollatorForPrefixSharing(pad_token_id=pad_token_id)(list(rows))
    segment_ids, prefix_segment_ids = batch.pop("segment_ids"), batch.pop("prefix_segment_ids")
    batch["attention_mask"] = build_attention_mask(segment_ids, prefix_segment_ids, attn_implementation)
    return batch, order, stats


def test_shared_prefix_length_follows_tokens_and_labels():
    a = {"input_ids": [1, 2, 3, 4, 9], "labels": [-100, -100, -100, -100, 9]}
    b = {"input_ids": [1, 2, 3, 5, 8, 9], "labels": [-100, -100, -100, -100, -100, 9]}
    assert shared_prefix_length([a, b]) == 3  # the tokens differ at index 3
    # a trained label at index 3 would be predicted from the prefix end: only 2 tokens may be shared then
    assert shared_prefix_length([a, {**b, "labels": [-100, -100, -100, 5, 8, 9]}]) == 2
    assert shared_prefix_length([{"input_ids": [1, 2, 3], "labels": [1, 2, 3]}]) == 0  # full-sequence loss
    assert shared_prefix_length([a]) == 3  # alone: up to the token before the first trained one


def test_plan_rows_places_every_sample_once_within_max_length():
    groups = {"a": (50, [30, 20, 20, 10, 5]), "b": (40, [60, 10]), "c": (10, [5])}
    rows = plan_rows(groups, max_length=128)
    placed = sorted((key, i) for row in rows for key, ids in row for i in ids)
    assert placed == sorted((key, i) for key, (_, lengths) in groups.items() for i in range(len(lengths)))
    sizes = [sum(groups[key][0] + sum(groups[key][1][i] for i in ids) for key, ids in row) for row in rows]
    assert max(sizes) <= 128
    assert len(rows) == 3  # 85 + 10 + 40 + 60 + 10 + 15 tokens over 3 rows: `c` shares a row with another role
    assert any(len(row) > 1 for row in rows)
    with pytest.raises(ValueError, match="more than max_length=64"):
        plan_rows({"a": (50, [30])}, max_length=64)


def test_plan_rows_on_random_groups_is_complete_and_tight():
    import random

    rng = random.Random(0)
    groups = {
        f"role{g}": (rng.randint(60, 200), [rng.randint(20, 300) for _ in range(rng.randint(1, 60))])
        for g in range(12)
    }
    rows = plan_rows(groups, max_length=1024)
    placed = sorted((key, i) for row in rows for key, ids in row for i in ids)
    assert placed == sorted((key, i) for key, (_, lengths) in groups.items() for i in range(len(lengths)))
    sizes = [sum(groups[key][0] + sum(groups[key][1][i] for i in ids) for key, ids in row) for row in rows]
    assert max(sizes) <= 1024
    # every role's prefix appears once per row it is in, and the rows are nearly full
    assert all(len({key for key, _ in row}) == len(row) for row in rows)
    assert sum(sizes) / (len(rows) * 1024) > 0.95


def test_collator_pads_and_restarts_positions():
    row = pack_samples(
        [
            (
                2,
                [
                    {"input_ids": [1, 2, 7], "labels": [-100, -100, 7]},
                    {"input_ids": [1, 2, 8, 9], "labels": [-100, -100, 8, 9]},
                ],
            ),
            (1, [{"input_ids": [3, 4], "labels": [-100, 4]}]),
        ]
    )
    assert row["input_ids"] == [1, 2, 7, 8, 9, 3, 4]
    assert row["labels"] == [-100, -100, -100, -100, 9, -100, -100]  # the token after each boundary is not trained
    short = pack_samples([(1, [{"input_ids": [5, 6], "labels": [-100, 6]}])])
    batch = DataCollatorForPrefixSharing(pad_token_id=0, pad_to_multiple_of=8)([row, short])
    assert batch["input_ids"].tolist() == [[1, 2, 7, 8, 9, 3, 4, 0], [5, 6, 0, 0, 0, 0, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 2, 3, 0, 1, 0], [0, 1, 0, 0, 0, 0, 0, 0]]
    assert batch["segment_ids"].tolist() == [[0, 0, 1, 2, 2, 3, 4, -1], [0, 1, -1, -1, -1, -1, -1, -1]]
    assert batch["prefix_segment_ids"].tolist() == [[0, 0, 0, 0, 0, 3, 3, -1], [0, 0, -1, -1, -1, -1, -1, -1]]
    mask = build_attention_mask(batch["segment_ids"], batch["prefix_segment_ids"])
    assert mask.shape == (2, 1, 8, 8) and mask.dtype == torch.bool
    assert mask[0, 0, 4].tolist() == [True, True, False, True, True, False, False, False]  # prefix + own sample
    assert mask[0, 0, 6].tolist() == [False] * 5 + [True, True, False]  # the second role's group sees only itself
    assert not mask[:, 0, :, 7][0, :7].any() and mask[0, 0, 7, 7]  # no real token sees padding
    eager = build_attention_mask(batch["segment_ids"], batch["prefix_segment_ids"], "eager", torch.float32)
    assert eager.dtype == torch.float32 and torch.equal(eager == 0, mask)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("data", ["chinese_samples", "english_samples"])
def test_packed_log_probs_equal_alone(request, tiny_model_path, tiny_tokenizer, attn_implementation, data):
    samples = request.getfixturevalue(data)
    model = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation=attn_implementation).eval()
    batch, order, stats = packed_batch(samples, 1024, attn_implementation, tiny_tokenizer.pad_token_id)
    assert stats.num_samples == len(samples) and stats.row_tokens < stats.sample_tokens
    assert stats.num_groups >= len({s["role"] for s in samples})
    with torch.no_grad():
        packed, alone = trained_log_probs(model, batch), alone_log_probs(model, order)
    assert packed.shape == alone.shape and packed.numel() == sum(
        sum(t != -100 for t in s["labels"][1:]) for s in samples
    )
    assert (packed - alone).abs().max().item() < 1e-5


def test_full_sequence_loss_packs_without_sharing_and_stays_exact(tiny_model_path, tiny_tokenizer, english_samples):
    """Every token trained (`assistant_only_loss=False`): nothing is shared, the rows are block-diagonal packing."""
    samples = [{**s, "labels": list(s["input_ids"])} for s in english_samples]
    model = LlamaForCausalLM.from_pretrained(tiny_model_path).eval()
    batch, order, stats = packed_batch(samples, 1024, "sdpa", tiny_tokenizer.pad_token_id)
    assert stats.row_tokens == stats.sample_tokens  # no prefix shared
    with torch.no_grad():
        packed, alone = trained_log_probs(model, batch), alone_log_probs(model, order)
    assert packed.shape == alone.shape and (packed - alone).abs().max().item() < 1e-5


def test_eager_attention_needs_the_additive_mask(tiny_model_path, tiny_tokenizer, english_samples):
    """Eager attention adds a boolean mask to the scores as 0/1: the samples would see each other."""
    model = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="eager").eval()
    batch, order, _ = packed_batch(english_samples, 1024, "sdpa", tiny_tokenizer.pad_token_id)
    with torch.no_grad():
        wrong, alone = trained_log_probs(model, batch), alone_log_probs(model, order)
    assert (wrong - alone).abs().max().item() > 1e-3


@pytest.mark.slow
@pytest.mark.exhaustive  # FlexAttention compiles its kernel first (10 s of CPU); the same rows with sdpa are above
def test_flex_block_mask_forward_equals_alone(tiny_model_path, tiny_tokenizer, english_samples):
    """The FlexAttention block mask encodes the same mask (forward only: no FlexAttention backward on CPU)."""
    model = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="flex_attention").eval()
    batch, order, _ = packed_batch(english_samples, 1024, "flex_attention", tiny_tokenizer.pad_token_id)
    with torch.no_grad():
        packed, alone = trained_log_probs(model, batch), alone_log_probs(model, order)
    assert (packed - alone).abs().max().item() < 1e-5


def test_packed_loss_and_gradients_equal_alone(tiny_model_path, tiny_tokenizer, chinese_samples):
    model = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    batch, order, _ = packed_batch(chinese_samples, 1024, "sdpa", tiny_tokenizer.pad_token_id)
    loss, stats = causal_lm_loss(model, batch)
    loss.backward()
    packed_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    total = sum(sum(t != -100 for t in s["labels"][1:]) for s in order)
    alone = sum(-alone_log_probs(model, [s]).sum() for s in order) / total  # TRL: sum over tokens / trained tokens
    alone.backward()
    assert stats["num_trained"].item() == total
    assert loss.item() == pytest.approx(alone.item(), abs=1e-5)
    for name, p in model.named_parameters():
        torch.testing.assert_close(packed_grads[name], p.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_loss_equals_trl_fused_head(tiny_model_path, tiny_tokenizer, english_samples):
    """The compact loss path gives the value of TRL's fused LM head on the same batch, and the same statistics."""
    from trl.trainer.utils import add_fused_lm_head

    model = LlamaForCausalLM.from_pretrained(tiny_model_path).eval()
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    batch, _, _ = packed_batch(english_samples, 1024, "sdpa", tiny_tokenizer.pad_token_id)
    with torch.no_grad():
        loss, stats = causal_lm_loss(model, batch)
        fused_loss, fused_stats = causal_lm_loss(model, batch, fused_lm_head=True)
    assert loss.item() == pytest.approx(fused_loss.item(), abs=1e-5)
    assert stats["num_trained"].item() == fused_stats["num_trained"].item()
    assert stats["num_correct"].item() == fused_stats["num_correct"].item()
    assert stats["entropy_sum"].item() == pytest.approx(fused_stats["entropy_sum"].item(), rel=1e-4)


def test_choose_attention_backend_on_cpu(tiny_model_path, caplog):
    model = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    with caplog.at_level("INFO", logger="rolellm.training.attention"):
        assert choose_attention_backend(model, "cpu") == "sdpa"
    assert "prefix sharing: sdpa attention with a dense boolean 4D mask on cpu" in caplog.text
    eager = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="eager")
    assert choose_attention_backend(eager, "cpu") == "eager"
    flex = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="flex_attention")
    assert choose_attention_backend(flex, "cpu") == "sdpa"  # no FlexAttention backward on CPU
    assert flex.config._attn_implementation == "sdpa"


def test_choose_attention_backend_prefers_flex_attention_for_cuda(tiny_model_path, caplog):
    """The choice for a CUDA device (the model itself may still be on the CPU when the trainer decides)."""
    model = LlamaForCausalLM.from_pretrained(tiny_model_path, attn_implementation="sdpa")
    with caplog.at_level("INFO", logger="rolellm.training.attention"):
        assert choose_attention_backend(model, "cuda") == "flex_attention"
    assert model.config._attn_implementation == "flex_attention"
    assert "flex_attention attention with a block mask on cuda, switched from sdpa" in caplog.text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_flex_attention_on_gpu_gives_the_gradients_of_samples_alone(tiny_model_path, tiny_tokenizer, english_samples):
    from datasets import Dataset

    model = LlamaForCausalLM.from_pretrained(tiny_model_path).cuda()
    assert choose_attention_backend(model, "cuda") == "flex_attention"
    rows, _ = pack_with_shared_prefix(Dataset.from_list(english_samples), 1024)
    batch = DataCollatorForPrefixSharing(tiny_tokenizer.pad_token_id, pad_to_multiple_of=128)(list(rows))
    batch = {k: v.cuda() for k, v in batch.items()}
    batch["attention_mask"] = build_attention_mask(
        batch.pop("segment_ids"), batch.pop("prefix_segment_ids"), "flex_attention"
    )
    loss, stats = causal_lm_loss(model, batch)
    loss.backward()
    packed = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad()
    total = stats["num_trained"].item()
    model.set_attn_implementation("sdpa")  # each sample alone, with the model's own causal mask
    alone = sum(
        -trained_log_probs(
            model, {"input_ids": torch.tensor([s["input_ids"]]).cuda(), "labels": torch.tensor([s["labels"]]).cuda()}
        ).sum()
        for s in english_samples
    )
    (alone / total).backward()
    assert loss.item() == pytest.approx((alone / total).item(), abs=1e-4)
    for name, p in model.named_parameters():
        torch.testing.assert_close(packed[name], p.grad, atol=1e-5, rtol=1e-3, msg=name)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_attention_on_gpu_follows_batches_of_changing_length(
    tiny_model_path, tiny_tokenizer, english_samples, dtype
):
    """Training batches change length from step to step: the block-mask path gives the dense mask's loss each time."""
    from datasets import Dataset

    model = LlamaForCausalLM.from_pretrained(tiny_model_path, dtype=dtype).cuda()
    assert choose_attention_backend(model, "cuda") == "flex_attention"
    for max_length in (128, 384, 1024):
        rows, _ = pack_with_shared_prefix(Dataset.from_list(english_samples), max_length)
        batch = DataCollatorForPrefixSharing(tiny_tokenizer.pad_token_id, pad_to_multiple_of=128)(list(rows)[:2])
        batch = {k: v.cuda() for k, v in batch.items()}
        segments = batch.pop("segment_ids"), batch.pop("prefix_segment_ids")
        model.set_attn_implementation("flex_attention")
        flex_loss, _ = causal_lm_loss(
            model, {**batch, "attention_mask": build_attention_mask(*segments, "flex_attention")}
        )
        flex_loss.backward()
        model.set_attn_implementation("sdpa")
        with torch.no_grad():
            dense = build_attention_mask(*segments, "sdpa")
            dense_loss, _ = causal_lm_loss(model, {**batch, "attention_mask": dense})
        assert torch.isfinite(flex_loss), max_length
        tolerance = 1e-4 if dtype == torch.float32 else 2e-2
        assert flex_loss.item() == pytest.approx(dense_loss.item(), abs=tolerance), (
            max_length,
            batch["input_ids"].shape,
        )
        model.zero_grad()


def test_packing_and_its_collator_leave_their_inputs_as_they_were():
    import copy

    import numpy as np

    from rolellm.training.packing import DataCollatorForPrefixSharing, pack_samples

    samples = [
        {"input_ids": np.array([1, 2, 3, 4]), "labels": np.array([-100, -100, 3, 4]), "subset_ids": [0, 0, 0, 0]},
        {"input_ids": [1, 2, 5], "labels": [-100, -100, 5], "subset_ids": [1, 1, 1]},
    ]
    before = copy.deepcopy(samples)
    row = pack_samples([(2, samples)], token_columns=["subset_ids"])
    assert all(np.array_equal(a[key], b[key]) for a, b in zip(samples, before) for key in a)
    assert row["input_ids"] == [1, 2, 3, 4, 5] and row["labels"] == [-100, -100, -100, 4, -100]
    rows = [row, copy.deepcopy(row)]
    rows_before = copy.deepcopy(rows)
    batch = DataCollatorForPrefixSharing(pad_token_id=0, pad_to_multiple_of=8, token_columns=("subset_ids",))(rows)
    assert rows == rows_before and batch["input_ids"].shape == (2, 8)
