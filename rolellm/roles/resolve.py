"""One way to get role profiles from whatever a user has: `load_profiles(source)`.

Every command and API that takes profiles (`rolellm generate`, `train`, `evaluate`) resolves them here, so a source
that works for one works for all. Accepted sources, told apart by what is on disk:

| source | read with |
|---|---|
| a RoleBench release folder (holding `profiles-eng/` and/or `profiles-zh/`) | `read_release_profiles`, each language |
| a `profiles-eng/` or `profiles-zh/` folder, or its `desc.json` | `read_release_profiles` |
| a screenplay-profile folder (`desc.json` + `{script}-{role}.jsonl`), or its `desc.json` | `read_screenplay_folder` |
| a Character Card V2/V3, `.json` or `.png`, or a folder of cards | `read_character_card` |
| a screenplay text file (`.txt`, `.fountain`), with `roles=` naming who to profile | `read_screenplay` |
| a model checkpoint folder holding `role_profiles.jsonl`, or that file | `read_profiles_jsonl` |

>>> import tempfile, pathlib
>>> from rolellm.roles.release import write_release_profiles
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = write_release_profiles({"Po": RoleProfile("Po", "en", "A kung fu panda.")}, folder)
>>> sorted(load_profiles(folder))
['Po']
>>> sorted(load_profiles(folder / "profiles-eng" / "desc.json", roles=["po"]))
['Po']
"""

import argparse
import contextlib
import json
import re
from collections.abc import Iterable
from dataclasses import field
from pathlib import Path

from rolellm.roles.character_card import read_character_card
from rolellm.roles.profile import DataFormatError, RoleProfile, parse_json_line, read_text, role_key
from rolellm.roles.release import RELEASE_LANG_DIRS, read_release_profiles, read_screenplay_folder
from rolellm.roles.screenplay import read_screenplay


PROFILES_FILE = "role_profiles.jsonl"  # a checkpoint's profiles: one `RoleProfile.to_dict()` per line
SCREENPLAY_SUFFIXES = (".txt", ".fountain", ".spmd")
CARD_SUFFIXES = (".json", ".png")
ACCEPTED = (
    "a RoleBench release folder (with profiles-eng/ or profiles-zh/), a profiles-eng/ or profiles-zh/ folder, a "
    "screenplay-profile folder (desc.json + {script}-{role}.jsonl), a desc.json, a Character Card (.json or .png) "
    "or a folder of cards, a screenplay file (.txt, .fountain) with roles, or a model checkpoint folder (with "
    f"{PROFILES_FILE})"
)
_RELEASE_FOLDERS = {f"profiles-{suffix}": lang for lang, suffix in RELEASE_LANG_DIRS.items()}
_CJK = re.compile(r"[\u3400-\u9fff]")


PROFILES_HELP = (
    "Role profiles, repeatable (--profiles A B --profiles C): a RoleBench release folder, a profiles-eng/ or "
    "profiles-zh/ folder, a desc.json, a screenplay folder, a screenplay file (.txt, .fountain: with --roles), a "
    "Character Card V2/V3 (.json, .png) or a folder of cards."
)


class ProfileSourceError(ValueError):
    """A profile source that is missing or of no accepted kind; the message names it and lists the accepted kinds."""


