"""Screenplay text (the common film-script layout) to a `RoleProfile`, and back.

The layout: scene headings (`INT.`, `EXT.`, `INT./EXT.`, `I/E`, `EST.`) open acts; a speaker cue in capitals
(`ADA`, `ADA (V.O.)`, `MOSS (CONT'D)`) is followed by its dialogue lines, with parentheticals such as `(beat)` on
lines of their own; every other paragraph is narration (action). Indentation is not relied on, so tabs, spaces or
flush-left text parse alike. Page numbers, `(CONTINUED)`, `CONTINUED:`, transitions (`CUT TO:`, `FADE IN:`) are
dropped, and a speech split over a page break (`(MORE)` ... `NAME (CONT'D)`) is joined back into one line.

Dialogue groups are cut as the paper's profiles are: a group ends on a line of the profiled role, and a new act
starts a new group.

>>> text = '''
... INT. WORKSHOP - NIGHT
...
... Gears everywhere.
...
...                 MOSS
...       What is that noise?
...
...                 ADA (CONT'D)
...       (not looking up)
...       Progress, Moss.
... '''
>>> profile = parse_screenplay(text, role="Ada Quill", aliases=["ADA"])
>>> [(u.diag_id, u.speaker, u.content) for u in profile.dialogue]
[(0, 'narration', 'Gears everywhere.'), (0, 'Moss', 'What is that noise?'), (0, 'Ada Quill', 'Progress, Moss.')]
"""

import re
import textwrap
from collections import Counter
from pathlib import Path

from rolellm.roles.profile import DataFormatError, RoleProfile, Utterance, read_text


NARRATION = "narration"
_HEADING = re.compile(
    r"^(?:\d+[A-Z]?\s+)?(?:INT\.?/EXT\.?|EXT\.?/INT\.?|I/E|INT\.|EXT\.|EST\.|INTERIOR\b|EXTERIOR\b)\s*", re.I
)
_TRANSITION = re.compile(
    r"^(?:[A-Z .'-]+ TO:|FADE (?:IN|OUT)[.:]?|FADE TO BLACK\.?|THE END\.?|CONTINUED:?|CUT TO BLACK\.?)$"
)
_PAGE_NOISE = re.compile(
    r"^(?:\d+[A-Z]?\.?|\(CONTINUED\)|CONTINUED:|\(CONT'D\)|\(CONT’D\)|[-–—]?\s*\d+\s*[-–—]?)$", re.I
)
_EXTENSION = re.compile(r"\s*\([^)]*\)\s*")  # a cue's extension: (V.O.), (O.S.), (CONT'D), (into phone), ...
_DIGIT = re.compile(r"\d")
_CUE = re.compile(r"^[A-Z0-9][A-Z0-9 .'’\-&#]*(?:\s*\([^)]*\))*\s*\^?$")


def _is_cue(line: str, indent: int, next_indent: int, indented: bool) -> bool:
    """A speaker cue: capitals, at most five words, not a heading or transition. In an indented script the cue sits
    to the right of its dialogue, which tells `THE DOOR SLAMS.` (action in capitals) from a cue."""
    name = _EXTENSION.sub(" ", line).strip(" ^")
    last = name.split()[-1] if name.split() else ""
    return (
        bool(_CUE.match(line))
        and any(ch.isalpha() for ch in name)
        and len(name.split()) <= 5
        and not (last.endswith(".") and len(last) > 4)  # `JR.`, `DR. X` yes; `SLAMS.` no
        and not _HEADING.match(line)
        and not _TRANSITION.match(line)
        and (not indented or indent > next_indent)
    )


