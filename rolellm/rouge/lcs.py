"""The NumPy core of [`rouge_l`]: texts to word ids, and `rouge`'s union LCS of many sentence pairs at once.

`rouge` 1.0.1 fills a Python dict per sentence pair and traces one LCS back through it. Here all sentence pairs of
a call are processed together in NumPy: the LCS tables as bit vectors (Hyyrö's bit-parallel LCS, one `uint64` per
64 columns), traced back with `rouge`'s own tie-breaking, one table row per step. [`rouge_l`] uses this when
`numba` is not installed; with it, the compiled kernels of [`rolellm.rouge.lcs_numba`] do the same work
several times faster.

>>> word_ids, lengths, first, counts = encode_texts(["a b. a", "..", " . "])
>>> lengths.tolist(), first.tolist(), counts.tolist()  # sentences [a b] [a] | none | [""] [""]
([2, 1, 1, 1], [0, 2, 2], [2, 0, 2])
>>> bool(word_ids[0] == word_ids[2]), bool(word_ids[3] == word_ids[4])
(True, True)
"""

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm


# batch sizes: large enough that NumPy's per-call cost is small, small enough to stay in the CPU caches
_MAX_WORDS = 250_000  # (pair, row, 64-bit word) LCS bit vectors per batch
_MAX_COMPARISONS = 2_000_000  # (pair, row, column) word comparisons held at once
_PROGRESS_FROM = 500_000  # sentence pairs (about 25,000 English answer pairs): show a progress bar
_MIN_PAIRS = 1024  # long sentences: fewer, larger batches, as the Python loops run once per row of a batch
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_ONE = np.uint64(1)


