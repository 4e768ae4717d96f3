import json
import warnings

import pytest

from rolellm.roles.profile import (
    DataFormatError,
    ProfileFileWarning,
    RoleProfile,
    Utterance,
    join_catchphrases,
    role_key,
    split_catchphrases,
)
from rolellm.roles.release import (
    read_profile_jsonl,
    read_release_profiles,
    read_screenplay_folder,
    write_release_profiles,
    write_screenplay_folder,
)


ZHENHUAN_ROLES = ["华妃", "槿汐", "浣碧", "甄嬛", "皇后", "皇帝", "眉庄", "苏培盛", "陵容"]


def script_lines(folder, name):
    """Lines of a role's screenplay script file (the full release's counts are in `test_full_release.py`)."""
    (path,) = folder.glob(f"*-{name}.jsonl")
    return len(path.read_text(encoding="utf-8").splitlines())


def test_split_catchphrases_chinese_release_sentences(rolebench_dir):
    descriptions = json.loads((rolebench_dir / "profiles-zh" / "desc.json").read_text(encoding="utf-8"))
    split = {name: split_catchphrases(text, "zh") for name, text in descriptions.items()}
    assert split["皇帝"][1] == ["朕", "本皇"]
    assert split["孙悟空"] == (
        "生性聪明、活泼、忠诚、嫉恶如仇，代表了机智、勇敢。",
        ["俺老孙", "我齐天大圣", "我美猴王"],
    )
    assert split["华妃"][1] == ["本宫", "本妃"]
    assert split["张飞"][1] == ["我乃燕人张翼德", "吃我一矛！", "啊~~~"]
    assert split["李白"] == ("为人爽朗大方，乐于交友，爱好饮酒作诗。", [])
    # the quoted “官二代” inside 华妃's description is not a catchphrase and stays in the description
    assert "“官二代”" in split["华妃"][0]
    for name, text in descriptions.items():  # rejoining gives the release's text back, byte for byte
        assert join_catchphrases(*split[name], "zh") == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('A pirate. Your catchphrase is: "Savvy?"', ("A pirate.", ["Savvy?"])),
        (
            'A pirate. Your catchphrases are: "Savvy?", "Why is the rum gone?"',
            ("A pirate.", ["Savvy?", "Why is the rum gone?"]),
        ),
        ("A pirate. Your catchphrase is: “Savvy?”.", ("A pirate.", ["Savvy?"])),
        ("A pirate. your catchphrase is: Savvy?", ("A pirate.", ["Savvy?"])),
        ("A pirate with no catchphrase sentence.  ", ("A pirate with no catchphrase sentence.", [])),
    ],
)
def test_split_catchphrases_english_forms(text, expected):
    assert split_catchphrases(text, "en") == expected


def test_split_catchphrases_language_autodetect():
    assert split_catchphrases("君王。口头禅：朕、本皇")[1] == ["朕", "本皇"]
    assert split_catchphrases('A wizard. Your catchphrase is: "You shall not pass"')[1] == ["You shall not pass"]


def test_description_with_catchphrases_is_the_release_text(rolebench_dir):
    descriptions = json.loads((rolebench_dir / "profiles-zh" / "desc.json").read_text(encoding="utf-8"))
    profiles = read_release_profiles(rolebench_dir, "zh")
    assert sorted(profiles) == sorted(descriptions) == ["华妃", "孙悟空", "张飞", "李白", "皇帝"]
    for name, profile in profiles.items():
        assert profile.description_with_catchphrases() == descriptions[name]
        assert "口头禅" not in profile.description
    assert profiles["张飞"].source == "三国演义"
    assert profiles["皇帝"].source == "甄嬛传"


def test_read_release_profiles_accepts_the_profiles_folder_itself(rolebench_dir):
    assert (
        read_release_profiles(rolebench_dir / "profiles-zh", "zh").keys()
        == read_release_profiles(rolebench_dir, "zh").keys()
    )


