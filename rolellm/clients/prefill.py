"""Prompt tokens that several rows share, computed once: the cache `generate` goes on from.

A batch of role prompts shares its first tokens: every question of a role follows the same system text, often a few
hundred tokens, and a GRPO batch holds each prompt `num_generations` times. `generate` on left-padded rows computes
those tokens once per row. With the shared tokens in a cache (computed once, then copied to every row), `generate`
computes only each row's own tokens and the new ones, at the positions it would give them anyway (the count of real
tokens before each: padding between the shared part and a row's own tokens is masked and skipped).

`decoder_to_prefill(model, generation_config)` gives the decoder to prefill with, or says a model cannot be prefilled
that way (its decoder must run alone on the shared tokens, and `generate` be asked for one sequence per row from a
dynamic cache); `shared_prefix_length(prompts)` is how many first tokens prompts share (always leaving each prompt a
token of its own, whose logits give the first new token); `plan_shared_prefixes(prompts, groups, pad_id, minimum)`
lays a batch out with one shared prefix per group (a role's system text), when that saves tokens.

>>> shared_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
2
>>> shared_prefix_length([[1, 2], [1, 2]])
1
"""

import inspect
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


def system_text(messages: Sequence[dict]) -> str:
    """The text of a conversation's system turn, `""` without one: what a role's prompts have in common, the key
    that groups them for a shared prefix (in the local backend's batches and in RoCIT's packed rows)."""
    first = messages[0] if messages else {}
    return str(first.get("content", "")) if first.get("role") == "system" else ""


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """The number of first tokens every prompt of `prompts` has in common, at most one less than the shortest."""
    shortest = min(len(prompt) for prompt in prompts)
    first = prompts[0]
    for length in range(shortest - 1):
        if any(prompt[length] != first[length] for prompt in prompts):
            return length
    return max(shortest - 1, 0)


def decoder_to_prefill(model, generation_config=None):
    """`model`'s decoder, to run alone on shared prompt tokens before `generate` goes on from their cache; `None` when
    `generate` would not take such a cache as it is: an encoder-decoder model, a model without `get_decoder` or whose
    decoder takes no `cache` and `position_ids`, a PEFT prompt-learning adapter (whose virtual tokens only its own
    forward adds), or a generation config (`generation_config` or the model's own) asking for several sequences per
    row, beams, or a cache of another kind."""
    config = getattr(model, "config", None)
    if not hasattr(model, "get_decoder") or getattr(config, "is_encoder_decoder", False):
        return None
    peft_config = getattr(model, "active_peft_config", None)
    if peft_config is not None and getattr(peft_config, "is_prompt_learning", False):
        return None
    for settings in (getattr(model, "generation_config", None), generation_config):
        if settings is not None and not (
            _setting(settings, "num_return_sequences") in (None, 1)
            and _setting(settings, "num_beams") in (None, 1)
            and _setting(settings, "cache_implementation") in (None, "dynamic")
        ):
            return None
    decoder = model.get_decoder()
    accepted = inspect.signature(decoder.forward).parameters
    return decoder if {"input_ids", "attention_mask", "position_ids", "cache"} <= set(accepted) else None


def _setting(settings, name: str):
    """A setting of a `GenerationConfig` or of `generate()` keywords (a dict); `None` when not set."""
    return settings.get(name) if isinstance(settings, dict) else getattr(settings, name, None)


@dataclass
class SharedPrefixes:
    """A batch laid out as rows `[prefix][padding][own tokens]`: `prefixes` (one per group, computed once, right-padded
    to the longest in `prefix_ids`/`prefix_mask`), `owners` (the group of each row), and the rows (`input_ids`,
    `attention_mask`) whose first columns are their group's prefix, for `generate` to go on from the prefixes' cache
    copied to every row (`cache.batch_select_indices(owners)`)."""

    prefix_ids: list[list[int]]
    prefix_mask: list[list[int]]
    owners: list[int]
    input_ids: list[list[int]]
    attention_mask: list[list[int]]


def plan_shared_prefixes(
    prompts: Sequence[Sequence[int]], groups: Sequence[Hashable], pad_id: int, minimum: int
) -> SharedPrefixes | None:
    """The layout of `prompts` with each group's shared first tokens (`groups[i]` is the group of prompt `i`) computed
    once; `None` when it would not save `minimum` prompt tokens a row against plain left padding.

    >>> plan = plan_shared_prefixes([[1, 2, 3, 7], [1, 2, 3, 8, 9], [4, 5, 6]], ["a", "a", "b"], pad_id=0, minimum=1)
    >>> plan.prefix_ids, plan.owners
    ([[1, 2, 3], [4, 5, 0]], [0, 0, 1])
    >>> plan.input_ids
    [[1, 2, 3, 0, 7], [1, 2, 3, 8, 9], [4, 5, 0, 0, 6]]
    >>> plan.attention_mask
    [[1, 1, 1, 0, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 1]]
    """
    keys = {group: index for index, group in enumerate(dict.fromkeys(groups))}
    owners = [keys[group] for group in groups]
    members = [[prompts[i] for i, owner in enumerate(owners) if owner == g] for g in range(len(keys))]
    lengths = [shared_prefix_length(group) for group in members]
    prefixes = [list(group[0][:length]) for group, length in zip(members, lengths)]
    width = max(lengths)
    own = max(len(prompt) - lengths[owner] for prompt, owner in zip(prompts, owners))
    plain = len(prompts) * max(map(len, prompts))
    if plain - (len(keys) * width + len(prompts) * own) < minimum * len(prompts):
        return None
    input_ids, attention_mask = [], []
    for prompt, owner in zip(prompts, owners):
        shared, gap = lengths[owner], width - lengths[owner] + own - (len(prompt) - lengths[owner])
        input_ids.append(list(prompt[:shared]) + [pad_id] * gap + list(prompt[shared:]))
        attention_mask.append([1] * shared + [0] * gap + [1] * (len(prompt) - shared))
    return SharedPrefixes(
        prefix_ids=[prefix + [pad_id] * (width - len(prefix)) for prefix in prefixes],
        prefix_mask=[[1] * len(prefix) + [0] * (width - len(prefix)) for prefix in prefixes],
        owners=owners,
        input_ids=input_ids,
        attention_mask=attention_mask,
    )
