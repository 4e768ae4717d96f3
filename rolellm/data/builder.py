"""The `RoleBench` datasets builder and `load_rolebench`, over a local release folder or the Hub repo.

Configs (`load_rolebench(name)` / `RoleBench(config_name=name)`): `zh`, `en-instruction`, `en-role` (both subsets,
told apart by the `subset` column), the same with `-general` or `-role_specific` for one subset, and `profiles-en`,
`profiles-zh` (one row per role). Row configs have the splits `train`, `test` and `rolegpt_baseline`.

>>> import json, tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> for split in ("train", "test", "rolegpt_baseline"):
...     path = root / "rolebench-zh" / "general" / f"{split}.jsonl"
...     path.parent.mkdir(parents=True, exist_ok=True)
...     _ = path.write_text(json.dumps({"role": "李白", "question": f" {split}？", "generated": ["好！"]}) + "\\n")
>>> dataset = load_rolebench("zh-general", data_dir=root, cache_dir=root / "cache")
>>> {split: dataset[split].num_rows for split in dataset}
{'train': 1, 'test': 1, 'rolegpt_baseline': 1}
>>> dataset["test"][0]["question"]  # the text as released
' test？'
"""

import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import datasets
import pyarrow as pa
from datasets.builder import Key

from rolellm.data.layout import (
    CONFIG_SPECS,
    HUB_REPO_ID,
    PROFILE_FEATURES,
    check_files,
    download_release,
    fingerprint_files,
    get_spec,
)
from rolellm.data.preference import PREFERENCE_FEATURES, read_preference_rows
from rolellm.data.readers import read_rolebench_columns
from rolellm.data.release import CITATION, HOMEPAGE, LICENSE, TYPES
from rolellm.data.schema import ROW_FEATURES
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import DataFormatError, RoleProfile
from rolellm.roles.release import read_release_profiles
from rolellm.roles.resolve import profiles_for


_DESCRIPTION = "RoleBench: role-playing instructions and references for 100 roles (RoleLLM, arXiv 2310.00746)."


@dataclass
class RoleBenchConfig(datasets.BuilderConfig):
    """A RoleBench config; the fields after `name` can be overridden as keyword arguments of `RoleBench(...)`.

    Args:
        splits (`tuple[str]`, *optional*): the splits to build (default: all three, every file required).
        repo_id (`str`, *optional*, defaults to `"ZenMoore/RoleBench"`): the Hub dataset read when `data_dir` is not
            given.
        revision (`str`, *optional*): the Hub revision.
        fingerprint (`str`, *optional*): a hash of the source files (set by `load_rolebench`) so edits rebuild.
    """

    splits: tuple[str, ...] | None = None
    repo_id: str = HUB_REPO_ID
    revision: str | None = None
    fingerprint: str | None = None


class RoleBench(datasets.ArrowBasedBuilder):
    """RoleBench as a `datasets` builder: `RoleBench(config_name="zh", data_dir=...).download_and_prepare()`.

    Each file becomes one Arrow table built column by column (`read_rolebench_columns`), with no per-row encoding,
    so building a config takes about as long as `load_dataset("json")` on the same files.
    """

    VERSION = datasets.Version("1.0.0")
    BUILDER_CONFIG_CLASS = RoleBenchConfig
    BUILDER_CONFIGS = [
        RoleBenchConfig(name=spec.name, version=datasets.Version("1.0.0"), description=spec.description)
        for spec in CONFIG_SPECS.values()
    ]

    def _info(self):
        kind = get_spec(self.config.name).kind
        if kind == "profiles":
            features = PROFILE_FEATURES
        elif kind in PREFERENCE_FEATURES:
            features = PREFERENCE_FEATURES[kind]
        else:
            features = datasets.Features(ROW_FEATURES)
        return datasets.DatasetInfo(
            description=_DESCRIPTION, features=features, homepage=HOMEPAGE, license=LICENSE, citation=CITATION
        )

    def _split_generators(self, dl_manager):
        spec = get_spec(self.config.name)
        data_dir = self.config.data_dir
        if data_dir is None:
            data_dir = download_release(spec.name, self.config.splits, self.config.repo_id, self.config.revision)
        files = check_files(data_dir, spec.name, self.config.splits)
        if spec.kind == "profiles":
            return [datasets.SplitGenerator(name="train", gen_kwargs={"profiles_dir": Path(data_dir)})]
        return [datasets.SplitGenerator(name=split, gen_kwargs={"files": found}) for split, found in files.items()]

    def _generate_tables(self, files=None, profiles_dir=None):
        spec = get_spec(self.config.name)
        schema = self.info.features.arrow_schema
        if profiles_dir is not None:
            rows = [profile.to_dict() for profile in read_release_profiles(profiles_dir, spec.lang).values()]
            for row in rows:
                row.pop("extra")
            yield Key(0, 0), pa.Table.from_pylist(rows, schema=schema)
            return
        for shard, (path, subset) in enumerate(files):
            if spec.kind in PREFERENCE_FEATURES:
                yield Key(shard, 0), pa.Table.from_pylist(read_preference_rows(path, spec.kind), schema=schema)
            else:
                yield Key(shard, 0), read_rolebench_table(path, subset, spec.lang)