def test_screenplay_profiles_load_with_dialogue_groups(screenplay_dir):
    profiles = read_screenplay_folder(screenplay_dir / "profile_zhenhuan")
    assert sorted(profiles) == sorted(ZHENHUAN_ROLES)
    folder = screenplay_dir / "profile_zhenhuan"
    assert {name: len(p.dialogue) for name, p in profiles.items()} == {n: script_lines(folder, n) for n in profiles}
    assert profiles.empty_files == []
    emperor = profiles["皇帝"]
    assert emperor.source == "甄嬛传" and emperor.catchphrases == ["朕", "本皇"]
    groups = emperor.dialogue_groups()
    assert sum(map(len, groups)) == len(emperor.dialogue)  # the full script: 7220 lines in 2660 groups
    # groups end on the profiled role's line, as the paper's profiles are cut, except where an act ends on another speaker
    ends = [group[-1].speaker == "皇帝" for group in groups]
    assert len(groups) > sum(ends) > len(groups) / 2  # the full script: 2439 of 2660
    assert any(u.narration for u in emperor.dialogue) == any(u.speaker == "旁白" for u in emperor.dialogue)


def test_sun_wukong_has_every_line_of_his_script(screenplay_dir):
    profiles = read_screenplay_folder(screenplay_dir / "profile_xiyou")
    assert list(profiles) == ["孙悟空"]  # 唐僧, 八戒, 沙僧 have a description but no script file
    wukong = profiles["孙悟空"]
    assert len(wukong.dialogue) == script_lines(screenplay_dir / "profile_xiyou", "孙悟空")  # the full script: 6254
    assert wukong.source == "西游记"
    assert wukong.catchphrases == ["俺老孙", "我齐天大圣", "我美猴王"]
    assert wukong.dialogue[2] == Utterance(0, 0, "孙悟空", "他怎么样了?")


def test_write_then_read_screenplay_folder_round_trips(tmp_path, screenplay_dir):
    original = read_screenplay_folder(screenplay_dir / "profile_zhenhuan")
    write_screenplay_folder(original, tmp_path / "copy")
    assert sorted(path.name for path in (tmp_path / "copy").iterdir())[:2] == ["desc.json", "甄嬛传-华妃.jsonl"]
    assert read_screenplay_folder(tmp_path / "copy") == original
    source = (screenplay_dir / "profile_zhenhuan" / "甄嬛传-眉庄.jsonl").read_text(encoding="utf-8")
    assert (tmp_path / "copy" / "甄嬛传-眉庄.jsonl").read_text(encoding="utf-8") == source  # the same bytes
    with pytest.raises(ValueError, match="without a source script"):
        write_screenplay_folder({"Po": RoleProfile("Po", "en")}, tmp_path / "bad")


def test_write_then_read_release_profiles_round_trips(tmp_path, screenplay_dir):
    original = read_screenplay_folder(screenplay_dir / "profile_zhenhuan")
    subset = {name: original[name] for name in ("华妃", "眉庄")}
    write_release_profiles(subset, tmp_path)
    assert read_release_profiles(tmp_path, "zh") == subset


def test_empty_profile_file_warns_and_is_counted(tmp_path):
    folder = tmp_path / "profiles-eng"
    folder.mkdir()
    (folder / "desc.json").write_text(json.dumps({"Doctor Who": 'A Time Lord. Your catchphrase is: "Allons-y!"',
                                                  "Po": "A panda."}))  # fmt: skip
    (folder / "profiles-eng-Doctor Who.jsonl").write_text("")
    (folder / "profiles-eng-Po.jsonl").write_text('{"act_id": 0, "diag_id": 0, "role": "Po", "content": "Hi"}\n')
    with pytest.warns(ProfileFileWarning, match="profiles-eng-Doctor Who.jsonl is empty"):
        profiles = read_release_profiles(tmp_path, "en")
    assert profiles.empty_files == [folder / "profiles-eng-Doctor Who.jsonl"]
    assert profiles["Doctor Who"].catchphrases == ["Allons-y!"] and profiles["Doctor Who"].dialogue == []
    assert len(profiles["Po"].dialogue) == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"act_id": 0, "diag_id": 0, "role": "Po", "cont', r"bad\.jsonl:2: not valid JSON"),
        ('{"act_id": 0, "diag_id": 0, "role": "Po"}', r"bad\.jsonl:2: field 'content' is missing"),
        (
            '{"act_id": "zero", "diag_id": 0, "role": "Po", "content": "x"}',
            r"bad\.jsonl:2: field 'act_id' must be int",
        ),
        ('["Po", "x"]', r"bad\.jsonl:2: expected a JSON object"),
    ],
)
def test_malformed_profile_line_names_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"act_id": 0, "diag_id": 0, "role": "Shifu", "content": "Focus."}\n' + line + "\n")
    with pytest.raises(DataFormatError, match=message):
        read_profile_jsonl(path, "Po", "en")


