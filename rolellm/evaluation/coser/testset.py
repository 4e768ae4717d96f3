"""The CoSER test set: read its JSON (the repository's `data/test/test_set.json` schema) and check every case.

A case is one scene of a book: the `scenario`, the `plot` it belongs to (`plot.summary`, `plot.i_p`,
`plot.key_characters`), the characters who speak in it (`speaking_characters_w_env`, where `"Environment"` is the
world), the `major_characters`, each key character's `motivation` (`key_characters`), the `character_profiles` and
the reference conversation (`dialogues`, `{"character", "message"}`). A case's id is `"{book}-{i_p}-{i_c}"`, as in
the original results files.

Anything malformed is a `DataFormatError` naming the file, the case (index and id) and the field; a scene that names
a character twice in `speaking_characters_w_env` or `major_characters` (the same name, or the same but for case,
spaces and punctuation) is one, naming the character.

>>> import json, tempfile
>>> case = {"book": "Othello", "i_c": 0, "scenario": "A street in Venice.", "topic": "",
...         "plot": {"i_p": 9, "summary": "Iago plots.", "key_characters": []},
...         "key_characters": [{"name": "Iago", "motivation": "Revenge."}],
...         "speaking_characters_w_env": ["Iago", "Othello"], "major_characters": ["Iago", "Othello"],
...         "character_profiles": {"Iago": "An ensign.", "Othello": "A general."},
...         "dialogues": [{"character": "Iago", "message": "[He trusts me.] My lord?"}]}
>>> path = tempfile.mkdtemp() + "/test_set.json"
>>> _ = open(path, "w").write(json.dumps([case]))
>>> [scene] = read_coser_test_set(path)
>>> scene.id, scene.speakers, scene.motivations["Iago"]
('Othello-9-0', ['Iago', 'Othello', 'Environment'], 'Revenge.')
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.roles.lookup import repeated_names
from rolellm.roles.profile import DataFormatError, read_json_file


ENVIRONMENT = "Environment"  # the role name of the world, as in the test set


@dataclass
class CoserCase:
    """One scene of the test set, checked.

    Args:
        id (`str`): `"{book}-{i_p}-{i_c}"`.
        book (`str`): the book's title.
        scenario (`str`): the scene's situation.
        plot_summary (`str`): the summary of the plot the scene belongs to.
        speakers (`list[str]`): who may speak, `"Environment"` always among them (added last when the file omits it).
        major_characters (`list[str]`): the main characters of the scene.
        profiles (`dict[str, str]`): each speaking character's profile (a plot's description of the character
            first), for the characters that have one.
        motivations (`dict[str, str]`): each key character's motivation in the scene.
        reference (`list[dict]`): the original conversation, `{"character", "message"}`.
    """

    id: str
    book: str
    scenario: str
    plot_summary: str
    speakers: list[str]
    major_characters: list[str]
    profiles: dict[str, str] = field(default_factory=dict)
    motivations: dict[str, str] = field(default_factory=dict)
    reference: list[dict] = field(default_factory=list)

    @property
    def characters(self) -> list[str]:
        """The speaking characters played by the actor model (everyone but the Environment)."""
        return [name for name in self.speakers if name != ENVIRONMENT]


def _check(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise DataFormatError(f"{where}: {message}")


def _strings(value, where: str, name: str, allow_empty: bool = False) -> list[str]:
    ok = isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)
    _check(ok and (allow_empty or value), where, f"field '{name}' must be a non-empty list of names, got {value!r}")
    return list(value)


def _no_repeats(names: list[str], where: str, name: str) -> None:
    """A character named twice in a scene's list (however spelled) would be played, and predicted, as two."""
    for first, again in repeated_names(names):
        spelled = f"{first!r} twice" if first == again else f"{first!r} and {again!r}, one character"
        _check(False, where, f"field '{name}' names {spelled}: list each character once")


