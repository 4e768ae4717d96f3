"""Read and write role profiles in the RoleBench release layout and the screenplay-profile folders.

Release layout (`profiles-zh/`, `profiles-eng/`): `desc.json` (role -> description with the catchphrase sentence),
`scripts.json` (role -> source script), optionally `generated.json` (roles whose description an LLM wrote and
nobody has reviewed yet: `{"generated": [...], "reviewed": [...]}`) and one `profiles-{lang}-{Role}.jsonl` per role with one utterance per line,
`{"act_id": int, "diag_id": int, "role": str, "content": str}`. Screenplay folders (`profile_zhenhuan/`) hold a
`desc.json` and `{script}-{role}.jsonl` files in the same line schema.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> profile = RoleProfile("Po", "en", "A kung fu panda.", ["Skadoosh!"], source="Kung Fu Panda",
...                       dialogue=[Utterance(0, 0, "Shifu", "Focus."), Utterance(0, 0, "Po", "I am focused!")])
>>> write_release_profiles({"Po": profile}, folder)
PosixPath('.../profiles-eng')
>>> read_release_profiles(folder, "en")["Po"] == profile
True
"""

import json
import warnings
from collections.abc import Mapping
from pathlib import Path

from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import (
    DataFormatError,
    ProfileFileWarning,
    RoleProfile,
    Utterance,
    join_catchphrases,
    parse_description,
    parse_json_line,
    parse_json_text,
    read_text,
    role_key,
)


RELEASE_LANG_DIRS = {"en": "eng", "zh": "zh"}  # the release spells English `eng` in folder and file names
_LINE_FIELDS = {"act_id": int, "diag_id": int, "role": str, "content": str}


