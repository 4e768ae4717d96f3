"""`LlamaCppEngine`: a GGUF model in llama.cpp through llama-cpp-python's C API, answering several prompts together,
one llama.cpp sequence each, in one KV cache (`LlamaCppChatClient`'s engine).

The tokens that prompts of a batch begin with in common (a role's system text) are decoded once, as cache cells that
belong to every sequence sharing them (`shared_prompt_plan`). A sequence keeps what it holds in the cache from one
batch to the next, so a prompt that goes on from the one its sequence answered before (the next turn of a chat, the
next question to the same role) decodes only its new tokens. Each sequence samples with its own llama.cpp sampler
chain, seeded by the caller.
"""

import logging
import os
from dataclasses import dataclass
from typing import NamedTuple


# the tokens before the one sampled that the repeat penalty looks back over (llama-cpp-python's `last_n_tokens_size`)
PENALTY_WINDOW = 64


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
    """One token to decode: its id, its position, the sequences it belongs to and whether one of them samples from
    it (then its logits are kept)."""

    token: int
    pos: int
    seqs: tuple[int, ...]
    last: bool


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many tokens `a` and `b` begin with in common."""
    n = min(len(a), len(b))
    return next((k for k in range(n) if a[k] != b[k]), n)


def shared_prompt_plan(prompts: list[list[int]], kept: list[int]) -> list[PlannedToken]:
    """The prompt tokens to decode when sequence `i` answers `prompts[i]` and already holds its first `kept[i]`:
    each token once for the sequences whose prompts begin with the same tokens up to it and that held as many tokens
    before (llama.cpp lets a token belong to several sequences only where their caches have the same extent), in an
    order where each sequence's positions rise one by one. Prompts in sorted order share the most.

    >>> plan = shared_prompt_plan([[1, 2, 3], [1, 2, 4], [5]], [0, 0, 0])
    >>> [(t.token, t.seqs, t.last) for t in plan]
    [(1, (0, 1), False), (2, (0, 1), False), (3, (0,), True), (4, (1,), True), (5, (2,), True)]
    >>> plan = shared_prompt_plan([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [1, 2, 6]], [0, 0, 0, 0])
    >>> [(t.token, t.seqs) for t in plan]
    [(1, (0, 1, 2, 3)), (2, (0, 1, 2, 3)), (3, (0, 1)), (4, (0,)), (5, (1,)), (6, (2, 3))]
    >>> [(t.token, t.pos, t.seqs) for t in shared_prompt_plan([[1, 2, 3], [1, 2, 3]], [2, 0])]
    [(1, 0, (1,)), (2, 1, (1,)), (3, 2, (1,)), (3, 2, (0,))]
    """
    shared = _shared_starts(prompts)
    plan = []
    for i, prompt in enumerate(prompts):
        end = len(prompts)
        for pos in range(shared[i], len(prompt)):  # positions before shared[i] are planned with an earlier prompt
            run = i + 1  # the prompts i..end-1 begin with prompt[: pos + 1]: a run, narrowing as pos grows
            while run < end and shared[run] > pos:
                run += 1
            end = run
            for held in sorted({kept[s] for s in range(i, end) if kept[s] <= pos}):
                seqs = tuple(s for s in range(i, end) if kept[s] == held)
                plan.append(PlannedToken(prompt[pos], pos, seqs, any(len(prompts[s]) == pos + 1 for s in seqs)))
    return plan


def cells_needed(prompts: list[list[int]], budgets: list[int]) -> int:
    """The cache cells answering `prompts` together takes from an empty cache: their tokens once each, shared first
    tokens once, and every answer's budget."""
    return sum(map(len, prompts)) - sum(_shared_starts(prompts)) + sum(budgets)


def _shared_starts(prompts: list[list[int]]) -> list[int]:
    """How many first tokens each prompt has in common with the one before it."""
    return [0] + [common_prefix(prompts[i - 1], prompts[i]) for i in range(1, len(prompts))]


