"""`reference_rouge_l`: the paper's ROUGE-L of each completion against its row's reference answers, as a reward.

The score is `rolellm.rouge.score.rouge_l_scores` (the `rouge` 1.0.1 rules the paper used, English
split on whitespace, Chinese into characters, the best over a row's references), so a completion that copies a
reference scores 1.0 and the reward is the benchmark's metric. The measure is the paper's, recall, which grows with
every word added: pair it with `rolellm.rewards.style.LengthPenalty`, or pass
`functools.partial(reference_rouge_l, measure="f")` for the F score (its `1e-8` smoothing gives an exact copy
0.99999999).

>>> reference_rouge_l(["p"], ["Arr, the sea is cruel."], references=[["Arr, the sea is cruel."]])
[1.0]
>>> reference_rouge_l(["p", "p"], [[{"role": "assistant", "content": "俺老孙来也"}], "x"], references=[["俺老孙去也"], []])
[0.8, None]
"""

import logging
from collections.abc import Sequence

from rolellm.rewards.text import role_texts
from rolellm.rouge.score import Measure, rouge_l_scores


logger = logging.getLogger(__name__)


def reference_rouge_l(
    prompts: Sequence,
    completions: Sequence,
    references: Sequence[Sequence[str] | str | None] | None = None,
    transcript: Sequence | None = None,
    measure: Measure = "recall",
    **kwargs,
) -> list[float | None]:
    """The ROUGE-L `measure` of each completion against its row's `references` (a TRL reward function).

    Args:
        prompts (`Sequence`): the prompts (unused: the score compares the answer with the references only).
        completions (`Sequence[str | list[dict]]`): the completions, plain or conversational.
        references (`Sequence[list[str]]`): the dataset's `references` column, one list of reference answers per
            row (`RoleGRPOTrainer` makes it from a RoleBench row's `generated`).
        transcript (`Sequence[dict]`, *optional*): a multi-turn rollout's transcripts; the role's lines are scored.
        measure (`"recall"`, `"precision"` or `"f"`, *optional*, defaults to `"recall"`): the ROUGE-L measure.
        **kwargs: the other columns TRL passes, ignored.

    Returns:
        `list[float | None]`: one score in [0, 1] per completion; `None` for a row with no reference (TRL then leaves
        this reward out for that completion), counted in a warning. An empty completion scores 0.
    """
    if references is None:
        raise ValueError(
            "reference_rouge_l needs a 'references' column (a list of reference answers per row): RoleGRPOTrainer "
            "makes it from RoleBench rows' 'generated'"
        )
    texts = role_texts(completions, transcript)
    kept = [[r for r in ([refs] if isinstance(refs, str) else refs or []) if r.strip()] for refs in references]
    scored = [i for i, refs in enumerate(kept) if refs]
    rewards: list[float | None] = [None] * len(texts)
    if len(scored) < len(texts):
        logger.warning("reference_rouge_l: %d of %d rows have no reference answer: no reward for them",
                       len(texts) - len(scored), len(texts))  # fmt: skip
    if scored:
        scores = rouge_l_scores([texts[i] for i in scored], [kept[i] for i in scored], measure=measure)
        for i, score in zip(scored, scores):
            rewards[i] = score
    return rewards
