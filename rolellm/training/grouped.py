"""Shared prompts computed once: the per-token log-probs of completions that share a prompt, from one packed row.

A GRPO group's K completions (and a DPO pair's chosen and rejected answers) follow one prompt. TRL scores them as K
padded rows `[prompt][completion_k]`, so the prompt, often a long role system text, goes through the model K times.
`grouped_token_logps` lays each group out as one prefix-shared row (`rolellm.training.packing`):

```
[prompt minus its last token][last prompt token, completion 1][last prompt token, completion 2] ... padding
```

under the attention mask of `rolellm.training.attention.build_attention_mask` (each segment sees the shared prompt
and itself). The last prompt token is repeated in every segment because it predicts the completion's first token:
it sees the same tokens at the same position in every segment, so its hidden state is the one of the unpacked row.
The position ids are those of the padded layout (a left-padded prompt's tokens keep their column), so every token
sees what it sees in TRL's row, and the log-probs come back in TRL's `(rows, completion length)` layout, `0` after a
completion's end, as the model's fused LM head (`trl.trainer.utils.add_fused_lm_head`) computes them.

>>> import torch
>>> prompt_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1]])
>>> input_ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 9, 0], [4, 5, 6, 7, 0]])
>>> completion_mask = torch.tensor([[1, 1], [1, 0], [1, 0]])
>>> plan = plan_grouped_rows(input_ids, torch.cat([prompt_mask, completion_mask], 1), 2, pad_token_id=0)
>>> plan.batch["input_ids"].tolist()  # two prompts: one row each
[[5, 6, 7, 8, 6, 9], [4, 5, 6, 7, 0, 0]]
>>> plan.batch["position_ids"].tolist()  # the columns of the padded layout
[[1, 2, 3, 4, 2, 3], [0, 1, 2, 3, 0, 0]]
"""

import logging
from dataclasses import dataclass

import torch

from rolellm.training.attention import AttentionBackend, prepare_model_inputs
from rolellm.training.packing import IGNORE_INDEX, DataCollatorForPrefixSharing, pack_samples


logger = logging.getLogger(__name__)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """The rows of a batch grouped by identical prompts (the same tokens under the same mask), in first-seen order.

    >>> prompt_groups(torch.tensor([[1, 2], [3, 4], [1, 2]]), torch.ones(3, 2, dtype=torch.long))
    [[0, 2], [1]]
    """
    keys = prompt_ids.masked_fill(prompt_mask == 0, IGNORE_INDEX)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for row, key in enumerate(inverse.tolist()):
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _contiguous(mask: torch.Tensor, side: str) -> bool:
    """Whether each row of a 0/1 mask is one run of ones against its `side` (`"left"`: ones then zeros)."""
    columns = torch.arange(mask.shape[1], device=mask.device)
    counts = mask.sum(dim=1, keepdim=True)
    expected = columns < counts if side == "left" else columns >= mask.shape[1] - counts
    return bool((mask.bool() == expected).all())


@dataclass
class GroupedRows:
    """The packed batch of one call (`batch`: model inputs with segment ids) and where each completion token's
    log-prob is in it: `source` (row, position) of the shifted outputs, `target` (row, column) of TRL's layout."""

    batch: dict
    source: tuple[torch.Tensor, torch.Tensor]
    target: tuple[torch.Tensor, torch.Tensor]
    shape: tuple[int, int]
    tokens: int  # real tokens of the packed rows
    padded_tokens: int  # tokens of TRL's padded rows


