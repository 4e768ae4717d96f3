"""Shared prompts computed once: RoleGRPOTrainer's prefix-shared generation samples what TRL's samples, and its
prefix-shared log-probs, loss and gradients equal TRL's padded path (tiny model, prompts of two lengths, left padding,
completions of every length up to the maximum)."""

import copy

import datasets
import pytest
import torch

from rolellm.roles.profile import RoleProfile
from rolellm.training.grouped import grouped_fused_forward, plan_grouped_rows, shared_prompt_cache
from rolellm.training.grpo import RoleGRPOConfig, RoleGRPOTrainer


PROFILES = {"Po": RoleProfile("Po", "en", "A kung fu panda.", ["ar"])}
T = 8  # max_completion_length
LENGTHS = [8, 3, 5, 1, 8, 2, 7, 4]  # two completions reach the maximum, one has a single token


def prompts():
    system = "You are Po, the Dragon Warrior of the Valley of Peace, who loves dumplings. "
    return datasets.Dataset.from_list(
        [
            {"role": "Po", "prompt": [{"role": "system", "content": system}, {"role": "user", "content": "Who?"}]},
            {"role": "Po", "prompt": [{"role": "system", "content": system * 3}, {"role": "user", "content": "Eat?"}]},
        ]
    )


def config(tmp_path, **overrides):
    values = {
        "use_cpu": True, "max_steps": 2, "learning_rate": 1e-2, "num_generations": 4, "per_device_train_batch_size": 8,
        "max_completion_length": T, "beta": 0.0, "report_to": "none", "save_strategy": "no", "disable_tqdm": True,
        "logging_steps": 1, "activation_checkpointing": False, "seed": 0,
    }  # fmt: skip
    return RoleGRPOConfig(str(tmp_path / "out"), **{**values, **overrides})


@pytest.fixture(scope="module")
def trainer(tiny_model_path, tmp_path_factory):
    args = config(tmp_path_factory.mktemp("grouped"))
    return RoleGRPOTrainer(str(tiny_model_path), lambda completions, **_: [1.0] * len(completions), args, prompts(),
                           profiles=PROFILES)  # fmt: skip


def batch(trainer, seed=0):
    """TRL's layout: eight completions of the two prompts, interleaved, prompts left-padded, completions
    right-padded after their end (random tokens, padding with a real id to show it is never read)."""
    encoded = [trainer.encode_prompt(prompt) for prompt in prompts()["prompt"]]
    width = max(map(len, encoded))
    generator = torch.Generator().manual_seed(seed)
    ids, mask = [], []
    for i, n in enumerate(LENGTHS):
        prompt, completion = encoded[i % 2], torch.randint(5, 300, (T,), generator=generator).tolist()
        pad = width - len(prompt)
        ids.append([7] * pad + prompt + completion)
        mask.append([0] * pad + [1] * len(prompt) + [1] * n + [0] * (T - n))
    return torch.tensor(ids), torch.tensor(mask), width


def completion_part(mask, width):
    completion = mask.clone()
    completion[:, :width] = 0
    return completion


def per_token(trainer, prefix_sharing, *args, **kwargs):
    trainer.args.prefix_sharing = prefix_sharing
    try:
        return trainer._get_per_token_logps_and_entropies(trainer.model, *args, **kwargs)
    finally:
        trainer.args.prefix_sharing = True


