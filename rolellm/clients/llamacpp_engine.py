"""`LlamaCppEngine`: a GGUF model in llama.cpp through llama-cpp-python's C API, answering several prompts together,
one llama.cpp sequence each (`LlamaCppChatClient`'s engine).

Each sequence has a cache of its own (llama.cpp's non-unified KV cache), so a token attends to its own sequence's
cells only, and a batch's cost grows with its prompts, not with the square of them. A sequence keeps what it holds
from one batch to the next, so a prompt that goes on from the one its sequence answered before (the next turn of a
chat, the next question to the same role) decodes only its new tokens. The prompts of a batch that begin with the
same tokens (a role's system text) decode them once: the first is decoded in full, the others start from a copy of
its cache (`copy_sources`). Each sequence samples with its own llama.cpp sampler chain, seeded by the caller.
"""

import logging
import os
from dataclasses import dataclass
from typing import NamedTuple


# the tokens before the one sampled that the repeat penalty looks back over (llama-cpp-python's `last_n_tokens_size`)
PENALTY_WINDOW = 64
# a prompt starts from a copy of another sequence's cache when that saves decoding one of its tokens for each this many
# cells of a sequence's cache: a copy moves the whole of it (measured on SmolLM2-135M: 4096 cells in the time of 5
# tokens, 512 in that of 1.3)
CELLS_PER_COPIED_TOKEN = 256
# the cells of each sequence's first cache; it grows, in powers of two up to `n_ctx`, when a batch needs more
FIRST_WINDOW = 512


@dataclass(frozen=True)
class Sampling:
    """How one sequence picks its tokens: greedy at `temp <= 0`, else llama.cpp's top-k, top-p, min-p, temperature
    and a seeded draw; `0`, `1.0`, `0.0` and `1.0` switch top-k, top-p, min-p and the repeat penalty off."""

    temp: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repeat_penalty: float = 1.0
    seed: int = 0


