"""ROUGE-L exactly as the RoleLLM paper computed it, fast.

The paper scores a model with the ROUGE-L of the `rouge` package (pltrdy/rouge 1.0.1): summary-level union LCS
over sentences split on `"."`, the maximum over a sample's references, averaged over samples, English split on
whitespace and Chinese split into characters (the string `" ".join(list(text))`). `rouge` reimplemented here
gives the same numbers to the last bit, a hundred and more times faster: compiled `numba` kernels split and number
the words and compute each sentence pair's LCS as bit vectors, traced back with `rouge`'s own tie-breaking (NumPy
does the same, slower, when `numba` is not installed).

What `rouge` 1.0.1 computes for one (prediction, reference) pair, and therefore what this module computes:

- each text is split on `"."`; empty pieces are dropped; each piece has its whitespace collapsed
  (`" ".join(piece.split())`) and is split on `" "` into words. A piece of only whitespace (for example the
  space after a final period, `"Done. "`) becomes one empty word `""`, which counts like any other word;
- words are compared as *sets* (`rouge`'s default `exclusive=True`): `m` is the number of distinct reference
  words, `n` the number of distinct prediction words;
- for every (reference sentence, prediction sentence) pair one LCS is traced back through the DP table
  (a match when the words are equal, otherwise towards the prediction's previous word when that keeps the LCS
  length, else towards the reference's previous word); the overlap is the number of distinct words in the union
  of all these LCSs;
- recall = overlap / m, precision = overlap / n, F = 2 * (p * r) / (p + r + 1e-8).

`rouge` raises on a text without any sentence (`""`, `"..."`). Here an empty prediction scores 0 and is counted
in a warning; an empty reference is a data error and raises a `ValueError` naming the sample.

The released RoleBench text must be scored as released: do not strip it. English references in the release end
with a space after the final period in places, which `rouge` turns into one extra empty word in `m`; stripping
the text raises the English RoleGPT SPE from the paper's 0.3229 to 0.3232.

>>> round(rouge_l(["The cat sat on the mat."], [["A cat sat on a mat.", "The dog barked."]]), 4)  # 4 of 6 words
0.6667
>>> rouge_l(["俺老孙来也"], ["俺老孙去也"])  # Chinese is split into characters
0.8
"""

import logging
from collections.abc import Sequence
from typing import Literal

import numpy as np
from tqdm.auto import tqdm

from rolellm.roles.profile import detect_language
from rolellm.rouge.lcs import encode_texts, union_lcs_words


logger = logging.getLogger(__name__)
_PROGRESS_FROM = 200_000  # pairs (a few seconds): show a progress bar
_CHUNK = 50_000  # pairs per call of the compiled kernel
_KERNELS = None  # the compiled kernels module once loaded, False when numba is missing

Tokenizer = Literal["whitespace", "char", "rouge_score", "jieba"]
Measure = Literal["recall", "precision", "f"]

PAPER_TOKENIZERS: dict[str, Tokenizer] = {"en": "whitespace", "zh": "char"}


def to_rouge_text(text: str, tokenizer: Tokenizer) -> str:
    """Return the string handed to `rouge` for `text`: its tokens joined by spaces (`"."` still splits sentences).

    `"whitespace"` leaves the text as it is (`rouge` splits on whitespace itself), `"char"` is the paper's
    `" ".join(list(text))`, `"rouge_score"` is `rouge_score`'s tokenizer (lower-cased ASCII alphanumerics, so one
    sentence and no Chinese) and `"jieba"` joins jieba's words.

    >>> to_rouge_text("孙悟空。", "char")
    '孙 悟 空 。'
    >>> to_rouge_text("Hello, World. Bye!", "rouge_score")
    'hello world bye'
    """
    if tokenizer == "whitespace":
        return text
    if tokenizer == "char":
        return " ".join(list(text))
    if tokenizer == "rouge_score":
        from rouge_score.tokenize import tokenize

        return " ".join(tokenize(text, None))
    if tokenizer == "jieba":
        import jieba

        return " ".join(word for word in jieba.cut(text) if word.strip())
    raise ValueError(f"tokenizer={tokenizer!r} is not one of 'whitespace', 'char', 'rouge_score', 'jieba'.")


def split_sentences(text: str) -> list[list[str]]:
    """Split a `rouge` input string into sentences of words exactly as `rouge` 1.0.1 does.

    >>> split_sentences(" Hi  there. Bye. ")
    [['Hi', 'there'], ['Bye'], ['']]
    """
    return [" ".join(piece.split()).split(" ") for piece in text.split(".") if piece]


def _unique(keys: np.ndarray) -> np.ndarray:
    # sort-based: several times faster than `np.unique`'s hash table on these keys
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys


