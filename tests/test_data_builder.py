import json
import os
import shutil

import datasets
import pytest
from fixtures.mini_release import EXPECTED_ROWS, release_rows, write_mini_release

from rolellm.data.builder import RoleBench, load_rolebench, load_rolebench_profiles
from rolellm.data.layout import CONFIG_NAMES, MissingFilesError, complete_configs, get_spec, hub_patterns
from rolellm.data.preference import PREFERENCE_FEATURES
from rolellm.data.schema import ROW_FEATURES
from rolellm.roles.profile import DataFormatError, ProfileFileWarning


@pytest.fixture(scope="module")
def mini_release(tmp_path_factory):
    return write_mini_release(tmp_path_factory.mktemp("mini-release"))


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "datasets-cache"


def counts(dataset_dict):
    return {split: part.num_rows for split, part in dataset_dict.items()}


def test_config_names_read_well():
    assert CONFIG_NAMES == (
        "zh", "zh-general", "zh-role_specific",
        "en-instruction", "en-instruction-general", "en-instruction-role_specific",
        "en-role", "en-role-general", "en-role-role_specific",
        "profiles-en", "profiles-zh",
        "zh-preference", "zh-unpaired", "en-instruction-preference", "en-instruction-unpaired",
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore::rolellm.roles.profile.ProfileFileWarning")
def test_every_config_builds_from_a_full_release_folder(mini_release, cache):
    assert complete_configs(mini_release) == list(CONFIG_NAMES)
    for name in CONFIG_NAMES:
        dataset = load_rolebench(name, data_dir=mini_release, cache_dir=cache)
        assert counts(dataset) == EXPECTED_ROWS[name], name
        if get_spec(name).kind == "rows":
            assert dataset["train"].features == ROW_FEATURES
        elif get_spec(name).kind != "profiles":
            assert dataset["train"].features == PREFERENCE_FEATURES[get_spec(name).kind]


def test_rows_are_normalised(mini_release, cache):
    dataset = load_rolebench("en-instruction", data_dir=mini_release, cache_dir=cache)
    train, test = dataset["train"], dataset["test"]
    assert train.unique("subset") == ["general", "role_specific"]
    specific = train.filter(lambda row: row["subset"] == "role_specific")
    assert specific[0]["type"] == ["script_based"] and specific[1]["type"] == ["script_agnostic"]
    assert specific[0]["question"] == " Ada Quill, what happened in scene 0 of train?"  # text as released
    test_specific = test.filter(lambda row: row["subset"] == "role_specific")
    assert test_specific[0]["type"] == ["script_based", "script_based"]
    assert [answer.strip() for answer in test_specific[0]["generated"]] == [
        "As Ada Quill, memory 0.",
        "Another take 0.",
    ]
    assert test_specific[0]["generated"][0] == " As Ada Quill, memory 0."  # text as released
    assert sorted(set(train["role"])) == ["Ada Quill", "Dr. Frank-N-Furter", "Moss Brindle"]


def test_profiles_join_every_row_across_spellings(mini_release, cache):
    with pytest.warns(ProfileFileWarning, match="Moss Brindle.jsonl is empty"):
        dataset = load_rolebench("en-instruction-role_specific", data_dir=mini_release, cache_dir=cache,
                                 with_profile=True)  # fmt: skip
    frank = dataset["test"].filter(lambda row: row["role"] == "Dr. Frank-N-Furter")
    assert frank.num_rows == 2
    assert frank[0]["description"] == "A flamboyant scientist in a castle."
    assert frank[0]["catchphrases"] == ["Welcome to the lab."]
    assert all(row["description"] for split in dataset.values() for row in split)


def test_streaming_reads_the_same_rows(mini_release, cache):
    streamed = load_rolebench("zh", data_dir=mini_release, cache_dir=cache, streaming=True, with_profile=True)
    assert isinstance(streamed, datasets.IterableDatasetDict)
    built = load_rolebench("zh", data_dir=mini_release, cache_dir=cache, with_profile=True)
    for split in ("train", "test", "rolegpt_baseline"):
        assert list(streamed[split]) == built[split].to_list()


def test_profiles_config_rows(mini_release, cache):
    with pytest.warns(ProfileFileWarning, match="profiles-eng-Moss Brindle.jsonl is empty"):
        profiles = load_rolebench_profiles("en", data_dir=mini_release, cache_dir=cache)
    assert sorted(profiles) == ["Ada Quill", "Captain Lune", "Dr. Frank N Furter", "Moss Brindle"]
    assert profiles["Captain Lune"].catchphrases == ["Steady on.", "Moon up, oars out."]
    ada = profiles["Ada Quill"]
    assert [u.speaker for u in ada.dialogue] == ["narration", "Moss Brindle", "Ada Quill"]
    assert ada.dialogue[0].narration is True and ada.source == "The Quill Story"
    assert profiles["Moss Brindle"].dialogue == []


def test_half_the_files_missing_lists_them_and_what_still_works(mini_release, tmp_path, cache):
    half = tmp_path / "half"
    shutil.copytree(mini_release / "rolebench-zh", half / "rolebench-zh")
    shutil.copytree(mini_release / "profiles-zh", half / "profiles-zh")
    (half / "rolebench-zh/role_specific/train.jsonl").unlink()
    with pytest.raises(MissingFilesError) as error:
        load_rolebench("zh", data_dir=half, cache_dir=cache)
    message = str(error.value)
    assert "needs 1 file(s) missing" in message
    assert "  - rolebench-zh/role_specific/train.jsonl" in message
    assert "Complete configs in this folder: zh-general, profiles-zh, zh-preference, zh-unpaired." in message
    assert "  - zh-role_specific: test, rolegpt_baseline" in message
    with pytest.raises(MissingFilesError, match="needs 6 file"):
        load_rolebench("en-role", data_dir=half, cache_dir=cache)
    assert counts(load_rolebench("zh", data_dir=half, cache_dir=cache, splits=["test"])) == {"test": 4}


def test_a_broken_line_stops_the_build_naming_the_file(mini_release, tmp_path, cache):
    broken = tmp_path / "broken"
    shutil.copytree(mini_release / "rolebench-zh", broken / "rolebench-zh")
    path = broken / "rolebench-zh/general/test.jsonl"
    path.write_text(path.read_text(encoding="utf-8")[:-20], encoding="utf-8")  # truncate the last line
    with pytest.raises(DataFormatError) as error:  # the reader's own error, not datasets' wrapper
        load_rolebench("zh-general", data_dir=broken, cache_dir=cache)
    assert "general/test.jsonl:2: not valid JSON (the line looks truncated)" in str(error.value)


def test_edited_files_rebuild_the_cache(mini_release, tmp_path, cache):
    folder = tmp_path / "edited"
    shutil.copytree(mini_release / "rolebench-zh", folder / "rolebench-zh")
    assert load_rolebench("zh-general", data_dir=folder, cache_dir=cache)["test"].num_rows == 2
    path = folder / "rolebench-zh/general/test.jsonl"
    path.write_text(path.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    assert load_rolebench("zh-general", data_dir=folder, cache_dir=cache)["test"].num_rows == 1
    # an edit of the same size and modification time is seen too: the cache is keyed by content
    stat = path.stat()
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("说书人", "讲书人", 1), encoding="utf-8")
    assert path.stat().st_size == stat.st_size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert load_rolebench("zh-general", data_dir=folder, cache_dir=cache)["test"][0]["role"] == "讲书人"


def test_hub_path_reads_only_the_needed_files_from_the_hub_cache(mini_release, tmp_path, cache, monkeypatch):
    # A Hub cache in the layout huggingface_hub writes (refs/main -> snapshots/<commit>), read with HF_HUB_OFFLINE=1.
    import huggingface_hub.constants

    hub_cache = tmp_path / "hub"
    repo = hub_cache / "datasets--ZenMoore--RoleBench"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    shutil.copytree(mini_release / "rolebench-zh", snapshot / "rolebench-zh")
    shutil.copytree(mini_release / "profiles-zh", snapshot / "profiles-zh")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub_cache))
    assert hub_patterns("zh-role_specific") == [
        "rolebench-zh/role_specific/train.jsonl",
        "rolebench-zh/role_specific/test.jsonl",
        "rolebench-zh/role_specific/rolegpt_baseline.jsonl",
    ]  # what snapshot_download fetches: the config's files only
    dataset = load_rolebench("zh-role_specific", cache_dir=cache, with_profile=True)
    assert counts(dataset) == EXPECTED_ROWS["zh-role_specific"]
    assert dataset["train"][0]["catchphrases"] == ["列位看官", "且听下回分解"]
    with pytest.raises(MissingFilesError, match="rolebench-eng/instruction-generalization/general/train.jsonl"):
        load_rolebench("en-instruction", cache_dir=cache)


