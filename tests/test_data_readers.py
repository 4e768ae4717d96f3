import json

import pytest

from rolellm.data.readers import read_rolebench_jsonl
from rolellm.roles.profile import DataFormatError


# (file, subset, lang) -> rows, as the release has them (`test_full_release.py` checks the counts)
RELEASE_FILES = {
    ("rolebench-zh/general/train.jsonl", "general", "zh"): 5933,
    ("rolebench-zh/general/test.jsonl", "general", "zh"): 1451,
    ("rolebench-zh/general/rolegpt_baseline.jsonl", "general", "zh"): 7395,
    ("rolebench-zh/role_specific/train.jsonl", "role_specific", "zh"): 1535,
    ("rolebench-zh/role_specific/test.jsonl", "role_specific", "zh"): 239,
    ("rolebench-zh/role_specific/rolegpt_baseline.jsonl", "role_specific", "zh"): 239,
    ("rolebench-eng/instruction-generalization/role_specific/test.jsonl", "role_specific", "en"): 4750,
    ("rolebench-eng/instruction-generalization/role_specific/rolegpt_baseline.jsonl", "role_specific", "en"): 4750,
}


def released_records(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.parametrize("key", RELEASE_FILES, ids=[k[0] for k in RELEASE_FILES])
def test_release_files_read_as_released(rolebench_dir, key):
    file, subset, lang = key
    rows = read_rolebench_jsonl(rolebench_dir / file, subset, lang)
    released = released_records(rolebench_dir / file)
    assert len(rows) == len(released) > 0
    for row, record in zip(rows, released, strict=True):
        assert set(row) == {"role", "question", "generated", "type", "subset", "lang"}
        assert row["subset"] == subset and row["lang"] == lang
        assert (row["role"], row["question"], row["generated"]) == (
            record["role"],
            record["question"],
            record["generated"],
        )
        assert isinstance(row["type"], list)
        assert len(row["type"]) in (0, len(row["generated"]))


def test_type_becomes_a_list_per_reference(rolebench_dir):
    train = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/role_specific/train.jsonl", "role_specific", "zh")
    test = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/role_specific/test.jsonl", "role_specific", "zh")
    released = released_records(rolebench_dir / "rolebench-zh/role_specific/train.jsonl")
    for kind in ("script_based", "script_agnostic"):
        assert sum(row["type"] == [kind] for row in train) == sum(r["type"] == kind for r in released) > 0
    references = sum(
        len(r["generated"]) for r in released_records(rolebench_dir / "rolebench-zh/role_specific/test.jsonl")
    )
    assert sum(len(row["type"]) for row in test) == references > len(test)  # a row with two references has two types
    general = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/general/train.jsonl", "general", "zh")
    assert all(row["type"] == [] for row in general)


def test_text_stays_as_released(rolebench_dir):
    path = rolebench_dir / "rolebench-eng/instruction-generalization/role_specific/test.jsonl"
    rows = read_rolebench_jsonl(path, "role_specific", "en")
    released = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert [(r["role"], r["question"], r["generated"]) for r in rows] == [
        (r["role"], r["question"], r["generated"]) for r in released
    ]
    assert rows[0]["question"].startswith(" John Coffey, what are")  # the English leading space is kept
    assert any(answer.endswith(" ") for row in rows for answer in row["generated"])
    assert len({row["role"] for row in rows}) == len({r["role"] for r in released}) > 1
    assert "Dr. Frank-N-Furter" in {row["role"] for row in rows}


def _write(tmp_path, *records_or_lines):
    path = tmp_path / "train.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in records_or_lines]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = {"role": "Po", "question": "Who?", "generated": ["Po."], "type": "script_based"}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            '{"role": "Po", "question": "Who?", "generated": ["Po',
            r"train\.jsonl:2: not valid JSON \(the line looks truncated\)",
        ),
        ({"role": "Po", "question": "Who?"}, r"train\.jsonl:2: field 'generated' is missing"),
        (
            {"role": "Po", "question": "Who?", "generated": "Po."},
            r"train\.jsonl:2: field 'generated' must be a list of strings, got str",
        ),
        ({"role": "Po", "question": "Who?", "generated": []}, r"train\.jsonl:2: field 'generated' is an empty list"),
        ({"role": "Po", "question": 3, "generated": ["x"]}, r"train\.jsonl:2: field 'question' must be a string"),
        (
            {**GOOD, "type": ["script_based", "script_based"]},
            r"train\.jsonl:2: field 'type' must be a string or a list with one entry per reference \(1\)",
        ),
        ({**GOOD, "type": "scripted"}, r"train\.jsonl:2: field 'type' has 'scripted'"),
    ],
)
def test_bad_lines_name_file_line_and_field(tmp_path, bad, message):
    path = _write(tmp_path, GOOD, bad)
    with pytest.raises(DataFormatError, match=message):
        read_rolebench_jsonl(path, "role_specific", "en")


def test_bad_arguments_are_rejected(tmp_path):
    path = _write(tmp_path, GOOD)
    with pytest.raises(ValueError, match="subset must be one of"):
        read_rolebench_jsonl(path, "specific", "en")
    with pytest.raises(ValueError, match="lang must be one of"):
        read_rolebench_jsonl(path, "general", "eng")