class PlannedToken(NamedTuple):
    """One token to decode: its id, its position, its sequence and whether the sequence samples from it (then its
    logits are kept)."""

    token: int
    pos: int
    seq: int
    last: bool


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` begin with in common."""
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def copy_sources(prompts: list[list[int]], kept: list[int], min_gain: int) -> dict[int, int]:
    """Which prompts start from a copy of another prompt's cache: `{i: j}` when prompt `j` is decoded first, in full,
    and prompt `i` begins with at least `min_gain` more of its tokens than its own sequence keeps (`kept[i]`). In
    sorted order, a prompt copies the last prompt decoded in full, unless the prompts after it would save more by
    copying it (`_saved_as_source`); a prompt's last token is never copied (its logits are needed).

    >>> copy_sources([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [7, 8]], [0, 0, 0, 0], min_gain=2)
    {1: 0, 2: 0}
    >>> copy_sources([[1, 2, 3, 4], [1, 2, 3, 5]], [0, 2], min_gain=2)  # the second sequence keeps [1, 2] already
    {}
    >>> copy_sources([[0, 1, 1, 1, 1], [0, 1, 1, 1, 2], [0, 2, 2, 2, 2], [0, 2, 2, 2, 3]], [0] * 4, min_gain=1)
    {1: 0, 3: 2}
    """
    sources, source = {}, None
    for i, prompt in enumerate(prompts):
        saved = -1 if source is None else copied_tokens(prompts[source], prompt) - kept[i]
        if saved >= min_gain and saved >= _saved_as_source(prompts, kept, source, i):
            sources[i] = source
        else:
            source = i
    return sources


def _saved_as_source(prompts: list[list[int]], kept: list[int], source: int, i: int) -> int:
    """The tokens the (sorted) prompts after `i` would save, beyond what copying `source` saves them, by copying
    prompt `i`: only those that share more with `i` than `source` does, the prompts right after it."""
    saved, shared_with_source = 0, common_prefix(prompts[source], prompts[i])
    for j in range(i + 1, len(prompts)):
        if common_prefix(prompts[i], prompts[j]) <= shared_with_source:
            break  # in sorted order, no later prompt shares more with `i` either
        over = max(copied_tokens(prompts[source], prompts[j]), kept[j])
        saved += max(0, copied_tokens(prompts[i], prompts[j]) - over)
    return saved


def copied_tokens(source: list[int], prompt: list[int]) -> int:
    """The first tokens of `prompt` that a cache holding `source` (a copy, or the sequence's own) serves: all they
    share but `prompt`'s last."""
    return min(common_prefix(source, prompt), len(prompt) - 1)


class LlamaCppEngine:
    """llama.cpp's model, context and batch for a GGUF file, decoding up to `n_seq` sequences together.

    Args:
        path (`str` or `os.PathLike`): the `.gguf` file.
        n_ctx (`int`): the cells of one sequence's cache at most: its longest prompt and answer together. The cache
            starts smaller (`FIRST_WINDOW`) and grows when a batch needs more, forgetting what it held.
        n_seq (`int`): sequences decoded together.
        n_threads (`int`): CPU threads, for prompts and answers alike.

    Attributes:
        window (`int`): the cells of each sequence's cache now.
        held (`list[list[int]]`): the tokens each sequence holds in the cache.
        prompt_tokens_decoded (`int`): prompt tokens computed so far; copied and kept ones are not counted.
    """

    def __init__(self, path: str | os.PathLike, *, n_ctx: int, n_seq: int, n_threads: int):
        import llama_cpp

        quiet = logging.getLogger("llama-cpp-python")  # where llama-cpp-python sends llama.cpp's log
        if quiet.level == logging.NOTSET:
            quiet.setLevel(logging.ERROR)
        self.lib = lib = llama_cpp
        self.model = self.ctx = self.batch = None
        if n_seq > lib.llama_max_parallel_sequences():
            raise ValueError(f"--batch_size {n_seq}: llama.cpp decodes at most {lib.llama_max_parallel_sequences()} "
                             "sequences together")  # fmt: skip
        self.path, self.n_ctx, self.n_seq, self.n_threads = path, n_ctx, n_seq, n_threads
        self.model = lib.llama_model_load_from_file(os.fsencode(path), lib.llama_model_default_params())
        if not self.model:
            raise ValueError(f"llama.cpp could not load {path}")
        self.n_batch = 512  # tokens given to one llama_decode call
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.eos = lib.llama_vocab_eos(lib.llama_model_get_vocab(self.model))
        self.prompt_tokens_decoded = 0
        try:
            self._open(min(FIRST_WINDOW, n_ctx))
        except RuntimeError as error:
            self.close()
            raise ValueError(str(error)) from None

    def _open(self, window: int) -> None:
        """A new context whose sequences hold `window` cells each (llama.cpp rounds up to a multiple of 256), in place
        of the one before; RuntimeError when llama.cpp cannot make it (then the next batch tries again)."""
        lib = self.lib
        if self.ctx is not None:
            lib.llama_free(self.ctx)
        self.ctx, self.window, self.held = None, 0, [[] for _ in range(self.n_seq)]
        params = lib.llama_context_default_params()
        params.n_ctx = window * self.n_seq
        params.n_batch = params.n_ubatch = self.n_batch
        params.n_seq_max = self.n_seq
        params.kv_unified = False  # a cache for each sequence: its tokens attend to its own cells only
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_AUTO  # on a CPU: on (it skips the cells masked out)
        params.n_threads = params.n_threads_batch = self.n_threads
        ctx = lib.llama_init_from_model(self.model, params)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not make a cache of {window} cells for each of {self.n_seq} "
                               f"sequences on {self.path}")  # fmt: skip
        self.ctx, self.window, self.memory = ctx, lib.llama_n_ctx_seq(ctx), lib.llama_get_memory(ctx)

    def close(self) -> None:
        """Free the batch, the context and the model (again: nothing)."""
        if self.batch is not None:
            self.lib.llama_batch_free(self.batch)
        if self.ctx is not None:
            self.lib.llama_free(self.ctx)
        if self.model is not None:
            self.lib.llama_model_free(self.model)
        self.model = self.ctx = self.batch = None

    def clear(self) -> None:
        """Forget what the cache holds: the next prompts are decoded from their first token."""
        if self.ctx is not None:
            self.lib.llama_memory_clear(self.memory, True)
        self.held = [[] for _ in range(self.n_seq)]

    def generate(self, prompts: list[list[int]], samplings: list[Sampling], budgets: list[int], stop_ids):
        """Answer the token-id lists `prompts` (at most `n_seq`, each with its answer within `n_ctx` cells)
        together: yields `(i, token)` for each token of answer `i` as it is made, until a token of `stop_ids` (not
        yielded) or `budgets[i]` tokens."""
        if len(prompts) > self.n_seq:
            raise ValueError(f"{len(prompts)} prompts for an engine of {self.n_seq} sequences")
        self._reserve(max(len(prompt) + budget for prompt, budget in zip(prompts, budgets)))
        slots = self._slots(prompts)
        samplers = [self._sampler(sampling, prompt) for sampling, prompt in zip(samplings, prompts)]
        try:
            upcoming = self._prefill(prompts, slots, samplers)  # prompt -> the token its answer goes on with
            made = [0] * len(prompts)
            active = sorted((i for i in range(len(prompts)) if budgets[i] > 0), key=slots.__getitem__)
            while active:
                going = []
                for i in active:
                    if upcoming[i] in stop_ids:
                        continue
                    made[i] += 1
                    yield i, upcoming[i]
                    if made[i] < budgets[i]:
                        going.append(i)
                if going:
                    steps = [PlannedToken(upcoming[i], len(self.held[slots[i]]), slots[i], True) for i in going]
                    self._decode(steps)
                    for row, i in enumerate(going):
                        upcoming[i] = self.lib.llama_sampler_sample(samplers[i], self.ctx, row)
                active = going
        finally:
            for sampler in samplers:
                self.lib.llama_sampler_free(sampler)

    def _reserve(self, cells: int) -> None:
        """A cache of at least `cells` cells for each sequence: a new one, twice as large or more, when it is
        smaller (what the old one held is gone)."""
        if cells > self.n_ctx:
            raise ValueError(f"a prompt and its answer of {cells} tokens exceed n_ctx {self.n_ctx}")
        if cells > self.window:
            self._open(min(max(2 * self.window, 1 << (cells - 1).bit_length()), self.n_ctx))

    def _slots(self, prompts: list[list[int]]) -> list[int]:
        """The sequence of each prompt, in turn: the free one holding the most of its first tokens (the first free
        one when none holds any)."""
        free, slots = list(range(self.n_seq)), []
        for prompt in prompts:
            slots.append(max(free, key=lambda slot: common_prefix(self.held[slot], prompt)))
            free.remove(slots[-1])
        return slots

    def _prefill(self, prompts: list[list[int]], slots: list[int], samplers) -> dict[int, int]:
        """Decode the tokens of `prompts` their sequences do not hold: each sequence drops what its prompt does not
        begin with; the prompts that others start from (`copy_sources`) are decoded, their caches copied, and the
        rest of the others decoded. A prompt's last token is always decoded, for its logits. Returns the first answer
        token of each prompt."""
        kept = [copied_tokens(self.held[slot], prompt) for slot, prompt in zip(slots, prompts)]
        for slot, k in zip(slots, kept):
            self._trim(slot, k)
        sources, upcoming = copy_sources(prompts, kept, self.window // CELLS_PER_COPIED_TOKEN), {}
        self._decode_prompts([i for i in range(len(prompts)) if i not in sources], prompts, slots, samplers, upcoming)
        for i, j in sources.items():  # llama.cpp copies the cache before its next decode
            self.lib.llama_memory_seq_cp(self.memory, slots[j], slots[i], -1, -1)
            self.held[slots[i]] = list(self.held[slots[j]])
            self._trim(slots[i], copied_tokens(prompts[j], prompts[i]))
        self._decode_prompts(list(sources), prompts, slots, samplers, upcoming)
        return upcoming

    def _decode_prompts(self, chosen: list[int], prompts, slots, samplers, upcoming: dict[int, int]) -> None:
        """Decode the rest of the prompts `chosen`, in the order of their sequences (llama.cpp decodes neighbouring
        sequences together), `n_batch` tokens at a time; `upcoming[i]` is sampled from prompt `i`'s last token."""
        chosen = sorted(chosen, key=slots.__getitem__)
        plan = [PlannedToken(prompts[i][pos], pos, slots[i], pos == len(prompts[i]) - 1)
                for i in chosen for pos in range(len(self.held[slots[i]]), len(prompts[i]))]  # fmt: skip
        prompt_of = {slots[i]: i for i in chosen}
        for start in range(0, len(plan), self.n_batch):
            chunk = plan[start : start + self.n_batch]
            self._decode(chunk)
            self.prompt_tokens_decoded += len(chunk)
            for row, planned in enumerate(chunk):
                if planned.last:
                    i = prompt_of[planned.seq]
                    upcoming[i] = self.lib.llama_sampler_sample(samplers[i], self.ctx, row)

    def _trim(self, slot: int, keep: int) -> None:
        """Sequence `slot` keeps its first `keep` tokens."""
        self.lib.llama_memory_seq_rm(self.memory, slot, keep, -1)
        del self.held[slot][keep:]

    def _decode(self, tokens: list[PlannedToken]) -> None:
        batch = self.batch
        batch.n_tokens = len(tokens)
        for row, planned in enumerate(tokens):
            batch.token[row], batch.pos[row], batch.logits[row] = planned.token, planned.pos, planned.last
            batch.n_seq_id[row], batch.seq_id[row][0] = 1, planned.seq
            self.held[planned.seq].append(planned.token)
        code = self.lib.llama_decode(self.ctx, batch)
        if code != 0:
            self.clear()  # what the cache holds is unknown now
            raise RuntimeError(f"llama.cpp's decode failed (code {code}) on a batch of {len(tokens)} tokens")

    def _sampler(self, sampling: Sampling, prompt: list[int]):
        lib = self.lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        parts = []
        if sampling.repeat_penalty != 1.0:
            parts.append(lib.llama_sampler_init_penalties(PENALTY_WINDOW, sampling.repeat_penalty, 0.0, 0.0))
        if sampling.temp <= 0:
            parts.append(lib.llama_sampler_init_greedy())
        else:
            if sampling.top_k > 0:
                parts.append(lib.llama_sampler_init_top_k(sampling.top_k))
            if sampling.top_p < 1.0:
                parts.append(lib.llama_sampler_init_top_p(sampling.top_p, 1))
            if sampling.min_p > 0.0:
                parts.append(lib.llama_sampler_init_min_p(sampling.min_p, 1))
            parts += [lib.llama_sampler_init_temp(sampling.temp), lib.llama_sampler_init_dist(sampling.seed)]
        for part in parts:
            lib.llama_sampler_chain_add(chain, part)
        if sampling.repeat_penalty != 1.0:  # the prompt's last tokens count as repeats too, as in transformers
            for token in prompt[-PENALTY_WINDOW:]:
                lib.llama_sampler_accept(chain, token)
        return chain
