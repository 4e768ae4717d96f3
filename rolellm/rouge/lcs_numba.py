"""Compiled kernels for [`rouge_l`]: `rouge`'s summary-level union LCS of many text pairs, one loop per pair.

Importing this module imports `numba` and compiles the kernels (once per machine: `cache=True` keeps the machine
code on disk, later processes load it in a fraction of a second). [`rolellm.rouge.lcs`] imports it on the
first ROUGE-L call, so `import rolellm` stays light.

The LCS of a (reference sentence, prediction sentence) pair is computed with Hyyrö's bit-parallel algorithm (one
`uint64` per 64 prediction words and reference word) and traced back with `rouge._recon_lcs`'s tie-breaking: a
match when the words are equal, otherwise towards the prediction's previous word when that keeps the LCS length,
else towards the reference's previous word. Along one table row that trace goes left to the first column that is
a match or loses length, so each row is one step: the highest set bit of `match | ~v` below the current column.
The words met as matches are counted once per scored pair (`rouge` unions them as a set).

>>> import numpy as np
>>> word_ids = np.array([0, 1, 2, 2, 0, 1], dtype=np.int64)  # texts "a b c" and "c a b", one sentence each
>>> starts, lengths = np.array([0, 3]), np.array([3, 3])  # sentences (one per text)
>>> first, counts = np.array([0, 1]), np.array([1, 1])  # texts
>>> union_lcs_overlaps(word_ids, starts, lengths, first, counts, np.array([0]), np.array([1]), 3).tolist()  # "a b"
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
def _short_pair(x_ids, x0, nx, ny, slots, masks, v, stamp, mark):  # pragma: no cover - compiled
    """[`_lcs_table`] and [`_trace`] in one, for a prediction sentence of at most 64 words (one `uint64` per row)."""
    row = _ALL
    v[0] = row
    shared = False
    for i in range(nx):
        slot = slots[x_ids[x0 + i]]
        if slot >= 0:
            u = row & masks[slot, 0]
            row = (row + u) | (row ^ u)
            shared = True
        v[i + 1] = row
    if not shared:  # no common word: the LCS is empty
        return 0
    new = 0
    j = ny
    for i in range(nx, 0, -1):
        word = x_ids[x0 + i - 1]
        slot = slots[word]
        match = masks[slot, 0] if slot >= 0 else np.uint64(0)
        bits = (match | ~v[i]) & (_ALL >> np.uint64(64 - j))  # columns 0 .. j - 1
        if bits == 0:
            break
        stop = 63 - np.int64(leading_zeros(bits))
        if (match >> np.uint64(stop)) & np.uint64(1):
            if stamp[word] != mark:
                stamp[word] = mark
                new += 1
            j = stop
            if j == 0:
                break
        else:
            j = stop + 1
    return new


@njit(cache=True, nogil=True)
def union_lcs_overlaps(
    word_ids, sentence_starts, sentence_lengths, first_sentence, sentence_counts, ref, hyp, vocab_size
):
    """For each scored pair `k`, the number of distinct words on `rouge`'s LCS of any (sentence of text `ref[k]`,
    sentence of text `hyp[k]`) pair: the `overlap` of `rouge.rouge_l_summary_level`."""
    starts = sentence_starts
    longest = sentence_lengths.max() if len(sentence_lengths) else 0
    words = (longest + 63) // 64
    masks = np.zeros((longest + 1, max(words, 1)), dtype=np.uint64)  # match bits per distinct prediction word
    v = np.empty((longest + 1, max(words, 1)), dtype=np.uint64)
    short = np.empty(longest + 1, dtype=np.uint64)  # `v` of a prediction sentence of at most 64 words
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
                if nw == 1:
                    count += _short_pair(word_ids, x0, nx, ny, slots, masks, short, stamp, k)
                else:
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


# `encode_utf8`'s byte classes: 0 inside a word, 1 ASCII whitespace, 2 ".", 3 may start multi-byte whitespace
BYTE_CLASSES = np.zeros(256, dtype=np.uint8)
BYTE_CLASSES[[0x20, *range(0x09, 0x0E), *range(0x1C, 0x20)]] = 1
BYTE_CLASSES[0x2E] = 2
BYTE_CLASSES[[0xC2, 0xE1, 0xE2, 0xE3]] = 3


@njit(cache=True, nogil=True, inline="always")
def _space_width(data, i, end):  # pragma: no cover - compiled
    """Bytes of the whitespace character (Python's `str.isspace`) starting at `data[i]`, 0 when not whitespace."""
    byte = data[i]
    if byte == 0x20 or 0x09 <= byte <= 0x0D or 0x1C <= byte <= 0x1F:
        return 1
    if byte == 0xC2:  # U+0085, U+00A0
        return 2 if i + 1 < end and (data[i + 1] == 0x85 or data[i + 1] == 0xA0) else 0
    if byte < 0xE1 or byte > 0xE3 or i + 2 >= end:
        return 0
    second, third = data[i + 1], data[i + 2]
    if byte == 0xE1:  # U+1680
        return 3 if second == 0x9A and third == 0x80 else 0
    if byte == 0xE3:  # U+3000
        return 3 if second == 0x80 and third == 0x80 else 0
    if second == 0x80:  # U+2000 .. U+200A, U+2028, U+2029, U+202F
        return 3 if third <= 0x8A or third == 0xA8 or third == 0xA9 or third == 0xAF else 0
    return 3 if second == 0x81 and third == 0x9F else 0  # U+205F


@njit(cache=True, nogil=True)
def encode_utf8(data, offsets, classes):  # pragma: no cover - compiled
    """Split UTF-8 texts as `rouge` does and number their words: `(word_ids, sentence_lengths, sentence_counts)`.

    Text `t` is `data[offsets[t] : offsets[t + 1]]`. Its sentences are the non-empty pieces between `"."`s (a byte
    never inside a multi-byte character), each split on whitespace runs; a piece of only whitespace is one empty
    word (`" ".join(piece.split()).split(" ")`). Word ids count distinct words in order of first occurrence, from a
    hash table keyed by a word's first 8 bytes, its length and a hash of the rest (kept in a compact copy, so
    comparing a long word reads no cold memory). `classes` is [`BYTE_CLASSES`] (an argument, not a default, so
    that the on-disk cache of the compiled code is found again).
    """
    size = offsets[-1] - offsets[0]
    bound = size // 2 + len(offsets)  # a word or sentence takes a byte and a separator, but the last of a text
    word_ids = np.empty(bound, dtype=np.int64)
    sentence_lengths = np.empty(bound, dtype=np.int64)
    sentence_counts = np.zeros(len(offsets) - 1, dtype=np.int64)
    table = np.full(1 << 12, -1, dtype=np.int64)  # open addressing, linear probing, at most half full
    keys = np.empty(len(table), dtype=np.uint64)  # per distinct word: its first 8 bytes,
    tails = np.empty(len(table), dtype=np.uint64)  # a hash of the bytes after them,
    lengths = np.empty(len(table), dtype=np.int64)  # its length (-1 for the empty word, which is not in the table)
    starts = np.empty(len(table), dtype=np.int64)  # and where the bytes after the 8th are in `store`
    store = np.empty(size + 1, dtype=np.uint8)
    stored = 0
    mask = len(table) - 1
    prime = np.uint64(1099511628211)
    words = 0
    sentences = 0
    distinct = 0
    empty = -1  # the id of the empty word (a sentence of only whitespace)
    for t in range(len(offsets) - 1):
        i = offsets[t]
        end = offsets[t + 1]
        piece = i
        first = words
        while True:
            if i == end or data[i] == 0x2E:
                if i > piece:
                    if words == first:
                        if empty < 0:
                            empty = distinct
                            keys[distinct] = 0
                            tails[distinct] = 0
                            lengths[distinct] = -1
                            distinct += 1
                        word_ids[words] = empty
                        words += 1
                    sentence_lengths[sentences] = words - first
                    sentences += 1
                    sentence_counts[t] += 1
                if i == end:
                    break
                i += 1
                piece = i
                first = words
                continue
            kind = classes[data[i]]
            if kind == 1:
                i += 1
                continue
            if kind == 3:
                width = _space_width(data, i, end)
                if width:
                    i += width
                    continue
            start = i
            length = 0
            key = np.uint64(0)
            tail = np.uint64(14695981039346656037)
            while i < end:
                byte = data[i]
                kind = classes[byte]
                if kind != 0 and (kind != 3 or _space_width(data, i, end)):
                    break
                if length < 8:
                    key |= np.uint64(byte) << np.uint64(8 * length)
                else:
                    tail = (tail ^ np.uint64(byte)) * prime
                length += 1
                i += 1
            h = (key ^ tail ^ np.uint64(length)) * np.uint64(0x9E3779B97F4A7C15)
            h ^= h >> np.uint64(29)
            slot = np.int64(h & np.uint64(mask))
            while True:
                found = table[slot]
                if found < 0:
                    table[slot] = distinct
                    keys[distinct] = key
                    tails[distinct] = tail
                    lengths[distinct] = length
                    starts[distinct] = stored
                    for b in range(8, length):
                        store[stored] = data[start + b]
                        stored += 1
                    found = distinct
                    distinct += 1
                    if 2 * distinct > len(table):  # twice the room (the empty word may take one more)
                        keys = np.concatenate((keys, np.empty(len(table), dtype=np.uint64)))
                        tails = np.concatenate((tails, np.empty(len(table), dtype=np.uint64)))
                        lengths = np.concatenate((lengths, np.empty(len(table), dtype=np.int64)))
                        starts = np.concatenate((starts, np.empty(len(table), dtype=np.int64)))
                        table = np.full(2 * len(table), -1, dtype=np.int64)
                        mask = len(table) - 1
                        for d in range(distinct):
                            hd = (keys[d] ^ tails[d] ^ np.uint64(lengths[d])) * np.uint64(0x9E3779B97F4A7C15)
                            hd ^= hd >> np.uint64(29)
                            s = np.int64(hd & np.uint64(mask))
                            while table[s] >= 0:
                                s = (s + 1) & mask
                            table[s] = d
                    break
                if keys[found] == key and lengths[found] == length and tails[found] == tail:
                    same = True
                    for b in range(8, length):
                        if store[starts[found] + b - 8] != data[start + b]:
                            same = False
                            break
                    if same:
                        break
                slot = (slot + 1) & mask
            word_ids[words] = found
            words += 1
    return word_ids[:words], sentence_lengths[:sentences], sentence_counts