class LlamaCppEngine:
    """llama.cpp's model, context and batch for a GGUF file, decoding up to `n_seq` sequences together.

    Args:
        path (`str` or `os.PathLike`): the `.gguf` file.
        n_ctx (`int`): cache cells, shared by all the sequences (prompts, shared first tokens once, and answers).
        n_seq (`int`): sequences decoded together.
        n_threads (`int`): CPU threads, for prompts and answers alike.
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
        self.model = lib.llama_model_load_from_file(os.fsencode(path), lib.llama_model_default_params())
        if not self.model:
            raise ValueError(f"llama.cpp could not load {path}")
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(n_ctx, 512)
        params.n_seq_max = n_seq
        params.kv_unified = True  # one cache, whose cells can belong to several sequences
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_AUTO  # on a CPU: on (a batch of 8 answers 15% sooner)
        params.n_threads = params.n_threads_batch = n_threads
        self.ctx = lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            self.close()
            raise ValueError(f"llama.cpp could not make a context of {n_ctx} cells for {n_seq} sequences on {path}")
        self.batch = lib.llama_batch_init(params.n_batch, 0, n_seq)
        self.n_batch, self.n_seq = params.n_batch, n_seq
        self.n_ctx = lib.llama_n_ctx(self.ctx)
        self.memory = lib.llama_get_memory(self.ctx)
        self.eos = lib.llama_vocab_eos(lib.llama_model_get_vocab(self.model))
        self.held: list[list[int]] = [[] for _ in range(n_seq)]  # the tokens each sequence holds in the cache
        self.prompt_tokens_decoded = 0  # prompt tokens computed so far: shared and kept ones are not counted again

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
        self.lib.llama_memory_clear(self.memory, True)
        self.held = [[] for _ in range(self.n_seq)]

    def batches(self, prompts: list[list[int]], budgets: list[int]) -> list[list[int]]:
        """`prompts` (in sorted order, each with its answer budget) cut into consecutive batches of at most `n_seq`
        that fit the cache from empty (`cells_needed`): the indices of each batch."""
        shared, groups, cells = _shared_starts(prompts), [], 0
        for i, (prompt, budget) in enumerate(zip(prompts, budgets)):
            added = len(prompt) - shared[i] + budget
            if not groups or len(groups[-1]) == self.n_seq or cells + added > self.n_ctx:
                groups.append([])
                cells, added = 0, len(prompt) + budget
            groups[-1].append(i)
            cells += added
        return groups

    def generate(self, prompts: list[list[int]], samplings: list[Sampling], budgets: list[int], stop_ids):
        """Answer the token-id lists `prompts` (at most `n_seq`, taking at most `n_ctx` cells together:
        `cells_needed`) together: yields `(i, token)` for each token of answer `i` as it is made, until a token of
        `stop_ids` (not yielded) or `budgets[i]` tokens."""
        if len(prompts) > self.n_seq:
            raise ValueError(f"{len(prompts)} prompts for an engine of {self.n_seq} sequences")
        slots, plan = self._keep(prompts, budgets)
        prompt_of = {slot: i for i, slot in enumerate(slots)}
        samplers = [self._sampler(sampling, prompt) for sampling, prompt in zip(samplings, prompts)]
        try:
            upcoming = {}  # prompt -> the token its answer goes on with
            for start in range(0, len(plan), self.n_batch):
                chunk = plan[start : start + self.n_batch]
                self._decode(chunk)
                self.prompt_tokens_decoded += len(chunk)
                for row, planned in enumerate(chunk):
                    for i in map(prompt_of.get, planned.seqs):
                        if planned.last and len(prompts[i]) == planned.pos + 1:
                            upcoming[i] = self.lib.llama_sampler_sample(samplers[i], self.ctx, row)
            made = [0] * len(prompts)
            active = [i for i in range(len(prompts)) if budgets[i] > 0]
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
                    steps = [PlannedToken(upcoming[i], len(self.held[slots[i]]), (slots[i],), True) for i in going]
                    self._decode(steps)
                    for row, i in enumerate(going):
                        upcoming[i] = self.lib.llama_sampler_sample(samplers[i], self.ctx, row)
                active = going
        finally:
            for sampler in samplers:
                self.lib.llama_sampler_free(sampler)

    def _keep(self, prompts: list[list[int]], budgets: list[int]) -> tuple[list[int], list[PlannedToken]]:
        """The sequence each prompt goes to (the one holding most of its first tokens), and the plan of the prompt
        tokens left to decode, in sequences: each sequence drops what its new prompt does not begin with (the whole
        cache goes when the batch would not fit beside what stays). A prompt's last token is always decoded again,
        for its logits."""
        slots = self._slots(prompts)
        kept = [min(common_prefix(self.held[slot], prompt), len(prompt) - 1) for slot, prompt in zip(slots, prompts)]
        plan = shared_prompt_plan(prompts, kept)
        staying = sum(map(len, self.held)) - sum(len(self.held[slot]) - k for slot, k in zip(slots, kept))
        if staying + len(plan) + sum(budgets) > self.n_ctx:  # shared cells counted once per sequence: at most
            self.clear()
            plan = shared_prompt_plan(prompts, [0] * len(prompts))
        else:
            for slot, k in zip(slots, kept):
                self.lib.llama_memory_seq_rm(self.memory, slot, k, -1)
                del self.held[slot][k:]
        return slots, [planned._replace(seqs=tuple(slots[i] for i in planned.seqs)) for planned in plan]

    def _slots(self, prompts: list[list[int]]) -> list[int]:
        """The sequence of each prompt, in turn: the free one holding the most of its first tokens (the first free
        one when none holds any)."""
        free, slots = list(range(self.n_seq)), []
        for prompt in prompts:
            slots.append(max(free, key=lambda slot: common_prefix(self.held[slot], prompt)))
            free.remove(slots[-1])
        return slots

    def _decode(self, tokens: list[PlannedToken]) -> None:
        batch = self.batch
        batch.n_tokens = len(tokens)
        for row, planned in enumerate(tokens):
            batch.token[row], batch.pos[row], batch.logits[row] = planned.token, planned.pos, planned.last
            batch.n_seq_id[row] = len(planned.seqs)
            for k, s in enumerate(planned.seqs):
                batch.seq_id[row][k] = s
                self.held[s].append(planned.token)
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