def test_log_probs_and_entropies_equal_trls_path(trainer):
    assert trainer.args.prefix_sharing  # on by default
    ids, mask, width = batch(trainer)
    plan = plan_grouped_rows(ids, mask, completion_part(mask, width), pad_token_id=0)
    assert plan is not None and plan.batch["input_ids"].shape[0] == 2  # one row per prompt
    assert plan.tokens < plan.padded_tokens / 2  # each prompt once instead of four times
    with torch.no_grad():
        expected, expected_entropy, _ = per_token(trainer, False, ids, mask, T, compute_entropy=True)
        for batch_size in (None, 3):  # chunks of whole groups, as for the reference model's forward
            got, entropy, _ = per_token(trainer, True, ids, mask, T, batch_size=batch_size, compute_entropy=True)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(entropy, expected_entropy, atol=1e-5, rtol=0)
    completion_mask = mask[:, width:].bool()
    assert (got[~completion_mask] == 0).all() and (got[completion_mask] < 0).all()
    assert got.shape == (8, T) and completion_mask.sum(1).tolist() == LENGTHS


def loss_and_grads(trainer, inputs, prefix_sharing):
    trainer.args.prefix_sharing = prefix_sharing
    try:
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        trainer.model.zero_grad()
        return loss.detach(), grads
    finally:
        trainer.args.prefix_sharing = True


def test_loss_and_gradients_equal_trls_path(trainer):
    check_grpo_loss_equals_trls(trainer)


def check_grpo_loss_equals_trls(trainer):
    ids, mask, width = batch(trainer, seed=1)
    inputs = {
        "prompt_ids": ids[:, :width], "prompt_mask": mask[:, :width],
        "completion_ids": ids[:, width:], "completion_mask": mask[:, width:],
        "advantages": torch.tensor([1.0, -0.5, 0.25, -1.0, 0.5, -0.25, 0.75, 1.5]),
        "num_items_in_batch": mask[:, width:].sum(),
    }  # fmt: skip
    inputs = {name: value.to(trainer.accelerator.device) for name, value in inputs.items()}
    expected_loss, expected_grads = loss_and_grads(trainer, inputs, False)
    loss, grads = loss_and_grads(trainer, inputs, True)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=0)
    assert grads.keys() == expected_grads.keys() and len(grads) == len(list(trainer.model.parameters()))
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    assert any(grad.abs().max() > 1e-3 for grad in grads.values())


def test_a_layout_it_cannot_pack_exactly_runs_trls_path(trainer):
    """A completion mask with a hole (not TRL's layout, but possible from a custom rollout) is not packed: the
    trainer computes it TRL's way."""
    ids, mask, width = batch(trainer)
    mask[0, width + 2] = 0
    model = trainer.model
    with torch.no_grad():
        assert grouped_fused_forward(model, "sdpa", ids, mask, completion_part(mask, width), 0, torch.float32) is None
        got, _, _ = per_token(trainer, True, ids, mask, T)
        expected, _, _ = per_token(trainer, False, ids, mask, T)
    assert torch.equal(got, expected)


def generate_counting_tokens(trainer, prefix_sharing, prompt_ids):
    """`trainer`'s generation of `prompt_ids` from seed 0, and the tokens each forward of the model computed."""
    counted = []
    hook = trainer.model.get_input_embeddings().register_forward_pre_hook(
        lambda _, args: counted.append(args[0].shape)
    )
    trainer.args.prefix_sharing = prefix_sharing
    try:
        torch.manual_seed(0)
        completions, _ = trainer._generate_single_turn(prompt_ids, None, {}, 4)
    finally:
        trainer.args.prefix_sharing = True
        hook.remove()
    return completions, counted


def test_generation_computes_each_prompt_once_and_samples_what_trl_samples(trainer):
    """A batch of two prompts, four completions each (as TRL's sampler orders them), sampled from one seed: the
    same completions as TRL's `generate`, with each prompt's tokens but the last computed once instead of once per
    completion; then the last prompt token of every row and the new tokens, as TRL computes them."""
    encoded = [trainer.encode_prompt(prompt) for prompt in prompts()["prompt"]]
    prompt_ids = [encoded[0]] * 4 + [encoded[1]] * 4
    width = max(map(len, encoded))
    completions, counted = generate_counting_tokens(trainer, True, prompt_ids)
    expected, counted_by_trl = generate_counting_tokens(trainer, False, prompt_ids)
    assert completions == expected and any(len(c) > 1 for c in completions)
    assert counted_by_trl[0] == (8, width)  # TRL: every row's whole prompt
    assert counted[0] == (2, width - 1) and counted[1] == (8, 1)  # each prompt once, then each row's last token
    assert counted[2:] == counted_by_trl[1:]  # the new tokens, row by row


