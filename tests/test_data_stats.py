import json

import pytest
from fixtures.mini_release import write_mini_release

from rolellm.data.stats import LeakageError, check_leakage, check_release_leakage, count_words, rolebench_stats
from rolellm.scripts import cli


@pytest.fixture(scope="module")
def mini_release(tmp_path_factory):
    return write_mini_release(tmp_path_factory.mktemp("mini-release"))


def by_key(table):
    return {(row["part"], row["split"], row["subset"]): row for row in table}


def _released(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_real_chinese_stats_match_the_files(rolebench_dir):
    """Counted from the files here; the paper's Table 1 from the full release is in `test_full_release.py`."""
    table = by_key(rolebench_stats(rolebench_dir, zh_tokenizer="chars"))
    zh = rolebench_dir / "rolebench-zh"
    specific_rows = _released(zh / "role_specific/train.jsonl")
    specific = table[("zh", "train", "role_specific")]
    assert (specific["rows"], specific["script_based"], specific["script_agnostic"]) == (
        len(specific_rows),
        sum(row["type"] == "script_based" for row in specific_rows),
        sum(row["type"] == "script_agnostic" for row in specific_rows),
    )
    general_rows, general_test = _released(zh / "general/train.jsonl"), _released(zh / "general/test.jsonl")
    general = table[("zh", "train", "general")]
    assert (general["rows"], general["roles"]) == (len(general_rows), 5)
    assert table[("zh", "test", "general")]["rows"] == len(general_test)
    specific_test = _released(zh / "role_specific/test.jsonl")  # 240 references on the full release
    assert table[("zh", "test", "role_specific")]["references"] == sum(len(row["generated"]) for row in specific_test)
    total = table[("zh", "train+test", "general")]
    assert total["rows"] == len(general_rows) + len(general_test)
    assert general["instructions"] <= total["instructions"] <= general["instructions"] + len(general_test)
    english_rows = _released(rolebench_dir / "rolebench-eng/instruction-generalization/role_specific/test.jsonl")
    english = table[("en-instruction", "test", "role_specific")]
    assert (english["rows"], english["roles"], english["script_based"], english["script_agnostic"]) == (
        len(english_rows),
        len({row["role"] for row in english_rows}),
        sum(kind == "script_based" for row in english_rows for kind in row["type"]),
        sum(kind == "script_agnostic" for row in english_rows for kind in row["type"]),
    )
    # only files that are present are reported: the English train files and general files are not in this copy
    assert ("en-instruction", "train", "role_specific") not in table
    assert ("en-role", "test", "general") not in table


def test_average_lengths_in_words():
    rows = [
        {"role": "A", "question": "one two three", "generated": ["a b", "c d e f"], "type": [], "lang": "en"},
        {"role": "A", "question": "one", "generated": ["x"], "type": [], "lang": "en"},
    ]
    from rolellm.data.stats import compute_stats

    stats = compute_stats(rows)
    assert stats["avg_instruction_words"] == 2.0 and stats["avg_response_words"] == pytest.approx(7 / 3, abs=0.01)
    assert count_words("俺老孙 来也！", "zh", zh_tokenizer="chars") == 5
    assert count_words("我今天去北京", "zh") == 4  # jieba: 我 / 今天 / 去 / 北京


def test_mini_release_stats_and_no_leakage(mini_release):
    table = by_key(rolebench_stats(mini_release, zh_tokenizer="chars"))
    assert table[("en-role", "test", "all")]["roles"] == 1
    assert table[("en-instruction", "train", "all")]["rows"] == 21
    assert all(report.ok for report in check_release_leakage(mini_release).values())


def test_dataset_stats_on_a_loaded_config_match_the_file_stats(mini_release, tmp_path):
    from rolellm.data.builder import load_rolebench
    from rolellm.data.stats import dataset_stats

    dataset = load_rolebench("zh", data_dir=mini_release, cache_dir=tmp_path / "cache")
    from_dataset = {(r["split"], r["subset"]): r for r in dataset_stats(dataset, zh_tokenizer="chars")}
    from_files = by_key(rolebench_stats(mini_release, zh_tokenizer="chars"))
    for split in ("train", "test"):
        for subset in ("general", "role_specific", "all"):
            expected = {
                k: v for k, v in from_files[("zh", split, subset)].items() if k not in ("part", "split", "subset")
            }
            assert {k: v for k, v in from_dataset[(split, subset)].items() if k not in ("split", "subset")} == expected
    assert from_dataset[("rolegpt_baseline", "all")]["rows"] == 8


def test_leakage_is_found_and_raises():
    train = [{"role": "Po", "question": "Who are you?"}, {"role": "Shifu", "question": "Why?"}]
    test = [{"role": "Po", "question": " Who are you? "}, {"role": "Po", "question": "Why?"}]
    report = check_leakage(train, test)
    assert report.leaked_pairs == [("Po", "Who are you?")] and not report.ok
    with pytest.raises(LeakageError, match="1 test \\(role, question\\) pair"):
        report.raise_for_leakage()
    held_out = check_leakage(train, [{"role": "Po", "question": "New?"}], role_generalization=True)
    assert held_out.leaked_roles == ["Po"]
    with pytest.raises(LeakageError, match="held-out test role\\(s\\) appear in train: Po"):
        held_out.raise_for_leakage("en-role-general")
    assert check_leakage(
        train, [{"role": "Po", "question": "New?"}]
    ).ok  # same role is fine outside role generalization


def test_real_chinese_role_specific_release_has_7_leaked_pairs(rolebench_dir):
    reports = check_release_leakage(rolebench_dir)
    assert reports["zh-general"].ok
    assert len(reports["zh-role_specific"].leaked_pairs) == 7
    assert reports["en-instruction-role_specific"] is None  # no English train file in this copy


def test_cli_stats_prints_table_1(rolebench_dir, capsys):
    assert cli.main(["data", "stats", "--data-dir", str(rolebench_dir), "--zh-tokenizer", "chars"]) == 0
    out = capsys.readouterr().out
    table = by_key(rolebench_stats(rolebench_dir, zh_tokenizer="chars"))
    specific, general = table[("zh", "train", "role_specific")], table[("zh", "train", "general")]
    # the full release: "| zh | train | role_specific | 1,535 | 1,533 | 5 | 912 | 623 |" (`test_full_release.py`)
    assert (
        f"| zh | train | role_specific | {specific['rows']:,} | {specific['instructions']:,} | 5 | "
        f"{specific['script_based']:,} | {specific['script_agnostic']:,} |" in out
    )
    assert f"| zh | train | general | {general['rows']:,} | {general['instructions']:,} | 5 |" in out


def test_cli_stats_json(mini_release, capsys):
    assert cli.main(["data", "stats", "--data-dir", str(mini_release), "--zh-tokenizer", "chars", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 27  # 3 parts x (train, test, train+test) x (general, role_specific, all)


def test_cli_check_fails_loudly_on_the_release_leak(rolebench_dir, mini_release, capsys):
    assert cli.main(["data", "check", "--data-dir", str(rolebench_dir)]) == 1
    out = capsys.readouterr().out
    assert "zh-role_specific: 7 test (role, question) pair(s) are also in train" in out
    assert "2 part(s) checked for leakage, 1 with leakage" in out
    assert "zh-role_specific/train: 2 row(s) repeat the role and question of an earlier row" in out
    assert cli.main(["data", "check", "--data-dir", str(mini_release)]) == 0


def test_cli_rejects_a_missing_folder(tmp_path, capsys):
    assert cli.main(["data", "stats", "--data-dir", str(tmp_path / "nowhere")]) == 2  # a usage error
    assert "is not a folder" in capsys.readouterr().err


def test_cli_check_finds_repeated_and_copied_rows_in_english_files_without_a_pair(tmp_path, capsys):
    """English files are checked even where a config has no train/test pair: repeated rows in a file, and test
    rows copied into another config's train, each make the check fail with the file named."""
    from rolellm.data.layout import config_files

    data = write_mini_release(tmp_path / "release")
    ((instruction_test, _),) = config_files("en-instruction-role_specific", ["test"])["test"]
    ((instruction_train, _),) = config_files("en-instruction-role_specific", ["train"])["train"]
    ((role_train, _),) = config_files("en-role-role_specific", ["train"])["train"]
    (data / instruction_train).unlink()  # no pair left for en-instruction-role_specific
    first = (data / instruction_test).read_text(encoding="utf-8").splitlines()[0]
    with open(data / instruction_test, "a", encoding="utf-8") as file:
        file.write(first + "\n")  # a repeated row
    with open(data / role_train, "a", encoding="utf-8") as file:
        file.write(first.replace('"type": ["script_based"]', '"type": "script_based"') + "\n")  # a copied test row
    assert cli.main(["data", "check", "--data-dir", str(data)]) == 1
    out = capsys.readouterr().out
    assert "checked ['en-instruction-role_specific/test']" in out
    assert "en-instruction-role_specific/test: 1 row(s) repeat the role and question of an earlier row" in out
    assert (
        "en-instruction-role_specific/test: 1 test (role, question) pair(s) are in en-role-role_specific/train" in out
    )