def plan_grouped_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    pad_token_id: int,
    rows: list[int] | None = None,
) -> GroupedRows | None:
    """Lay out TRL's `[left-padded prompt][right-padded completion]` rows as one prefix-shared row per prompt.

    Args:
        input_ids, attention_mask (`torch.LongTensor` of shape `(N, P + T)`): prompts and completions, as TRL
            concatenates them.
        logits_to_keep (`int`): `T`, the completion columns.
        pad_token_id (`int`): the id that pads the packed rows.
        rows (`list[int]`, *optional*): only these rows of the batch (default: all).

    Returns:
        `GroupedRows`, or `None` when the layout is not the one the packing reproduces exactly: a prompt that is
        not one run of tokens against the completion, a completion with a hole in its mask, or an empty prompt.
    """
    rows = list(range(input_ids.shape[0])) if rows is None else rows
    ids, mask = input_ids[rows], attention_mask[rows]
    width = ids.shape[1] - logits_to_keep
    prompt_mask, completion_mask = mask[:, :width], mask[:, width:]
    if width < 1 or not _contiguous(prompt_mask, "right") or not _contiguous(completion_mask, "left"):
        return None
    prompt_lengths, completion_lengths = prompt_mask.sum(1).tolist(), completion_mask.sum(1).tolist()
    if min(prompt_lengths) < 1:
        return None
    ids_list = ids.tolist()
    packed, offsets = [], []
    source_rows, source_positions, target_rows, target_columns = [], [], [], []
    for b, group in enumerate(prompt_groups(ids[:, :width], prompt_mask)):
        n_prompt = prompt_lengths[group[0]]
        pad = width - n_prompt
        prompt = ids_list[group[0]][pad:width]
        samples = []
        start = n_prompt - 1  # the first segment starts after the shared prompt minus its last token
        for row in group:
            completion = ids_list[row][width : width + completion_lengths[row]]
            samples.append({"input_ids": prompt + completion, "labels": [IGNORE_INDEX] * n_prompt + completion})
            # completion token j sits at start + 1 + j; the shifted outputs hold its log-prob at start + j
            source_rows += [b] * len(completion)
            source_positions += range(start, start + len(completion))
            target_rows += [rows[row]] * len(completion)
            target_columns += range(len(completion))
            start += 1 + len(completion)
        packed.append(pack_samples([(n_prompt - 1, samples)]))
        offsets.append(pad)
    batch = DataCollatorForPrefixSharing(pad_token_id=pad_token_id)(packed)
    real = batch["segment_ids"] >= 0
    batch["position_ids"] += torch.tensor(offsets)[:, None] * real  # the columns of TRL's padded layout
    device = input_ids.device
    batch = {k: v.to(device) for k, v in batch.items()}
    as_tensor = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return GroupedRows(
        batch=batch,
        source=(as_tensor(source_rows), as_tensor(source_positions)),
        target=(as_tensor(target_rows), as_tensor(target_columns)),
        shape=(input_ids.shape[0], logits_to_keep),
        tokens=int(real.sum()),
        padded_tokens=ids.numel(),
    )


def chunk_groups(groups: list[list[int]], batch_size: int) -> list[list[int]]:
    """The rows of whole groups in chunks of about `batch_size` rows (a group is never split)."""
    chunks, current = [], []
    for group in groups:
        if current and len(current) + len(group) > batch_size:
            chunks.append(current)
            current = []
        current = current + group
    return chunks + ([current] if current else [])


def grouped_token_logps(
    model,
    backend: AttentionBackend,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    pad_token_id: int,
    dtype: torch.dtype,
    batch_size: int | None = None,
    compute_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """Per-token log-probs (and entropies) of the completions with each prompt computed once.

    `model` must carry TRL's fused LM head (`add_fused_lm_head`), as `GRPOTrainer` and `DPOTrainer` models do; it runs
    with the mask `backend` takes (`choose_attention_backend`). Rows are processed in chunks of whole groups of about
    `batch_size` rows. Returns tensors of shape `(N, logits_to_keep)` equal to what the model computes on TRL's padded
    rows, `0` where the completion mask is `0`, or `None` when the layout cannot be packed exactly (see
    `plan_grouped_rows`): the caller then runs its own path.
    """
    n = input_ids.shape[0]
    width = input_ids.shape[1] - logits_to_keep
    groups = prompt_groups(input_ids[:, :width], attention_mask[:, :width])
    chunks = chunk_groups(groups, batch_size or n)
    plans = [plan_grouped_rows(input_ids, attention_mask, logits_to_keep, pad_token_id, rows) for rows in chunks]
    if any(plan is None for plan in plans):
        return None
    logps = entropies = None
    for plan in plans:
        inputs = prepare_model_inputs(plan.batch, backend, dtype)
        outputs = model(**inputs, fused_lm_head=True)
        values = outputs.log_probs[plan.source]
        logps = (logps if logps is not None else values.new_zeros(plan.shape)).index_put(plan.target, values)
        if compute_entropy:
            values = outputs.entropy[plan.source]
            entropies = (entropies if entropies is not None else values.new_zeros(plan.shape)).index_put(
                plan.target, values
            )
    return logps, entropies
