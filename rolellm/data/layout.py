"""The release layout: which files each RoleBench config reads, what is missing from a folder, Hub download.

The release (`ZenMoore/RoleBench` on the Hub) is laid out as `rolebench-zh/`, `rolebench-eng/instruction-generalization/`
and `rolebench-eng/role-generalization/`, each with `general/` and `role_specific/` holding `train.jsonl`,
`test.jsonl` and `rolegpt_baseline.jsonl`, plus `profiles-zh/` and `profiles-eng/`.

>>> sorted(config_files("zh-general"))
['rolegpt_baseline', 'test', 'train']
>>> config_files("en-role-role_specific", splits=["test"])
{'test': [('rolebench-eng/role-generalization/role_specific/test.jsonl', 'role_specific')]}
"""

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import datasets

from rolellm.data.release import HUB_REPO_ID, RELEASE_LANG_DIRS, SUBSETS


logger = logging.getLogger(__name__)

EN, ZH = RELEASE_LANG_DIRS["en"], RELEASE_LANG_DIRS["zh"]  # the release's folder suffixes
SPLITS = ("train", "test", "rolegpt_baseline")


@dataclass(frozen=True)
class ConfigSpec:
    """What one config reads: a release folder, its subsets and language (`kind="profiles"`: a profiles folder)."""

    name: str
    release_dir: str
    lang: str
    subsets: tuple[str, ...] = SUBSETS
    kind: str = "rows"
    description: str = ""
    splits: tuple[str, ...] = ("train", "test", "rolegpt_baseline")


def _row_specs(prefix: str, release_dir: str, lang: str, what: str) -> list[ConfigSpec]:
    specs = [ConfigSpec(prefix, release_dir, lang, SUBSETS, description=f"{what}: general and role-specific rows.")]
    for subset in SUBSETS:
        text = f"{what}: {subset.replace('_', '-')} rows only."
        specs.append(ConfigSpec(f"{prefix}-{subset}", release_dir, lang, (subset,), description=text))
    return specs


CONFIG_SPECS = {
    spec.name: spec
    for spec in [
        *_row_specs("zh", f"rolebench-{ZH}", "zh", "Chinese (5 roles)"),
        *_row_specs("en-instruction", f"rolebench-{EN}/instruction-generalization", "en",
                    "English instruction generalization (95 roles, held-out instructions)"),
        *_row_specs("en-role", f"rolebench-{EN}/role-generalization", "en",
                    "English role generalization (10 held-out roles)"),
        ConfigSpec("profiles-en", f"profiles-{EN}", "en", (), "profiles", "English role profiles."),
        ConfigSpec("profiles-zh", f"profiles-{ZH}", "zh", (), "profiles", "Chinese role profiles."),
    ]
}  # fmt: skip
# the config that generated rows of a language are written for (`rolellm generate`): generated data asks new
# instructions of known roles, as instruction generalization does
GENERATED_CONFIGS = {"zh": "zh", "en": "en-instruction"}
# preference data (`rolellm generate preferences`, `rolellm.data.preference`) beside the rows of the generated config:
# `{config}-preference` holds chosen/rejected pairs (DPO), `{config}-unpaired` single answers labelled desirable or
# not (KTO), each in `<release part>/<kind>/{train,test}.jsonl`
PREFERENCE_KINDS = ("preference", "unpaired")
for _lang, _config in GENERATED_CONFIGS.items():
    for _kind in PREFERENCE_KINDS:
        CONFIG_SPECS[f"{_config}-{_kind}"] = ConfigSpec(
            f"{_config}-{_kind}", f"{CONFIG_SPECS[_config].release_dir}/{_kind}", _lang, (), _kind,
            f"{'Chosen/rejected answer pairs' if _kind == 'preference' else 'Answers labelled desirable or not'} "
            f"of the roles of {_config} ({_lang}), for DPO/KTO.", ("train", "test"),
        )  # fmt: skip
CONFIG_NAMES = tuple(CONFIG_SPECS)


def preference_config(lang: str, kind: str = "preference") -> str:
    """The config of `lang`'s preference data of `kind` (`"preference"` or `"unpaired"`).

    >>> preference_config("en"), get_spec(preference_config("zh", "unpaired")).release_dir
    ('en-instruction-preference', 'rolebench-zh/unpaired')
    """
    if kind not in PREFERENCE_KINDS:
        raise ValueError(f"kind must be one of {PREFERENCE_KINDS}, got {kind!r}")
    return f"{GENERATED_CONFIGS[lang]}-{kind}"


def subset_dir(lang: str, subset: str) -> str:
    """The release folder of one subset of the generated config of `lang` (see `GENERATED_CONFIGS`).

    >>> subset_dir("en", "general"), subset_dir("zh", "role_specific")
    ('rolebench-eng/instruction-generalization/general', 'rolebench-zh/role_specific')
    """
    if subset not in SUBSETS:
        raise ValueError(f"subset must be one of {SUBSETS}, got {subset!r}")
    return f"{get_spec(GENERATED_CONFIGS[lang]).release_dir}/{subset}"