# Python's whitespace (`str.strip`), so that Arrow finds blank text exactly where `normalize_row` does
_WHITESPACE = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
_FILE_SCHEMA = pa.schema([("role", pa.string()), ("question", pa.string()), ("generated", pa.list_(pa.string()))])


def read_rolebench_table(path: str | Path, subset: str, lang: str) -> pa.Table:
    """One release jsonl file as an Arrow table of `ROW_FEATURES`, the rows of `read_rolebench_jsonl`.

    Arrow's JSON reader parses the file and Arrow compute checks what `normalize_row` checks (strings present and
    not blank, a non-empty list of non-blank answers, `type` values and lengths, no repeated role and question);
    a file that fails any check, or that Arrow cannot read, is read again by `read_rolebench_columns`, which raises
    the error naming the file, the line and the field (or warns about the repeats), so the outcome is the same.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "train.jsonl"
    >>> _ = path.write_text('{"role": "Po", "question": " Hi?", "generated": [" Yo!", " Hey!"], "type": "script_based"}\\n')
    >>> read_rolebench_table(path, "role_specific", "en").to_pylist()[0]["type"]
    ['script_based', 'script_based']
    """
    table = _arrow_rows(Path(path), subset)
    if table is None:  # the careful path: its rows, or the error naming the file, line and field
        table = pa.table(read_rolebench_columns(path, subset, lang))
    n = table.num_rows
    columns = [*(table[name] for name in ("role", "question", "generated", "type")), [subset] * n, [lang] * n]
    return pa.Table.from_arrays(columns, schema=datasets.Features(ROW_FEATURES).arrow_schema)


# RoleBench rows nest three deep; Arrow's JSON reader crashes the process (stack overflow) near 20,000
_MAX_ARROW_DEPTH = 64
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")


def _bracket_depth(raw: bytes) -> int:
    """The deepest run of open brackets in `raw`, counting brackets inside strings too (an over-estimate only sends
    a file to the careful path). About a tenth of the time Arrow takes to parse the file.

    >>> _bracket_depth(b'{"a": [[1], [2]]}\\n{"b": "]]"}\\n[[[')
    3
    """
    import numpy as np

    brackets = np.frombuffer(raw.translate(None, _NOT_BRACKETS), np.uint8)
    depth = np.cumsum(np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1))
    return int((depth - np.minimum.accumulate(np.minimum(depth, 0))).max()) if len(depth) else 0


