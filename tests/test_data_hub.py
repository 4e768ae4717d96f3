import warnings

import datasets
import pytest
import yaml
from fixtures.folder_hub import FolderHub
from fixtures.mini_release import EXPECTED_ROWS, write_mini_release
from test_rouge import ENGLISH_SPE, release_pairs

from rolellm.data.builder import load_rolebench
from rolellm.data.hub import export_rolebench, push_rolebench, upload_export
from rolellm.data.layout import CONFIG_NAMES
from rolellm.data.schema import ROW_FEATURES
from rolellm.rouge.score import rouge_l
from rolellm.scripts import cli


@pytest.fixture(scope="module")
def mini_release(tmp_path_factory):
    return write_mini_release(tmp_path_factory.mktemp("mini-release"))


@pytest.fixture(scope="module")
def exported(mini_release, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mini release's empty profile file
        return export_rolebench(tmp_path_factory.mktemp("hub") / "rolebench", data_dir=mini_release, cache_dir=cache)


def read_card(folder):
    text = (folder / "README.md").read_text(encoding="utf-8")
    _, front, body = text.split("---\n", 2)
    return yaml.safe_load(front), body


def test_export_writes_parquet_per_config_and_split(exported):
    files = sorted(str(path.relative_to(exported)) for path in exported.rglob("*.parquet"))
    assert len(files) == sum(len(splits) for splits in EXPECTED_ROWS.values()) == 37
    assert "zh-general/rolegpt_baseline-00000-of-00001.parquet" in files
    assert "profiles-en/train-00000-of-00001.parquet" in files


def test_card_has_configs_dataset_info_license_citation_and_roles(exported):
    meta, body = read_card(exported)
    assert meta["license"] == "apache-2.0" and meta["language"] == ["en", "zh"]
    assert sorted(config["config_name"] for config in meta["configs"]) == sorted(CONFIG_NAMES)
    zh = next(config for config in meta["configs"] if config["config_name"] == "zh")
    assert zh["data_files"] == [
        {"split": "train", "path": "zh/train-*.parquet"},
        {"split": "test", "path": "zh/test-*.parquet"},
        {"split": "rolegpt_baseline", "path": "zh/rolegpt_baseline-*.parquet"},
    ]
    info = {entry["config_name"]: entry for entry in meta["dataset_info"]}
    assert {split["name"]: split["num_examples"] for split in info["en-role"]["splits"]} == EXPECTED_ROWS["en-role"]
    assert "@article{wang2023rolellm" in body
    assert "| en-role | Captain Lune | en | 0 | 4 | 4 |" in body
    assert "| zh | 说书人 | zh | 4 | 2 | 4 |" in body


def test_plain_load_dataset_round_trips_every_config_row_for_row(exported, mini_release, tmp_path):
    cache = tmp_path / "cache"
    for name in CONFIG_NAMES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = load_rolebench(name, data_dir=mini_release, cache_dir=cache)
        loaded = datasets.load_dataset(str(exported), name, cache_dir=str(cache))
        assert list(loaded) == list(expected), name
        for split in expected:
            assert loaded[split].features == expected[split].features, (name, split)
            assert loaded[split].to_list() == expected[split].to_list(), (name, split)


def test_export_a_generated_dataset_dict(tmp_path):
    rows = [
        {"role": "Ada Quill", "question": "Q1", "generated": ["A1", "A2"], "type": [], "subset": "general", "lang": "en"},
        {"role": "Ada Quill", "question": "Q2", "generated": ["B"], "type": ["script_based"],
         "subset": "role_specific", "lang": "en"},
    ]  # fmt: skip
    generated = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows, features=ROW_FEATURES)})
    folder = export_rolebench(tmp_path / "out", generated, config_name="ada")
    meta, body = read_card(folder)
    assert [config["config_name"] for config in meta["configs"]] == ["ada"]
    loaded = datasets.load_dataset(str(folder), "ada", cache_dir=str(tmp_path / "cache"))
    assert loaded["train"].to_list() == rows
    assert "| ada | Ada Quill | en | 2 |" in body


def test_export_needs_something_to_export(tmp_path):
    with pytest.raises(ValueError, match="pass the rows to export"):
        export_rolebench(tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="nothing to export: no RoleBench config has its files in"):
        export_rolebench(tmp_path / "out", data_dir=tmp_path / "empty")


