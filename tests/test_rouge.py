"""ROUGE-L: bit-for-bit agreement with the `rouge` package and the paper's RoleGPT rows from the release files."""

import json
import logging
import random

import numpy as np
import pytest
from rouge import Rouge

from rolellm.roles.profile import detect_language
from rolellm.rouge.lcs import _encode_in_python, encode_texts, union_lcs_words
from rolellm.rouge.score import (
    rouge_l,
    rouge_l_pairs,
    rouge_l_scores,
    split_sentences,
    to_rouge_text,
)


ROUGE = Rouge(metrics=["rouge-l"])
MEASURES = {"recall": "r", "precision": "p", "f": "f"}
ENGLISH_SPE = "rolebench-eng/instruction-generalization/role_specific"
RELEASE_PARTS = {ENGLISH_SPE: "en", "rolebench-zh/role_specific": "zh", "rolebench-zh/general": "zh"}


def reference_scores(predictions, references):
    """What `rouge` 1.0.1 says for each aligned pair (`None` where it raises)."""
    scores = []
    for prediction, reference in zip(predictions, references):
        try:
            scores.append(ROUGE.get_scores(prediction, reference)[0]["rouge-l"])
        except ValueError:
            scores.append(None)
    return scores


def assert_same_as_rouge(predictions, references):
    ours = rouge_l_pairs(predictions, references)
    expected = reference_scores(predictions, references)
    for index, scores in enumerate(expected):
        for measure, key in MEASURES.items():
            assert ours[measure][index] == scores[key], (predictions[index], references[index], measure)
    return len(expected)


def random_text(rng, vocabulary, max_words):
    # few distinct words, runs of dots and spaces: many LCS ties, empty and whitespace-only sentences
    pieces = [rng.choice(vocabulary) for _ in range(rng.randint(1, max_words))]
    return "".join(piece if not piece.strip(".") or piece.isspace() else " " + piece for piece in pieces)


WORDS = ["a", "b", "c", "d", "é", "x", " ", "  ", "\t", "\u3000", "\x1f"]


@pytest.mark.parametrize(
    "max_words,count,dots",
    [
        (12, 3000, True),
        (40, 600, True),
        (260, 40, True),
        # single sentences of up to 700 words: LCS bit vectors of up to 11 64-bit words, carries across them
        pytest.param(700, 12, False, marks=pytest.mark.slow),
    ],
)
def test_identical_to_rouge_on_random_texts(max_words, count, dots):
    rng = random.Random(max_words)
    vocabulary = WORDS + [".", "."] * dots
    pairs = [(random_text(rng, vocabulary, max_words), random_text(rng, vocabulary, max_words)) for _ in range(count)]
    pairs = [pair for pair in pairs if split_sentences(pair[0]) and split_sentences(pair[1])]
    assert assert_same_as_rouge(*zip(*pairs)) > 0.9 * count


def test_arrow_splitting_equals_python_splitting():
    # every character Python's str.split() splits on, dots, and a lone surrogate (Arrow cannot hold it)
    spaces = [chr(c) for c in range(0x3001) if chr(c).isspace()]
    rng = random.Random(0)
    texts = [
        "".join(rng.choice(["a", "bé", ".", "", *spaces]) for _ in range(rng.randint(0, 20))) for _ in range(3000)
    ]
    for batch in (texts, [*texts[:50], "lone \ud800 surrogate."]):
        arrow, python = encode_texts(batch), _encode_in_python(batch)
        for got, expected in zip(arrow[1:], python[1:]):
            assert got.tolist() == expected.tolist()
        # the same partition of words into ids (the numbering itself may differ)
        assert len(set(zip(arrow[0].tolist(), python[0].tolist()))) == len(set(python[0].tolist()))
        assert len(set(arrow[0].tolist())) == len(set(python[0].tolist()))


def test_wide_word_ids_give_the_same_lcs():
    # more than 65,534 distinct words switch the LCS batches from 16-bit to 64-bit ids
    rng = random.Random(3)
    texts = [random_text(rng, ["a", "b", "c", ".", " "], 30) for _ in range(400)]
    word_ids, lengths, _, _ = encode_texts(texts)
    x, y = np.arange(len(lengths)), np.roll(np.arange(len(lengths)), 1)
    narrow_pairs, narrow_words = union_lcs_words(word_ids, lengths, x, y)
    wide_pairs, wide_words = union_lcs_words(word_ids + 100_000, lengths, x, y)
    assert len(narrow_pairs) > 100 and wide_words.dtype == np.int64
    assert sorted(zip(wide_pairs.tolist(), (wide_words - 100_000).tolist())) == sorted(
        zip(narrow_pairs.tolist(), narrow_words.tolist())
    )


def test_sentence_splitting_matches_rouge_preprocessing():
    assert split_sentences("") == [] and split_sentences("...") == []
    assert split_sentences(" Hi  there. Bye. ") == [["Hi", "there"], ["Bye"], [""]]
    # the whitespace-only last sentence is one more (empty) reference word: 2 distinct hits out of 3 words
    assert rouge_l_pairs(["Hi there"], ["Hi there. "])["recall"].tolist() == [2 / 3]
    assert ROUGE.get_scores("Hi there", "Hi there. ")[0]["rouge-l"]["r"] == 2 / 3


def test_words_are_counted_as_sets():
    # `rouge` counts distinct words: "the" twice in the reference is one word
    assert rouge_l(["the cat"], ["the cat and the dog"]) == 2 / 4
    assert rouge_l(["the cat"], ["the cat and the dog"], measure="precision") == 1.0


