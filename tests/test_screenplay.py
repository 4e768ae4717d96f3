from pathlib import Path

import pytest

from rolellm.roles.profile import Utterance
from rolellm.roles.screenplay import parse_screenplay, parse_screenplay_lines, read_screenplay, write_screenplay


FIXTURE = Path(__file__).parent / "fixtures" / "lighthouse_screenplay.txt"
HEADINGS = ["INT. LIGHTHOUSE LAMP ROOM - NIGHT", "EXT. HARBOUR WALL - DAWN", "INT. LIGHTHOUSE KITCHEN - DAY"]


@pytest.fixture
def ada():
    return read_screenplay(FIXTURE, "Ada Quill", aliases=["ADA"])


def test_fixture_parses_to_the_expected_groups(ada):
    groups = [[(u.speaker, u.content) for u in group] for group in ada.dialogue_groups()]
    assert groups == [
        [
            ("narration", "Rain hammers the glass. MOSS BRINDLE (60s), oilskin coat, trims the wick of an enormous lamp."),
            ("narration", "ADA QUILL (30s) climbs through the hatch, soaked, carrying a crate of brass parts."),
            ("Ada Quill", "You said the lamp was failing."),
        ],
        [("Moss", "I said it was tired. Lamps get tired, same as keepers."), ("Ada Quill", "Then we give it new lungs.")],
        [("narration", "She drops the crate. BANG!"), ("Moss", "Careful. The sea hears everything.")],
        [("narration", "Gulls. Ada walks the wall, counting bolts."), ("Ada Quill", "Forty-two bolts. Forty-one good ones.")],
        [("Harbourmaster", "Miss Quill! The ferry wants its engine back."),
         ("Ada Quill", "Tell the ferry to measure twice. And cut once.")],
        # split over a page break by (MORE) / page number / (CONTINUED) / HARBOURMASTER (CONT'D): joined back
        [("Harbourmaster", "It says it did, and it still has a wobble.")],
        [("narration", "Moss pours tea into two chipped mugs."), ("Moss", "Will it hold?"), ("Ada Quill", "Measure twice!")],
    ]  # fmt: skip
    assert [u.act_id for u in ada.dialogue] == [0] * 7 + [1] * 5 + [2] * 3
    assert [group[0].diag_id for group in ada.dialogue_groups()] == list(range(7))
    assert ada.extra["scene_headings"] == HEADINGS
    assert ada.source == "lighthouse_screenplay" and ada.name == "Ada Quill"
    assert all(u.narration == (u.speaker == "narration") for u in ada.dialogue)


def test_page_noise_and_transitions_are_dropped(ada):
    text = " ".join(u.content for u in ada.dialogue)
    for noise in (
        "CONTINUED",
        "(MORE)",
        "CONT'D",
        "CUT TO",
        "FADE",
        "(V.O.)",
        "(O.S.)",
        "(beat)",
        "(without turning)",
    ):
        assert noise not in text


def test_tabs_spaces_and_flush_left_parse_alike(ada):
    flush = "\n".join(line.strip() for line in FIXTURE.read_text().splitlines())
    assert parse_screenplay(flush, "Ada Quill", aliases=["ADA"], source="lighthouse_screenplay") == ada
    tabs = FIXTURE.read_text().replace("               ", "\t\t").replace("                         ", "\t\t\t")
    assert parse_screenplay(tabs, "Ada Quill", aliases=["ADA"], source="lighthouse_screenplay") == ada


def test_parentheticals_can_be_kept():
    lines = parse_screenplay_lines(FIXTURE.read_text(), keep_parentheticals=True)
    assert (
        0,
        "MOSS",
        "(without turning) I said it was tired. Lamps get tired, same as keepers.",
        HEADINGS[0],
    ) in lines


def test_write_then_parse_round_trips(ada):
    text = write_screenplay(ada)
    assert text.startswith("INT. LIGHTHOUSE LAMP ROOM - NIGHT\n")
    assert "                         HARBOURMASTER\n" in text
    again = parse_screenplay(text, "Ada Quill", source=ada.source)
    assert again.dialogue == ada.dialogue and again.extra == ada.extra


def test_the_role_is_matched_by_name_without_aliases():
    profile = parse_screenplay("EXT. DOCK - DAY\n\nPO\nSkadoosh!\n\nSHIFU\nAgain.", role="Po")
    assert profile.dialogue == [Utterance(0, 0, "Po", "Skadoosh!"), Utterance(0, 1, "Shifu", "Again.")]


def test_a_new_act_opens_a_new_group():
    profile = parse_screenplay(
        "INT. A - DAY\n\nSHIFU\nFocus.\n\nINT. B - NIGHT\n\nSHIFU\nAgain.\n\nPO\nOkay!", role="Po"
    )
    assert [(u.act_id, u.diag_id) for u in profile.dialogue] == [(0, 0), (1, 1), (1, 1)]


