"""Speaking-style rewards read from the role's profile, and a length penalty.

- `CatchphraseReward`: 1.0 when the answer uses one of the role's catchphrases (`RoleProfile.catchphrases`), else 0.0;
  `None` (no reward) for a role whose profile has none.
- `LanguageReward`: 1.0 when the answer is in the row's language (its `lang` column, else the profile's), by the one
  rule of `rolellm.roles.profile.detect_language`; an empty answer scores 0.0.
- `LengthPenalty`: 0.0 up to `max_length` words (a Chinese character counts as a word), then falling linearly to
  -1.0 at twice that length; a cap on the verbosity that ROUGE-L recall and judges both reward.

Each is an object called as a TRL reward function, `reward(prompts, completions, role=..., **columns)`, that reads
the profiles it was given; a row whose role has no profile is an error that names the role.

>>> from rolellm.roles.profile import RoleProfile
>>> profiles = {"Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A pirate.", ["Savvy?"])}
>>> CatchphraseReward(profiles)(["p", "p"], ["Rum, savvy?", "Rum."], role=["Jack Sparrow"] * 2)
[1.0, 0.0]
>>> LanguageReward(profiles)(["p", "p"], ["Rum, savvy?", "朗姆酒"], role=["Jack Sparrow"] * 2)
[1.0, 0.0]
>>> LengthPenalty(max_length=2)(["p", "p", "p"], ["Rum!", "Rum, rum, rum!", "朗姆酒"])
[0.0, -0.5, -0.5]
"""

import logging
import re
import unicodedata
from collections.abc import Mapping

from rolellm.evaluation.multiturn.dialogue import answer_length
from rolellm.rewards.text import profiles_of, role_texts
from rolellm.roles.profile import RoleProfile, detect_language


logger = logging.getLogger(__name__)


def _folded(text: str) -> str:
    """Text compared for a catchphrase: Unicode NFKC (full-width punctuation as ASCII), case and spacing ignored."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text).casefold()).strip()


class CatchphraseReward:
    """1.0 when a completion contains one of its role's catchphrases (case, width and spacing ignored), else 0.0.

    Args:
        profiles (`Mapping[str, RoleProfile]`): role -> profile (names matched by `rolellm.roles.lookup`).
    """

    __name__ = "catchphrase"

    def __init__(self, profiles: Mapping[str, RoleProfile]):
        self.profiles = profiles

    def __call__(self, prompts, completions, role=None, transcript=None, **kwargs) -> list[float | None]:
        rewards: list[float | None] = []
        for text, profile in zip(role_texts(completions, transcript), profiles_of(self.profiles, role, self.__name__)):
            phrases = [_folded(p) for p in profile.catchphrases if p.strip()]
            rewards.append(float(any(p in _folded(text) for p in phrases)) if phrases else None)
        missing = rewards.count(None)
        if missing:
            logger.warning("catchphrase: %d of %d rows are of roles without catchphrases: no reward for them",
                           missing, len(rewards))  # fmt: skip
        return rewards


class LanguageReward:
    """1.0 when a completion is in its row's language (the `lang` column, else the profile's), else 0.0.

    Args:
        profiles (`Mapping[str, RoleProfile]`): role -> profile.
    """

    __name__ = "language"

    def __init__(self, profiles: Mapping[str, RoleProfile]):
        self.profiles = profiles

    def __call__(self, prompts, completions, role=None, lang=None, transcript=None, **kwargs) -> list[float]:
        profiles = profiles_of(self.profiles, role, self.__name__)
        wanted = [(lang[i] if lang is not None and lang[i] else p.lang) for i, p in enumerate(profiles)]
        texts = role_texts(completions, transcript)
        return [float(bool(text.strip()) and detect_language(text) == w) for text, w in zip(texts, wanted)]


class LengthPenalty:
    """0.0 for an answer of at most `max_length` words, then `-(length - max_length) / max_length`, down to -1.0.

    Words are counted as `rolellm.evaluation.multiturn.dialogue.answer_length` counts them, a CJK character as one
    word, so one limit serves English and Chinese answers.

    Args:
        max_length (`int`): the words an answer may have without penalty.
    """

    __name__ = "length_penalty"

    def __init__(self, max_length: int):
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"LengthPenalty(max_length={max_length}): give a positive number of words")
        self.max_length = max_length

    def __call__(self, prompts, completions, transcript=None, **kwargs) -> list[float]:
        rewards = []
        for text in role_texts(completions, transcript):
            length = answer_length([text])
            excess = max(0, length["words"] + length["cjk_chars"] - self.max_length)
            rewards.append(-min(1.0, excess / self.max_length) if excess else 0.0)
        return rewards
