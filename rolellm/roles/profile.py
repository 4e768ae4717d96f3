"""Role profiles: who a role is (description, catchphrases) and what it said (script dialogue).

A `RoleProfile` is the one profile type every stage reads: RoleGPT retrieves from its dialogue, Context-Instruct
segments it, the RoCIT chat template renders its description into the system instruction. This module holds the
dataclasses and the catchphrase sentence; the readers and writers of the release's files are in
`rolellm.roles.release`, screenplay text in `rolellm.roles.screenplay`, character cards in
`rolellm.roles.character_card`.

>>> profile = RoleProfile(
...     name="孙悟空", lang="zh", description="齐天大圣，性格桀骜不驯。", catchphrases=["俺老孙来也"],
...     dialogue=[Utterance(act_id=1, diag_id=1, speaker="唐僧", content="悟空，前面是什么地方？"),
...               Utterance(act_id=1, diag_id=1, speaker="孙悟空", content="师父莫慌，俺老孙去看看！")],
... )
>>> [len(group) for group in profile.dialogue_groups()]
[2]
>>> profile.description_with_catchphrases()
'齐天大圣，性格桀骜不驯。常用口头禅是：“俺老孙来也”'
"""

import codecs
import functools
import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Literal


NARRATOR_NAMES = ("旁白", "narration", "NARRATION", "Narrator", "narrator")

# The release's catchphrase sentence closes the description: `... Your catchphrase is: "..."` in English,
# `...常用口头禅是：“…”、“…”` in Chinese. The sentence may name several catchphrases, each in quotes.
_CATCHPHRASE_SENTENCE = {
    "en": re.compile(
        r"\s*\b(?:your|his|her|their|the role's)\s+catch[- ]?phrases?\s+(?:is|are)\s*[:：]?\s*(?P<items>.*)$",
        re.I | re.S,
    ),
    "zh": re.compile(r"\s*(?:常用|经常说的)?口头禅(?:是|为|有)?\s*[:：]\s*(?P<items>.*)$", re.S),
}
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|「([^」]+)」|‘([^’]+)’')
_UNQUOTED_SEPARATORS = re.compile(r"\s*[、,，;；/]\s*")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class DataFormatError(ValueError):
    """A file of the release (or one written in its layout) does not have the expected shape.

    The message names the file, the line (1-based) and the field, the value found and what was expected.
    """