class ProfileSet(dict):
    """`dict[str, RoleProfile]` keyed by role name, plus the files that were empty (counted, each warned about).

    Attributes:
        empty_files (`list[pathlib.Path]`): profile files with no utterance; their roles keep description and
            catchphrases from `desc.json`.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.empty_files: list[Path] = []


def read_profile_jsonl(
    path: str | Path,
    name: str,
    lang: str,
    description: str = "",
    catchphrases: list[str] | None = None,
    source: str = "",
) -> RoleProfile:
    """Read one `profiles-{lang}-{Role}.jsonl` / screenplay profile file into a `RoleProfile`.

    Args:
        path (`str` or `os.PathLike`): the jsonl file, one `{"act_id", "diag_id", "role", "content"}` per line.
        name (`str`): the profiled role.
        lang (`str`): `"en"` or `"zh"`.
        description (`str`, *optional*): the description; a catchphrase sentence in it is split off.
        catchphrases (`list[str]`, *optional*): catchphrases to add to those split off `description`.
        source (`str`, *optional*): the script the role comes from.

    Returns:
        `RoleProfile`. An empty file gives a `ProfileFileWarning` naming it and a profile with no dialogue.

    Raises:
        `DataFormatError`: a line that is not a JSON object, or a field missing or of the wrong type; the message
        names the file, the line and the field.
    """
    path = Path(path)
    description, split_off, extra = parse_description(description, lang)
    dialogue = []
    for line_no, line in enumerate(read_text(path, allow_empty=True).splitlines(), start=1):
        if line.strip():
            record = parse_json_line(line, path, line_no)
            for key, kind in _LINE_FIELDS.items():
                if key not in record:
                    raise DataFormatError(
                        f"{path}:{line_no}: field {key!r} is missing (fields found: {sorted(record)})"
                    )
                if not isinstance(record[key], kind) or isinstance(record[key], bool):
                    raise DataFormatError(
                        f"{path}:{line_no}: field {key!r} must be {kind.__name__}, got {type(record[key]).__name__} "
                        f"{record[key]!r}"
                    )
            dialogue.append(Utterance(record["act_id"], record["diag_id"], record["role"].strip(), record["content"]))
    if not dialogue:
        warnings.warn(f"{path} is empty: the profile of {name!r} has no dialogue", ProfileFileWarning, stacklevel=2)
    return RoleProfile(
        name=name,
        lang=lang,
        description=description,
        catchphrases=split_off + list(catchphrases or []),
        source=source,
        dialogue=dialogue,
        extra=extra,
    )


def write_profile_jsonl(profile: RoleProfile, path: str | Path) -> Path:
    """Write the profile's dialogue in the release's line schema (the inverse of `read_profile_jsonl`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for u in profile.dialogue:
            line = {"act_id": u.act_id, "diag_id": u.diag_id, "role": u.speaker, "content": u.content}
            file.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def read_release_profiles(folder: str | Path, lang: str) -> ProfileSet:
    """Read the release's profiles of one language.

    Args:
        folder (`str` or `os.PathLike`): the release root (holding `profiles-zh/` or `profiles-eng/`) or the
            profiles folder itself.
        lang (`str`): `"en"` or `"zh"`.

    Returns:
        `ProfileSet`: role name -> `RoleProfile` for every role of `desc.json` and every `profiles-*.jsonl` file.
        Empty files are warned about and listed in `.empty_files`.
    """
    if lang not in RELEASE_LANG_DIRS:
        raise ValueError(f"lang must be one of {sorted(RELEASE_LANG_DIRS)}, got {lang!r}")
    folder = Path(folder)
    prefix = f"profiles-{RELEASE_LANG_DIRS[lang]}"
    if (folder / prefix).is_dir():
        folder = folder / prefix
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: pass the release root or its {prefix}/ folder")
    descriptions = _read_json_object(folder / "desc.json", required=True)
    scripts = _read_json_object(folder / "scripts.json", required=False)
    files = {path.name[len(prefix) + 1 : -len(".jsonl")]: path for path in sorted(folder.glob(f"{prefix}-*.jsonl"))}
    profiles = _assemble(descriptions, scripts, files, lang)
    if not descriptions and not read_text(folder / "desc.json", allow_empty=True).strip():
        profiles.empty_files.insert(0, folder / "desc.json")
    marker = _read_generated_marker(folder / "generated.json")
    for name, profile in profiles.items():
        profile.generated = name in marker
    return profiles


def require_release_profiles(profiles: Mapping, rows: list[dict]) -> Profiles:
    """`profiles` as `Profiles`, once each role of the RoleBench `rows` finds one; else a `ValueError` naming the roles
    without one and where the release keeps their descriptions: a role's prompt and its judges need them."""
    folder = f"profiles-{RELEASE_LANG_DIRS[rows[0]['lang']]}" if rows else "profiles-<lang>"
    return Profiles(profiles).require(
        (row["role"] for row in rows), "the evaluation rows",
        "the system instruction and the judges need each role's description. Give data_dir with the release's "
        f"{folder}/desc.json, or profiles (--profiles) with any profile source of these roles",
    )  # fmt: skip


def read_screenplay_folder(folder: str | Path, lang: str = "zh") -> ProfileSet:
    """Read a folder of screenplay profiles: `desc.json` and one `{script}-{role}.jsonl` per profiled role.

    Only roles with a script file are returned (a description without dialogue is not a screenplay profile).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder of screenplay profiles")
    descriptions = _read_json_object(folder / "desc.json", required=False)
    described = {role_key(name) for name in descriptions}
    files, scripts = {}, {}
    for path in sorted(folder.glob("*.jsonl")):
        source, role = split_script_role(path.stem, described)
        files[role] = path
        scripts[role] = source
    profiles = _assemble(descriptions, scripts, files, lang)
    file_keys = {role_key(role) for role in files}
    scripted = ProfileSet({name: profile for name, profile in profiles.items() if role_key(name) in file_keys})
    scripted.empty_files = profiles.empty_files
    return scripted


def split_script_role(stem: str, described: set[str] = frozenset()) -> tuple[str, str]:
    """A `{script}-{role}` file name (without `.jsonl`) as `(script, role)`: split at the first dash after which a
    role of `desc.json` follows (`described` holds their `role_key`s), else at the last dash.

    >>> split_script_role("Rocky Horror-Dr. Frank-N-Furter", {role_key("Dr. Frank N Furter")})
    ('Rocky Horror', 'Dr. Frank-N-Furter')
    >>> split_script_role("甄嬛传-华妃")
    ('甄嬛传', '华妃')
    """
    for index, char in enumerate(stem):
        if char == "-" and role_key(stem[index + 1 :]) in described:
            return stem[:index], stem[index + 1 :]
    source, _, role = stem.rpartition("-")
    return source, role


def write_screenplay_folder(profiles: dict[str, RoleProfile], folder: str | Path) -> Path:
    """Write profiles as a screenplay-profile folder (`desc.json` + `{source}-{role}.jsonl`), the inverse of
    `read_screenplay_folder`; every profile needs its `source` (the script name in the file names)."""
    folder = Path(folder)
    missing = sorted(name for name, profile in profiles.items() if not profile.source)
    if missing:
        raise ValueError(f"profiles without a source script cannot be named {{source}}-{{role}}.jsonl: {missing}")
    folder.mkdir(parents=True, exist_ok=True)
    descriptions = {name: profile.description_with_catchphrases() for name, profile in profiles.items()}
    (folder / "desc.json").write_text(json.dumps(descriptions, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    for name, profile in profiles.items():
        write_profile_jsonl(profile, folder / f"{profile.source}-{name}.jsonl")
    return folder


def write_release_profiles(profiles: dict[str, RoleProfile], folder: str | Path) -> Path:
    """Write profiles in the release layout under `folder/profiles-{lang}/`; returns that folder."""
    langs = {profile.lang for profile in profiles.values()}
    if len(langs) != 1:
        raise ValueError(f"write one language at a time; got profiles in {sorted(langs)}")
    prefix = f"profiles-{RELEASE_LANG_DIRS[langs.pop()]}"
    out = Path(folder) / prefix
    out.mkdir(parents=True, exist_ok=True)
    descriptions = {name: p.description_with_catchphrases() for name, p in profiles.items()}
    scripts = {name: p.source for name, p in profiles.items() if p.source}
    (out / "desc.json").write_text(json.dumps(descriptions, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    (out / "scripts.json").write_text(json.dumps(scripts, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, profile in profiles.items():
        if profile.dialogue:
            write_profile_jsonl(profile, out / f"{prefix}-{name}.jsonl")
    generated = sorted(name for name, profile in profiles.items() if profile.generated)
    if generated:
        marker = {"generated": generated, "reviewed": []}
        (out / "generated.json").write_text(json.dumps(marker, ensure_ascii=False, indent=1), encoding="utf-8")
    return out


def _assemble(descriptions: dict, scripts: dict, files: dict, lang: str) -> ProfileSet:
    by_key = {role_key(name): name for name in descriptions}
    profiles, read_from = ProfileSet(), {}
    for name, text in descriptions.items():
        description, catchphrases, extra = parse_description(text, lang)
        profiles[name] = RoleProfile(name, lang, description, catchphrases, source=scripts.get(name, ""), extra=extra)
    for file_role, path in files.items():
        name = by_key.get(role_key(file_role), file_role)
        if name not in profiles:
            warnings.warn(
                f"{path}: {name!r} has no entry in desc.json: the profile has dialogue but no description",
                ProfileFileWarning,
                stacklevel=3,
            )
        profile = profiles.get(name) or RoleProfile(name, lang, source=scripts.get(file_role, ""))
        if name in read_from:  # two files of one role: one would replace the other's dialogue
            raise DataFormatError(f"{path} and {read_from[name]} hold the dialogue of one role ({name!r}): keep one")
        read_from[name] = path
        profile.dialogue = read_profile_jsonl(path, name, lang).dialogue
        if not profile.dialogue:
            profiles.empty_files.append(path)
        profiles[name] = profile
    return profiles


def _read_generated_marker(path: Path) -> set[str]:
    """Roles listed in `generated.json` (`{"generated": [...], "reviewed": [...]}`) and not yet reviewed."""
    if not path.is_file():
        return set()
    try:
        marker = json.loads(read_text(path))
        return set(marker.get("generated", [])) - set(marker.get("reviewed", []))
    except (json.JSONDecodeError, AttributeError, TypeError):
        raise DataFormatError(f'{path}: expected {{"generated": [role, ...], "reviewed": [role, ...]}}') from None


class _RepeatedKey(Exception):
    pass


def _unique_keys(pairs: list) -> dict:
    """A JSON object whose keys are all different (`json` keeps the last of a repeated key silently)."""
    found = {}
    for key, value in pairs:
        if key in found:
            raise _RepeatedKey(key)
        found[key] = value
    return found


def _read_json_object(path: Path, required: bool) -> dict[str, str]:
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder, not a JSON file of role -> text")
    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path} not found: a profiles folder needs desc.json (role -> description)")
        return {}
    text = read_text(path, allow_empty=True)
    if not text.strip():
        warnings.warn(f"{path} is empty", ProfileFileWarning, stacklevel=3)
        return {}
    try:
        data = parse_json_text(text, path, object_pairs_hook=_unique_keys)
    except _RepeatedKey as repeated:
        raise DataFormatError(f"{path}: {repeated.args[0]!r} is given twice; keep one entry per role") from None
    if not isinstance(data, dict):
        raise DataFormatError(f"{path}: expected a JSON object of role -> text, got {type(data).__name__}")
    by_key = {}
    for name, value in data.items():
        if not isinstance(value, str):
            raise DataFormatError(f"{path}: the value of {name!r} must be a string, got {type(value).__name__}")
        if not name.strip():
            raise DataFormatError(f"{path}: a role name is empty (the key {name!r})")
        if role_key(name) in by_key:  # one role for `roles.lookup`: its profile would be two
            raise DataFormatError(
                f"{path}: {by_key[role_key(name)]!r} and {name!r} name one role; keep one entry per role"
            )
        by_key[role_key(name)] = name
    return data


__all__ = [
    "ProfileSet",
    "join_catchphrases",
    "read_profile_jsonl",
    "read_release_profiles",
    "read_screenplay_folder",
    "split_script_role",
    "write_profile_jsonl",
    "write_release_profiles",
    "write_screenplay_folder",
]