def _arrow_rows(path: Path, subset: str) -> pa.Table | None:
    """The file's `role`, `question`, `generated` and `type` (a list per row) read and checked by Arrow, or `None`
    when Arrow cannot read the file or any row needs `normalize_row`'s attention."""
    import pyarrow.compute as pc
    import pyarrow.json as paj

    raw = path.read_bytes()
    # only files whose every line starts with an object go to Arrow (a bare `null` line crashes its reader), and
    # with as many rows as lines (not two objects on a line); blank lines and indents take the careful path
    lines = raw.count(b"\n") + (not raw.endswith(b"\n"))
    if not raw or raw.count(b"\n{") + raw.startswith(b"{") != lines:
        return None
    if _bracket_depth(raw) > _MAX_ARROW_DEPTH:  # Arrow's reader overflows the stack on deep nesting: a crash
        return None
    try:
        options = paj.ParseOptions(explicit_schema=_FILE_SCHEMA, unexpected_field_behavior="infer")
        table = paj.read_json(pa.BufferReader(raw), parse_options=options)
        table.validate(full=True)  # Arrow keeps invalid UTF-8 in its strings unless asked
    except (pa.ArrowInvalid, UnicodeDecodeError):
        return None
    if table.num_rows != lines:
        return None
    role, question, generated = table["role"], table["question"], table["generated"]
    answers = pc.list_flatten(generated)
    if role.null_count or question.null_count or generated.null_count or answers.null_count:
        return None
    if not pc.all(pc.greater(pc.list_value_length(generated), 0)).as_py():
        return None
    for text in (question, answers):
        if not pc.all(pc.greater(pc.utf8_length(pc.utf8_trim(text, characters=_WHITESPACE)), 0)).as_py():
            return None
    if table.group_by(["role", "question"]).aggregate([]).num_rows != table.num_rows:
        return None  # repeats: counted, with their lines, by the careful path
    kind = _arrow_types(table, generated, subset)
    if kind is None:
        return None
    return pa.table({"role": role, "question": question, "generated": generated, "type": kind})


def _arrow_types(table: pa.Table, generated, subset: str):
    """`type` as a list parallel to `generated` (empty where absent), or `None` when a row needs `normalize_row`."""
    import pyarrow.compute as pc

    lengths = pc.list_value_length(generated)
    if "type" not in table.column_names or table["type"].null_count == table.num_rows:
        return pa.array([[]] * table.num_rows, type=pa.list_(pa.string()))
    kind = table["type"].combine_chunks()
    if subset != "role_specific" or kind.null_count:
        return None
    allowed = pa.array(TYPES)
    if pa.types.is_string(kind.type):
        if not pc.all(pc.is_in(kind, value_set=allowed)).as_py():
            return None
        values = pc.take(kind, pc.list_parent_indices(generated.combine_chunks()))
        offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths).combine_chunks()])
        return pa.ListArray.from_arrays(offsets.cast(pa.int32()), values)
    if not pa.types.is_list(kind.type) or not pa.types.is_string(kind.type.value_type):
        return None
    if not pc.all(pc.equal(pc.list_value_length(kind), lengths)).as_py():
        return None
    flat = pc.list_flatten(kind)
    if flat.null_count or not pc.all(pc.is_in(flat, value_set=allowed)).as_py():
        return None
    return kind


def load_rolebench(
    name: str,
    data_dir: str | Path | None = None,
    splits: list[str] | None = None,
    with_profile: bool = False,
    cache_dir: str | Path | None = None,
    repo_id: str = HUB_REPO_ID,
    revision: str | None = None,
    token: str | None = None,
    download_mode: str | None = None,
    streaming: bool = False,
) -> datasets.DatasetDict:
    """Load a RoleBench config as a `DatasetDict`, from a local release folder or the Hub.

    Args:
        name (`str`): a config name (`"zh"`, `"en-instruction-role_specific"`, `"profiles-zh"`, ...).
        data_dir (`str` or `os.PathLike`, *optional*): a folder in the release layout; when `None` the files the
            config needs are fetched from `repo_id` with `huggingface_hub`.
        splits (`list[str]`, *optional*): build only these splits (for a folder that lacks the others).
        with_profile (`bool`, *optional*, defaults to `False`): add each row's role `description` and
            `catchphrases` from the release's profiles (see `add_profile_columns`).
        cache_dir (`str` or `os.PathLike`, *optional*): the `datasets` cache folder.
        repo_id (`str`, *optional*, defaults to `"ZenMoore/RoleBench"`), revision (`str`, *optional*),
            token (`str`, *optional*): where the Hub copy is.
        download_mode (`str`, *optional*): `"force_redownload"` rebuilds the cache.
        streaming (`bool`, *optional*, defaults to `False`): return an `IterableDatasetDict` that reads the files as
            it is iterated, with no Arrow cache.

    Returns:
        `datasets.DatasetDict` (`datasets.IterableDatasetDict` when streaming) with the config's splits.

    Raises:
        `MissingFilesError`: the folder lacks files the config needs; the message lists them and the configs that
        the folder can still build.
    """
    spec = get_spec(name)
    from_hub = data_dir is None
    if from_hub:
        data_dir = download_release(name, splits, repo_id, revision, token=token)
    data_dir = Path(data_dir).resolve()
    files = check_files(data_dir, name, splits)
    paths = [path for found in files.values() for path, _ in found]
    if spec.kind == "profiles":
        paths += sorted((data_dir / spec.release_dir).glob("*.json*"))
    builder = RoleBench(
        config_name=name,
        data_dir=str(data_dir),
        cache_dir=None if cache_dir is None else str(cache_dir),
        dataset_name="rolebench",
        splits=tuple(splits) if splits else None,
        fingerprint=fingerprint_files(paths),
        token=token,
    )
    if streaming:
        dataset = builder.as_streaming_dataset()
    else:
        reader_error = None
        try:
            builder.download_and_prepare(download_mode=download_mode)
        except datasets.exceptions.DatasetGenerationError as error:
            if not isinstance(error.__cause__, DataFormatError):
                raise
            reader_error = error.__cause__
        if reader_error is not None:  # the reader's own message names the file and line; raised outside the
            raise reader_error  # handler, its chain does not lead back to the wrapper that holds it
        dataset = builder.as_dataset()
    if with_profile and spec.kind == "rows":
        profiles_config = f"profiles-{spec.lang}"
        profiles_dir = (
            download_release(profiles_config, None, repo_id, revision, token=token) if from_hub else data_dir
        )
        check_files(profiles_dir, profiles_config)
        dataset = add_profile_columns(dataset, profiles_for(data_dir=profiles_dir, lang=spec.lang))
    return dataset


