"""Role profiles: who a role is (description, catchphrases) and what it said (script dialogue).

A `RoleProfile` is the one profile type every stage reads: RoleGPT retrieves from its dialogue, Context-Instruct
segments it, the RoCIT chat template renders its description into the system instruction.

>>> profile = RoleProfile(
...     name="孙悟空", lang="zh", description="齐天大圣，性格桀骜不驯。", catchphrases=["俺老孙来也"],
...     dialogue=[Utterance(act_id=1, diag_id=1, speaker="唐僧", content="悟空，前面是什么地方？"),
...               Utterance(act_id=1, diag_id=1, speaker="孙悟空", content="师父莫慌，俺老孙去看看！")],
... )
>>> [len(group) for group in profile.dialogue_groups()]
[2]
"""

from dataclasses import dataclass, field
from itertools import groupby
from typing import Literal


NARRATOR_NAMES = ("旁白", "narration", "NARRATION", "Narrator", "narrator")


@dataclass
class Utterance:
    """One line of a script: a speaker's words, or narration.

    Args:
        act_id (`int`): the act (scene) the line belongs to.
        diag_id (`int`): the dialogue group; a group ends on a line of the profiled role.
        speaker (`str`): who speaks (`"旁白"` or `"narration"` for narration).
        content (`str`): what is said.
        narration (`bool`, *optional*, defaults to whether `speaker` is a narrator name): the line is narration,
            not speech.
    """

    act_id: int
    diag_id: int
    speaker: str
    content: str
    narration: bool | None = None

    def __post_init__(self):
        if self.narration is None:
            self.narration = self.speaker in NARRATOR_NAMES


@dataclass
class RoleProfile:
    """A role: its description, catchphrases and the script dialogue it appears in.

    Args:
        name (`str`): the role's name as RoleBench spells it (`"Jack Sparrow"`, `"孙悟空"`).
        lang (`Literal["en", "zh"]`): the profile's language.
        description (`str`, *optional*): who the role is, without the catchphrase sentence.
        catchphrases (`list[str]`, *optional*): the role's catchphrases, split out of the release's
            `Your catchphrase is: "..."` / `常用口头禅是：“…”` sentence.
        source (`str`, *optional*): the script (film, series, novel) the role comes from.
        dialogue (`list[Utterance]`, *optional*): the structured script lines.
        generated (`bool`, *optional*, defaults to `False`): the description was written by an LLM and has not been
            reviewed.
        extra (`dict`, *optional*): fields of the source format that have no place above (a character card's
            `scenario`, `extensions`, ...), kept so that writing the profile back loses nothing.
    """

    name: str
    lang: Literal["en", "zh"]
    description: str = ""
    catchphrases: list[str] = field(default_factory=list)
    source: str = ""
    dialogue: list[Utterance] = field(default_factory=list)
    generated: bool = False
    extra: dict = field(default_factory=dict)

    def dialogue_groups(self) -> list[list[Utterance]]:
        """The dialogue split into its `diag_id` groups, in script order."""
        return [list(group) for _, group in groupby(self.dialogue, key=lambda u: (u.act_id, u.diag_id))]
