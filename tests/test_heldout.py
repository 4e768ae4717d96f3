"""Held-out questions: each role's questions split deterministically, written as a release folder that the
trainer and the evaluation read, with no held-out question in the train rows or the few-shot dialogue."""

import json
from pathlib import Path

import pytest

from rolellm.data.builder import load_rolebench, load_rolebench_profiles
from rolellm.data.heldout import split_role_questions, write_split_release


ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "tests/fixtures/rolebench-slice/rolebench/rolebench-eng/instruction-generalization/role_specific"
DESCRIPTIONS = json.loads((ROOT / "examples/data/roles-eng.json").read_text(encoding="utf-8"))


def slice_rows() -> list[dict]:
    with open(SLICE / "test.jsonl", encoding="utf-8") as stream:
        return [json.loads(line) for line in stream]


def test_split_is_per_role_deterministic_and_independent_of_row_order():
    rows = slice_rows()
    train, held_out = split_role_questions(rows, held_out=8)
    assert len(held_out) == 8 * 4 and len(train) == len(rows) - 32
    assert {row["question"] for row in train}.isdisjoint(row["question"] for row in held_out)
    shuffled_train, shuffled_held_out = split_role_questions(rows[::-1], held_out=8)
    assert sorted(r["question"] for r in shuffled_held_out) == sorted(r["question"] for r in held_out)
    other_seed = split_role_questions(rows, held_out=8, seed=1)[1]
    assert {r["question"] for r in other_seed} != {r["question"] for r in held_out}
    # a fraction rounds per role, and a role always keeps a train question
    assert len(split_role_questions(rows, held_out=0.2)[1]) == 4 * 5
    assert len(split_role_questions(rows[:3], held_out=10)[0]) == 1


@pytest.mark.parametrize("held_out", [0, -1, 0.0, 1.0, 1.5])
def test_split_refuses_a_held_out_size_that_holds_nothing_or_everything(held_out):
    with pytest.raises(ValueError, match=f"held_out={held_out}"):
        split_role_questions(slice_rows(), held_out=held_out)


def test_written_folder_loads_as_a_release_with_train_dialogue_only(tmp_path):
    train, held_out = split_role_questions(slice_rows(), held_out=8)
    data_dir = write_split_release(train, held_out, tmp_path, DESCRIPTIONS, train_dialogue=True)
    splits = load_rolebench("en-instruction-role_specific", data_dir=data_dir, splits=["train", "test"])
    assert [row["question"] for row in splits["test"]] == [row["question"] for row in held_out]
    assert len(splits["train"]) == len(train)
    profiles = load_rolebench_profiles("en", data_dir=data_dir)
    assert profiles["Jack Sparrow"].catchphrases == ["Savvy?"]
    said = {utterance.content for profile in profiles.values() for utterance in profile.dialogue}
    assert {row["question"].strip() for row in train} <= said
    assert said.isdisjoint(row["question"].strip() for row in held_out)


def test_a_role_without_description_is_named_and_nothing_is_written(tmp_path):
    train, held_out = split_role_questions(slice_rows(), held_out=8)
    descriptions = {role: text for role, text in DESCRIPTIONS.items() if role != "John Coffey"}
    with pytest.raises(ValueError, match=r"no description for the roles \['John Coffey'\]"):
        write_split_release(train, held_out, tmp_path / "out", descriptions)
    assert not (tmp_path / "out").exists()