def load_rolebench_profiles(lang: str, data_dir: str | Path | None = None, **kwargs) -> dict[str, RoleProfile]:
    """The release's profiles of one language as `{role: RoleProfile}` (from the `profiles-{lang}` config)."""
    dataset = load_rolebench(f"profiles-{lang}", data_dir=data_dir, **kwargs)["train"]
    return {row["name"]: RoleProfile.from_dict(row) for row in dataset}


def add_profile_columns(dataset, profiles: dict[str, RoleProfile]):
    """Add `description` and `catchphrases` of each row's role; roles are matched across spellings (the rule of
    `rolellm.roles.lookup`).

    Rows whose role has no profile get empty values, and a warning lists those roles with their row counts.

    >>> rows = datasets.Dataset.from_list([{"role": "Dr. Frank N Furter"}, {"role": "Nobody"}])
    >>> profiles = {"Dr. Frank-N-Furter": RoleProfile("Dr. Frank-N-Furter", "en", "A scientist.", ["Rose tint my world"])}
    >>> with warnings.catch_warnings(record=True):
    ...     rows = add_profile_columns(rows, profiles)
    >>> rows[0]
    {'role': 'Dr. Frank N Furter', 'description': 'A scientist.', 'catchphrases': ['Rose tint my world']}
    """
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        parts = {split: add_profile_columns(part, profiles) for split, part in dataset.items()}
        return type(dataset)(parts)
    profiles = Profiles(profiles)
    streaming = isinstance(dataset, datasets.IterableDataset)
    if not streaming:
        counts = Counter(dataset.with_format("arrow")["role"].to_pylist())
        unmatched = {role: count for role, count in counts.items() if role not in profiles}
        if unmatched:
            warnings.warn(
                f"{len(unmatched)} role(s) have no profile (rows get an empty description): {unmatched}", stacklevel=2
            )

    warned = set()

    def lookup(row):
        profile = profiles.get(row["role"])
        if profile is None and streaming and row["role"] not in warned:  # streamed rows cannot be counted up front
            warned.add(row["role"])
            warnings.warn(f"role {row['role']!r} has no profile (its rows get an empty description)", stacklevel=2)
        return {
            "description": profile.description if profile else "",
            "catchphrases": list(profile.catchphrases) if profile else [],
        }

    features = datasets.Features(
        {
            **dataset.features,
            "description": datasets.Value("string"),
            "catchphrases": datasets.List(datasets.Value("string")),
        }
    )
    if streaming:
        return dataset.map(lookup, features=features)
    return dataset.map(lookup, features=features, desc="Adding profile columns")
