import base64
import json
import struct
import zlib
from pathlib import Path

import pytest

from rolellm.roles import character_card
from rolellm.roles.character_card import (
    card_from_profile,
    dumps_character_card,
    profile_from_card,
    read_character_card,
    write_character_card,
)
from rolellm.roles.profile import DataFormatError, RoleProfile, Utterance


FIXTURES = Path(__file__).parent / "fixtures"
CARDS = ["card_v2_ada.json", "card_v3_storyteller.json"]


@pytest.mark.parametrize("name", CARDS)
def test_card_round_trips_byte_equal(name, tmp_path):
    path = FIXTURES / name
    profile = read_character_card(path)
    out = write_character_card(profile, tmp_path / name)
    assert out.read_bytes() == path.read_bytes()


def test_v2_import_maps_fields_and_keeps_the_rest():
    profile = read_character_card(FIXTURES / "card_v2_ada.json")
    assert profile.name == "Ada Quill" and profile.lang == "en"
    assert profile.catchphrases == ["Measure twice!"]
    assert profile.description.endswith("fixes lighthouses.")
    assert [[(u.speaker, u.content) for u in group] for group in profile.dialogue_groups()] == [
        [("user", "Can you fix it?"), ("Ada Quill", "I can fix anything that admits it's broken.")],
        [
            ("user", "What's in the crate?"),
            ("Ada Quill", "Lungs. Brass ones.\nThey'll breathe better than the old ones."),
        ],
    ]
    data = profile.extra["character_card"]["data"]
    assert data["character_book"]["entries"][0]["keys"] == ["lamp"]
    assert data["post_history_instructions"] == "Stay in character as {{char}}."


def test_v3_unknown_fields_survive_and_chinese_catchphrases_split():
    profile = read_character_card(FIXTURES / "card_v3_storyteller.json")
    assert profile.lang == "zh" and profile.catchphrases == ["列位看官", "且听下回分解"]
    card = card_from_profile(profile)
    assert card["x_top_level_unknown"] == "kept too"
    assert card["data"]["extensions"] == {"x_unknown_tool": {"kept": [1, 2, 3]}}
    assert card["data"]["assets"][0]["uri"] == "ccdefault:"


def test_edits_are_written_and_everything_else_is_kept():
    profile = read_character_card(FIXTURES / "card_v2_ada.json")
    profile.catchphrases.append("Progress!")
    profile.dialogue.append(Utterance(2, 2, "user", "Ready?"))
    profile.dialogue.append(Utterance(2, 2, "Ada Quill", "Always."))
    card = json.loads(dumps_character_card(profile))
    assert card["data"]["description"].endswith('Your catchphrases are: "Measure twice!", "Progress!"')
    assert card["data"]["mes_example"].endswith("<START>\n{{user}}: Ready?\n{{char}}: Always.")
    original = json.loads((FIXTURES / "card_v2_ada.json").read_text())
    for key in ("personality", "scenario", "first_mes", "character_book", "extensions", "alternate_greetings"):
        assert card["data"][key] == original["data"][key]


def test_a_release_profile_exports_as_a_new_card():
    profile = RoleProfile("孙悟空", "zh", "生性聪明。", ["俺老孙"], source="西游记",
                          dialogue=[Utterance(0, 0, "唐僧", "悟空！"), Utterance(0, 0, "孙悟空", "师父！")])  # fmt: skip
    card = card_from_profile(profile, spec="chara_card_v3")
    assert card["spec"] == "chara_card_v3" and card["spec_version"] == "3.0"
    assert card["data"]["description"] == "生性聪明。常用口头禅是：“俺老孙”"
    assert card["data"]["mes_example"] == "<START>\n唐僧: 悟空！\n{{char}}: 师父！"
    assert card["data"]["extensions"] == {"rolellm": {"source": "西游记", "lang": "zh", "speakers": ["唐僧"]}}
    again = profile_from_card(card)
    assert again.dialogue == profile.dialogue and again.catchphrases == ["俺老孙"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", r"the file is empty"),
        ('{"spec": "chara_card_v2", "data": {"name": "Po"', r"bad\.json:1: not valid JSON"),
        ('{"name": "Po", "description": "A panda."}', r"field 'spec' is None; expected one of"),
        ('{"spec": "chara_card_v2", "data": []}', r"field 'data' must be an object, got list"),
        ('{"spec": "chara_card_v3", "data": {"name": ""}}', r"field 'data.name' is missing or empty"),
        (
            '{"spec": "chara_card_v2", "data": {"name": "Po", "mes_example": ["x"]}}',
            r"'data.mes_example' must be a string",
        ),
    ],
)
def test_bad_cards_name_the_file_and_field(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataFormatError, match=message):
        read_character_card(path)


@pytest.fixture
def png_image(tmp_path):
    from PIL import Image

    path = tmp_path / "portrait.png"
    Image.new("RGB", (2, 2), (200, 30, 30)).save(path)
    return path


