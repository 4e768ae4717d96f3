"""Attention masks and the loss forward for prefix-shared packed rows.

`build_attention_mask` turns the per-token segment ids of `DataCollatorForPrefixSharing` into the mask the model's
attention backend takes, once per batch: a boolean `(batch, 1, L, L)` tensor for SDPA, an additive float tensor for
eager attention (eager adds the mask to the scores, so a boolean mask would be added as 0/1 and mask nothing), or a
FlexAttention `BlockMask` (GPU only: FlexAttention has no CPU backward in current torch builds).
`choose_attention_backend` picks one for a model and says which; `causal_lm_loss` runs the forward and the loss,
projecting only the positions that are trained through the output layer.

>>> import torch
>>> segment_ids = torch.tensor([[0, 0, 1, 1, 2]])  # a prefix of two tokens, then two samples
>>> prefix_segment_ids = torch.tensor([[0, 0, 0, 0, 0]])
>>> build_attention_mask(segment_ids, prefix_segment_ids)[0, 0].int().tolist()
[[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 1]]
"""

import logging
from typing import Literal

import torch
import torch.nn.functional as F


logger = logging.getLogger(__name__)

AttentionBackend = Literal["sdpa", "eager", "flex_attention"]


def build_attention_mask(
    segment_ids: torch.Tensor,
    prefix_segment_ids: torch.Tensor,
    attn_implementation: AttentionBackend = "sdpa",
    dtype: torch.dtype = torch.float32,
):
    """The attention mask of prefix-shared packed rows for one attention backend.

    Query `q` may attend key `k` when `k <= q` and `k` is in the segment of `q` or in the prefix segment `q` sees.

    Args:
        segment_ids (`torch.LongTensor` of shape `(batch, L)`): segment of each token (`-1` for padding).
        prefix_segment_ids (`torch.LongTensor` of shape `(batch, L)`): the prefix segment each token also sees.
        attn_implementation (`str`, *optional*, defaults to `"sdpa"`): `"sdpa"`, `"eager"` or `"flex_attention"`.
        dtype (`torch.dtype`, *optional*, defaults to `torch.float32`): dtype of the eager mask (the model's dtype).

    Returns:
        `torch.BoolTensor` of shape `(batch, 1, L, L)` for SDPA (`True` = attend, L*L bytes per row), a float tensor
        of that shape holding 0 or the dtype's minimum for eager, or a `BlockMask` for FlexAttention.
    """
    if attn_implementation == "flex_attention":
        return build_block_mask(segment_ids, prefix_segment_ids)
    length = segment_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    keys = segment_ids[:, None, None, :]  # (batch, 1, 1, L)
    mask = causal & ((segment_ids[:, None, :, None] == keys) | (prefix_segment_ids[:, None, :, None] == keys))
    if attn_implementation == "eager":
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
    return mask