def test_empty_prediction_scores_zero_and_is_reported(caplog):
    with caplog.at_level(logging.WARNING, logger="rolellm.rouge.score"):
        scores = rouge_l_scores(["", "...", "a b"], ["a b", "a b", "a b"])
    assert scores == [0.0, 0.0, 1.0]
    assert "2 of 3 predictions are empty" in caplog.text


def test_empty_reference_raises_with_the_sample():
    with pytest.raises(ValueError, match="Sample 1: a reference has no sentence"):
        rouge_l_scores(["a", "b"], [["a"], ["b", "..."]])
    with pytest.raises(ValueError, match="Sample 0 has no reference"):
        rouge_l_scores(["a"], [[]])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="measure='bleu'"):
        rouge_l(["a"], ["a"], measure="bleu")
    with pytest.raises(ValueError, match="lang='fr'"):
        rouge_l(["a"], ["a"], lang="fr")
    with pytest.raises(ValueError, match="2 predictions but 1 reference"):
        rouge_l(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="tokenizer='bpe'"):
        rouge_l(["a"], ["a"], tokenizer="bpe")
    with pytest.raises(ValueError, match="Sample 1: predictions and references must be strings, got None"):
        rouge_l(["a", None], ["a", "b"])
    with pytest.raises(ValueError, match="must be strings"):
        rouge_l_pairs(["a"], [3])


def test_max_over_references_mean_over_samples():
    predictions = ["the sea is cruel", "I fought in Korea"]
    references = [["a cruel sea is the sea", "the sea"], ["Korea. I fought", "Korea"]]
    expected = [
        [ROUGE.get_scores(prediction, reference)[0]["rouge-l"] for reference in sample]
        for prediction, sample in zip(predictions, references)
    ]
    for measure, key in MEASURES.items():
        best = [max(scores[key] for scores in sample) for sample in expected]
        assert rouge_l_scores(predictions, references, measure=measure) == best
        assert rouge_l(predictions, references, measure=measure) == sum(best) / 2
    assert rouge_l_scores(predictions, references) == [1.0, 1.0]  # "the sea" and "Korea" are fully recalled


def test_language_detected_per_sample():
    assert detect_language("Arr, matey") == "en" and detect_language("俺老孙来也") == "zh"
    predictions = ["俺老孙来也，妖怪哪里走", "the cat sat"]
    references = [["俺老孙去也，妖怪快走"], ["the cat sat on the mat"]]
    expected = [
        ROUGE.get_scores(" ".join(predictions[0]), " ".join(references[0][0]))[0]["rouge-l"]["r"],
        ROUGE.get_scores(predictions[1], references[1][0])[0]["rouge-l"]["r"],
    ]
    assert rouge_l_scores(predictions, references) == expected
    # forcing English on Chinese text makes each clause one word
    assert rouge_l_scores(predictions[:1], references[:1], lang="en") == [0.0]


def test_other_tokenizers():
    assert to_rouge_text("Hello, World. Bye!", "rouge_score") == "hello world bye"
    assert rouge_l(["Hello, world!"], ["hello world"], tokenizer="rouge_score") == 1.0
    assert rouge_l(["Hello, world!"], ["hello world"]) == 0.0  # paper: case and punctuation count
    assert to_rouge_text("我爱北京天安门", "jieba").split() == ["我", "爱", "北京", "天安门"]
    assert rouge_l(["我爱北京"], ["我爱北京天安门"], tokenizer="jieba") == 3 / 4


def read_jsonl(path):
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file]


def release_pairs(rolebench_dir, part, split="test"):
    """Baseline answers and the references of the same (role, question): rows are not in the same order."""
    tests = read_jsonl(rolebench_dir / part / f"{split}.jsonl")
    baseline = {(row["role"], row["question"]): row["generated"][0] for row in read_jsonl(rolebench_dir / part / "rolegpt_baseline.jsonl")}  # fmt: skip
    return [baseline[row["role"], row["question"]] for row in tests], [row["generated"] for row in tests]


def test_stripping_the_release_text_changes_the_english_spe(rolebench_dir):
    predictions, references = release_pairs(rolebench_dir, ENGLISH_SPE)
    stripped = [[reference.strip() for reference in sample] for sample in references]
    # the full release: 0.3229 as released, 0.3232 stripped (`test_full_release.py`)
    assert rouge_l([p.strip() for p in predictions], stripped) != rouge_l(predictions, references)


@pytest.mark.parametrize(
    "part,split",
    [
        (ENGLISH_SPE, "test"),
        ("rolebench-zh/role_specific", "test"),
        ("rolebench-zh/general", "test"),
        ("rolebench-zh/general", "train"),  # the Chinese baseline file answers the train questions too
    ],
)
def test_identical_to_rouge_on_release_pairs(rolebench_dir, part, split):
    """A fixed sample of each part's pairs; `bench/bench_rouge_all_pairs.py` (`make bench`) checks every pair."""
    predictions, references = release_pairs(rolebench_dir, part, split)
    tokenizer = "char" if RELEASE_PARTS[part] == "zh" else "whitespace"
    flat = [(p, r) for p, refs in zip(predictions, references) for r in refs]
    assert len(flat) == sum(map(len, references)) > 0  # the release's pair counts: `test_full_release.py`
    sample = random.Random(0).sample(flat, min(300, len(flat)))
    flat_predictions = [to_rouge_text(p, tokenizer) for p, _ in sample]
    flat_references = [to_rouge_text(r, tokenizer) for _, r in sample]
    assert assert_same_as_rouge(flat_predictions, flat_references) == len(sample)