def _blocks(text: str) -> tuple[list[list[tuple[int, str, str]]], bool]:
    """Paragraphs of `(indentation, stripped line, raw line)`, page noise and running headers removed, tabs
    expanded; and whether the script is laid out with indentation (cues and dialogue indented, as film scripts are).

    A running header is a one-line paragraph with a number in it that recurs, with other numbers, at least three
    times (`MY SCRIPT - 12`, `Draft 3 - page 7`): the page furniture of a printed script.
    """
    blocks, current, indented = [], [], False
    for raw in text.expandtabs(8).splitlines():
        line = raw.strip()
        if _PAGE_NOISE.match(line):
            continue
        if not line:
            if current:
                blocks.append(current)
            current = []
        else:
            indent = len(raw) - len(raw.lstrip())
            indented = indented or indent >= 10
            current.append((indent, line, raw))
    if current:
        blocks.append(current)
    shapes = Counter(
        re.sub(r"\d+", "#", block[0][1]) for block in blocks if len(block) == 1 and _DIGIT.search(block[0][1])
    )
    headers = {shape for shape, count in shapes.items() if count >= 3}
    blocks = [b for b in blocks if not (len(b) == 1 and re.sub(r"\d+", "#", b[0][1]) in headers)]
    return blocks, indented


def parse_screenplay_lines(text: str, keep_parentheticals: bool = False) -> list[tuple[int, str | None, str, str]]:
    """The script as `(act, speaker cue or None for narration, content, scene heading)` in order."""
    lines: list[list] = []
    act, heading, continued = -1, "", False
    blocks, indented = _blocks(text)
    for block in blocks:
        if _HEADING.match(block[0][1]):
            act, heading = act + 1, block[0][1]
            block = block[1:]
            if not block:
                continue
        first = block[0][1]
        if len(block) == 1 and _TRANSITION.match(first):
            continue
        act_id = max(act, 0)
        columns = _dual_cue_columns(block) if len(block) > 1 else None
        if columns is not None:  # dual dialogue side by side: two speeches, the left one first
            for side in (slice(None, columns), slice(columns, None)):
                speech = [(indent, raw[side].strip(), raw) for indent, _, raw in block if raw[side].strip()]
                speaker, content, _ = _speech(speech, keep_parentheticals)
                if content:
                    lines.append([act_id, speaker, content, heading])
            continued = False
        elif len(block) > 1 and _is_cue(first, block[0][0], _dialogue_indent(block), indented):
            speaker, content, more = _speech(block, keep_parentheticals)
            if continued and lines and lines[-1][1] == speaker and lines[-1][0] == act_id:
                lines[-1][2] = f"{lines[-1][2]} {content}".strip()
            elif content:
                lines.append([act_id, speaker, content, heading])
            continued = more
        else:
            lines.append([act_id, None, " ".join(line for _, line, _ in block), heading])
            continued = False
    return [tuple(line) for line in lines]


def _dialogue_indent(block) -> int:
    """The indentation of the first dialogue line after a cue (a parenthetical may sit at the cue's own indent)."""
    return next((indent for indent, line, _ in block[1:] if not line.startswith("(")), block[1][0])


def _dual_cue_columns(block) -> int | None:
    """The column between two speeches side by side (`BRICK        STEEL` over two columns of dialogue), else
    `None`: the middle of the widest run of columns that is blank on every line between the two cues."""
    raw = block[0][2]
    parts = list(re.finditer(r"\S+(?: \S+)*", raw))
    if len(parts) != 2 or not all(_CUE.match(m.group()) and any(c.isalpha() for c in m.group()) for m in parts):
        return None
    if parts[1].start() - parts[0].end() < 4 or _HEADING.match(raw.strip()) or _TRANSITION.match(raw.strip()):
        return None
    blank = [
        column
        for column in range(parts[0].end(), parts[1].start())
        if all(column >= len(line) or line[column] == " " for _, _, line in block[1:])
    ]
    runs, start = [], None
    for i, column in enumerate(blank):
        if start is None:
            start = column
        if i + 1 == len(blank) or blank[i + 1] != column + 1:
            runs.append((column - start + 1, start, column))
            start = None
    if not runs:
        return None
    width, first, last = max(runs)
    return (first + last + 1) // 2 if width >= 2 else None


def _speech(block, keep_parentheticals: bool) -> tuple[str, str, bool]:
    """A cue's block as `(speaker, content, continued on the next page)`. Parentheticals are dropped (or kept),
    including one that opens a line before the words (`(beat) Then we go.`)."""
    speaker = _EXTENSION.sub(" ", block[0][1]).strip(" ^")
    words, more, in_paren = [], False, False
    for _, line, _ in block[1:]:
        if line.upper() == "(MORE)":
            more = True
            continue
        if in_paren or line.startswith("("):
            closing = line.find(")")
            in_paren = closing < 0
            paren, rest = (line, "") if in_paren else (line[: closing + 1], line[closing + 1 :].strip())
            if keep_parentheticals:
                words.append(paren)
            if rest:
                words.append(rest)
            continue
        words.append(line)
    return speaker, " ".join(words), more


