"""Prompt tokens that several rows share, computed once: the cache `generate` goes on from.

A batch of role prompts shares its first tokens: every question of a role follows the same system text, often a few
hundred tokens, and a GRPO batch holds each prompt `num_generations` times. `generate` on left-padded rows computes
those tokens once per row. With the shared tokens in a cache (computed once, then copied to every row), `generate`
computes only each row's own tokens and the new ones, at the positions it would give them anyway (the count of real
tokens before each: padding between the shared part and a row's own tokens is masked and skipped).

`decoder_to_prefill(model, generation_config)` gives the decoder to prefill with, or says a model cannot be prefilled
that way (its decoder must run alone on the shared tokens, and `generate` be asked for one sequence per row from a
dynamic cache);
`shared_prefix_length(prompts)` is how many first tokens a batch's prompts share (always leaving each prompt a token
of its own, whose logits give the first new token).

>>> shared_prefix_length([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]])
2
>>> shared_prefix_length([[1, 2], [1, 2]])
1
"""

from collections.abc import Sequence


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
    `generate` would not take such a cache as it is: an encoder-decoder model, a model without `get_decoder`, a PEFT
    prompt-learning adapter (whose virtual tokens only its own forward adds), or a generation config (`generation_config`
    or the model's own) asking for several sequences per row, beams, or a cache of another kind."""
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
    return model.get_decoder()


def _setting(settings, name: str):
    """A setting of a `GenerationConfig` or of `generate()` keywords (a dict); `None` when not set."""
    return settings.get(name) if isinstance(settings, dict) else getattr(settings, name, None)