def encode_texts(texts: Sequence[str], kernels=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split texts as `rouge` does and number the words: `(word_ids, sentence_lengths, first_sentence, counts)`.

    `word_ids` holds the words of all sentences in order; text `t` owns `counts[t]` sentences from
    `first_sentence[t]`. Equal words get equal ids; a whitespace-only sentence is one empty word. The compiled
    `kernels` ([`rolellm.rouge.lcs_numba`]) split the texts' UTF-8 bytes when given, else Arrow's string
    kernels do (both take Python's `str.isspace` as whitespace); text Arrow cannot hold (lone surrogates) is split
    in Python.
    """
    try:
        array = pa.array(texts, type=pa.large_string())
    except (pa.ArrowException, UnicodeError):
        return _encode_in_python(texts)
    if kernels is not None:
        _, offsets, data = array.buffers()
        offsets = np.frombuffer(offsets, dtype=np.int64)[: len(texts) + 1] if len(texts) else np.zeros(1, np.int64)
        data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        word_ids, lengths, counts = kernels.encode_utf8(data, offsets, kernels.BYTE_CLASSES)
        return word_ids, lengths, np.cumsum(counts) - counts, counts
    pieces = pc.split_pattern(array, ".")
    flat = pc.list_flatten(pieces)
    keep = pc.greater(pc.utf8_length(flat), 0)
    # " ".join(piece.split()).split(" "): trimmed, then split on whitespace runs; a blank piece gives [""]
    words = pc.utf8_split_whitespace(pc.utf8_trim_whitespace(pc.filter(flat, keep)))
    word_ids = pc.dictionary_encode(pc.list_flatten(words)).indices.to_numpy()
    owner = np.repeat(np.arange(len(texts)), pc.list_value_length(pieces).to_numpy())[
        keep.to_numpy(zero_copy_only=False)
    ]
    counts = np.bincount(owner, minlength=len(texts))
    lengths = pc.list_value_length(words).to_numpy().astype(np.int64)
    return word_ids, lengths, np.cumsum(counts) - counts, counts


def _encode_in_python(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    words: list[str] = []
    sentence_lengths: list[int] = []
    counts = np.zeros(len(texts), dtype=np.int64)
    for index, text in enumerate(texts):
        pieces = [piece for piece in text.split(".") if piece]
        counts[index] = len(pieces)
        for piece in pieces:
            sentence = piece.split() or [""]
            words.extend(sentence)
            sentence_lengths.append(len(sentence))
    vocab = {word: i for i, word in enumerate(dict.fromkeys(words))}
    word_ids = np.fromiter(map(vocab.__getitem__, words), dtype=np.int32, count=len(words))
    return word_ids, np.asarray(sentence_lengths, dtype=np.int64), np.cumsum(counts) - counts, counts


def _pad(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, width: int) -> np.ndarray:
    """Rows of `flat[start : start + length]`, padded to `width` with `flat[-1]` (a fill value, not a word)."""
    positions = np.arange(width, dtype=np.int64)
    index = starts[:, None] + positions
    index[positions >= lengths[:, None]] = len(flat) - 1
    return flat[index]


def _match_bits(x: np.ndarray, y: np.ndarray, words: int) -> np.ndarray:
    """`match[i, w, b]`: bit k set when `y[b, 64 * w + k] == x[b, i]`."""
    size, rows = x.shape
    x_rows = np.ascontiguousarray(x.T)
    match = np.zeros((rows, size, words * 8), dtype=np.uint8)
    step = max(1, _MAX_COMPARISONS // max(1, size * y.shape[1]))
    for start in range(0, rows, step):  # rows in chunks: the comparison matrix is the big intermediate
        equal = x_rows[start : start + step, :, None] == y  # (chunk, size, columns)
        packed = np.packbits(equal, axis=-1, bitorder="little")
        match[start : start + step, :, : packed.shape[2]] = packed
    return np.ascontiguousarray(match.view("<u8").transpose(0, 2, 1))


def _lcs_rows(match: np.ndarray) -> np.ndarray:
    """Bit-parallel LCS: `v[i]` has bit `j - 1` clear exactly when `table[i][j] = table[i][j - 1] + 1`."""
    rows, words, size = match.shape
    v = np.empty((rows + 1, words, size), dtype=np.uint64)
    v[0] = _ALL
    word_index = np.arange(words)[:, None]
    for i in range(rows):
        row, u = v[i], v[i] & match[i]
        total = row + u  # (words, size), each word wrapping
        if words > 1:
            # the carry into word w is the overflow of the last word before w that is not all ones (a word of all
            # ones passes a carry on), found with a running maximum instead of a loop over the words
            stops = np.maximum.accumulate(np.where(total != _ALL, word_index, -1), axis=0)
            last = np.concatenate((np.full((1, size), -1), stops[:-1]))
            overflow = total < row
            carry = (last >= 0) & np.take_along_axis(overflow, np.maximum(last, 0), axis=0)
            total += carry.astype(np.uint64)
        v[i + 1] = total | (row ^ u)
    return v


def _highest_bit(bits: np.ndarray) -> np.ndarray:
    """Position of the highest set bit of each column of a `(words, batch)` uint64 array (-1 when none)."""
    exponent = np.minimum(np.frexp(bits.astype(np.float64))[1].astype(np.int64) - 1, 63)  # may round up by one
    exponent -= (bits >> np.maximum(exponent, 0).astype(np.uint64)) == 0
    exponent[bits == 0] = -1
    if bits.shape[0] == 1:
        return exponent[0]
    word = bits.shape[0] - 1 - np.argmax((exponent >= 0)[::-1], axis=0)
    top = exponent[word, np.arange(bits.shape[1])]
    return np.where(top >= 0, 64 * word + top, -1)


def _trace(x, match, v, len_x, len_y) -> np.ndarray:
    """Mark the words of `x` on the LCS `rouge._recon_lcs` traces back from `(len_x, len_y)`.

    `rouge` takes a match when the words are equal, else goes left when that keeps the length, else up. Along one
    row it thus goes left to the first column that is a match or loses length, so each row is one step: the
    highest set bit of `match | ~v` below the current column.
    """
    rows, words, size = match.shape
    if words == 1:
        return _trace_one_word(match[:, 0], v[:, 0], len_x, len_y)
    columns = np.arange(size)
    word_start = 64 * np.arange(words)[:, None]
    j = len_y.copy()
    matched = np.zeros((rows, size), dtype=bool)
    for i in range(rows, 0, -1):
        if not j.any():  # every trace has reached column 0 (traces not started yet keep j = len_y > 0)
            break
        active = (len_x >= i) & (j > 0)
        keep = np.clip(j - word_start, 0, 64)  # columns below j in each word
        below = _ALL >> np.minimum(64 - keep, 63).astype(np.uint64)
        below[keep == 0] = 0
        stop = _highest_bit((match[i - 1] | ~v[i]) & below)
        hit = np.maximum(stop, 0)
        is_match = (stop >= 0) & ((match[i - 1, hit // 64, columns] >> (hit % 64).astype(np.uint64)) & _ONE == 1)
        matched[i - 1] = active & is_match
        j = np.where(active, np.where(stop >= 0, stop + 1 - is_match, 0), j)
    return matched


def _trace_one_word(match: np.ndarray, v: np.ndarray, len_x: np.ndarray, len_y: np.ndarray) -> np.ndarray:
    """[`_trace`] for sentences of at most 64 words: one `uint64` per row, fewer NumPy calls."""
    rows, size = match.shape
    j = len_y.copy()
    matched = np.zeros((rows, size), dtype=bool)
    for i in range(rows, 0, -1):
        if not j.any():
            break
        # j == 0 shifts by 64 (undefined): those traces are inactive and the result is dropped
        stop_bits = (match[i - 1] | ~v[i]) & (_ALL >> (64 - j).astype(np.uint64))
        top = np.frexp(stop_bits.astype(np.float64))[1].astype(np.int64) - 1
        top = np.clip(top, 0, 63)
        top -= (stop_bits >> top.astype(np.uint64)) == 0  # the float may have rounded up to the next power of two
        is_match = ((match[i - 1] >> np.maximum(top, 0).astype(np.uint64)) & _ONE).astype(bool)
        active = (len_x >= i) & (j > 0)
        matched[i - 1] = active & is_match & (stop_bits != 0)
        j = np.where(active, np.where(stop_bits != 0, top + 1 - is_match, 0), j)
    return matched


def union_lcs_words(
    word_ids: np.ndarray, sentence_lengths: np.ndarray, x_sentences: np.ndarray, y_sentences: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`(pair, word_id)` of the words on `rouge`'s traced LCS of each (x sentence, y sentence) pair.

    >>> word_ids, lengths, _, _ = encode_texts(["a b c", "c a b"])
    >>> pairs, words = union_lcs_words(word_ids, lengths, np.array([0]), np.array([1]))
    >>> words.tolist() == word_ids[:2].tolist()  # "a b"
    True
    """
    sentence_starts = np.cumsum(sentence_lengths) - sentence_lengths
    # two different fill values, so padding never matches; 16-bit ids when they fit halve the bytes compared
    small = len(word_ids) == 0 or int(word_ids.max()) < np.iinfo(np.uint16).max - 1
    dtype, fills = (np.uint16, (65535, 65534)) if small else (np.int64, (-1, -2))
    ids = word_ids.astype(dtype)
    x_ids, y_ids = np.append(ids, dtype(fills[0])), np.append(ids, dtype(fills[1]))
    len_x, len_y = sentence_lengths[x_sentences], sentence_lengths[y_sentences]
    words = (len_y + 63) // 64
    # batches: one word count and x lengths within 25% (rows), sorted by y length (columns) inside, as many pairs as
    # the comparison budget allows; few large batches beat tight padding, as the Python loops run per row of a batch
    rows_bucket = np.maximum(8, 1 << np.maximum(np.log2(np.maximum(len_x, 1)).astype(np.int64) - 2, 0))
    group = words * (1 << 40) + np.where(words == 1, -(-len_x // rows_bucket) * rows_bucket, 0)
    order = np.lexsort((len_y, group))
    sorted_group = group[order]
    pairs, hits = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=ids.dtype)]
    begin = 0
    progress = tqdm(total=len(order), desc="ROUGE-L", unit="sentence pair", disable=len(order) < _PROGRESS_FROM)
    while begin < len(order):
        end = begin + int(np.searchsorted(sorted_group[begin:], sorted_group[begin], side="right"))
        cells = np.arange(1, end - begin + 1) * np.maximum.accumulate(len_x[order[begin:end]]) * words[order[begin]]
        fits = int(np.searchsorted(cells, _MAX_WORDS, side="right"))
        # y lengths grow along the group: cut where they pass 1.5 times the first (padding is compared too)
        narrow = int(np.searchsorted(len_y[order[begin:end]], 1.5 * len_y[order[begin]] + 8, side="right"))
        end = min(end, begin + max(_MIN_PAIRS, min(fits, narrow)))
        batch, begin_of_batch, begin = order[begin:end], begin, end
        rows, columns = int(len_x[batch].max()), -(-int(len_y[batch[-1]]) // 8) * 8
        x = _pad(x_ids, sentence_starts[x_sentences[batch]], len_x[batch], rows)
        y = _pad(y_ids, sentence_starts[y_sentences[batch]], len_y[batch], columns)
        match = _match_bits(x, y, int(words[batch[0]]))
        shared = np.flatnonzero(match.any(axis=(0, 1)))  # pairs without a common word have an empty LCS
        batch, x, match = batch[shared], x[shared], np.ascontiguousarray(match[:, :, shared])
        matched = _trace(x, match, _lcs_rows(match), len_x[batch], len_y[batch])
        hit_position, hit_pair = np.nonzero(matched)
        pairs.append(batch[hit_pair])
        hits.append(x[hit_pair, hit_position])
        progress.update(end - begin_of_batch)
    progress.close()
    return np.concatenate(pairs), np.concatenate(hits)
