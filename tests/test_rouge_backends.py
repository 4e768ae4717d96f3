"""ROUGE-L backends: the compiled `numba` kernels (the default) and the NumPy fallback both equal `rouge` 1.0.1."""

import logging
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from test_rouge import WORDS, assert_same_as_rouge, random_text

import rolellm.rouge
from rolellm.rouge import lcs_numba
from rolellm.rouge import score as rouge_module
from rolellm.rouge.lcs import _encode_in_python, encode_texts
from rolellm.rouge.lcs_numba import distinct_word_counts, union_lcs_overlaps
from rolellm.rouge.score import rouge_l_pairs, split_sentences


@pytest.fixture(params=["numba", "numpy"])
def backend(request, monkeypatch):
    """Run a test once with the compiled kernels and once with the NumPy LCS (as without numba installed)."""
    monkeypatch.setattr(rouge_module, "_KERNELS", None if request.param == "numba" else False)
    yield request.param
    assert (rouge_module._KERNELS is not False) == (request.param == "numba")


def random_pairs(seed, vocabulary, max_words, count):
    rng = random.Random(seed)
    pairs = [(random_text(rng, vocabulary, max_words), random_text(rng, vocabulary, max_words)) for _ in range(count)]
    return [pair for pair in pairs if split_sentences(pair[0]) and split_sentences(pair[1])]


@pytest.mark.parametrize("max_words,count", [(12, 2000), (90, 200), (300, 20)])
def test_both_backends_identical_to_rouge(backend, max_words, count):
    # up to 300 words in one sentence: LCS bit vectors of up to 5 64-bit words, carries across them
    dots = [".", "."] if max_words < 300 else []
    pairs = random_pairs(max_words + 1, WORDS + dots, max_words, count)
    assert assert_same_as_rouge(*zip(*pairs)) > 0.9 * count


def test_backends_agree_on_many_words_and_repeated_texts():
    # a vocabulary larger than 16-bit ids, texts that repeat as predictions and references, a text scored against
    # itself (every word on the LCS) and one without a common word
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(70_000)] + ["."] * 2000
    texts = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 150))) for _ in range(600)]
    texts = [text for text in texts if split_sentences(text)]
    predictions = [rng.choice(texts) for _ in range(1500)] + texts[:5] + ["alpha beta"]
    references = [rng.choice(texts) for _ in range(1500)] + texts[:5] + ["gamma"]
    compiled = rouge_l_pairs(predictions, references)
    rouge_module._KERNELS = False
    try:
        fallback = rouge_l_pairs(predictions, references)
    finally:
        rouge_module._KERNELS = None
    for measure in ("recall", "precision", "f"):
        assert compiled[measure].tolist() == fallback[measure].tolist()
    assert compiled["recall"][1500:1505].tolist() == [1.0] * 5 and compiled["recall"][-1] == 0.0


def test_compiled_splitting_equals_python_splitting():
    # every character Python splits on (all of Unicode) and neighbours of the multi-byte ones, dots, words longer
    # than 8 bytes that differ late, NUL bytes, empty and whitespace-only texts, and a lone surrogate (Python path)
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    near = ["\u0084", "\u00a1", "\u1681", "\u200b", "\u2027", "\u202a", "\u2030", "\u205e", "\u3001", "\u2e80"]
    rng = random.Random(1)
    pieces = ["a", "bé", "孙", ".", "", "\U0001f600", "abcdefghij", "abcdefghik", "\x00", *spaces, *near]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 25))) for _ in range(4000)]
    for batch in (texts, texts[:1], [], ["", ".", " "], [*texts[:50], "lone \ud800 surrogate."]):
        compiled, python = encode_texts(batch, lcs_numba), _encode_in_python(batch)
        for got, expected in zip(compiled, python):  # the same numbering too: both in order of first occurrence
            assert got.tolist() == expected.tolist()


def test_pairs_scored_in_chunks_give_the_same_scores(monkeypatch):
    pairs = random_pairs(5, WORDS + [".", "."], 30, 300)
    whole = rouge_l_pairs(*zip(*pairs))
    monkeypatch.setattr(rouge_module, "_CHUNK", 7)
    monkeypatch.setattr(rouge_module, "_PROGRESS_FROM", 100)  # the progress bar path too
    chunked = rouge_l_pairs(*zip(*pairs))
    for measure in ("recall", "precision", "f"):
        assert chunked[measure].tolist() == whole[measure].tolist()
    assert len(set(whole["recall"].tolist())) > 10  # not all the same


def test_kernels_on_encoded_texts():
    word_ids, lengths, first, counts = encode_texts(["a b. c a", "c a b", "x"])
    word_ids = word_ids.astype(np.int64)
    vocab = int(word_ids.max()) + 1
    assert distinct_word_counts(word_ids, lengths, counts, vocab).tolist() == [3, 3, 1]
    # "a b" | "c a" against "c a b": LCS "a b" and "c a", union {a, b, c}; nothing in common with "x"
    starts = np.cumsum(lengths) - lengths
    overlaps = union_lcs_overlaps(word_ids, starts, lengths, first, counts, np.array([0, 2]), np.array([1, 1]), vocab)
    assert overlaps.tolist() == [3, 0]


def test_without_numba_falls_back_to_numpy(monkeypatch, caplog):
    # as without numba: `import numba` raises ImportError, and the kernels module is imported afresh
    monkeypatch.setattr(rouge_module, "_KERNELS", None)
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.delitem(sys.modules, "rolellm.rouge.lcs_numba")
    monkeypatch.delattr(rolellm.rouge, "lcs_numba")
    with caplog.at_level(logging.INFO, logger="rolellm.rouge.score"):
        scores = rouge_l_pairs(["the cat sat. on the mat", "x"], ["a cat sat on a mat", "y"])
    assert rouge_module._KERNELS is False and "numba is not installed" in caplog.text
    assert scores["recall"].tolist() == [4 / 5, 0.0]
    monkeypatch.setattr(rouge_module, "_KERNELS", None)


def test_numba_is_imported_on_the_first_rouge_call_only():
    code = (
        "import sys; import rolellm.rouge.score as r; before = 'numba' in sys.modules; "
        "r.rouge_l(['a b'], ['a c']); print(before, 'numba' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_numba_without_a_cache_folder_falls_back_to_numpy():
    # no cache locator fits (as when neither the package folder nor the user's cache folder is writable)
    code = "import rolellm.rouge.score as r; print(r.rouge_l_pairs(['a b c'], ['a c'])['recall'].tolist())"
    environment = {**os.environ, "NUMBA_CACHE_LOCATOR_CLASSES": "ZipCacheLocator"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment)
    assert result.stdout.split() == ["[1.0]"]
    assert "ROUGE-L runs in NumPy, as numba failed: cannot cache function" in result.stderr
    assert "set NUMBA_CACHE_DIR to a writable folder" in result.stderr


@pytest.mark.exhaustive
@pytest.mark.slow
def test_compiled_kernels_are_cached_for_the_next_process(tmp_path):
    # the first process compiles and writes the cache; the second one loads every kernel from it, compiling none
    code = (
        "from rolellm.rouge import lcs_numba as k; from rolellm.rouge.score import rouge_l_pairs; "
        "rouge_l_pairs(['a b. c'], ['a c']); kernels = (k.encode_utf8, k.union_lcs_overlaps, k.distinct_word_counts); "
        "print(sum(len(f.stats.cache_hits) for f in kernels), sum(len(f.stats.cache_misses) for f in kernels))"
    )
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment)
        for _ in range(2)
    ]
    assert [run.stdout.split() for run in runs] == [["0", "3"], ["3", "0"]]