def case_from_dict(record: Mapping, where: str) -> CoserCase:
    """A checked `CoserCase` from one entry of the test set; `where` names it in errors (file, index)."""
    _check(isinstance(record, Mapping), where, f"a case must be a JSON object, got {type(record).__name__}")
    plot = record.get("plot")
    _check(isinstance(plot, Mapping), where, f"field 'plot' must be an object, got {plot!r}")
    book = record.get("book")
    _check(
        isinstance(book, str) and book.strip() != "", where, f"field 'book' must be a non-empty string, got {book!r}"
    )
    i_p = plot.get("i_p", record.get("i_p"))
    i_c = record.get("i_c")
    for name, value in (("plot.i_p", i_p), ("i_c", i_c)):
        _check(isinstance(value, int) and not isinstance(value, bool), where, f"field '{name}' must be an integer, "
               f"got {value!r}")  # fmt: skip
    where = f"{where} ({book}-{i_p}-{i_c})"
    scenario = record.get("scenario")
    _check(isinstance(scenario, str) and scenario.strip() != "", where, "field 'scenario' must be a non-empty string")
    summary = plot.get("summary", "")
    _check(isinstance(summary, str), where, f"field 'plot.summary' must be a string, got {summary!r}")
    speakers = _strings(record.get("speaking_characters_w_env"), where, "speaking_characters_w_env")
    _no_repeats(speakers, where, "speaking_characters_w_env")
    if ENVIRONMENT not in speakers:
        speakers.append(ENVIRONMENT)
    _check(len(speakers) > 1, where, "field 'speaking_characters_w_env' names no character besides the Environment")
    majors = _strings(record.get("major_characters", []), where, "major_characters", allow_empty=True)
    _no_repeats(majors, where, "major_characters")
    profiles = record.get("character_profiles", {})
    _check(
        isinstance(profiles, Mapping) and all(isinstance(v, str) for v in profiles.values()),
        where, "field 'character_profiles' must be an object of name -> profile text",
    )  # fmt: skip
    described = {}
    for n, entry in enumerate(plot.get("key_characters") or []):
        _check(isinstance(entry, Mapping) and isinstance(entry.get("name"), str), where,
               f"field 'plot.key_characters[{n}]' must be an object with a 'name'")  # fmt: skip
        if isinstance(entry.get("description"), str):
            described.setdefault(entry["name"], entry["description"])
    motivations = {}
    key_characters = record.get("key_characters", [])
    _check(isinstance(key_characters, list), where, "field 'key_characters' must be a list")
    for n, entry in enumerate(key_characters):
        _check(isinstance(entry, Mapping) and isinstance(entry.get("name"), str), where,
               f"field 'key_characters[{n}]' must be an object with a 'name'")  # fmt: skip
        # the example set calls it `motivation`, the full test set `thought`: the same text
        motivation = entry.get("motivation", entry.get("thought", ""))
        _check(isinstance(motivation, str), where, f"field 'key_characters[{n}].motivation' must be a string")
        motivations.setdefault(entry["name"], motivation)
    involved = {}
    for name in speakers:
        if name == ENVIRONMENT:
            continue
        profile = profiles.get(name, "")
        if name in described:
            profile = described[name].strip("\n") + "\n\n" + profile.strip("\n")
        profile = profile.strip(" \n")
        if profile:
            involved[name] = profile
    dialogues = record.get("dialogues")
    _check(isinstance(dialogues, list) and dialogues, where, "field 'dialogues' must be a non-empty list")
    reference = []
    for n, message in enumerate(dialogues):
        ok = isinstance(message, Mapping) and all(isinstance(message.get(k), str) for k in ("character", "message"))
        _check(ok, where, f"field 'dialogues[{n}]' must be an object with string 'character' and 'message'")
        reference.append({"character": message["character"], "message": message["message"]})
    return CoserCase(
        f"{book}-{i_p}-{i_c}", book, scenario, summary, speakers, majors, involved, motivations, reference
    )


def read_coser_test_set(path: str | os.PathLike) -> list[CoserCase]:
    """Read and check a CoSER test set file (a JSON list of cases); a repeated case id is an error naming both.

    Raises:
        `FileNotFoundError` for a missing file, `DataFormatError` naming the file, the case and the field.
    """
    path = Path(path)
    records = read_json_file(path, "test set file (CoSER's data/test/test_set.json)")
    if not isinstance(records, list) or not records:
        raise DataFormatError(f"{path}: a test set is a non-empty JSON list of cases")
    cases, seen = [], {}
    for index, record in enumerate(records):
        case = case_from_dict(record, f"{path}: case {index}")
        if case.id in seen:
            raise DataFormatError(f"{path}: case {index}: id {case.id!r} is already used by case {seen[case.id]}")
        seen[case.id] = index
        cases.append(case)
    return cases


def select_cases(cases: list[CoserCase], ids: list[str] | None = None, limit: int | None = None) -> list[CoserCase]:
    """The cases named by `ids` (in the file's order; an unknown id is a `ValueError`), then the first `limit`."""
    if ids:
        known = {case.id for case in cases}
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise ValueError(f"--cases {unknown} are not in the test set; its ids look like {cases[0].id!r}")
        cases = [case for case in cases if case.id in set(ids)]
    return cases[:limit] if limit is not None else cases