def parse_screenplay(
    text: str,
    role: str,
    aliases: list[str] | tuple[str, ...] = (),
    lang: str = "en",
    source: str = "",
    description: str = "",
    keep_parentheticals: bool = False,
) -> RoleProfile:
    """Parse screenplay text into the profile of one role, with acts and dialogue groups.

    Args:
        text (`str`): the screenplay.
        role (`str`): the profiled role's name; its lines get this name as speaker.
        aliases (`list[str]`, *optional*): the cue names of the role in the script (`["ADA"]` for `"Ada Quill"`);
            the upper-cased `role` always counts.
        lang (`str`, *optional*, defaults to `"en"`), source (`str`, *optional*), description (`str`, *optional*):
            stored on the profile.
        keep_parentheticals (`bool`, *optional*, defaults to `False`): keep `(beat)`-style lines in the content.

    Returns:
        `RoleProfile` whose `dialogue` holds every line (other speakers title-cased, narration as `"narration"`) and
        whose `extra["scene_headings"]` lists each act's heading.
    """
    names = {role.upper(), *(alias.upper() for alias in aliases)}
    dialogue, headings = [], []
    diag_id, last_act = 0, None
    for act_id, cue, content, heading in parse_screenplay_lines(text, keep_parentheticals):
        if last_act is not None and act_id != last_act and dialogue and dialogue[-1].diag_id == diag_id:
            diag_id += 1  # a new act opens a new group
        if act_id >= len(headings):
            headings.extend([""] * (act_id + 1 - len(headings)))
        headings[act_id] = heading
        last_act = act_id
        if cue is None:
            dialogue.append(Utterance(act_id, diag_id, NARRATION, content, narration=True))
        elif cue.upper() in names:
            dialogue.append(Utterance(act_id, diag_id, role, content))
            diag_id += 1
        else:
            dialogue.append(Utterance(act_id, diag_id, cue.title(), content))
    extra = {"scene_headings": headings}
    return RoleProfile(role, lang, description, source=source, dialogue=dialogue, extra=extra)


def read_screenplay(path: str | Path, role: str, **kwargs) -> RoleProfile:
    """`parse_screenplay` on a text file; the file name (without suffix) becomes the `source` unless given.

    Raises:
        `DataFormatError`: the file is empty, not UTF-8, or has no line of `role` (the message lists the cues found).
    """
    path = Path(path)
    kwargs.setdefault("source", path.stem)
    profile = parse_screenplay(read_text(path), role, **kwargs)
    if not any(u.speaker == role for u in profile.dialogue):
        cues = Counter(u.speaker.upper() for u in profile.dialogue if not u.narration)
        found = f"cues found: {', '.join(c for c, _ in cues.most_common(10))}" if cues else "no speaker cue found"
        raise DataFormatError(
            f"{path}: no line of {role!r} ({found}); give the role as the script's cues spell it, or its cue names "
            "as aliases"
        )
    return profile


def write_screenplay(profile: RoleProfile, width: int = 35) -> str:
    """Render a profile's dialogue in the film-script layout; `parse_screenplay` reads it back to the same lines.

    >>> profile = parse_screenplay("INT. HALL - DAY\\n\\nPO\\nSkadoosh!", role="Po")
    >>> print(write_screenplay(profile).strip())
    INT. HALL - DAY
    <BLANKLINE>
                             PO
                   Skadoosh!
    """
    headings = profile.extra.get("scene_headings", [])
    out, act = [], None
    for utterance in profile.dialogue:
        if utterance.act_id != act:
            act = utterance.act_id
            heading = headings[act] if act < len(headings) and headings[act] else f"INT. SCENE {act + 1}"
            out += [heading, ""]
        if utterance.narration:
            out += [*textwrap.wrap(utterance.content, 60), ""]
        else:
            out.append(" " * 25 + utterance.speaker.upper())
            out += [" " * 15 + line for line in textwrap.wrap(utterance.content, width)]
            out.append("")
    return "\n".join(out)