def _compiled_kernels():
    """The `numba` kernels of [`rolellm.rouge.lcs_numba`], or `None` (NumPy) when `numba` is not installed."""
    global _KERNELS
    if _KERNELS is None:
        try:
            from rolellm.rouge import lcs_numba

            _KERNELS = lcs_numba
        except ImportError:
            logger.info("numba is not installed: ROUGE-L runs in NumPy (pip install 'rolellm[eval]' for speed).")
            _KERNELS = False
        except RuntimeError as error:  # numba found no writable folder for its cache of compiled kernels
            logger.warning(
                f"ROUGE-L runs in NumPy, as numba failed: {error} (set NUMBA_CACHE_DIR to a writable folder)."
            )
            _KERNELS = False
    return _KERNELS or None


def _overlaps_numpy(word_ids, sentence_lengths, first_sentence, sentence_counts, ref, hyp):
    """`(distinct words per text, overlap per pair)` with the NumPy LCS of [`union_lcs_words`]."""
    vocab_size = int(word_ids.max(initial=0)) + 1
    texts = len(sentence_counts)
    # m and n: distinct words per text (rouge compares word sets)
    sentence_text = np.repeat(np.arange(texts), sentence_counts)
    word_text = np.repeat(sentence_text, sentence_lengths)
    distinct = np.bincount(_unique(word_text * vocab_size + word_ids) // vocab_size, minlength=texts)
    # every (reference sentence, prediction sentence) pair of every scored pair
    per_pair = sentence_counts[ref] * sentence_counts[hyp]
    owner = np.repeat(np.arange(len(ref)), per_pair)
    local = np.arange(len(owner)) - np.repeat(np.cumsum(per_pair) - per_pair, per_pair)
    x_sentences = first_sentence[ref][owner] + local // sentence_counts[hyp][owner]
    y_sentences = first_sentence[hyp][owner] + local % sentence_counts[hyp][owner]
    overlap = np.zeros(len(ref), dtype=np.int64)
    if len(owner):
        sentence_pair, word = union_lcs_words(word_ids, sentence_lengths, x_sentences, y_sentences)
        union = _unique(owner[sentence_pair] * vocab_size + word)
        overlap = np.bincount(union // vocab_size, minlength=len(ref))
    return distinct, overlap


def rouge_l_pairs(predictions: Sequence[str], references: Sequence[str]) -> dict[str, np.ndarray]:
    """Score aligned (prediction, reference) `rouge` input strings pair by pair, as `rouge.Rouge` 1.0.1 does.

    Args:
        predictions (`Sequence[str]`):
            Texts already tokenized for `rouge` (see [`to_rouge_text`]).
        references (`Sequence[str]`):
            One reference per prediction, tokenized the same way.

    Returns:
        `dict[str, np.ndarray]`: `"recall"`, `"precision"` and `"f"` (float64, one per pair), and `"empty"`
        (`bool`, the predictions without any sentence, which score 0 where `rouge` would raise).

    >>> scores = rouge_l_pairs(["a b. c", "x"], ["a c b", "y"])
    >>> scores["recall"].tolist(), scores["precision"].tolist()
    ([1.0, 0.0], [1.0, 0.0])
    """
    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} predictions but {len(references)} references: pass one each.")
    texts = list(dict.fromkeys([*predictions, *references]))
    if not all(isinstance(text, str) for text in texts):
        raise ValueError(
            f"predictions and references must be strings, got {[t for t in texts if not isinstance(t, str)][:3]}"
        )
    text_index = {text: i for i, text in enumerate(texts)}
    kernels = _compiled_kernels()
    word_ids, sentence_lengths, first_sentence, sentence_counts = encode_texts(texts, kernels)
    hyp = np.fromiter(map(text_index.__getitem__, predictions), dtype=np.int64, count=len(predictions))
    ref = np.fromiter(map(text_index.__getitem__, references), dtype=np.int64, count=len(references))
    if (sentence_counts[ref] == 0).any():
        index = int(np.flatnonzero(sentence_counts[ref] == 0)[0])
        raise ValueError(f"Reference {index} ({references[index]!r}) has no sentence to score against.")
    vocab_size = int(word_ids.max(initial=0)) + 1
    if kernels is not None:
        word_ids = word_ids.astype(np.int64, copy=False)
        distinct = kernels.distinct_word_counts(word_ids, sentence_lengths, sentence_counts, vocab_size)
        starts = np.cumsum(sentence_lengths) - sentence_lengths
        overlap = np.zeros(len(ref), dtype=np.int64)
        progress = tqdm(total=len(ref), desc="ROUGE-L", unit="pair", disable=len(ref) < _PROGRESS_FROM)
        for begin in range(0, len(ref), _CHUNK):  # in chunks, for the progress bar
            end = begin + _CHUNK
            overlap[begin:end] = kernels.union_lcs_overlaps(
                word_ids,
                starts,
                sentence_lengths,
                first_sentence,
                sentence_counts,
                ref[begin:end],
                hyp[begin:end],
                vocab_size,
            )
            progress.update(len(overlap[begin:end]))
        progress.close()
    else:
        distinct, overlap = _overlaps_numpy(word_ids, sentence_lengths, first_sentence, sentence_counts, ref, hyp)
    empty = sentence_counts[hyp] == 0
    m, n = distinct[ref], np.maximum(distinct[hyp], 1)
    recall, precision = overlap / m, overlap / n
    f = 2.0 * ((precision * recall) / (precision + recall + 1e-8))
    return {"recall": recall, "precision": precision, "f": f, "empty": empty}


def rouge_l_scores(
    predictions: Sequence[str],
    references: Sequence[str | Sequence[str]],
    lang: Literal["en", "zh"] | None = None,
    measure: Measure = "recall",
    tokenizer: Tokenizer | None = None,
) -> list[float]:
    """Score each sample: the best ROUGE-L `measure` of its prediction over its references (the paper's rule).

    Args:
        predictions (`Sequence[str]`):
            One model answer per sample.
        references (`Sequence[str | Sequence[str]]`):
            One reference or a list of references per sample.
        lang (`"en"` or `"zh"`, *optional*):
            The language of every sample. Detected per sample from its references when not given
            ([`detect_language`]); it picks the tokenizer when `tokenizer` is not given.
        measure (`"recall"`, `"precision"` or `"f"`, *optional*, defaults to `"recall"`):
            The ROUGE-L measure; the paper reports recall.
        tokenizer (`"whitespace"`, `"char"`, `"rouge_score"` or `"jieba"`, *optional*):
            How texts become words (see [`to_rouge_text`]). Defaults to the paper's choice per language:
            whitespace for English, characters for Chinese.

    Returns:
        `list[float]`: one score per sample.

    >>> rouge_l_scores(["The cat sat.", "皇上万福金安"], [["The cat sat on the mat."], ["皇上吉祥"]])
    [0.5, 0.5]
    """
    if measure not in ("recall", "precision", "f"):
        raise ValueError(f"measure={measure!r} is not one of 'recall', 'precision', 'f'.")
    if lang not in (None, "en", "zh"):
        raise ValueError(f"lang={lang!r} is not one of 'en', 'zh' (or None to detect it per sample).")
    if len(predictions) != len(references):
        raise ValueError(f"Got {len(predictions)} predictions but {len(references)} reference lists: pass one each.")
    flat_predictions, flat_references, owners = [], [], []
    for index, (prediction, sample_references) in enumerate(zip(predictions, references)):
        if isinstance(sample_references, str):
            sample_references = [sample_references]
        if not sample_references:
            raise ValueError(f"Sample {index} has no reference: every prediction needs at least one.")
        if not isinstance(prediction, str) or not all(isinstance(r, str) for r in sample_references):
            raise ValueError(
                f"Sample {index}: predictions and references must be strings, got {prediction!r} and "
                f"{sample_references!r} (score a failed generation as an empty string)."
            )
        sample_lang = lang or detect_language(" ".join(sample_references))
        sample_tokenizer = tokenizer or PAPER_TOKENIZERS[sample_lang]
        rouge_prediction = to_rouge_text(prediction, sample_tokenizer)
        for reference in sample_references:
            flat_predictions.append(rouge_prediction)
            flat_references.append(to_rouge_text(reference, sample_tokenizer))
            owners.append(index)
    try:
        scores = rouge_l_pairs(flat_predictions, flat_references)
    except ValueError as error:  # name the sample, not the flattened pair
        pair = int(str(error).split()[1])
        raise ValueError(f"Sample {owners[pair]}: a reference has no sentence to score against.") from error
    best = np.zeros(len(predictions))
    np.maximum.at(best, np.asarray(owners, dtype=np.int64), scores[measure])
    empty = np.unique(np.asarray(owners, dtype=np.int64)[scores["empty"]])
    if len(empty):
        logger.warning(f"{len(empty)} of {len(predictions)} predictions are empty and score 0 (samples {empty[:10]}).")
    return best.tolist()


def rouge_l(
    predictions: Sequence[str],
    references: Sequence[str | Sequence[str]],
    lang: Literal["en", "zh"] | None = None,
    measure: Measure = "recall",
    tokenizer: Tokenizer | None = None,
) -> float:
    """The paper's ROUGE-L: the mean over samples of [`rouge_l_scores`] (same arguments).

    >>> rouge_l(["Arr, the sea is cruel.", "I fought in Korea."], ["The sea is a cruel mistress.", "I fought."])
    0.75
    """
    scores = rouge_l_scores(predictions, references, lang=lang, measure=measure, tokenizer=tokenizer)
    if not scores:
        raise ValueError("rouge_l needs at least one sample.")
    return float(np.mean(scores))