def test_push_uploads_the_export_in_one_commit(mini_release, tmp_path):
    remote = tmp_path / "remote"
    (remote / "zh").mkdir(parents=True)
    (remote / "zh" / "train-00000-of-00002.parquet").write_text("stale shard")
    api = FolderHub(remote)
    commit = push_rolebench("me/rolebench", data_dir=mini_release, configs=["zh", "zh-general"], api=api,
                            private=True, cache_dir=tmp_path / "cache")  # fmt: skip
    assert commit == "commit"
    assert [call[0] for call in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[0][2] == {"repo_type": "dataset", "private": True, "exist_ok": True}
    assert api.calls[1][2]["repo_type"] == "dataset"
    assert not (remote / "zh" / "train-00000-of-00002.parquet").exists()  # stale shards go in the same commit
    loaded = datasets.load_dataset(str(remote), "zh", cache_dir=str(tmp_path / "cache"))
    assert {split: part.num_rows for split, part in loaded.items()} == EXPECTED_ROWS["zh"]


def test_push_refuses_the_official_repo(mini_release, exported):
    with pytest.raises(ValueError, match="refusing to push to the official release"):
        push_rolebench("ZenMoore/RoleBench", data_dir=mini_release)
    with pytest.raises(ValueError, match="refusing to push to the official release"):
        upload_export(exported, "ZenMoore/RoleBench")


def test_upload_an_existing_export(exported, tmp_path):
    api = FolderHub(tmp_path / "remote")
    upload_export(exported, "me/rolebench", api=api)
    assert sorted(p.name for p in (tmp_path / "remote").iterdir()) == sorted(p.name for p in exported.iterdir())
    with pytest.raises(FileNotFoundError, match="has no README.md: upload a folder written by export_rolebench"):
        upload_export(tmp_path, "me/rolebench", api=api)


def test_cli_export(mini_release, tmp_path, capsys):
    out = tmp_path / "cli-export"
    assert (
        cli.main(
            ["data", "export", str(out), "--data-dir", str(mini_release), "--configs", "zh-general", "profiles-zh"]
        )
        == 0
    )
    assert "wrote 2 config(s)" in capsys.readouterr().out
    assert sorted(path.name for path in out.iterdir()) == ["README.md", "profiles-zh", "zh-general"]


@pytest.mark.slow
def test_real_release_export_round_trips(rolebench_slice_dir, tmp_path):
    cache = tmp_path / "cache"
    folder = export_rolebench(tmp_path / "out", data_dir=rolebench_slice_dir, cache_dir=cache)
    configs = sorted(path.name for path in folder.iterdir() if path.is_dir())
    assert configs == ["en-instruction-role_specific", "profiles-zh", "zh", "zh-general", "zh-role_specific"]
    loaded = datasets.load_dataset(str(folder), "zh-role_specific", cache_dir=str(cache))
    expected = load_rolebench("zh-role_specific", data_dir=rolebench_slice_dir, cache_dir=cache)
    for split in ("train", "test", "rolegpt_baseline"):
        assert loaded[split].to_list() == expected[split].to_list()
    english = datasets.load_dataset(str(folder), "en-instruction-role_specific", cache_dir=str(cache))
    english_files = rolebench_slice_dir / "rolebench-eng/instruction-generalization/role_specific"
    assert {split: part.num_rows for split, part in english.items()} == {
        split: len((english_files / f"{split}.jsonl").read_text(encoding="utf-8").splitlines())
        for split in ("test", "rolegpt_baseline")
    }


@pytest.mark.slow
def test_an_exported_release_scores_the_papers_rolegpt_spe(rolebench_slice_dir, tmp_path):
    """Text stays as released through export and load: the RoleGPT SPE of a plain `load_dataset` copy is the
    ROUGE-L of the release files themselves (the paper's 0.3229 English, 0.2478 Chinese on the full release,
    `test_full_release.py`)."""
    from rolellm.evaluation.benchmark.baseline import rolegpt_predictions
    from rolellm.evaluation.benchmark.scoring import score_predictions

    names = ["en-instruction-role_specific", "zh-role_specific"]
    splits = ["test", "rolegpt_baseline"]  # the English train files are not part of the shared data
    releases = {
        name: load_rolebench(name, rolebench_slice_dir, splits, cache_dir=tmp_path / "cache") for name in names
    }
    folder = export_rolebench(tmp_path / "hub", releases)
    english = round(rouge_l(*release_pairs(rolebench_slice_dir, ENGLISH_SPE)), 4)
    chinese = round(rouge_l(*release_pairs(rolebench_slice_dir, "rolebench-zh/role_specific")), 4)
    for name, paper in zip(names, (english, chinese)):
        release = releases[name]
        exported = datasets.load_dataset(str(folder), name, cache_dir=str(tmp_path / "cache2"))
        spe = []
        for dataset in (release, exported):
            rows = dataset["test"].to_list()
            predictions = rolegpt_predictions(rows, dataset["rolegpt_baseline"].to_list())
            spe.append(score_predictions(rows, predictions)["metrics"]["SPE"])
        assert spe[0] == spe[1] and round(spe[0], 4) == paper, name