def test_an_empty_screenplay_file_is_an_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("\n\n")
    with pytest.raises(ValueError, match="empty.txt: the file is empty"):
        read_screenplay(path, "Po")


def test_action_in_capitals_is_narration_not_a_cue():
    indented = (
        "INT. HALL - DAY\n\nTHE DOOR SLAMS.\nEveryone jumps.\n\n                    PO\n          Who's there?\n"
    )
    flush = "INT. HALL - DAY\n\nTHE DOOR SLAMS.\nEveryone jumps.\n\nPO\nWho's there?\n"
    for text in (indented, flush):
        profile = parse_screenplay(text, role="Po")
        assert [(u.speaker, u.content) for u in profile.dialogue] == [
            ("narration", "THE DOOR SLAMS. Everyone jumps."),
            ("Po", "Who's there?"),
        ]
    # in an indented script a capitalised action line followed by indented text is not mistaken for a cue
    mixed = "INT. HALL - DAY\n\nGONG\n          The gong rings.\n\n                    PO\n          Who's there?\n"
    assert parse_screenplay(mixed, role="Po").dialogue[0].speaker == "narration"


def _said(text, role="Ada Quill", aliases=("ADA",)):
    profile = parse_screenplay(text, role=role, aliases=list(aliases))
    return [(u.speaker, u.content) for u in profile.dialogue]


def test_speech_after_an_inline_parenthetical_is_kept():
    text = "INT. LAB - DAY\n\n                ADA\n          (beat) Then we go.\n          Now.\n"
    assert _said(text) == [("Ada Quill", "Then we go. Now.")]


def test_a_cue_and_its_parenthetical_at_the_same_indent_are_a_speech():
    text = "INT. LAB - DAY\n\n                ADA\n                (quietly)\n          Not yet.\n"
    assert _said(text) == [("Ada Quill", "Not yet.")]


def test_page_numbers_and_running_headers_are_not_lines():
    page = "\n\n                                                   {n}.\n\nTHE CLOCKWORK HEIR - Draft 2 - {n}\n\n"
    text = "INT. LAB - DAY\n\n"
    for n in range(1, 4):
        text += f"                ADA\n          Line {n}.\n" + page.format(n=n)
    assert _said(text) == [("Ada Quill", f"Line {n}.") for n in range(1, 4)]


@pytest.mark.parametrize("heading", ["INTERIOR LAB - DAY", "EXTERIOR YARD - NIGHT", "INT./EXT. CAR - DAY"])
def test_spelled_out_headings_open_acts(heading):
    text = (
        f"INT. HALL - DAY\n\n                ADA\n          One.\n\n{heading}\n\n                ADA\n          Two.\n"
    )
    profile = parse_screenplay(text, role="Ada Quill", aliases=["ADA"])
    assert [u.act_id for u in profile.dialogue] == [0, 1] and profile.extra["scene_headings"][1] == heading


def test_dual_dialogue_side_by_side_is_two_speeches():
    text = (
        "INT. LAB - DAY\n\n"
        "          ADA                              MOSS\n"
        "     It works!                     It's on fire!\n"
        "     It really works.              Truly on fire.\n"
    )
    assert _said(text) == [("Ada Quill", "It works! It really works."), ("Moss", "It's on fire! Truly on fire.")]


def test_fountain_dual_dialogue_is_two_speeches():
    text = "INT. LAB - DAY\n\nADA\nIt works!\n\nMOSS ^\nIt's on fire!\n"
    assert _said(text) == [("Ada Quill", "It works!"), ("Moss", "It's on fire!")]


def test_a_speech_over_a_page_break_is_one_line():
    text = (
        "INT. LAB - DAY\n\n                ADA\n          The first half\n                (MORE)\n\n"
        "                                                   2.\n\n                ADA (CONT'D)\n          and the rest.\n"
    )
    assert _said(text) == [("Ada Quill", "The first half and the rest.")]


@pytest.mark.parametrize("layout", ["indented", "flush"])
def test_write_then_parse_is_exact_on_every_layout(layout):
    source = (
        "INT. LAB - DAY\n\nGears turn.\n\n                ADA\n          (beat) Progress.\n\n"
        "                MOSS\n                (worried)\n          Is it safe?\n\nEXTERIOR YARD - NIGHT\n\n"
        "                ADA\n          Safe enough.\n"
    )
    if layout == "flush":
        source = "\n".join(line.strip() for line in source.splitlines())
    profile = parse_screenplay(source, role="Ada Quill", aliases=["ADA"])
    again = parse_screenplay(write_screenplay(profile), role="Ada Quill")
    assert [(u.act_id, u.diag_id, u.speaker, u.content) for u in again.dialogue] == [
        (u.act_id, u.diag_id, u.speaker, u.content) for u in profile.dialogue
    ]
    assert [u.content for u in profile.dialogue] == ["Gears turn.", "Progress.", "Is it safe?", "Safe enough."]
