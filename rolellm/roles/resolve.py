"""One way to get role profiles from whatever a user has: `load_profiles(source)`, and one decision of where a
command's profiles come from: `profiles_for(sources, model_dir=, data_dir=)` (the data folder's release profiles,
then `--profiles` or else a checkpoint's `role_profiles.jsonl`).

Every command and API that takes profiles (`rolellm generate`, `train`, `evaluate`, `dialogue`, `chat`) resolves
them here, so a source that works for one works for all. Both return a `Profiles` mapping, which finds a role however
it is spelled (the rule of `rolellm.roles.lookup`). Accepted sources, told apart by what is on disk:

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
import os
from collections.abc import Iterable, Mapping
from dataclasses import field
from pathlib import Path

from rolellm.roles.character_card import read_character_card
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import (
    DataFormatError,
    RoleProfile,
    detect_language,
    parse_json_line,
    read_text,
    role_key,
)
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
) -> Profiles:
    """Read role profiles from any accepted source (see the module docstring), or several.

    Args:
        source (`str`, `os.PathLike` or a list of them): where the profiles are. With several sources a role read
            again (the same name by its key: `Dr. Frank N Furter` is `Dr. Frank-N-Furter`, NFD is NFC) replaces the
            earlier profile and takes from it what the later source lacks: the description and catchphrases, the
            dialogue, the source, and the fields kept in `extra` (a screenplay adds dialogue to a release role or to
            a Character Card, whose personality, scenario and lorebook stay in force).
        lang (`str`, *optional*): `"en"` or `"zh"`: only this language of a release folder, and the language of
            screenplays and cards (guessed from their text when not given).
        roles (`list[str]`, *optional*): keep only these roles, matched by the rule of `rolellm.roles.lookup`
            (`"Dr. Frank N Furter"` finds `"Dr. Frank-N-Furter"`, `"Odessa"` the card `"Odessa Flint"`); required
            for a screenplay text file, whose profile takes the name of the role another source has (`--profiles
            odessa.png script.txt --roles Odessa` reads the cue `ODESSA` into the card's `Odessa Flint`).

    Returns:
        `Profiles`: role name -> profile, in the order read, looked up by the rule of `rolellm.roles.lookup`.

    Raises:
        `ProfileSourceError`: a source that does not exist or is of no accepted kind, or a role of `roles` that no
        source has (the message lists the roles found).
        `DataFormatError`: a file of the source that is malformed (named with its line).
    """
    sources = [Path(item) for item in ([source] if isinstance(source, (str, Path)) else source)]
    if not sources:
        raise ProfileSourceError(f"no profile source given: pass {ACCEPTED}")
    roles = list(roles) if roles is not None else None
    parts = {i: _read_source(path, lang) for i, path in enumerate(sources) if not _is_screenplay_file(path)}
    if len(parts) < len(sources):
        named = Profiles({name: profile for part in parts.values() for name, profile in part.items()})
        for i, path in enumerate(sources):
            if i not in parts:
                parts[i] = _read_screenplay_file(path, lang, roles, named)
    profiles: dict[str, RoleProfile] = {}
    names: dict[str, str] = {}  # role_key -> the name the role is kept under
    for i in range(len(sources)):
        for name, profile in parts[i].items():
            known = profiles.pop(names.get(role_key(name), name), None)
            profiles[name] = profile if known is None else _fill_from(profile, known)
            names[role_key(name)] = name
    where = ", ".join(str(path) for path in sources)
    return select_roles(profiles, roles, where=where) if roles else Profiles(profiles, where=where)


def _fill_from(profile: RoleProfile, known: RoleProfile) -> RoleProfile:
    """`profile` read again from a later source, with what it lacks taken from the earlier `known` one."""
    if not profile.description:
        profile.description, profile.catchphrases = known.description, known.catchphrases
    profile.dialogue = profile.dialogue or known.dialogue
    profile.source = profile.source or known.source
    profile.extra = {**known.extra, **profile.extra}  # a card's fields stay beside a screenplay's dialogue
    return profile


def select_roles(profiles: Mapping[str, RoleProfile], roles: Iterable[str], where: str | None = None) -> Profiles:
    """The profiles of `roles`, in the order of `roles`, matched by the rule of `rolellm.roles.lookup`.

    >>> profiles = {"Dr. Frank-N-Furter": RoleProfile("Dr. Frank-N-Furter", "en")}
    >>> list(select_roles(profiles, ["Dr. Frank N Furter"]))
    ['Dr. Frank-N-Furter']

    Raises:
        `ProfileSourceError`: roles that match no profile (the message lists the roles found).
        `AmbiguousRoleError`: a role that matches several profiles.
    """
    profiles = Profiles(profiles, where=where)
    found = {role: profiles.find(role) for role in roles}
    missing = [role for role, name in found.items() if name is None]
    if missing:
        raise ProfileSourceError(f"roles {missing} are not in {profiles.where}; roles found: {sorted(profiles)}")
    return Profiles({name: profiles[name] for name in found.values()}, where=profiles.where)


def profiles_for(
    sources: str | Path | Iterable[str | Path] | None = None,
    model_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    lang: str | None = None,
    roles: Iterable[str] | None = None,
) -> Profiles:
    """The profiles a command works with: where they come from is decided here, for every command.

    Read in this order, a role read again taking the later source's fields (`load_profiles`):

    1. the data folder's profiles: the release's `profiles-eng/` and `profiles-zh/` in `data_dir` (only `lang`'s),
       when it has them, since the data's rows need their roles' descriptions;
    2. the explicit `sources` (`--profiles`), or, when there are none, the model folder's: a checkpoint's
       `role_profiles.jsonl` (the profiles a model was trained with), else release `profiles-*/` folders in it.

    So `--profiles` wins over a checkpoint's profiles and both add to (and take precedence over) the data folder's.
    A missing piece is skipped; nothing found at all gives an empty `Profiles` (or, with `roles`, an error naming
    them), and the command says what to pass.

    Args:
        sources (`str`, `os.PathLike` or a list of them, *optional*): explicit profile sources, any kind
            `load_profiles` reads.
        model_dir (`str` or `os.PathLike`, *optional*): a model folder or Hub id; only a local folder holding
            `role_profiles.jsonl` (or `profiles-*/`) counts.
        data_dir (`str` or `os.PathLike`, *optional*): a RoleBench release folder.
        lang (`str`, *optional*): `"en"` or `"zh"` (see `load_profiles`).
        roles (`list[str]`, *optional*): keep only these roles (see `load_profiles`).

    >>> import tempfile, pathlib
    >>> from rolellm.roles.release import write_release_profiles
    >>> data, model = pathlib.Path(tempfile.mkdtemp()), pathlib.Path(tempfile.mkdtemp())
    >>> _ = write_release_profiles({"Po": RoleProfile("Po", "en", "A panda.")}, data)
    >>> _ = write_profiles_jsonl({"Po": RoleProfile("Po", "en", "The Dragon Warrior.")}, model / PROFILES_FILE)
    >>> profiles_for(model_dir=model, data_dir=data)["po"].description
    'The Dragon Warrior.'
    >>> profiles_for(data_dir=data, roles=["Shifu"])
    Traceback (most recent call last):
    ...
    rolellm.roles.resolve.ProfileSourceError: roles ['Shifu'] are not in .../profiles-eng; roles found: ['Po']
    """
    read = _release_folders(Path(data_dir), lang) if data_dir is not None else []
    explicit = as_sources(sources)
    if explicit:
        read += explicit
    elif model_dir is not None and os.path.lexists(Path(model_dir) / PROFILES_FILE):  # a folder or a dead link too
        read.append(Path(model_dir) / PROFILES_FILE)
    elif model_dir is not None:
        read += _release_folders(Path(model_dir), lang)
    if not read and roles:
        looked = [f"{folder} holds no {PROFILES_FILE} or profiles-*/" for folder in (model_dir, data_dir) if folder]
        raise ProfileSourceError(f"roles {list(roles)} are not in any profiles: {'; '.join(looked) or 'no source'}")
    return load_profiles(read, lang, roles=roles) if read else Profiles()


def _release_folders(folder: Path, lang: str | None) -> list[Path]:
    """The release's `profiles-eng/` and `profiles-zh/` in `folder` (only `lang`'s), those that are there."""
    langs = [lang] if lang is not None else list(RELEASE_LANG_DIRS)
    paths = [folder / f"profiles-{RELEASE_LANG_DIRS[code]}" for code in langs]
    return [path for path in paths if path.is_dir()]


def _is_screenplay_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in SCREENPLAY_SUFFIXES


def _read_screenplay_file(path: Path, lang: str | None, roles: list[str] | None, named: Profiles) -> dict:
    """The profiles of `roles` in a screenplay, each under the name another source has for it (`named`)."""
    if not roles:
        raise ProfileSourceError(f"{path}: a screenplay needs the roles to profile: pass roles (--roles NAME)")
    text_lang = lang or _guess_lang(path)
    profiles = {}
    for role in roles:
        name = named.find(role) or role
        aliases = [role] if name != role else []  # the cue the user gave: `ODESSA` for the card's `Odessa Flint`
        profiles[name] = read_screenplay(path, name, aliases=aliases, lang=text_lang)
    return profiles


def _read_source(path: Path, lang: str | None) -> dict[str, RoleProfile]:
    for link in (path, path / PROFILES_FILE, path / "desc.json"):
        if link.is_symlink() and not link.exists():
            raise ProfileSourceError(f"{link} is a link that leads nowhere (a loop, or a missing target)")
    if not path.exists():
        raise ProfileSourceError(f"{path}: no such file or folder; profiles are read from {ACCEPTED}")
    if path.is_file():
        return _read_file(path, lang)
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
        profiles, read_from = {}, {}
        for card in cards:
            profile = read_character_card(card, lang)
            if role_key(profile.name) in read_from:  # one would replace the other without a word
                raise ProfileSourceError(
                    f"{card} and {read_from[role_key(profile.name)]} are cards of one role ({profile.name!r}): keep one"
                )
            read_from[role_key(profile.name)] = card
            profiles[profile.name] = profile
        return profiles
    raise ProfileSourceError(f"{path}: a folder with no role profiles in it; profiles are read from {ACCEPTED}")


def _read_file(path: Path, lang: str | None) -> dict[str, RoleProfile]:
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
    """The language of a file's first 4,000 characters, by `detect_language` (the one rule for guessing it)."""
    try:
        text = path.read_bytes()[:16000].decode("utf-8", errors="ignore")
    except OSError as error:
        raise ProfileSourceError(f"{path}: cannot be read ({error.strerror})") from None
    if path.suffix == ".json":
        with contextlib.suppress(ValueError, AttributeError):  # a truncated or odd file: guess from the raw text
            text = " ".join(str(value) for value in json.loads(text).values())
    return detect_language(text[:4000])