def test_hub_without_a_cached_copy_offline_says_what_to_do(tmp_path, cache, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(
        MissingFilesError, match="could not fetch RoleBench config 'zh' from the Hub dataset 'ZenMoore/RoleBench'"
    ) as error:
        load_rolebench("zh", cache_dir=cache)
    assert "Pass data_dir= with a local copy of the release" in str(error.value)


def test_builder_class_is_a_plain_arrow_based_builder(mini_release, cache):
    builder = RoleBench(config_name="zh-general", data_dir=str(mini_release), cache_dir=str(cache))
    assert isinstance(builder, datasets.ArrowBasedBuilder)
    builder.download_and_prepare()
    test = builder.as_dataset(split="test")
    expected = list(release_rows()["rolebench-zh/general/test.jsonl"])
    assert test["question"] == [row["question"] for row in expected]  # as released
    assert builder.info.license == "apache-2.0" and "wang2023rolellm" in builder.info.citation


def test_unknown_config_and_split(mini_release, cache):
    with pytest.raises(ValueError, match="unknown RoleBench config 'english'; choose one of zh, zh-general"):
        load_rolebench("english", data_dir=mini_release, cache_dir=cache)
    with pytest.raises(ValueError, match="unknown split 'validation'"):
        load_rolebench("zh", data_dir=mini_release, cache_dir=cache, splits=["validation"])


# -- the real release ------------------------------------------------------------------------------------------


def lines(path):
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def file_counts(folder, splits=("train", "test", "rolegpt_baseline")):
    return {split: lines(folder / f"{split}.jsonl") for split in splits}


@pytest.mark.slow
def test_real_release_builds_with_the_release_counts(rolebench_dir, cache):
    """As many rows as the files (the full release's counts are in `test_full_release.py`)."""
    zh = rolebench_dir / "rolebench-zh"
    assert counts(load_rolebench("zh-general", data_dir=rolebench_dir, cache_dir=cache)) == file_counts(zh / "general")
    assert counts(load_rolebench("zh-role_specific", data_dir=rolebench_dir, cache_dir=cache)) == file_counts(
        zh / "role_specific"
    )
    english = load_rolebench("en-instruction-role_specific", data_dir=rolebench_dir, cache_dir=cache,
                             splits=["test", "rolegpt_baseline"])  # fmt: skip
    folder = rolebench_dir / "rolebench-eng/instruction-generalization/role_specific"
    assert counts(english) == file_counts(folder, ("test", "rolegpt_baseline"))
    roles = {json.loads(line)["role"] for line in (folder / "test.jsonl").read_text(encoding="utf-8").splitlines()}
    assert set(english["test"]["role"]) == roles and len(roles) > 1
    profiles = load_rolebench_profiles("zh", data_dir=rolebench_dir, cache_dir=cache)
    assert sorted(profiles) == ["华妃", "孙悟空", "张飞", "李白", "皇帝"]
    assert complete_configs(rolebench_dir) == ["zh", "zh-general", "zh-role_specific", "profiles-zh"]


@pytest.mark.slow
def test_real_release_rows_join_their_profiles(rolebench_dir, cache):
    dataset = load_rolebench("zh", data_dir=rolebench_dir, cache_dir=cache, with_profile=True)
    zh = rolebench_dir / "rolebench-zh"
    general, specific = file_counts(zh / "general"), file_counts(zh / "role_specific")
    assert counts(dataset) == {split: general[split] + specific[split] for split in general}  # 7468, 1690, 7634
    emperor = dataset["test"].filter(lambda row: row["role"] == "皇帝")
    assert {tuple(c) for c in emperor["catchphrases"]} == {("朕", "本皇")}