def build_block_mask(segment_ids: torch.Tensor, prefix_segment_ids: torch.Tensor):
    """The same mask as a FlexAttention `BlockMask`: blocks with no allowed entry are skipped, no L*L tensor."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q, kv):
        key = segment_ids[b, kv]
        return (kv <= q) & ((segment_ids[b, q] == key) | (prefix_segment_ids[b, q] == key))

    batch, length = segment_ids.shape
    return create_block_mask(mask_mod, batch, None, length, length, device=segment_ids.device)


def choose_attention_backend(
    model, device: torch.device | str | None = None, switch_to_flex: bool = True
) -> AttentionBackend | None:
    """Choose how prefix-shared rows are masked for `model`, switching it to FlexAttention on GPU when it can.

    - On CUDA, a model that supports FlexAttention is switched to it (a block-sparse mask, no L*L tensor), unless
      `switch_to_flex=False` (a model that also generates keeps the attention it generates with).
    - Otherwise a model running SDPA or eager attention gets a dense 4D mask; a model set to FlexAttention on a CPU
      is switched to SDPA (FlexAttention has no CPU backward).
    - Any other backend (FlashAttention kernels, ...) takes no custom mask: `None`, the caller falls back.

    The choice is logged. `model` may be wrapped by PEFT.
    """
    from accelerate.utils import is_peft_model
    from transformers.utils import is_torch_flex_attn_available

    base = model.get_base_model() if is_peft_model(model) else model
    current = base.config._attn_implementation
    device = torch.device(device) if device is not None else next(base.parameters()).device
    chosen = current
    if (
        device.type == "cuda"
        and switch_to_flex
        and current in ("sdpa", "eager", "flex_attention")
        and base._supports_flex_attn
    ):
        chosen = "flex_attention" if is_torch_flex_attn_available() else current
    elif current == "flex_attention":
        chosen = "sdpa"
    if chosen not in ("sdpa", "eager", "flex_attention"):
        logger.warning(
            f"prefix sharing needs SDPA, eager or FlexAttention; the model uses {current!r}, which takes no custom "
            "attention mask"
        )
        return None
    if chosen != current:
        base.set_attn_implementation(chosen)
    how = {"sdpa": "dense boolean 4D mask", "eager": "dense additive float 4D mask", "flex_attention": "block mask"}
    switched = f", switched from {current}" if chosen != current else ""
    logger.info(f"prefix sharing: {chosen} attention with a {how[chosen]} on {device.type}{switched}")
    return chosen


def prepare_model_inputs(inputs: dict, attn_implementation: AttentionBackend, dtype: torch.dtype) -> dict:
    """Replace the segment ids of a collated batch by the attention mask; the other keys pass through."""
    inputs = dict(inputs)
    segment_ids, prefix_segment_ids = inputs.pop("segment_ids"), inputs.pop("prefix_segment_ids")
    inputs["attention_mask"] = build_attention_mask(segment_ids, prefix_segment_ids, attn_implementation, dtype)
    return inputs


def causal_lm_loss(model, inputs: dict, num_items_in_batch=None, fused_lm_head: bool = False):
    """Next-token loss summed over trained tokens and divided by their count, as TRL's `SFTTrainer` computes it.

    Only the positions whose next label is trained go through the output layer (`logits_to_keep` with a boolean
    mask), so prompts, shared prefixes and padding cost no vocabulary projection. With `fused_lm_head=True` (a model
    patched by TRL's `add_fused_lm_head`, best on GPU with Triton) TRL's chunked kernel is used instead.

    Args:
        model: a causal LM (optionally PEFT- or DDP-wrapped); the forward goes through the wrapper.
        inputs (`dict`): model inputs with `labels` (unshifted, `-100` where not trained).
        num_items_in_batch (`int` or `torch.Tensor`, *optional*): trained tokens of the whole (accumulated) batch;
            defaults to those of this batch.
        fused_lm_head (`bool`, *optional*, defaults to `False`): use TRL's fused LM head.

    Returns:
        `tuple[torch.Tensor, dict]`: the loss and, without gradient, `nll` (the loss of each trained token, in the
        order of `labels[:, 1:] != -100`), `num_trained`, `num_correct` (top-1 equals the label) and `entropy_sum`.
    """
    labels = inputs["labels"]
    if fused_lm_head:
        outputs = model(**inputs, use_cache=False, fused_lm_head=True)
        mask = outputs.label_mask
        stats = {
            "nll": -outputs.log_probs[mask],
            "num_trained": mask.sum(),
            "num_correct": outputs.is_top1.sum(),
            "entropy_sum": outputs.entropy.sum(),
        }
        denominator = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return -outputs.log_probs.sum() / denominator, {k: v.detach() for k, v in stats.items()}
    keep = torch.zeros_like(labels, dtype=torch.bool)
    keep[:, :-1] = labels[:, 1:] != -100
    targets = labels[:, 1:][keep[:, :-1]]  # (N,)
    model_inputs = {k: v for k, v in inputs.items() if k != "labels"}
    logits = model(**model_inputs, use_cache=False, logits_to_keep=keep).logits  # (N, vocab)
    log_probs = F.log_softmax(logits.float(), dim=-1)
    denominator = max(targets.numel(), 1) if num_items_in_batch is None else num_items_in_batch
    nll = F.nll_loss(log_probs, targets, reduction="none")
    loss = nll.sum() / denominator
    with torch.no_grad():
        stats = {
            "nll": nll.detach(),
            "num_trained": torch.tensor(targets.numel(), device=targets.device),
            "num_correct": (log_probs.argmax(-1) == targets).sum(),
            "entropy_sum": -(log_probs.exp() * log_probs).sum(),
        }
    return loss, stats


def resolve_prefix_sharing(model, args) -> tuple[AttentionBackend | None, bool]:
    """The attention backend prefix sharing uses for `model` under `args` (`None` when it is off or cannot run),
    and whether TRL's best-fit packing must stand in for it.

    When `args.prefix_sharing` is set but the model's attention takes no custom mask, TRL's best-fit packing
    (`packing=True`) is used instead, with a warning; `args` itself is left as it is.
    """
    if not args.prefix_sharing:
        return None, False
    backend = choose_attention_backend(model, args.device)
    if backend is None:
        logger.warning(
            "prefix_sharing=True cannot run with this attention backend: falling back to packing=True (TRL)"
        )
    return backend, backend is None


def _use_fused_lm_head(device: torch.device) -> bool:
    """TRL's chunked LM head scores only the trained positions on Triton devices; elsewhere it scores all of them."""
    import importlib.util

    return device.type in ("cuda", "xpu") and importlib.util.find_spec("triton") is not None


def log_subset_losses(trainer, mode: str, nll: torch.Tensor, subset_ids: torch.Tensor) -> None:
    """Log the mean loss of the `general` and `role_specific` tokens (`loss_general`, ...) over all processes.

    `nll` and `subset_ids` hold the loss and the subset id (`rolellm.training.data.SUBSET_IDS`) of each trained
    token, in the same order.
    """
    from rolellm.training.data import SUBSET_IDS

    gather = trainer.accelerator.gather_for_metrics
    for name, index in SUBSET_IDS.items():
        selected = subset_ids == index
        count = gather(selected.sum()).sum()
        if count > 0:
            total = gather(nll[selected].sum().float()).sum()
            trainer.record_metric(mode, f"loss_{name}", (total / count).item())


def compute_prefix_shared_loss(
    trainer, model, inputs, backend: AttentionBackend, return_outputs=False, num_items_in_batch=None
):
    """`RoCITTrainer.compute_loss` for prefix-shared batches: the mask, the loss, and TRL's metrics.

    Logs what `trl.SFTTrainer` logs (`entropy`, `mean_token_accuracy`, `num_tokens` counting the real tokens of the
    rows, not mask entries) and, with `log_subset_losses`, the loss of `general` and `role_specific` tokens.
    """
    mode = "train" if trainer.model.training else "eval"
    inputs = dict(inputs)
    subset_ids = inputs.pop("subset_ids", None)
    real_tokens = (inputs["segment_ids"] >= 0).sum()
    dtype = trainer.accelerator.unwrap_model(model).dtype
    inputs = prepare_model_inputs(inputs, backend, dtype)
    fused = _use_fused_lm_head(inputs["input_ids"].device)
    loss, stats = causal_lm_loss(model, inputs, num_items_in_batch, fused_lm_head=fused)
    # As in `SFTTrainer`: `num_items_in_batch` counts every rank's tokens and DDP averages the gradients.
    if trainer.args.average_tokens_across_devices and num_items_in_batch is not None:
        loss = loss * (trainer.accelerator.num_processes // trainer.get_tp_size())

    gather = trainer.accelerator.gather_for_metrics
    num_valid = gather(stats["num_trained"]).sum()
    if num_valid > 0:
        trainer.record_metric(mode, "entropy", (gather(stats["entropy_sum"]).sum() / num_valid).item())
        trainer.record_metric(mode, "mean_token_accuracy", (gather(stats["num_correct"]).sum() / num_valid).item())
    if mode == "train":
        trainer.count_train_tokens(gather(real_tokens).sum().item())
    trainer.record_metric(mode, "num_tokens", trainer.num_train_tokens, cumulative=True)
    if subset_ids is not None and trainer.args.log_subset_losses:
        targets = subset_ids[:, 1:][inputs["labels"][:, 1:] != -100].to(stats["nll"].device)
        log_subset_losses(trainer, mode, stats["nll"], targets)
    if return_outputs:  # the full logits, for `compute_metrics`: one more forward, as in `SFTTrainer`
        with torch.no_grad():
            return loss, model(**{k: v for k, v in inputs.items() if k != "labels"}, use_cache=False)
    return loss