def parse_json_line(line: str, path, line_no: int) -> dict:
    """One line of a JSON-lines file as a dict; anything else is a `DataFormatError` naming the file and the line.

    >>> parse_json_line('{"role": "Po"}', "rows.jsonl", 1)
    {'role': 'Po'}
    >>> parse_json_line("[1, 2]", "rows.jsonl", 2)
    Traceback (most recent call last):
    ...
    rolellm.roles.profile.DataFormatError: rows.jsonl:2: expected a JSON object, got list
    """
    record = parse_json_text(line, path, line_no)
    if not isinstance(record, dict):
        raise DataFormatError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
    if _SURROGATE_ESCAPE.search(line):  # pairs were joined by json.loads; a lone half cannot be written as UTF-8
        try:
            json.dumps(record, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as error:
            raise DataFormatError(
                f"{path}:{line_no}: a lone UTF-16 surrogate ({error.object[error.start]!r}) is not text"
            ) from None
    return record


class ProfileFileWarning(UserWarning):
    """A profile file is empty or has no usable content; the profile is kept with what the other files give."""


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

    def description_with_catchphrases(self) -> str:
        """The description followed by the release's catchphrase sentence: the paper's `{desc}`.

        >>> RoleProfile("Jack Sparrow", "en", "A witty pirate.", ["Savvy?"]).description_with_catchphrases()
        'A witty pirate. Your catchphrase is: "Savvy?"'
        >>> RoleProfile("李白", "zh", "为人爽朗大方。").description_with_catchphrases()
        '为人爽朗大方。'

        A text read from a file whose catchphrase sentence is worded differently (`extra["description_text"]`, set by
        the readers) comes back as written while description and catchphrases are unchanged.
        """
        kept = self.extra.get("description_text")
        if kept and kept["description"] == self.description and kept["catchphrases"] == self.catchphrases:
            return kept["text"]
        return join_catchphrases(self.description, self.catchphrases, self.lang)

    def to_dict(self) -> dict:
        """The profile as plain Python values (the `profiles-*` configs' row, JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> "RoleProfile":
        """Inverse of `to_dict`; also reads a row of the `profiles-en`/`profiles-zh` configs.

        >>> p = RoleProfile("Po", "en", "A panda.", dialogue=[Utterance(0, 0, "Po", "Skadoosh!")])
        >>> RoleProfile.from_dict(p.to_dict()) == p
        True
        """
        row = dict(row)
        row["dialogue"] = [Utterance(**utterance) for utterance in row.get("dialogue") or []]
        row["catchphrases"] = list(row.get("catchphrases") or [])
        row["extra"] = dict(row.get("extra") or {})
        return cls(**row)


def split_catchphrases(text: str, lang: str | None = None) -> tuple[str, list[str]]:
    """Split the release's catchphrase sentence off a description.

    Args:
        text (`str`): a description as the release's `desc.json` holds it.
        lang (`str`, *optional*): `"en"` or `"zh"`; when `None` both sentence forms are tried.

    Returns:
        `tuple[str, list[str]]`: the description without the sentence (stripped) and the catchphrases, in order.
        A text without a catchphrase sentence comes back stripped with an empty list.

    >>> split_catchphrases("一位猛将。常用口头禅是：“我乃燕人张翼德”、“吃我一矛！”", "zh")
    ('一位猛将。', ['我乃燕人张翼德', '吃我一矛！'])
    >>> split_catchphrases('A pirate captain. Your catchphrase is: "Savvy?"', "en")
    ('A pirate captain.', ['Savvy?'])
    """
    patterns = [_CATCHPHRASE_SENTENCE[lang]] if lang in _CATCHPHRASE_SENTENCE else list(_CATCHPHRASE_SENTENCE.values())
    for pattern in patterns:
        match = pattern.search(text)
        if match is None:
            continue
        items = match.group("items").strip()
        quoted = [next(group for group in groups if group) for groups in _QUOTED.findall(items)]
        if not quoted:
            quoted = [re.sub(r"^'(.*)'$", r"\1", item.strip(" .。")) for item in _UNQUOTED_SEPARATORS.split(items)]
        return text[: match.start()].strip(), [item.strip() for item in quoted if item.strip()]
    return text.strip(), []


def join_catchphrases(description: str, catchphrases: list[str], lang: str) -> str:
    """The inverse of `split_catchphrases`: the description with the release's catchphrase sentence appended.

    >>> join_catchphrases("一个典型的君王。", ["朕", "本皇"], "zh")
    '一个典型的君王。常用口头禅是：“朕”、“本皇”'
    >>> join_catchphrases("A witty pirate.", ["Savvy?", "Why is the rum gone?"], "en")
    'A witty pirate. Your catchphrases are: "Savvy?", "Why is the rum gone?"'
    """
    if not catchphrases:
        return description
    if lang == "zh":
        return description + "常用口头禅是：" + "、".join(f"“{phrase}”" for phrase in catchphrases)
    quoted = ", ".join(f'"{phrase}"' for phrase in catchphrases)
    sentence = f"Your catchphrase is: {quoted}" if len(catchphrases) == 1 else f"Your catchphrases are: {quoted}"
    return f"{description} {sentence}" if description else sentence


def parse_description(text: str, lang: str) -> tuple[str, list[str], dict]:
    """`split_catchphrases` plus the `extra` that keeps `text` exact when rejoining would word it differently.

    >>> parse_description('A pirate. Your catchphrase is: Savvy', "en")
    ('A pirate.', ['Savvy'], {'description_text': {'description': 'A pirate.', 'catchphrases': ['Savvy'], 'text': 'A pirate. Your catchphrase is: Savvy'}})
    """
    description, catchphrases = split_catchphrases(text, lang)
    if join_catchphrases(description, catchphrases, lang) == text:
        return description, catchphrases, {}
    return (
        description,
        catchphrases,
        {"description_text": {"description": description, "catchphrases": list(catchphrases), "text": text}},
    )


def detect_language(text: str) -> Literal["en", "zh"]:
    """Return `"zh"` when the text has at least as many CJK characters as Latin words, else `"en"`.

    >>> detect_language("Arr, matey."), detect_language("俺老孙来也！OK"), detect_language("")
    ('en', 'zh', 'en')
    """
    cjk = len(_CJK.findall(text))
    return "zh" if cjk and cjk >= len(_LATIN_WORD.findall(text)) else "en"


def role_key(name: str) -> str:
    """A spelling-insensitive key for a role name, to join rows and profiles across the release's spellings.

    >>> role_key("Dr. Frank-N-Furter") == role_key("Dr. Frank N Furter")
    True
    >>> role_key("D_Artagnan") == role_key("D'Artagnan")
    True
    >>> role_key("Jose\u0301") == role_key("Jos\u00e9")  # one name in decomposed (NFD) and composed (NFC) form
    True

    Code outside `rolellm.roles` matches names through `rolellm.roles.lookup` (`Profiles`, `RoleNames`), which adds
    aliases and first names to this key.
    """
    return re.sub(r"[\W_]+", "", unicodedata.normalize("NFKC", name)).casefold()


def role_slug(name: str) -> str:
    """The role's name as an id (a scenario's, a file name's part): letters and digits only, case-folded; the
    spellings of one role give one slug.

    >>> role_slug("Jack Sparrow"), role_slug("Dr. Frank-N-Furter")
    ('jacksparrow', 'drfranknfurter')
    """
    return role_key(name)


def decode_text(raw: bytes, path, log: bool = False) -> str:
    """The text of a file's bytes, UTF-8 with or without a byte-order mark; anything else is a `DataFormatError`
    naming the file, the line and the byte. A NUL byte is an error too (a binary file), except, with `log` (an
    append-only log), a run of them at the end: a crash can leave the tail of a log as NUL bytes, and the log's
    reader drops it as the last line cut short.

    >>> decode_text("\\ufeff{}\\r\\n".encode("utf-8"), "a.json")
    '{}\\r\\n'
    >>> decode_text(b'{"a": "\\xff"}', "a.json")
    Traceback (most recent call last):
    ...
    rolellm.roles.profile.DataFormatError: a.json:1: not UTF-8 text (byte 7 is 0xff); save the file as UTF-8
    >>> decode_text(b'{}\\n\\x00\\x00', "a.json")
    Traceback (most recent call last):
    ...
    rolellm.roles.profile.DataFormatError: a.json:2: a NUL byte (byte 3): a binary file, not text
    """
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DataFormatError(f"{path}: UTF-16 text; save the file as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataFormatError(
            f"{path}:{line}: not UTF-8 text (byte {error.start} is 0x{raw[error.start]:02x}); save the file as UTF-8"
        ) from None
    nul = raw.find(b"\0")  # valid UTF-8, yet no text file holds one: a binary file, or a log's tail lost in a crash
    if nul >= 0 and not (log and not raw[nul:].strip(b"\0")):
        line = raw[:nul].count(b"\n") + 1
        raise DataFormatError(f"{path}:{line}: a NUL byte (byte {nul}): a binary file, not text")
    return text


def read_text(path, allow_empty: bool = False, log: bool = False) -> str:
    """A text file's content through `decode_text` (`log`: an append-only log's); an empty or blank file is a
    `DataFormatError` naming it unless `allow_empty`."""
    text = decode_text(Path(path).read_bytes(), path, log=log)
    if not allow_empty and not text.strip():
        raise DataFormatError(f"{path}: the file is empty")
    return text


def parse_json_text(text: str, path, line_no: int | None = None, object_pairs_hook=None):
    """The value of a JSON document read from `path` (line `line_no` of a JSON Lines file, or the whole file); invalid
    JSON, a value nested too deeply for Python or an integer of too many digits is a `DataFormatError` naming the
    file and the line. `object_pairs_hook` is `json.loads`'s; what it raises (other than a `ValueError`) passes.

    >>> parse_json_text('{"cases": [1]}', "results.json")
    {'cases': [1]}
    >>> parse_json_text('{"cases": [1}', "results.json")
    Traceback (most recent call last):
    ...
    rolellm.roles.profile.DataFormatError: results.json:1: not valid JSON (Expecting ',' delimiter, column 13)
    """
    at = path if line_no is None else f"{path}:{line_no}"
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as error:
        if line_no is None:
            raise DataFormatError(
                f"{path}:{error.lineno}: not valid JSON ({error.msg}, column {error.colno})"
            ) from None
        hint = " (the line looks truncated)" if not text.rstrip().endswith("}") else ""
        raise DataFormatError(f"{at}: not valid JSON{hint}: {error.msg} (column {error.colno})") from None
    except RecursionError:
        raise DataFormatError(f"{at}: a JSON value nested too deeply to read") from None
    except ValueError as error:  # an integer of more digits than Python converts
        raise DataFormatError(f"{at}: not a readable JSON value: {error}") from None


def check_output_folder(path, flag: str = "--output_dir") -> None:
    """Refuse an output folder that is a file, or lies under one, before a run does any work (it would fail at its
    first write, after the work): a `NotADirectoryError` naming both.

    >>> import tempfile
    >>> notes = Path(tempfile.mkdtemp()) / "notes.txt"
    >>> _ = notes.write_text("mine")
    >>> check_output_folder(notes / "run")
    Traceback (most recent call last):
    ...
    NotADirectoryError: --output_dir .../notes.txt/run: .../notes.txt is a file, not a folder
    """
    for folder in (Path(path), *Path(path).parents):
        if folder.is_file():
            raise NotADirectoryError(f"{flag} {path}: {folder} is a file, not a folder")


@functools.cache
def unique_key_yaml_loader():
    """PyYAML's safe loader refusing a key given twice in one mapping (PyYAML keeps the last one silently): the
    `Loader` of `yaml.load` for the YAML files rolellm reads (recipes, scenarios)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"key {key!r} is given twice (line {seen[key] + 1} and line {key_node.start_mark.line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def read_json_file(path, kind: str | None = None):
    """The JSON value of a UTF-8 file (`read_text`, then `parse_json_text`): errors name the file and the line. With
    `kind` (what the file is, e.g. `"results file"`), a folder or a missing file is an error saying so."""
    if kind is not None:
        if Path(path).is_dir():
            raise IsADirectoryError(f"{path} is a folder: give the {kind}")
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path}: no such {kind}")
    return parse_json_text(read_text(path), path)


def read_json_object(path, what: str, hint: str = "", kind: str | None = None) -> dict:
    """The JSON object of a file holding `what` (`"the run's settings"`), read with `read_json_file`: any error names
    the file (and line), says when the value is no object, and ends with `hint`, what to do about it."""
    try:
        value = read_json_file(path, kind)
    except DataFormatError as error:
        raise DataFormatError(f"{error}{hint}") from None
    if not isinstance(value, dict):
        raise DataFormatError(f"{path}: expected a JSON object of {what}, got {type(value).__name__}{hint}")
    return value