def test_a_batch_without_repeated_prompts_or_with_its_own_sampling_layout_generates_as_trl(trainer):
    ids = torch.tensor([[0, 5, 6], [4, 5, 6], [4, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [1, 1, 1]])
    assert shared_prompt_cache(trainer.model, ids[:2], mask[:2]) is None  # no prompt twice
    assert shared_prompt_cache(trainer.model, ids[:, :1], mask[:, :1]) is None  # one-token prompts
    config = copy.deepcopy(trainer.model.generation_config)
    config.num_return_sequences = 2
    assert shared_prompt_cache(trainer.model, ids, mask, config) is None
    cache = shared_prompt_cache(trainer.model, ids, mask)
    # two prompts computed, then one copy per row of the batch
    assert cache.get_seq_length() == 2 and [layer.keys.shape[0] for layer in cache.layers] == [3] * len(cache.layers)


def test_training_with_a_reference_model_ends_where_trls_path_ends(tiny_model_path, tmp_path):
    """Two GRPO steps from one seed with KL to a reference model (whose forward is grouped too): the same losses and
    the same parameters as with prefix_sharing=False."""

    def run(prefix_sharing):
        # plain SGD: Adam's first step moves every weight by about the learning rate whatever the size of its
        # gradient, so a gradient of 1e-9 against -1e-9 (float rounding) would show as a difference of 2 * lr
        args = config(tmp_path / str(prefix_sharing), beta=0.1, prefix_sharing=prefix_sharing, optim="sgd",
                      learning_rate=0.5)  # fmt: skip

        def reward(completions, **_):  # depends on the completion, so the advantages are not all zero
            return [float(len(str(c))) for c in completions]

        trainer = RoleGRPOTrainer(str(tiny_model_path), reward, args, prompts(), profiles=PROFILES)
        assert trainer.ref_model is not None
        trainer.train()
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        kl = [log["kl"] for log in trainer.state.log_history if "kl" in log]
        return losses, kl, {n: p.detach() for n, p in trainer.model.named_parameters()}

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # GRPO generates token by token: one thread is the fastest on a shared CPU
    try:
        losses, kl, params = run(True)
        expected_losses, expected_kl, expected_params = run(False)
    finally:
        torch.set_num_threads(threads)
    assert len(losses) == 2 and kl[-1] > 0  # the second step is off the reference: the KL term is live
    assert losses == pytest.approx(expected_losses, abs=1e-5) and kl == pytest.approx(expected_kl, abs=1e-5)
    for name, value in params.items():
        torch.testing.assert_close(value, expected_params[name], atol=1e-5, rtol=0, msg=name)


def test_right_padded_pairs_as_dpo_lays_them_out(trainer):
    """TRL's DPO layout: `[prompt][chosen]` rows then `[prompt][rejected]` rows, right-padded, one completion mask; a
    pair's two rows become one packed row, and the log-probs are those of the padded rows (the fused head's layout)."""
    encoded = [trainer.encode_prompt(prompt) for prompt in prompts()["prompt"]]
    generator = torch.Generator().manual_seed(2)
    sequences, completions = [], []
    for n, prompt in zip([5, 1, 8, 3], encoded * 2):  # chosen of pairs 0 and 1, then their rejected
        sequences.append(prompt + torch.randint(5, 300, (n,), generator=generator).tolist())
        completions.append([0] * len(prompt) + [1] * n)
    width = max(map(len, sequences))
    ids = torch.tensor([s + [7] * (width - len(s)) for s in sequences])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    completion_mask = torch.tensor([c + [0] * (width - len(c)) for c in completions])
    plan = plan_grouped_rows(ids, mask, completion_mask, pad_token_id=0)
    assert plan.batch["input_ids"].shape[0] == 2 and plan.tokens < plan.padded_tokens * 0.6
    model = trainer.model
    with torch.no_grad():
        labels = ids.masked_fill(completion_mask == 0, -100)
        expected = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        got = grouped_fused_forward(model, "sdpa", ids, mask, completion_mask, 0, torch.float32)
    assert set(got) == {"log_probs", "entropy", "label_mask"}  # what GRPOTrainer set the head up for
    assert got["log_probs"].shape == (4, width - 1)
    for name, value in got.items():
        torch.testing.assert_close(value, getattr(expected, name), atol=1e-5, rtol=0, msg=name)
    assert (got["log_probs"] != 0).sum() == got["label_mask"].sum() == 5 + 1 + 8 + 3


def test_eager_attention_gets_the_additive_mask(tiny_model_path, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, attn_implementation="eager")
    eager = RoleGRPOTrainer(model, lambda completions, **_: [1.0] * len(completions), config(tmp_path), prompts(),
                            processing_class=None, profiles=PROFILES)  # fmt: skip
    ids, mask, _ = batch(eager)
    with torch.no_grad():
        expected, _, _ = per_token(eager, False, ids, mask, T)
        got, _, _ = per_token(eager, True, ids, mask, T)
    assert eager._attention_backend(eager.model) == "eager"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------- DPO
@pytest.fixture(scope="module")
def dpo_trainer(tmp_path_factory):
    return build_dpo_trainer(tmp_path_factory, use_cpu=True)


def build_dpo_trainer(tmp_path_factory, use_cpu, peft_config=None):
    from rolellm.encoding.chat_template import set_role_chat_template
    from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer
    from rolellm.training.preference import RoleDPOConfig, RoleDPOTrainer

    tokenizer = train_tiny_tokenizer()
    set_role_chat_template(tokenizer)
    path = build_tiny_llama(tmp_path_factory.mktemp("chat-llama"), tokenizer=tokenizer)
    rows = [
        {"role": "Po", "question": q, "chosen": chosen, "rejected": rejected, "lang": "en"}
        for q, chosen, rejected in [
            ("Who are you?", "Skadoosh! The Dragon Warrior.", "A model."),
            ("What do you eat?", "Dumplings.", "I cannot say what I eat, being a language model."),
            ("Who trained you?", "Master Shifu, in the Jade Palace.", "Nobody."),
        ]
    ]
    args = RoleDPOConfig(
        str(tmp_path_factory.mktemp("dpo")), use_cpu=use_cpu, max_steps=1, per_device_train_batch_size=3, beta=0.1,
        report_to="none", save_strategy="no", disable_tqdm=True, activation_checkpointing=False, seed=0,
        loss_type=["sigmoid", "sft"], loss_weights=[1.0, 0.5],
    )  # fmt: skip
    return RoleDPOTrainer(
        str(path),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        profiles=PROFILES,
        peft_config=peft_config,
    )


def dpo_loss_and_grads(trainer, inputs, prefix_sharing):
    trainer.args.prefix_sharing = prefix_sharing
    try:
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, inputs, False)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        trainer.model.zero_grad()
        metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
        with torch.no_grad():
            ref = trainer.compute_ref_log_probs(trainer.ref_model or trainer.model, inputs)  # a LoRA run: no copy
        return loss.detach(), grads, metrics, ref
    finally:
        trainer.args.prefix_sharing = True