def test_broken_desc_json_names_the_file(tmp_path):
    folder = tmp_path / "profiles-zh"
    folder.mkdir()
    (folder / "desc.json").write_text('{"李白": ["not", "a", "string"]}')
    with pytest.raises(DataFormatError, match=r"desc\.json: the value of '李白' must be a string"):
        read_release_profiles(tmp_path, "zh")
    (tmp_path / "empty" / "profiles-zh").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="needs desc.json"):
        read_release_profiles(tmp_path / "empty", "zh")
    with pytest.raises(FileNotFoundError, match="nowhere is not a folder"):
        read_release_profiles(tmp_path / "nowhere", "zh")


def test_role_profile_dict_round_trip_and_role_key():
    profile = RoleProfile("Dr. Frank-N-Furter", "en", "A scientist.", ["Don't dream it, be it."],
                          dialogue=[Utterance(1, 2, "narration", "The castle.")])  # fmt: skip
    assert profile.dialogue[0].narration is True
    assert RoleProfile.from_dict(json.loads(json.dumps(profile.to_dict()))) == profile
    assert role_key("Dr. Frank N Furter") == role_key(profile.name) == "drfranknfurter"


def test_no_warning_for_complete_release(rolebench_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_release_profiles(rolebench_dir, "zh").empty_files == []


def test_generated_descriptions_are_marked_until_reviewed(tmp_path):
    profiles = {
        "Po": RoleProfile("Po", "en", "A panda.", generated=True),
        "Shifu": RoleProfile("Shifu", "en", "A master."),
    }
    folder = write_release_profiles(profiles, tmp_path)
    assert json.loads((folder / "generated.json").read_text()) == {"generated": ["Po"], "reviewed": []}
    assert read_release_profiles(tmp_path, "en") == profiles
    (folder / "generated.json").write_text('{"generated": ["Po"], "reviewed": ["Po"]}')
    assert read_release_profiles(tmp_path, "en")["Po"].generated is False
    (folder / "generated.json").write_text('["Po"]')
    with pytest.raises(DataFormatError, match=r"generated\.json: expected"):
        read_release_profiles(tmp_path, "en")


def test_empty_desc_json_warns_and_is_counted(tmp_path):
    folder = tmp_path / "profiles-zh"
    folder.mkdir()
    (folder / "desc.json").write_text("\n")
    (folder / "profiles-zh-李白.jsonl").write_text(
        '{"act_id": 0, "diag_id": 0, "role": "李白", "content": "举杯！"}\n'
    )
    with pytest.warns(ProfileFileWarning, match=r"desc\.json is empty"):
        profiles = read_release_profiles(tmp_path, "zh")
    assert profiles.empty_files == [folder / "desc.json"]
    assert profiles["李白"].description == "" and len(profiles["李白"].dialogue) == 1


def test_a_differently_worded_catchphrase_sentence_is_kept_as_written(tmp_path):
    folder = tmp_path / "profiles-eng"
    folder.mkdir()
    text = "A lighthouse keeper. Your catchphrase is: 'The sea hears everything'."
    (folder / "desc.json").write_text(json.dumps({"Moss Brindle": text}))
    moss = read_release_profiles(tmp_path, "en")["Moss Brindle"]
    assert moss.description == "A lighthouse keeper." and moss.catchphrases == ["The sea hears everything"]
    assert moss.description_with_catchphrases() == text  # the paper's {desc} stays the release's text
    write_release_profiles({"Moss Brindle": moss}, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "profiles-eng" / "desc.json").read_text()) == {"Moss Brindle": text}
    moss.catchphrases = ["Steady."]  # an edit is rendered in the standard sentence
    assert moss.description_with_catchphrases() == 'A lighthouse keeper. Your catchphrase is: "Steady."'
