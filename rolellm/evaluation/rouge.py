"""ROUGE-L exactly as the RoleLLM paper computed it, fast.

The paper scores a model with the ROUGE-L of the `rouge` package (pltrdy/rouge 1.0.1): summary-level union LCS
over sentences split on `"."`, the maximum over a sample's references, averaged over samples, English split on
whitespace and Chinese split into characters (the string `" ".join(list(text))`). `rouge` reimplemented here
gives the same numbers to the last bit, a few hundred times faster: the LCS tables of all sentence pairs are
filled together in NumPy and traced back with `rouge`'s own tie-breaking.

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
import re
from collections.abc import Sequence
from typing import Literal

import numpy as np


logger = logging.getLogger(__name__)

Tokenizer = Literal["whitespace", "char", "rouge_score", "jieba"]
Measure = Literal["recall", "precision", "f"]
Language = Literal["en", "zh"]

PAPER_TOKENIZERS: dict[str, Tokenizer] = {"en": "whitespace", "zh": "char"}
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")
_MAX_CELLS = 8_000_000  # (pair, row, column) match cells compared per NumPy batch


def detect_language(text: str) -> Language:
    """Return `"zh"` when the text has at least as many CJK characters as Latin words, else `"en"`.

    >>> detect_language("Arr, matey."), detect_language("俺老孙来也！OK"), detect_language("")
    ('en', 'zh', 'en')
    """
    cjk = len(_CJK.findall(text))
    return "zh" if cjk and cjk >= len(_LATIN_WORD.findall(text)) else "en"


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


def _encode(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Word ids of the texts' sentences: `(word_ids, sentence_lengths, text_first_sentence, text_sentence_count)`."""
    words: list[str] = []
    sentence_lengths: list[int] = []
    sentence_counts = np.zeros(len(texts), dtype=np.int64)
    for index, text in enumerate(texts):
        pieces = [piece for piece in text.split(".") if piece]
        sentence_counts[index] = len(pieces)
        for piece in pieces:
            sentence = piece.split() or [""]  # == split_sentences(text), inlined for speed
            words.extend(sentence)
            sentence_lengths.append(len(sentence))
    vocab = {word: i for i, word in enumerate(dict.fromkeys(words))}
    word_ids = np.fromiter(map(vocab.__getitem__, words), dtype=np.int64, count=len(words))
    first_sentence = np.cumsum(sentence_counts) - sentence_counts
    return word_ids, np.asarray(sentence_lengths, dtype=np.int64), first_sentence, sentence_counts


def _unique(keys: np.ndarray) -> np.ndarray:
    # sort-based: several times faster than `np.unique`'s hash table on these keys
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys


def _pad(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int, fill: int) -> np.ndarray:
    positions = np.arange(width)
    inside = positions < lengths[:, None]
    return np.where(inside, flat[np.minimum(starts[:, None] + positions, len(flat) - 1)], fill)


_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_ONE = np.uint64(1)