class ProfileSourcesAction(argparse.Action):
    """`--profiles A B --profiles C` gives `["A", "B", "C"]`; the first use on the command line replaces the value a
    YAML recipe set, the next ones add to it."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        kept = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, kept + list(values))


def profiles_field(required: bool = False, help: str = PROFILES_HELP):
    """The `profiles` field of every command's config: one or more profile sources for `load_profiles`.

    On the command line it is `--profiles SOURCE [SOURCE ...]`, repeatable (`ProfileSourcesAction`); in a YAML
    recipe, a string or a list of strings. A config using it normalises the value with `as_sources` in its
    `__post_init__`.

    >>> from dataclasses import dataclass
    >>> from transformers import HfArgumentParser
    >>> @dataclass
    ... class Arguments:
    ...     profiles: list[str] | None = profiles_field()
    >>> HfArgumentParser(Arguments).parse_args(["--profiles", "a.json", "b/", "--profiles", "c.png"]).profiles
    ['a.json', 'b/', 'c.png']
    """
    metadata = {"help": help, "action": ProfileSourcesAction}
    return field(metadata=metadata) if required else field(default=None, metadata=metadata)


def as_sources(value, name: str = "profiles") -> list[str]:
    """A `profiles` value (`None`, a path, or a list of paths, as a recipe or the command line gives it) as a list.

    >>> as_sources("card.png"), as_sources(["a", "b"]), as_sources(None)
    (['card.png'], ['a', 'b'], [])
    """
    if value is None:
        return []
    items = [value] if isinstance(value, (str, Path)) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(item, (str, Path)) for item in items):
        raise ValueError(f"{name} must be a path or a list of paths to profile sources, got {value!r}")
    return [str(item) for item in items]


def load_profiles(
    source: str | Path | Iterable[str | Path], lang: str | None = None, roles: Iterable[str] | None = None
) -> dict[str, RoleProfile]:
    """Read role profiles from any accepted source (see the module docstring), or several.

    Args:
        source (`str`, `os.PathLike` or a list of them): where the profiles are. With several sources a role read
            again replaces the earlier profile and takes from it what the later source lacks: the description and
            catchphrases, the dialogue, the source, and the fields kept in `extra` (a screenplay adds dialogue to a
            release role or to a Character Card, whose personality, scenario and lorebook stay in force).
        lang (`str`, *optional*): `"en"` or `"zh"`: only this language of a release folder, and the language of
            screenplays and cards (guessed from their text when not given).
        roles (`list[str]`, *optional*): keep only these roles, matched spelling-insensitively (`role_key`:
            `"Dr. Frank N Furter"` finds `"Dr. Frank-N-Furter"`); required for a screenplay text file.

    Returns:
        `dict[str, RoleProfile]`: role name -> profile, in the order read.

    Raises:
        `ProfileSourceError`: a source that does not exist or is of no accepted kind, or a role of `roles` that no
        source has (the message lists the roles found).
        `DataFormatError`: a file of the source that is malformed (named with its line).
    """
    sources = [source] if isinstance(source, (str, Path)) else list(source)
    if not sources:
        raise ProfileSourceError(f"no profile source given: pass {ACCEPTED}")
    roles = list(roles) if roles is not None else None
    profiles: dict[str, RoleProfile] = {}
    for item in sources:
        for name, profile in _read_source(Path(item), lang, roles).items():
            known = profiles.pop(name, None)
            profiles[name] = profile if known is None else _fill_from(profile, known)
    return select_roles(profiles, roles, where=", ".join(str(item) for item in sources)) if roles else profiles


def _fill_from(profile: RoleProfile, known: RoleProfile) -> RoleProfile:
    """`profile` read again from a later source, with what it lacks taken from the earlier `known` one."""
    if not profile.description:
        profile.description, profile.catchphrases = known.description, known.catchphrases
    profile.dialogue = profile.dialogue or known.dialogue
    profile.source = profile.source or known.source
    profile.extra = {**known.extra, **profile.extra}  # a card's fields stay beside a screenplay's dialogue
    return profile


def select_roles(profiles: dict[str, RoleProfile], roles: Iterable[str], where: str = "the profiles") -> dict:
    """The profiles of `roles`, in the order of `roles`, matched spelling-insensitively with `role_key`.

    >>> profiles = {"Dr. Frank-N-Furter": RoleProfile("Dr. Frank-N-Furter", "en")}
    >>> list(select_roles(profiles, ["Dr. Frank N Furter"]))
    ['Dr. Frank-N-Furter']
    """
    by_key = {role_key(name): name for name in profiles}
    missing = [role for role in roles if role_key(role) not in by_key]
    if missing:
        raise ProfileSourceError(f"roles {missing} are not in {where}; roles found: {sorted(profiles)}")
    return {by_key[role_key(role)]: profiles[by_key[role_key(role)]] for role in roles}


def _read_source(path: Path, lang: str | None, roles: list[str] | None) -> dict[str, RoleProfile]:
    if not path.exists():
        raise ProfileSourceError(f"{path}: no such file or folder; profiles are read from {ACCEPTED}")
    if path.is_file():
        return _read_file(path, lang, roles)
    if (path / PROFILES_FILE).is_file():
        return read_profiles_jsonl(path / PROFILES_FILE)
    if path.name in _RELEASE_FOLDERS:
        return _release(path, _RELEASE_FOLDERS[path.name], lang)
    release = [name for name in _RELEASE_FOLDERS if (path / name).is_dir()]
    if release:
        profiles = {}
        for name in release:
            if lang is None or _RELEASE_FOLDERS[name] == lang:
                profiles.update(read_release_profiles(path, _RELEASE_FOLDERS[name]))
        return profiles
    if (path / "desc.json").is_file():
        return dict(read_screenplay_folder(path, lang or _guess_lang(path / "desc.json")))
    cards = sorted(p for p in path.iterdir() if p.suffix.lower() in CARD_SUFFIXES and p.is_file())
    if cards:
        profiles = {}
        for card in cards:
            profile = read_character_card(card, lang)
            profiles[profile.name] = profile
        return profiles
    raise ProfileSourceError(f"{path}: a folder with no role profiles in it; profiles are read from {ACCEPTED}")


def _read_file(path: Path, lang: str | None, roles: list[str] | None) -> dict[str, RoleProfile]:
    suffix = path.suffix.lower()
    if path.name == PROFILES_FILE:
        return read_profiles_jsonl(path)
    if path.name == "desc.json":
        folder = path.parent
        if folder.name in _RELEASE_FOLDERS:
            return _release(folder, _RELEASE_FOLDERS[folder.name], lang)
        return dict(read_screenplay_folder(folder, lang or _guess_lang(path)))
    if suffix in CARD_SUFFIXES:
        profile = read_character_card(path, lang)
        return {profile.name: profile}
    if suffix in SCREENPLAY_SUFFIXES:
        if not roles:
            raise ProfileSourceError(f"{path}: a screenplay needs the roles to profile: pass roles (--roles NAME)")
        text_lang = lang or _guess_lang(path)
        return {role: read_screenplay(path, role, lang=text_lang) for role in roles}
    raise ProfileSourceError(f"{path}: not a kind of profile file rolellm reads; profiles are read from {ACCEPTED}")


def write_profiles_jsonl(profiles: dict[str, RoleProfile], path: str | Path) -> Path:
    """Write profiles losslessly, one `RoleProfile.to_dict()` JSON object per line (a checkpoint's
    `role_profiles.jsonl`); `load_profiles` reads the file or the folder holding it.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> profiles = {"Po": RoleProfile("Po", "en", "A kung fu panda.", ["Skadoosh!"])}
    >>> _ = write_profiles_jsonl(profiles, folder / PROFILES_FILE)
    >>> load_profiles(folder)["Po"].catchphrases
    ['Skadoosh!']
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(profile.to_dict(), ensure_ascii=False) for profile in profiles.values()]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_profiles_jsonl(path: Path) -> dict[str, RoleProfile]:
    """Read a file written by `write_profiles_jsonl`; a malformed line is a `DataFormatError` naming file and line."""
    profiles = {}
    for line_no, line in enumerate(read_text(path).splitlines(), 1):
        if line.strip():
            try:
                profile = RoleProfile.from_dict(parse_json_line(line, path, line_no))
            except TypeError as error:
                raise DataFormatError(f"{path}:{line_no}: not a RoleProfile ({error})") from None
            profiles[profile.name] = profile
    return profiles


def _release(folder: Path, folder_lang: str, lang: str | None) -> dict[str, RoleProfile]:
    if lang is not None and lang != folder_lang:
        raise ProfileSourceError(f"{folder} holds {folder_lang!r} profiles, but lang={lang!r} was asked for")
    return dict(read_release_profiles(folder, folder_lang))


def _guess_lang(path: Path) -> str:
    """`"zh"` when at least a tenth of the file's first 4,000 letters are CJK, else `"en"`."""
    try:
        text = path.read_bytes()[:16000].decode("utf-8", errors="ignore")
    except OSError as error:
        raise ProfileSourceError(f"{path}: cannot be read ({error.strerror})") from None
    if path.suffix == ".json":
        with contextlib.suppress(ValueError, AttributeError):  # a truncated or odd file: guess from the raw text
            text = " ".join(str(value) for value in json.loads(text).values())
    letters = [c for c in text[:4000] if c.isalpha()]
    return "zh" if letters and len(_CJK.findall("".join(letters))) * 10 >= len(letters) else "en"