PROFILE_FEATURES = datasets.Features(
    {
        "name": datasets.Value("string"),
        "lang": datasets.Value("string"),
        "description": datasets.Value("string"),
        "catchphrases": datasets.List(datasets.Value("string")),
        "source": datasets.Value("string"),
        "dialogue": datasets.List(
            {
                "act_id": datasets.Value("int64"),
                "diag_id": datasets.Value("int64"),
                "speaker": datasets.Value("string"),
                "content": datasets.Value("string"),
                "narration": datasets.Value("bool"),
            }
        ),
        "generated": datasets.Value("bool"),
    }
)


class MissingFilesError(FileNotFoundError):
    """A config needs files that the data folder (or Hub snapshot) does not have; the message lists them."""


def get_spec(name: str) -> ConfigSpec:
    if name not in CONFIG_SPECS:
        import difflib

        close = difflib.get_close_matches(str(name), CONFIG_NAMES, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown RoleBench config {name!r}; {hint}choose one of {', '.join(CONFIG_NAMES)}")
    return CONFIG_SPECS[name]


def config_files(name: str, splits: list[str] | tuple[str, ...] | None = None) -> dict[str, list[tuple[str, str]]]:
    """`{split: [(relative path, subset), ...]}` for a rows config; `{"train": [("profiles-zh/desc.json", "")]}`
    for a profiles config (its per-role jsonl files are optional and found by listing the folder)."""
    spec = get_spec(name)
    if spec.kind == "profiles":
        return {"train": [(f"{spec.release_dir}/desc.json", "")]}
    for split in splits or ():
        if split not in spec.splits:
            raise ValueError(f"unknown split {split!r}; the splits of {name} are {', '.join(spec.splits)}")
    if spec.kind in PREFERENCE_KINDS:
        return {split: [(f"{spec.release_dir}/{split}.jsonl", "")] for split in (splits or spec.splits)}
    return {
        split: [(f"{spec.release_dir}/{subset}/{split}.jsonl", subset) for subset in spec.subsets]
        for split in (splits or SPLITS)
    }


def check_not_unreadable(path: Path, why: str) -> None:
    """Raise `MissingFilesError` when a release file's `path` is there but cannot be read as a file: a folder, or a
    link that leads nowhere (a loop, or a missing target); `why` says what the file is for. Such a file is never
    taken for an absent one, which would leave its rows out without a word."""
    if path.is_dir():
        raise MissingFilesError(f"{path} is a folder: {why}")
    if path.is_symlink() and not path.exists():
        raise MissingFilesError(f"{path} is a link that leads nowhere (a loop, or a missing target): {why}")


def available_splits(data_dir: str | Path, name: str) -> list[str]:
    """The splits of a config whose files are all in `data_dir`; raises `MissingFilesError` for a file that is there
    but cannot be read (a folder, a link that leads nowhere)."""
    root, wanted = Path(data_dir), config_files(name)
    for rel in (rel for files in wanted.values() for rel, _ in files):
        check_not_unreadable(root / rel, f"RoleBench config {name!r} needs a JSON-lines file there")
    return [split for split, files in wanted.items() if all((root / rel).is_file() for rel, _ in files)]


def complete_configs(data_dir: str | Path) -> list[str]:
    """The configs whose every split is in `data_dir`."""
    return [name for name in CONFIG_NAMES if len(available_splits(data_dir, name)) == len(config_files(name))]


def configs_with_split(data_dir: str | Path, split: str = "train") -> list[str]:
    """The row configs whose `split` is in `data_dir`, without overlap: a release part's whole config when every
    subset has the split, else the subsets that have it (what `rolellm train --data_dir` trains on by default).

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for rel in ["rolebench-eng/instruction-generalization/general/train.jsonl", "rolebench-zh/general/train.jsonl",
    ...             "rolebench-zh/role_specific/train.jsonl"]:
    ...     (root / rel).parent.mkdir(parents=True, exist_ok=True); _ = (root / rel).write_text("{}")
    >>> configs_with_split(root)
    ['zh', 'en-instruction-general']
    """
    chosen = []
    for spec in CONFIG_SPECS.values():
        if spec.kind != "rows" or len(spec.subsets) != len(SUBSETS):
            continue
        if split in available_splits(data_dir, spec.name):
            chosen.append(spec.name)
        else:
            parts = [f"{spec.name}-{subset}" for subset in spec.subsets]
            chosen += [part for part in parts if split in available_splits(data_dir, part)]
    return chosen


def check_files(data_dir: str | Path, name: str, splits=None) -> dict[str, list[tuple[Path, str]]]:
    """Resolve a config's files in `data_dir`, or raise `MissingFilesError` saying what is missing and what works.

    Returns:
        `{split: [(absolute path, subset), ...]}`.
    """
    root = Path(data_dir)
    wanted = config_files(name, splits)
    if not root.is_dir():
        what = "a file, not a folder" if root.exists() else "no such folder"
        raise MissingFilesError(f"data_dir {root}: {what} (a RoleBench release folder, as the Hub lays it out)")
    for rel in (rel for files in wanted.values() for rel, _ in files):
        check_not_unreadable(root / rel, f"RoleBench config {name!r} needs a JSON-lines file there")
    missing = [rel for files in wanted.values() for rel, _ in files if not (root / rel).is_file()]
    if missing:
        complete = complete_configs(root)
        partial = {
            other: available_splits(root, other)
            for other in CONFIG_NAMES
            if other not in complete and available_splits(root, other)
        }
        lines = [f"RoleBench config {name!r} needs {len(missing)} file(s) missing from {root}:"]
        lines += [f"  - {rel}" for rel in missing]
        lines.append(f"Complete configs in this folder: {', '.join(complete) or 'none'}.")
        if partial:
            lines.append("Configs with some splits present (pass splits=[...] to load them):")
            lines += [f"  - {other}: {', '.join(found)}" for other, found in partial.items()]
        raise MissingFilesError("\n".join(lines))
    return {split: [(root / rel, subset) for rel, subset in files] for split, files in wanted.items()}


def hub_patterns(name: str, splits=None) -> list[str]:
    """The `allow_patterns` of a config: exactly its files (a profiles folder: everything in it).

    >>> hub_patterns("zh-role_specific", ["test"])
    ['rolebench-zh/role_specific/test.jsonl']
    >>> hub_patterns("profiles-en")
    ['profiles-eng/*']
    """
    spec = get_spec(name)
    if spec.kind == "profiles":
        return [f"{spec.release_dir}/*"]
    return [rel for files in config_files(name, splits).values() for rel, _ in files]


def download_release(
    name: str, splits=None, repo_id: str = HUB_REPO_ID, revision: str | None = None, cache_dir=None, token=None
) -> Path:
    """Fetch only the files a config needs from the Hub dataset repo; returns the local snapshot folder.

    Uses `huggingface_hub.snapshot_download` with `allow_patterns`, so the Hub cache (and `HF_HUB_OFFLINE=1`)
    work as usual. Files the repo does not have are reported by `check_files` afterwards.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    patterns = hub_patterns(name, splits)
    try:
        folder = snapshot_download(
            repo_id, repo_type="dataset", revision=revision, allow_patterns=patterns, cache_dir=cache_dir, token=token
        )
    except (LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise MissingFilesError(
            f"could not fetch RoleBench config {name!r} from the Hub dataset {repo_id!r} (revision {revision or 'main'}): "
            f"{type(error).__name__}: {str(error).splitlines()[0]}\nPass data_dir= with a local copy of the release, "
            "or check the network, HF_HUB_OFFLINE and HF_TOKEN."
        ) from error
    return Path(folder)


def fingerprint_files(paths) -> str:
    """A short hash of the files' names and contents, so any edit rebuilds the cache (one of the same size and
    modification time too). Hashing reads the files once, at disk speed: about 0.1 s for the whole release."""
    digest = hashlib.sha256()
    for path in sorted(map(Path, paths)):
        digest.update(str(path).encode("utf-8") + b"\0")
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def raw_targets_path(raw_targets_file: str | Path | None, data_dir: str | Path | None, lang: str) -> Path | None:
    """The RAW references of `rolellm evaluate` (`BenchmarkConfig.raw_targets_file`): `raw_targets_file`, else the
    release's `instructions-{eng,zh}/instructions-general.jsonl` if present (in `data_dir`, or on the Hub when
    `data_dir` is not set); `None` when the release's file is unavailable."""
    if raw_targets_file is not None:
        if Path(raw_targets_file).is_dir():
            raise IsADirectoryError(f"raw_targets_file={str(raw_targets_file)!r} is a folder: give the JSONL file")
        if not Path(raw_targets_file).is_file():
            raise FileNotFoundError(f"raw_targets_file={raw_targets_file!r} does not exist")
        return Path(raw_targets_file)
    relative = f"instructions-{RELEASE_LANG_DIRS[lang]}/instructions-general.jsonl"
    if data_dir is None:  # the release on the Hub
        from huggingface_hub import hf_hub_download

        try:
            return Path(hf_hub_download(HUB_REPO_ID, relative, repo_type="dataset"))
        except Exception as error:  # offline, or a repository without the file: RAW is reported unavailable
            logger.warning("RAW unavailable: could not fetch %s from %s (%s)", relative, HUB_REPO_ID, error)
            return None
    path = Path(data_dir) / relative
    check_not_unreadable(path, "the RAW references are read from this file")
    return path if path.is_file() else None