def test_png_card_round_trip(tmp_path, png_image):
    from PIL import Image

    profile = read_character_card(FIXTURES / "card_v3_storyteller.json")
    written = write_character_card(profile, tmp_path / "storyteller.png", image=png_image)
    with Image.open(written) as image:  # still a valid PNG, with the V3 card and a V2-readable copy
        assert image.size == (2, 2) and sorted(image.text) == ["ccv3", "chara"]
    again = read_character_card(written)
    assert again.extra["character_card_png"]["keywords"] == ["ccv3", "chara"]
    assert card_from_profile(again) == card_from_profile(profile)
    # written again from the PNG it was read from: the card chunks are replaced, not added
    rewritten = write_character_card(again, tmp_path / "again.png")
    assert rewritten.read_bytes() == written.read_bytes()


def test_png_card_errors(tmp_path, png_image):
    with pytest.raises(DataFormatError, match=r"portrait\.png: a PNG without a character card"):
        read_character_card(png_image)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(png_image.read_bytes()[:-20])
    with pytest.raises(DataFormatError, match=r"truncated\.png: truncated PNG"):
        read_character_card(truncated)
    profile = read_character_card(FIXTURES / "card_v2_ada.json")
    with pytest.raises(ValueError, match="needs a PNG to embed the card in: pass image="):
        write_character_card(profile, tmp_path / "ada.png")


def test_crlf_json_round_trips_byte_equal(tmp_path):
    crlf = tmp_path / "crlf.json"
    crlf.write_bytes((FIXTURES / "card_v2_ada.json").read_bytes().replace(b"\n", b"\r\n"))
    out = write_character_card(read_character_card(crlf), tmp_path / "out.json")
    assert out.read_bytes() == crlf.read_bytes()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _card_png(card_chunks: list[bytes]) -> bytes:
    """A 1x1 PNG with text, time and other chunks around the card chunks, as image editors leave them."""
    header = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    extras = [_chunk(b"tIME", bytes([7, 234, 11, 23, 12, 0, 0])), _chunk(b"tEXt", b"Software\0paint")]
    comment = _chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"made by hand"))
    pixels = _chunk(b"IDAT", zlib.compress(b"\x00\x80"))
    return (
        b"\x89PNG\r\n\x1a\n"
        + header
        + extras[0]
        + b"".join(card_chunks)
        + extras[1]
        + comment
        + pixels
        + _chunk(b"IEND", b"")
    )


def _text_chunk(kind: bytes, keyword: str, card: dict) -> bytes:
    payload = base64.b64encode(json.dumps(card, ensure_ascii=False).encode("utf-8"))
    if kind == b"tEXt":
        return _chunk(kind, keyword.encode() + b"\0" + payload)
    if kind == b"zTXt":
        return _chunk(kind, keyword.encode() + b"\0\0" + zlib.compress(payload))
    return _chunk(kind, keyword.encode() + b"\0\1\0en\0\0" + zlib.compress(payload))  # iTXt, compressed


V3_CARD = {"spec": "chara_card_v3", "spec_version": "3.0", "data": {"name": "Po", "description": "A panda."}}
V2_CARD = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Po", "description": "A panda."}}


@pytest.mark.parametrize("kind", [b"tEXt", b"zTXt", b"iTXt"])
def test_a_card_is_read_from_any_png_text_chunk(tmp_path, kind):
    path = tmp_path / "po.png"
    path.write_bytes(_card_png([_text_chunk(kind, "chara", V2_CARD)]))
    assert read_character_card(path).description == "A panda."


def test_a_png_round_trip_is_byte_exact_and_an_edit_changes_only_the_card_chunks(tmp_path):
    original = _card_png([_text_chunk(b"tEXt", "chara", V2_CARD), _text_chunk(b"tEXt", "ccv3", V3_CARD)])
    path = tmp_path / "po.png"
    path.write_bytes(original)
    profile = read_character_card(path)
    write_character_card(profile, tmp_path / "same.png")
    assert (tmp_path / "same.png").read_bytes() == original

    profile.description = "A panda who knows kung fu."
    write_character_card(profile, tmp_path / "edited.png")
    edited = (tmp_path / "edited.png").read_bytes()
    kinds = [kind for kind, *_ in character_card._png_chunks(edited, "edited.png")]
    assert kinds == [b"IHDR", b"tIME", b"tEXt", b"tEXt", b"tEXt", b"zTXt", b"IDAT", b"IEND"]  # cards in place
    others = [c for c in character_card._png_chunks(original, "o") if not character_card._is_card_chunk(c[0], c[1])]
    assert [
        c[:2] for c in character_card._png_chunks(edited, "e") if not character_card._is_card_chunk(c[0], c[1])
    ] == [c[:2] for c in others]
    texts = dict(character_card._png_texts(character_card._png_chunks(edited, "e"), "e"))
    v3 = json.loads(base64.b64decode(texts["ccv3"]))
    v2 = json.loads(base64.b64decode(texts["chara"]))  # V3 is written with a V2-readable copy, as the spec says
    assert v3["spec"] == "chara_card_v3" and v2["spec"] == "chara_card_v2"
    assert v3["data"]["description"] == v2["data"]["description"] == "A panda who knows kung fu."
    assert read_character_card(tmp_path / "edited.png").description == "A panda who knows kung fu."
