"""Compiled kernels for [`rouge_l`]: `rouge`'s summary-level union LCS of many text pairs, one loop per pair.

Importing this module imports `numba` and compiles the kernels (once per machine: `cache=True` keeps the machine
code on disk, later processes load it in a fraction of a second). [`rolellm.evaluation.lcs`] imports it on the
first ROUGE-L call, so `import rolellm` stays light.

The LCS of a (reference sentence, prediction sentence) pair is computed with Hyyrö's bit-parallel algorithm (one
`uint64` per 64 prediction words and reference word) and traced back with `rouge._recon_lcs`'s tie-breaking: a
match when the words are equal, otherwise towards the prediction's previous word when that keeps the LCS length,
else towards the reference's previous word. Along one table row that trace goes left to the first column that is
a match or loses length, so each row is one step: the highest set bit of `match | ~v` below the current column.
The words met as matches are counted once per scored pair (`rouge` unions them as a set).

>>> import numpy as np
>>> word_ids = np.array([0, 1, 2, 2, 0, 1], dtype=np.int64)  # texts "a b c" and "c a b", one sentence each
>>> lengths = np.array([3, 3]); first = np.array([0, 1]); counts = np.array([1, 1])
>>> union_lcs_overlaps(word_ids, lengths, first, counts, np.array([0]), np.array([1]), 3).tolist()  # "a b"
[2]
"""

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import leading_zeros


_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(cache=True, nogil=True)
def _lcs_table(x_ids, x0, nx, slots, masks, nw, v):  # pragma: no cover - compiled; exercised through the kernel
    """Fill `v[0 : nx + 1, 0 : nw]`: bit `j - 1` of `v[i]` clear exactly when `table[i][j] = table[i][j - 1] + 1`."""
    one = np.uint64(1)
    for w in range(nw):
        v[0, w] = _ALL
    for i in range(nx):
        slot = slots[x_ids[x0 + i]]
        if slot < 0:  # a word the prediction sentence lacks leaves the row as it is
            for w in range(nw):
                v[i + 1, w] = v[i, w]
            continue
        carry = np.uint64(0)
        for w in range(nw):
            row = v[i, w]
            u = row & masks[slot, w]
            total = row + u
            overflow = total < row
            total += carry
            carry = one if (overflow or total < carry) else np.uint64(0)
            v[i + 1, w] = total | (row ^ u)


@njit(cache=True, nogil=True)
def _trace(x_ids, x0, nx, ny, slots, masks, v, stamp, mark):  # pragma: no cover - compiled
    """Trace `rouge`'s LCS back from `(nx, ny)`; stamp its words with `mark`, return how many were new."""
    new = 0
    j = ny
    for i in range(nx, 0, -1):
        if j == 0:
            break
        word = x_ids[x0 + i - 1]
        slot = slots[word]
        w = (j - 1) >> 6
        below = _ALL >> np.uint64(63 - ((j - 1) & 63))  # columns 0 .. j - 1 of word w
        stop = -1
        while w >= 0:
            bits = ~v[i, w]
            if slot >= 0:
                bits |= masks[slot, w]
            bits &= below
            if bits != 0:
                stop = 64 * w + 63 - np.int64(leading_zeros(bits))
                break
            w -= 1
            below = _ALL
        if stop < 0:  # the row has no match left of j and loses no length: the trace reaches column 0
            break
        if slot >= 0 and (masks[slot, stop >> 6] >> np.uint64(stop & 63)) & np.uint64(1):
            if stamp[word] != mark:
                stamp[word] = mark
                new += 1
            j = stop
        else:
            j = stop + 1
    return new


@njit(cache=True, nogil=True)
def union_lcs_overlaps(word_ids, sentence_lengths, first_sentence, sentence_counts, ref, hyp, vocab_size):
    """For each scored pair `k`, the number of distinct words on `rouge`'s LCS of any (sentence of text `ref[k]`,
    sentence of text `hyp[k]`) pair: the `overlap` of `rouge.rouge_l_summary_level`."""
    starts = np.empty(len(sentence_lengths), dtype=np.int64)
    total = 0
    longest = 0
    for s in range(len(sentence_lengths)):
        starts[s] = total
        total += sentence_lengths[s]
        longest = max(longest, sentence_lengths[s])
    words = (longest + 63) // 64
    masks = np.zeros((longest + 1, max(words, 1)), dtype=np.uint64)  # match bits per distinct prediction word
    v = np.empty((longest + 1, max(words, 1)), dtype=np.uint64)
    slots = np.full(vocab_size, -1, dtype=np.int64)  # word id -> row of `masks` for the current prediction sentence
    stamp = np.full(vocab_size, -1, dtype=np.int64)  # word id -> the last pair that counted it
    overlaps = np.zeros(len(ref), dtype=np.int64)
    for k in range(len(ref)):
        count = 0
        for y in range(first_sentence[hyp[k]], first_sentence[hyp[k]] + sentence_counts[hyp[k]]):
            y0, ny = starts[y], sentence_lengths[y]
            nw = (ny + 63) >> 6
            distinct = 0
            for c in range(ny):
                word = word_ids[y0 + c]
                if slots[word] < 0:
                    slots[word] = distinct
                    distinct += 1
                masks[slots[word], c >> 6] |= np.uint64(1) << np.uint64(c & 63)
            for x in range(first_sentence[ref[k]], first_sentence[ref[k]] + sentence_counts[ref[k]]):
                x0, nx = starts[x], sentence_lengths[x]
                _lcs_table(word_ids, x0, nx, slots, masks, nw, v)
                count += _trace(word_ids, x0, nx, ny, slots, masks, v, stamp, k)
            for c in range(ny):
                slot = slots[word_ids[y0 + c]]
                if slot >= 0:
                    for w in range(nw):
                        masks[slot, w] = 0
                    slots[word_ids[y0 + c]] = -1
        overlaps[k] = count
    return overlaps


@njit(cache=True, nogil=True)
def distinct_word_counts(word_ids, sentence_lengths, sentence_counts, vocab_size):
    """The number of distinct words of each text (`rouge`'s `m` and `n`); texts own consecutive sentences."""
    stamp = np.full(vocab_size, -1, dtype=np.int64)
    counts = np.zeros(len(sentence_counts), dtype=np.int64)
    position = 0
    sentence = 0
    for t in range(len(sentence_counts)):
        for _ in range(sentence_counts[t]):
            for _ in range(sentence_lengths[sentence]):
                word = word_ids[position]
                if stamp[word] != t:
                    stamp[word] = t
                    counts[t] += 1
                position += 1
            sentence += 1
    return counts
