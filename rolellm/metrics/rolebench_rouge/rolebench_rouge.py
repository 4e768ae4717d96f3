"""RoleBench ROUGE-L: the RoleLLM paper's ROUGE-L (recall of the `rouge` package, best reference, mean)."""

from pathlib import Path

import datasets
import evaluate
import numpy as np

from rolellm.data.release import CITATION
from rolellm.rouge.score import rouge_l_scores


_DESCRIPTION = """\
ROUGE-L as the RoleLLM paper reports it for RoleBench (the RAW, CUS and SPE columns): the recall of the summary-level
ROUGE-L of the `rouge` package (pltrdy/rouge 1.0.1: union LCS over sentences split on ".", words counted as sets),
the best score over a sample's references, averaged over samples. English is split on whitespace, Chinese into
characters; the language is detected per sample unless given. Scores are identical to `rouge` 1.0.1, computed a few
dozen times faster. Score the released text as it is (do not strip it): that reproduces the paper's RoleGPT rows.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[str]`): one model answer per sample.
    references (`list[str]` or `list[list[str]]`): one reference, or a list of references, per sample.
    lang (`"en"` or `"zh"`, *optional*): the language of every sample; detected per sample when not given.
    measure (`"recall"`, `"precision"` or `"f"`, *optional*, defaults to `"recall"`): the paper reports recall.
    tokenizer (`"whitespace"`, `"char"`, `"rouge_score"` or `"jieba"`, *optional*): how text becomes words;
        defaults to the paper's choice per language (whitespace for English, characters for Chinese).
    use_aggregator (`bool`, *optional*, defaults to `True`): return the mean; with `False`, one score per sample.

Returns:
    `{"rougeL": float}` (or a list of floats with `use_aggregator=False`).

Examples:
    >>> metric = RolebenchRouge()
    >>> metric.compute(predictions=["The sea is cruel."], references=[["The sea is cruel, mate.", "Savvy?"]])
    {'rougeL': 0.6}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RolebenchRouge(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(datasets.Value("string", id="sequence")),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/InteractiveNLP-Team/RoleLLM-public", "https://github.com/pltrdy/rouge"],
            reference_urls=["https://arxiv.org/abs/2310.00746"],
        )

    def compute(self, **kwargs):
        """`evaluate.Metric.compute`, leaving no cache file locked when it fails: evaluate unlocks its files only when
        `_compute` returns, and every later `compute` in the process (of any instance) would wait a second for them."""
        try:
            return super().compute(**kwargs)
        except Exception:
            for lock, path in zip(getattr(self, "filelocks", None) or [], getattr(self, "file_paths", None) or []):
                if lock.is_locked:
                    lock.release()
                    Path(path).unlink(missing_ok=True)
            self.data = self.writer = None
            raise

    def _compute(self, predictions, references, lang=None, measure="recall", tokenizer=None, use_aggregator=True):
        scores = rouge_l_scores(predictions, references, lang=lang, measure=measure, tokenizer=tokenizer)
        return {"rougeL": float(np.mean(scores)) if use_aggregator else scores}
