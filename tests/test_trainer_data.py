"""RoleBench rows -> RoCIT chats on the real Chinese release files: counts equal the release's."""

import datasets
import pytest

from rolellm import build_system_instruction
from rolellm.data.readers import read_rolebench_jsonl
from rolellm.roles.resolve import load_profiles
from rolellm.training.data import mix_subsets, rolebench_to_conversations


@pytest.fixture(scope="module")
def zh_train(rolebench_dir):
    root = rolebench_dir / "rolebench-zh"
    rows = read_rolebench_jsonl(root / "general" / "train.jsonl", "general", "zh")
    rows += read_rolebench_jsonl(root / "role_specific" / "train.jsonl", "role_specific", "zh")
    return datasets.Dataset.from_list(rows)


def test_release_rows_become_one_chat_each(zh_train, rolebench_dir):
    profiles = load_profiles(rolebench_dir)
    assert sorted(profiles) == ["华妃", "孙悟空", "张飞", "李白", "皇帝"]
    chats = rolebench_to_conversations(zh_train, profiles)
    general, specific = zh_train["subset"].count("general"), zh_train["subset"].count("role_specific")
    assert general > specific > 0  # the full release: 5933 and 1535
    assert len(chats) == general + specific
    assert chats["subset"].count("general") == general and chats["subset"].count("role_specific") == specific
    first = chats[0]["messages"]
    assert first[0] == {"role": "system", "content": build_system_instruction(profiles[zh_train[0]["role"]])}
    assert first[1]["content"] == zh_train[0]["question"].strip()
    assert first[2]["content"] == zh_train[0]["generated"][0].strip()


def test_reference_all_gives_one_chat_per_reference(zh_train, rolebench_dir):
    chats = rolebench_to_conversations(zh_train, load_profiles(rolebench_dir), reference="all")
    assert len(chats) == sum(len(generated) for generated in zh_train["generated"])


def test_mixing_reaches_the_fraction(zh_train):
    general, specific = zh_train["subset"].count("general"), zh_train["subset"].count("role_specific")
    assert general > specific  # the full release: 5933 and 1535
    mixed = mix_subsets(zh_train, 0.5, seed=0)
    assert mixed["subset"].count("role_specific") == specific and mixed["subset"].count("general") == specific
    assert mix_subsets(zh_train, 0.5, seed=0)["question"] == mixed["question"]  # seeded
    assert len(mix_subsets(zh_train, 0.0)) == general and set(mix_subsets(zh_train, 1.0)["subset"]) == {
        "role_specific"
    }