def _highest_bit(bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position of the highest set bit of each row of a `(batch, words)` uint64 array, and whether one is set."""
    smeared = bits.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        smeared |= smeared >> np.uint64(shift)
    top = np.bitwise_count(smeared).astype(np.int64) - 1  # -1 for an all-zero word
    nonzero = top >= 0
    word = bits.shape[1] - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    return 64 * word + np.take_along_axis(top, word[:, None], axis=1)[:, 0], nonzero.any(axis=1)


def _test_bit(bits: np.ndarray, position: np.ndarray) -> np.ndarray:
    word = np.take_along_axis(bits, (position // 64)[:, None], axis=1)[:, 0]
    return ((word >> (position % 64).astype(np.uint64)) & _ONE).astype(bool)


def _trace_lcs(x: np.ndarray, y: np.ndarray, len_x: np.ndarray, len_y: np.ndarray) -> np.ndarray:
    """Mark the words of `x` on the LCS that `rouge._recon_lcs` traces, for a batch of padded sequence pairs.

    The LCS table is kept as bit vectors (Hyyrö's bit-parallel LCS): bit `j - 1` of `v[i]` is 0 exactly when
    `table[i][j] = table[i][j - 1] + 1`. `rouge` walks back from `(len_x, len_y)`: a match when the words are equal,
    else left when that keeps the length, else up. Along one row it goes left until the first column that is a
    match or would lose length, so each row is one step: the highest bit of `match | ~v` below the column.
    """
    size, rows = x.shape
    words = y.shape[1] // 64
    # match[b, i, w]: bit k set when y[b, 64 * w + k] == x[b, i]
    match = np.packbits(x[:, :, None] == y[:, None, :], axis=-1, bitorder="little").view("<u8")
    v = np.empty((rows + 1, size, words), dtype=np.uint64)
    v[0] = _ALL
    for i in range(rows):
        row = v[i]
        u = row & match[:, i]
        if words == 1:
            v[i + 1] = (row + u) | (row ^ u)
            continue
        carry = np.zeros(size, dtype=np.uint64)
        for w in range(words):  # the addition carries across 64-bit words
            total = row[:, w] + u[:, w]
            carried = total + carry
            carry = ((total < row[:, w]) | (carried < total)).astype(np.uint64)
            v[i + 1, :, w] = carried | (row[:, w] ^ u[:, w])
    j = len_y.copy()
    word_start = 64 * np.arange(words)
    matched = np.zeros((size, rows), dtype=bool)
    for i in range(rows, 0, -1):
        active = (len_x >= i) & (j > 0)
        shift = np.clip(j[:, None] - word_start, 0, 64)
        below = np.where(shift >= 64, _ALL, (_ONE << np.minimum(shift, 63).astype(np.uint64)) - _ONE)
        stop, found = _highest_bit((match[:, i - 1] | ~v[i]) & below)
        is_match = found & _test_bit(match[:, i - 1], np.maximum(stop, 0))
        matched[:, i - 1] = active & is_match
        j = np.where(active, np.where(found, stop + ~is_match, 0), j)
    return matched


def _union_lcs_words(word_ids, sentence_lengths, x_sentences, y_sentences) -> tuple[np.ndarray, np.ndarray]:
    """`(sentence_pair, word_id)` for every word of `rouge`'s traced LCS of each (x, y) sentence pair."""
    sentence_starts = np.cumsum(sentence_lengths) - sentence_lengths
    len_x, len_y = sentence_lengths[x_sentences], sentence_lengths[y_sentences]
    words = (len_y + 63) // 64
    order = np.lexsort((len_x, words))
    pairs, hits = [], []
    begin = 0
    while begin < len(order):
        # one batch: pairs of the same word count, sorted by length, within the cell budget
        end = min(len(order), begin + 65536)
        width = int(words[order[begin]]) * 64
        end = begin + int(np.searchsorted(words[order[begin:end]], width // 64, side="right"))
        while end - begin > 1 and (end - begin) * int(len_x[order[end - 1]]) * width > _MAX_CELLS:
            end = begin + (end - begin) // 2
        batch, begin = order[begin:end], end
        rows = int(len_x[batch[-1]])
        x = _pad(word_ids, sentence_starts[x_sentences[batch]], len_x[batch], rows, -1)
        y = _pad(word_ids, sentence_starts[y_sentences[batch]], len_y[batch], width, -2)
        hit_pair, hit_position = np.nonzero(_trace_lcs(x, y, len_x[batch], len_y[batch]))
        pairs.append(batch[hit_pair])
        hits.append(x[hit_pair, hit_position])
    return np.concatenate(pairs), np.concatenate(hits)


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
    text_index = {text: i for i, text in enumerate(texts)}
    word_ids, sentence_lengths, first_sentence, sentence_counts = _encode(texts)
    hyp = np.fromiter(map(text_index.__getitem__, predictions), dtype=np.int64, count=len(predictions))
    ref = np.fromiter(map(text_index.__getitem__, references), dtype=np.int64, count=len(references))
    if (sentence_counts[ref] == 0).any():
        index = int(np.flatnonzero(sentence_counts[ref] == 0)[0])
        raise ValueError(f"Reference {index} ({references[index]!r}) has no sentence to score against.")
    vocab_size = int(word_ids.max(initial=0)) + 1

    # m and n: distinct words per text (rouge compares word sets)
    sentence_text = np.repeat(np.arange(len(texts)), sentence_counts)
    word_text = np.repeat(sentence_text, sentence_lengths)
    distinct = np.bincount(_unique(word_text * vocab_size + word_ids) // vocab_size, minlength=len(texts))

    # every (reference sentence, prediction sentence) pair of every scored pair
    per_pair = sentence_counts[ref] * sentence_counts[hyp]
    owner = np.repeat(np.arange(len(ref)), per_pair)
    local = np.arange(len(owner)) - np.repeat(np.cumsum(per_pair) - per_pair, per_pair)
    x_sentences = first_sentence[ref][owner] + local // sentence_counts[hyp][owner]
    y_sentences = first_sentence[hyp][owner] + local % sentence_counts[hyp][owner]
    overlap = np.zeros(len(ref), dtype=np.int64)
    if len(owner):
        sentence_pair, word = _union_lcs_words(word_ids, sentence_lengths, x_sentences, y_sentences)
        union = _unique(owner[sentence_pair] * vocab_size + word)
        overlap = np.bincount(union // vocab_size, minlength=len(ref))
    empty = sentence_counts[hyp] == 0
    m, n = distinct[ref], np.maximum(distinct[hyp], 1)
    recall, precision = overlap / m, overlap / n
    f = 2.0 * ((precision * recall) / (precision + recall + 1e-8))
    return {"recall": recall, "precision": precision, "f": f, "empty": empty}


def rouge_l_scores(
    predictions: Sequence[str],
    references: Sequence[str | Sequence[str]],
    lang: Language | None = None,
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
    lang: Language | None = None,
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
