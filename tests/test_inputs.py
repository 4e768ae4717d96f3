"""Every reader takes UTF-8 with or without a byte-order mark and with CRLF line ends, and names the file, the line
and the byte of anything else; an empty file is an error naming it."""

import json

import pytest

from rolellm.data.readers import read_raw_targets, read_rolebench_jsonl
from rolellm.roles.character_card import read_character_card
from rolellm.roles.profile import DataFormatError
from rolellm.roles.release import read_release_profiles
from rolellm.roles.screenplay import read_screenplay


ROWS = [{"role": "Po", "question": " Who are you?", "generated": [" The Dragon Warrior!"]}]


def as_bytes(text: str, bom: bool, crlf: bool) -> bytes:
    text = text.replace("\n", "\r\n") if crlf else text
    return ("\ufeff" if bom else "").encode("utf-8") + text.encode("utf-8")


def jsonl(records) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


@pytest.mark.parametrize(("bom", "crlf"), [(True, False), (False, True), (True, True)])
def test_byte_order_marks_and_crlf_are_read_as_plain_utf8(tmp_path, bom, crlf):
    rows = tmp_path / "train.jsonl"
    rows.write_bytes(as_bytes(jsonl(ROWS), bom, crlf))
    assert read_rolebench_jsonl(rows, "general", "en")[0]["question"] == " Who are you?"

    folder = tmp_path / "profiles-eng"
    folder.mkdir()
    (folder / "desc.json").write_bytes(as_bytes(json.dumps({"Po": "A panda."}), bom, crlf))
    line = {"act_id": 0, "diag_id": 0, "role": "Po", "content": "Skadoosh!"}
    (folder / "profiles-eng-Po.jsonl").write_bytes(as_bytes(jsonl([line]), bom, crlf))
    profile = read_release_profiles(tmp_path, "en")["Po"]
    assert profile.description == "A panda." and profile.dialogue[0].content == "Skadoosh!"

    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Po", "description": "A panda."}}
    (tmp_path / "po.json").write_bytes(as_bytes(json.dumps(card), bom, crlf))
    assert read_character_card(tmp_path / "po.json").description == "A panda."

    (tmp_path / "po.txt").write_bytes(as_bytes("INT. JADE PALACE - DAY\n\nPO\nSkadoosh!\n", bom, crlf))
    assert [u.content for u in read_screenplay(tmp_path / "po.txt", "Po").dialogue if u.speaker == "Po"] == [
        "Skadoosh!"
    ]

    targets = tmp_path / "instructions-general.jsonl"
    targets.write_bytes(as_bytes(jsonl([{"instruction": "Who are you?", "target": "A panda."}]), bom, crlf))
    assert read_raw_targets(targets) == {"Who are you?": "A panda."}


def test_invalid_utf8_is_named_with_file_line_and_byte(tmp_path):
    path = tmp_path / "train.jsonl"
    raw = jsonl(ROWS).encode() + b'{"role": "Po", "question": "\xe9t\xe9", "generated": ["x"]}\n'  # Latin-1
    path.write_bytes(raw)
    byte = raw.index(b"\xe9")
    with pytest.raises(
        DataFormatError, match=rf"train.jsonl:2: not UTF-8 text \(byte {byte} is 0xe9\); save the file"
    ):
        read_rolebench_jsonl(path, "general", "en")


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_utf16_is_named(tmp_path, encoding):
    path = tmp_path / "po.json"
    path.write_bytes(
        ("\ufeff" if encoding.endswith("be") else "").encode(encoding) + b"" + '{"name": "Po"}'.encode(encoding)
    )
    with pytest.raises(DataFormatError, match=r"po.json: UTF-16 text; save the file as UTF-8"):
        read_character_card(path)


@pytest.mark.parametrize("content", ["", "\n\n  \n", "\ufeff"])
def test_an_empty_rows_file_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / "test.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"test.jsonl: the file is empty"):
        read_rolebench_jsonl(path, "role_specific", "en")


def test_the_builder_passes_a_readers_error_on_unwrapped(tmp_path):
    from rolellm.data.builder import load_rolebench

    for split in ("train", "test", "rolegpt_baseline"):
        path = tmp_path / "rolebench-zh" / "general" / f"{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(jsonl([{"role": "李白", "question": "你好", "generated": ["好"]}]), encoding="utf-8")
    (tmp_path / "rolebench-zh" / "general" / "test.jsonl").write_text('{"role": "李白", "question": 3}\n')
    with pytest.raises(DataFormatError, match=r"general/test.jsonl:1: field 'generated' is missing"):
        load_rolebench("zh-general", data_dir=tmp_path, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("record", "subset", "message"),
    [
        ({"role": "Po", "question": "  ", "generated": ["Hi"]}, "general", "field 'question' is empty"),
        ({"role": "Po", "question": "Who?", "generated": ["Po", " "]}, "general", r"field .generated. has empty answers at positions \[1\]"),
        ({"role": "Po", "question": "Who?", "generated": ["Po"], "type": "script_based"}, "general",
         "field 'type' belongs to role_specific rows"),
    ],
)  # fmt: skip
def test_rows_that_would_skew_the_data_are_named(tmp_path, record, subset, message):
    path = tmp_path / "train.jsonl"
    path.write_text(jsonl([ROWS[0], record]), encoding="utf-8")
    with pytest.raises(DataFormatError, match=rf"train.jsonl:2: {message}"):
        read_rolebench_jsonl(path, subset, "en")
