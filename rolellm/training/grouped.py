"""Shared prompts computed once: the per-token log-probs of completions that share a prompt, from one packed row.

A GRPO group's K completions and a DPO pair's chosen and rejected answers follow one prompt. TRL scores them as
padded rows `[prompt][completion]`, so the prompt, often a long role system text, goes through the model once per
completion. `grouped_fused_forward` lays the completions of each prompt out as one prefix-shared row
(`rolellm.training.packing`):

```
[prompt minus its last token][last prompt token, completion 1][last prompt token, completion 2] ... padding
```

under the attention mask of `rolellm.training.attention.build_attention_mask` (each segment sees the shared prompt
and itself). The last prompt token is repeated in every segment because it predicts the completion's first token:
it sees the same tokens at the same position in every segment, so its hidden state is the one of the unpacked row.
Every token keeps the position of its column in TRL's padded row (TRL's forward passes no position ids), so each
token sees what it sees there, and the log-probs come back in the layout of the model's fused LM head
(`trl.trainer.utils.add_fused_lm_head`) on the padded rows: `(rows, columns - 1)`, the log-prob of the token of
column `t` at `t - 1`, `0` where no completion token is.

>>> import torch
>>> input_ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 9, 0], [4, 5, 6, 7, 0]])  # TRL's GRPO layout
>>> attention_mask = torch.tensor([[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [1, 1, 1, 1, 0]])
>>> completion_mask = attention_mask * torch.tensor([0, 0, 0, 1, 1])
>>> plan = plan_grouped_rows(input_ids, attention_mask, completion_mask, pad_token_id=0)
>>> plan.batch["input_ids"].tolist()  # two prompts: one row each
[[5, 6, 7, 8, 6, 9], [4, 5, 6, 7, 0, 0]]
>>> plan.batch["position_ids"].tolist()  # the columns of the padded rows
[[1, 2, 3, 4, 2, 3], [0, 1, 2, 3, 0, 0]]
"""

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from rolellm.clients.prefill import decoder_to_prefill
from rolellm.training.attention import AttentionBackend, prepare_model_inputs
from rolellm.training.packing import IGNORE_INDEX, DataCollatorForPrefixSharing, pack_samples


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """The rows of a batch grouped by identical prompts (the same tokens in the same columns), in first-seen order.

    >>> prompt_groups(torch.tensor([[1, 2], [3, 4], [1, 2]]), torch.ones(3, 2, dtype=torch.long))
    [[0, 2], [1]]
    """
    keys = prompt_ids.masked_fill(prompt_mask == 0, IGNORE_INDEX)
    _, inverse = torch.unique(keys, dim=0, return_inverse=True)
    groups: dict[int, list[int]] = {}
    for row, key in enumerate(inverse.tolist()):
        groups.setdefault(key, []).append(row)
    return list(groups.values())


@dataclass
class GroupedRows:
    """The packed batch of one call (`batch`: model inputs with segment ids) and where each completion token's
    log-prob is in it: `source` (row, position) of the packed outputs, `target` (row, position) of the padded ones."""

    batch: dict
    source: tuple[torch.Tensor, torch.Tensor]
    target: tuple[torch.Tensor, torch.Tensor]
    shape: tuple[int, int]
    tokens: int  # real tokens of the packed rows
    padded_tokens: int  # tokens of the padded rows


def _spans(attention_mask: torch.Tensor, completion_mask: torch.Tensor):
    """Per row (start, completion start, end) of its attended columns, or `None` unless every row is one run of
    attended columns ending in one run of completion columns after at least one prompt column."""
    columns = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    attended, completion = attention_mask.bool(), completion_mask.bool() & attention_mask.bool()
    n_attended, n_completion = attended.sum(1), completion.sum(1)
    start = torch.where(attended.any(1), attended.int().argmax(1), 0)
    end = start + n_attended
    middle = end - n_completion
    run = (columns >= start[:, None]) & (columns < end[:, None])
    tail = (columns >= middle[:, None]) & (columns < end[:, None])
    if not (torch.equal(run, attended) and torch.equal(tail, completion)) or bool((middle <= start).any()):
        return None
    return list(zip(start.tolist(), middle.tolist(), end.tolist()))


def _groups(input_ids: torch.Tensor, spans: list[tuple[int, int, int]]) -> list[list[int]]:
    """Rows share a prompt when its tokens, and so its columns (positions), are the same."""
    prompt_columns = torch.zeros_like(input_ids)
    for i, (start, middle, _) in enumerate(spans):
        prompt_columns[i, start:middle] = 1
    return prompt_groups(input_ids, prompt_columns)


