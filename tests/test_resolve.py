"""`load_profiles`: one resolver for every profile source, with errors that name the source and the kinds accepted."""

import json
import struct
import zlib
from pathlib import Path

import pytest

from rolellm.roles.character_card import write_character_card
from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.release import write_release_profiles, write_screenplay_folder
from rolellm.roles.resolve import ProfileSourceError, load_profiles, select_roles
from rolellm.roles.screenplay import write_screenplay


def po(lang="en"):
    dialogue = [Utterance(0, 0, "Shifu", "Focus."), Utterance(0, 0, "Po", "I am focused!")]
    return RoleProfile("Po", lang, "A kung fu panda.", ["Skadoosh!"], source="Kung Fu Panda", dialogue=dialogue)


def wukong():
    dialogue = [
        Utterance(1, 1, "唐僧", "悟空，前面是什么地方？"),
        Utterance(1, 1, "孙悟空", "师父莫慌，俺老孙去看看！"),
    ]
    return RoleProfile("孙悟空", "zh", "齐天大圣，性格桀骜不驯。", ["俺老孙来也"], source="西游记", dialogue=dialogue)


def test_a_release_folder_gives_every_language_or_the_one_asked_for(tmp_path):
    write_release_profiles({"Po": po()}, tmp_path)
    write_release_profiles({"孙悟空": wukong()}, tmp_path)
    assert list(load_profiles(tmp_path)) == ["Po", "孙悟空"]
    assert list(load_profiles(tmp_path, lang="zh")) == ["孙悟空"]
    assert load_profiles(tmp_path / "profiles-eng")["Po"] == po()
    assert load_profiles(tmp_path / "profiles-zh" / "desc.json")["孙悟空"] == wukong()
    with pytest.raises(ProfileSourceError, match="holds 'zh' profiles, but lang='en' was asked for"):
        load_profiles(tmp_path / "profiles-zh", lang="en")


def test_a_screenplay_folder_and_its_desc_json_guess_the_language(tmp_path):
    write_screenplay_folder({"孙悟空": wukong()}, tmp_path / "xiyou")
    for source in (tmp_path / "xiyou", tmp_path / "xiyou" / "desc.json"):
        profile = load_profiles(source)["孙悟空"]
        assert profile.lang == "zh" and profile.dialogue == wukong().dialogue


def tiny_png() -> bytes:
    """A valid 1x1 grey PNG."""

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\x80"))
        + chunk(b"IEND", b"")
    )


def test_character_cards_one_file_png_or_a_folder(tmp_path):
    (tmp_path / "cards").mkdir()
    write_character_card(po(), tmp_path / "cards" / "po.json")
    write_character_card(
        RoleProfile("Tigress", "en", "A fierce warrior."), tmp_path / "cards" / "tigress.png", image=tiny_png()
    )
    assert load_profiles(tmp_path / "cards" / "po.json")["Po"].description == "A kung fu panda."
    assert list(load_profiles(tmp_path / "cards")) == ["Po", "Tigress"]
    assert load_profiles(tmp_path / "cards" / "tigress.png")["Tigress"].lang == "en"


def test_a_screenplay_file_needs_the_roles(tmp_path):
    script = tmp_path / "panda.txt"
    script.write_text(write_screenplay(po()), encoding="utf-8")
    with pytest.raises(ProfileSourceError, match=r"panda.txt: a screenplay needs the roles to profile"):
        load_profiles(script)
    profile = load_profiles(script, roles=["Po"])["Po"]
    assert [u.content for u in profile.dialogue if u.speaker == "Po"] == ["I am focused!"]


def test_several_sources_add_dialogue_and_keep_the_earlier_description(tmp_path):
    write_release_profiles({"孙悟空": wukong()}, tmp_path / "release")
    bare = wukong()
    bare.description, bare.catchphrases = "", []
    bare.dialogue.append(Utterance(2, 2, "孙悟空", "吃俺老孙一棒！"))
    write_screenplay_folder({"孙悟空": bare}, tmp_path / "screenplay")
    (tmp_path / "screenplay" / "desc.json").write_text(json.dumps({"孙悟空": ""}, ensure_ascii=False), "utf-8")
    profile = load_profiles([tmp_path / "release", tmp_path / "screenplay"])["孙悟空"]
    assert profile.description == "齐天大圣，性格桀骜不驯。" and profile.catchphrases == ["俺老孙来也"]
    assert profile.dialogue[-1].content == "吃俺老孙一棒！"


def test_roles_are_matched_however_they_are_spelled(tmp_path):
    frank = RoleProfile("Dr. Frank-N-Furter", "en", "A mad scientist.")
    write_release_profiles({"Dr. Frank-N-Furter": frank, "Po": po()}, tmp_path)
    assert list(load_profiles(tmp_path, roles=["Dr. Frank N Furter"])) == ["Dr. Frank-N-Furter"]
    with pytest.raises(ProfileSourceError, match=r"roles \['Shifu'\] are not in .*roles found: \['Dr. Frank-N-Furter', 'Po'\]"):  # fmt: skip
        select_roles(load_profiles(tmp_path), ["Shifu", "Po"], where=str(tmp_path))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "missing", "missing: no such file or folder; profiles are read from a RoleBench release"),
        (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "empty: a folder with no role profiles in it"),
        (lambda tmp: (tmp / "notes.csv").write_text("a,b") and tmp / "notes.csv", "notes.csv: not a kind of profile"),
    ],
)
def test_an_unreadable_source_is_named_with_the_kinds_accepted(tmp_path, make, message):
    with pytest.raises(ProfileSourceError, match=message) as error:
        load_profiles(make(tmp_path))
    assert "Character Card (.json or .png)" in str(error.value)
    with pytest.raises(ProfileSourceError, match="no profile source given"):
        load_profiles([])


def test_the_real_release_and_screenplays(rolebench_dir, screenplay_dir):
    release = load_profiles(rolebench_dir)
    assert list(release) == ["皇帝", "孙悟空", "华妃", "张飞", "李白"] and not release["孙悟空"].dialogue
    both = load_profiles([rolebench_dir, screenplay_dir / "profile_xiyou", screenplay_dir / "profile_zhenhuan"])
    script = (screenplay_dir / "profile_xiyou" / "西游记-孙悟空.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(both["孙悟空"].dialogue) == len(script) and both["孙悟空"].catchphrases == [
        "俺老孙",
        "我齐天大圣",
        "我美猴王",
    ]
    assert both["华妃"].dialogue and both["华妃"].description == release["华妃"].description


def test_a_card_and_a_screenplay_of_one_role_combine():
    """The screenplay's dialogue joins the card's fields, in either order: the chat keeps the card's personality."""
    from rolellm.roles.prompts import build_chat_messages, role_greeting

    fixtures = Path(__file__).parent / "fixtures"
    card, screenplay = fixtures / "card_v2_ada.json", fixtures / "lighthouse_screenplay.txt"
    for sources in ([card, screenplay], [screenplay, card]):
        profile = load_profiles(sources, roles=["Ada Quill"])["Ada Quill"]
        system = build_chat_messages(profile, [{"role": "user", "content": "Hello?"}])[0]["content"]
        assert "Ada Quill's personality: curious, blunt" in system
        assert role_greeting(profile) is not None
        assert profile.description == load_profiles(card)["Ada Quill"].description
    card_first = load_profiles([card, screenplay], roles=["Ada Quill"])["Ada Quill"]
    assert "You said the lamp was failing." in [u.content for u in card_first.dialogue]  # the script's lines