def test_dpo_pairs_share_the_prompt_with_trls_loss(dpo_trainer):
    """A batch of three pairs of different prompt lengths (right-padded, chosen rows then rejected rows): one packed
    row per pair, and the loss (sigmoid + SFT), its gradients, the logged metrics and the reference log-probs are
    those of TRL's padded rows."""
    check_dpo_equals_trls(dpo_trainer)


def test_dpo_with_lora_shares_the_prompt_too(tmp_path_factory, monkeypatch):
    """PEFT's forward passes its own keywords on as None (`inputs_embeds`, `return_dict`, ...): the pairs of a LoRA
    run still go through the grouped forward, with TRL's loss and gradients."""
    from peft import LoraConfig

    from rolellm.training import grouped

    packed = []
    original = grouped.grouped_fused_forward

    def counted(*args, **kwargs):
        fields = original(*args, **kwargs)
        packed.append(fields is not None)
        return fields

    monkeypatch.setattr(grouped, "grouped_fused_forward", counted)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    trainer = build_dpo_trainer(tmp_path_factory, use_cpu=True, peft_config=lora)
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    expected_loss, expected_grads, _, _ = dpo_loss_and_grads(trainer, inputs, False)
    assert not packed
    loss, grads, _, _ = dpo_loss_and_grads(trainer, inputs, True)
    assert packed and all(packed)  # the policy's forward and the reference's (the adapter switched off)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=0)
    assert grads.keys() == expected_grads.keys() and all("lora_" in name for name in grads)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def check_dpo_equals_trls(trainer):
    assert trainer.args.prefix_sharing  # on by default
    trl_forward = vars(trainer.model)["forward"]  # TRL's fused-head forward
    with trainer._prompts_once():
        assert vars(trainer.model)["forward"] is not trl_forward
        assert vars(trainer.ref_model)["forward"] is not vars(trainer.model)["forward"]
    assert vars(trainer.model)["forward"] is trl_forward
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    ids, mask, completion_mask = inputs["input_ids"], inputs["attention_mask"], inputs["completion_mask"]
    plan = plan_grouped_rows(ids, mask, completion_mask, pad_token_id=0)
    assert ids.shape[0] == 6 and plan.batch["input_ids"].shape[0] == 3  # a row per pair
    assert plan.tokens < mask.sum() * 0.7
    expected_loss, expected_grads, expected_metrics, expected_ref = dpo_loss_and_grads(trainer, inputs, False)
    loss, grads, metrics, ref = dpo_loss_and_grads(trainer, inputs, True)
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=0)
    assert grads.keys() == expected_grads.keys() and len(grads) == len(list(trainer.model.parameters()))
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    assert metrics.keys() == expected_metrics.keys() and metrics == pytest.approx(expected_metrics, abs=1e-4)
    torch.testing.assert_close(ref, expected_ref, atol=1e-5, rtol=0)
    assert vars(trainer.model)["forward"] is trl_forward


# ---------------------------------------------------------------------------------------------------- CUDA
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dpo_on_cuda_equals_trls_path(tmp_path_factory):
    """The DPO check on a GPU: the grouped forwards run with the attention the model was loaded with (SDPA with a
    dense mask), so TRL's own forwards beside them are untouched."""
    dpo = build_dpo_trainer(tmp_path_factory, use_cpu=False)
    assert dpo.accelerator.device.type == "cuda"
    check_dpo_equals_trls(dpo)
    assert dpo.model.config._attn_implementation == "sdpa"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_grpo_on_cuda_equals_trls_path(tiny_model_path, tmp_path_factory):
    """In float32: off the CPU, GRPOConfig turns bf16 on, and both paths then run under bf16 autocast, whose rounding
    alone moves the gradients by up to 0.5% of their norm (as on the CPU with bf16=True)."""
    grpo = RoleGRPOTrainer(str(tiny_model_path), lambda completions, **_: [1.0] * len(completions),
                           config(tmp_path_factory.mktemp("grouped-cuda"), use_cpu=False, bf16=False), prompts(),
                           profiles=PROFILES)  # fmt: skip
    assert grpo.accelerator.device.type == "cuda"
    check_grpo_loss_equals_trls(grpo)