def plan_grouped_rows(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    pad_token_id: int,
    rows: list[int] | None = None,
) -> GroupedRows | None:
    """Lay out padded `[prompt][completion]` rows as one prefix-shared row per prompt.

    Args:
        input_ids, attention_mask (`torch.LongTensor` of shape `(N, L)`): the padded rows (left- or right-padded).
        completion_mask (`torch.LongTensor` of shape `(N, L)`): `1` on the completion's columns.
        pad_token_id (`int`): the id that pads the packed rows.
        rows (`list[int]`, *optional*): only these rows of the batch (default: all).

    Returns:
        `GroupedRows`, or `None` when a row is not a layout the packing reproduces exactly: attended columns that are
        not one run, completion columns that are not one run at its end, or no prompt column.
    """
    rows = list(range(input_ids.shape[0])) if rows is None else rows
    ids, mask = input_ids[rows], attention_mask[rows]
    spans = _spans(mask, completion_mask[rows])
    if spans is None:
        return None
    ids_list = ids.tolist()
    packed, offsets = [], []
    source_rows, source_positions, target_rows, target_positions = [], [], [], []
    for b, group in enumerate(_groups(ids, spans)):
        start, middle, _ = spans[group[0]]
        n_prompt = middle - start
        prompt = ids_list[group[0]][start:middle]
        samples = []
        position = n_prompt - 1  # the first segment starts after the shared prompt minus its last token
        for i in group:
            _, _, end = spans[i]
            completion = ids_list[i][middle:end]
            samples.append({"input_ids": prompt + completion, "labels": [IGNORE_INDEX] * n_prompt + completion})
            # completion token j sits at position + 1 + j; the shifted outputs hold its log-prob at position + j,
            # and the padded rows' at (column of the token) - 1 = middle + j - 1
            source_rows += [b] * len(completion)
            source_positions += range(position, position + len(completion))
            target_rows += [rows[i]] * len(completion)
            target_positions += range(middle - 1, end - 1)
            position += 1 + len(completion)
        packed.append(pack_samples([(n_prompt - 1, samples)]))
        offsets.append(start)
    batch = DataCollatorForPrefixSharing(pad_token_id=pad_token_id)(packed)
    real = batch["segment_ids"] >= 0
    batch["position_ids"] += torch.tensor(offsets)[:, None] * real  # the columns of the padded rows
    device = input_ids.device
    batch = {k: v.to(device) for k, v in batch.items()}

    def as_tensor(values):
        return torch.tensor(values, dtype=torch.long, device=device)

    return GroupedRows(
        batch=batch,
        source=(as_tensor(source_rows), as_tensor(source_positions)),
        target=(as_tensor(target_rows), as_tensor(target_positions)),
        shape=(input_ids.shape[0], input_ids.shape[1] - 1),
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


PER_TOKEN_FIELDS = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


def grouped_fused_forward(
    model,
    backend: AttentionBackend,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_mask: torch.Tensor,
    pad_token_id: int,
    dtype: torch.dtype,
    batch_size: int | None = None,
) -> dict[str, torch.Tensor] | None:
    """The per-token outputs of the model's fused LM head on padded `[prompt][completion]` rows, scoring the
    completion tokens, with each prompt computed once.

    `model` must carry TRL's fused LM head (`add_fused_lm_head`), as the models of `GRPOTrainer` and `DPOTrainer` do;
    it runs with the mask `backend` takes (`choose_attention_backend`). Rows are processed in chunks of whole groups
    of about `batch_size` rows.

    Returns:
        `dict[str, torch.Tensor]`: every per-token field the head computes (`log_probs`, and `entropy`,
        `log_sum_sq_probs`, `mean_logits`, `is_top1` when it was set up for them) and `label_mask`, each of shape
        `(N, L - 1)`, the head's layout on the padded rows: the value for the completion token of column `t` at
        `t - 1`, `0` elsewhere. `None` when a row cannot be packed exactly (see `plan_grouped_rows`): the caller then
        runs its own forward.
    """
    n = input_ids.shape[0]
    spans = _spans(attention_mask, completion_mask)
    if spans is None:
        return None
    fields = {}
    for rows in chunk_groups(_groups(input_ids, spans), batch_size or n):
        plan = plan_grouped_rows(input_ids, attention_mask, completion_mask, pad_token_id, rows)
        outputs = model(**prepare_model_inputs(plan.batch, backend, dtype), fused_lm_head=True)
        for name in (*PER_TOKEN_FIELDS, "label_mask"):
            packed = getattr(outputs, name, None)
            if packed is None:
                continue
            values = packed[plan.source]
            padded = fields[name] if name in fields else values.new_zeros(plan.shape)
            fields[name] = padded.index_put(plan.target, values)
    return fields


def _grouped_fused_forward(original, backend: AttentionBackend, pad_token_id: int, dtype: torch.dtype):
    """`original` (a forward with TRL's fused LM head) that scores padded `[prompt][completion]` rows with each
    prompt computed once: for calls with `fused_lm_head=True`, 2D `attention_mask` and `labels` only (the labelled
    columns are the completions), when `grouped_fused_forward` can pack them; any other call goes to `original`."""
    from trl.trainer.utils import FusedCausalLMOutput

    def forward(
        *args, fused_lm_head=False, input_ids=None, attention_mask=None, labels=None, use_cache=None, **kwargs
    ):
        # PEFT's forward passes its own keywords on as None (`inputs_embeds`, `output_attentions`, `return_dict`, ...)
        given = {name: value for name, value in kwargs.items() if value is not None}
        plain = not args and not given and labels is not None and input_ids is not None
        if fused_lm_head and plain and attention_mask is not None and attention_mask.dim() == 2:
            completion_mask = (labels != IGNORE_INDEX).long() * attention_mask
            fields = grouped_fused_forward(
                original, backend, input_ids, attention_mask, completion_mask, pad_token_id, dtype
            )
            if fields is not None:
                mask = fields["label_mask"]
                return FusedCausalLMOutput(
                    loss=-fields["log_probs"].sum() / mask.sum().clamp(min=1),
                    label_mask=mask,
                    **{name: fields.get(name) for name in PER_TOKEN_FIELDS},
                )
        return original(*args, fused_lm_head=fused_lm_head, input_ids=input_ids, attention_mask=attention_mask,
                        labels=labels, use_cache=use_cache, **kwargs)  # fmt: skip

    return forward


@contextmanager
def prompts_computed_once(models: list[tuple[torch.nn.Module, AttentionBackend | None]], pad_token_id: int):
    """While active, the fused-head forwards of `models` (each a model patched by TRL's `add_fused_lm_head`, with
    the mask backend it takes; `None` leaves a model as it is) compute each prompt of the rows once
    (`grouped_fused_forward`). This is how `RoleDPOTrainer` runs a pair's chosen and rejected behind one prompt
    through `trl.DPOTrainer`'s own loss code, whose forward calls are not a method to override."""
    patched = []
    try:
        for module, backend in models:
            if backend is not None and "forward" in vars(module):  # the instance forward add_fused_lm_head set
                original = module.forward
                module.forward = _grouped_fused_forward(original, backend, pad_token_id, module.dtype)
                patched.append((module, original))
        yield
    finally:
        for module, original in patched:
            module.forward = original


def shared_prompt_cache(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config=None):
    """The cache of left-padded prompt rows in which prompts repeat (a GRPO batch holds each prompt `num_generations`
    times), each distinct prompt computed once: its tokens but the last, at the positions `generate` gives them (the
    count of real tokens before each), copied to every row of that prompt. `generate(input_ids, attention_mask,
    cache=...)` then computes the last prompt token and the new ones row by row, as without the cache.

    `None` when there is nothing to share (no repeated prompt, one-token prompts) or `generate` would not take the
    cache as it is (`rolellm.clients.prefill.decoder_to_prefill`)."""
    if input_ids.dim() != 2 or input_ids.shape[1] < 2:
        return None
    decoder = decoder_to_prefill(model, generation_config)
    groups = prompt_groups(input_ids, attention_mask)
    if decoder is None or len(groups) == len(input_ids):
        return None
    firsts = torch.tensor([rows[0] for rows in groups], device=input_ids.device)
    owners = torch.empty(len(input_ids), dtype=torch.long, device=input_ids.device)
    for index, rows in enumerate(groups):
        owners[rows] = index
    ids, mask = input_ids[firsts, :-1], attention_mask[firsts, :-1]
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        cache = decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True).cache
    cache.batch_select_indices(owners)  # (prompts, ...) -> (rows, ...)
    return cache


@contextmanager
def prompts_prefilled_once(model):
    """While active, `model.generate(input_ids=..., attention_mask=..., generation_config=...)` on rows in which
    prompts repeat computes each distinct prompt once (`shared_prompt_cache`): this is how `RoleGRPOTrainer` runs
    `trl.GRPOTrainer`'s own generation, whose call is not a method to override. Other calls go to `generate` as
    they are."""
    original, own = model.generate, vars(model).get("generate")

    def generate(*args, input_ids=None, attention_mask=None, **kwargs):
        cache = None
        if not args and input_ids is not None and attention_mask is not None and set(kwargs) <= {"generation_config"}:
            cache = shared_prompt_cache(model, input_ids, attention_mask, kwargs.get("generation_config"))
        if cache is not None:
            kwargs["cache"] = cache
        return original(*args, input_ids=input_ids, attention_mask=attention_mask, **kwargs)

    model.generate = generate
    try:
        yield
    finally:
        if own is None:
            del model.generate  # the class's method again
        else:
            model.generate = own
