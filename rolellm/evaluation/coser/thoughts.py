"""Inner thoughts: what a character thinks but does not say, removed from what the other agents and the judge see.

CoSER's actors write thoughts in square brackets (`[I must not show fear.]`), and reasoning models write
`<think>`, `<system_thinking>` or `<role_thinking>` blocks. `remove_inner_thoughts` drops both, strips every line and
collapses the blank lines left behind; `add_speaker_name` labels a message with its speaker for the others.

>>> remove_inner_thoughts("[He lies.] (smiles) Of course.\\n\\n<role_thinking>Be careful.</role_thinking>\\nGo on.")
'(smiles) Of course.\\nGo on.'
>>> add_speaker_name("(bows) My lord.", "Iago")
'Iago: (bows) My lord.'
"""

import re
from collections.abc import Mapping, Sequence

from rolellm.evaluation.coser.testset import ENVIRONMENT


_BRACKETS = re.compile(r"\[.*?\]")  # one line at a time, as the original does
_BLOCKS = [
    re.compile(rf"\s*<\s*{tag}\s*>.*?</\s*{tag}\s*>\s*", re.S | re.I)
    for tag in (r"system[_\s]+think(?:ing)?", r"role[_\s]+think(?:ing)?", r"[_\s]*think(?:ing)?")
]
_BLANK_LINES = re.compile(r"\n+")


def remove_inner_thoughts(text: str) -> str:
    """`text` without bracketed thoughts and thinking blocks, each line stripped, no blank lines, stripped."""
    text = "\n".join(line.strip() for line in _BRACKETS.sub("", text).split("\n"))
    text = _BLANK_LINES.sub("\n", text)
    for block in _BLOCKS:
        text = block.sub("\n", text)
    return _BLANK_LINES.sub("\n", text).strip()


def add_speaker_name(text: str, speaker: str) -> str:
    """`"{speaker}: {text}"`, unless a line of `text` already starts with the speaker's name and a colon."""
    lines = [line.strip() for line in text.split("\n")]
    if any(line.startswith((f"{speaker}:", f"{speaker}：")) for line in lines):
        return text
    return f"{speaker}: {text}"


def reference_without_thoughts(reference: Sequence[Mapping]) -> list[dict]:
    """The reference conversation (`{"character", "message"}`) as it is judged and compared: thoughts removed from
    every character's message, the Environment's as written."""
    return [
        dict(m) if m["character"] == ENVIRONMENT else {**m, "message": remove_inner_thoughts(m["message"])}
        for m in reference
    ]
