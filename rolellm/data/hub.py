"""Export RoleBench to the Hub's no-code layout (parquet per config and split + README card) and push it.

The result loads with plain `datasets`, no rolellm code: `load_dataset("<folder or repo>", "<config>")`.

>>> import tempfile, datasets
>>> from rolellm.data.schema import ROW_FEATURES
>>> rows = [{"role": "Po", "question": "Who?", "generated": ["Po!"], "type": [], "subset": "general", "lang": "en"}]
>>> mine = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows, features=ROW_FEATURES)})
>>> folder = export_rolebench(tempfile.mkdtemp(), {"my-roles": mine})
>>> sorted(str(p.relative_to(folder)) for p in folder.rglob("*.*"))
['README.md', 'my-roles/train-00000-of-00001.parquet']
>>> datasets.load_dataset(str(folder), "my-roles", split="train")[0]["question"]
'Who?'
"""

import tempfile
from pathlib import Path

import datasets
from tqdm.auto import tqdm

from rolellm.data.builder import load_rolebench
from rolellm.data.card import build_card
from rolellm.data.layout import CONFIG_NAMES, available_splits, get_spec
from rolellm.data.release import HUB_REPO_ID


def release_configs(data_dir: str | Path, configs: list[str] | None = None, **load_kwargs) -> dict:
    """`{config: DatasetDict}` for every config of `data_dir` with at least one split present (only those splits)."""
    data_dir = Path(data_dir)
    loaded = {}
    for name in configs or CONFIG_NAMES:
        splits = available_splits(data_dir, name)
        if not splits:
            if configs:  # asked for by name: say why it is not there
                load_rolebench(name, data_dir=data_dir, **load_kwargs)
            continue
        full = get_spec(name).kind == "profiles" or len(splits) == len(get_spec(name).splits)
        loaded[name] = load_rolebench(name, data_dir=data_dir, splits=None if full else splits, **load_kwargs)
    return loaded


def export_rolebench(
    folder: str | Path,
    dataset: dict[str, datasets.DatasetDict] | datasets.DatasetDict | None = None,
    data_dir: str | Path | None = None,
    configs: list[str] | None = None,
    config_name: str = "default",
    pretty_name: str = "RoleBench",
    license: str = "apache-2.0",
    cache_dir: str | Path | None = None,
) -> Path:
    """Write RoleBench in the Hub's no-code layout: `{config}/{split}-00000-of-00001.parquet` and `README.md`.

    Args:
        folder (`str` or `os.PathLike`): where to write (created; files of the exported configs are replaced).
        dataset (`dict[str, DatasetDict]` or `DatasetDict`, *optional*): what to export: `{config name: DatasetDict}`
            (e.g. rows from the generation stage), or one `DatasetDict` exported as `config_name`. When `None`,
            every config of the release in `data_dir` is built and exported.
        data_dir (`str` or `os.PathLike`, *optional*): a release folder, used when `dataset` is `None`.
        configs (`list[str]`, *optional*): only these release configs (with `data_dir`).
        config_name (`str`, *optional*, defaults to `"default"`): the config name of a single `DatasetDict`.
        pretty_name (`str`, *optional*), license (`str`, *optional*, defaults to `"apache-2.0"`): for the card.
        cache_dir (`str` or `os.PathLike`, *optional*): the `datasets` cache used to build release configs.

    Returns:
        `pathlib.Path`: the folder.
    """
    if dataset is None:
        if data_dir is None:
            raise ValueError("pass the rows to export (dataset=...) or a release folder (data_dir=...)")
        if Path(folder).resolve().is_relative_to(Path(data_dir).resolve()):
            raise ValueError(f"{folder} is inside the release folder {data_dir}: export to a folder outside it")
        dataset = release_configs(data_dir, configs, cache_dir=cache_dir)
    elif isinstance(dataset, datasets.DatasetDict):
        dataset = {config_name: dataset}
    if not dataset:
        raise ValueError(f"nothing to export: no RoleBench config has its files in {data_dir}")
    folder = Path(folder)
    total = sum(len(dataset_dict) for dataset_dict in dataset.values())
    with tqdm(total=total, desc="Writing parquet", unit="split") as progress:
        for config, dataset_dict in dataset.items():
            config_dir = folder / config
            config_dir.mkdir(parents=True, exist_ok=True)
            for stale in config_dir.glob("*.parquet"):
                stale.unlink()
            for split, part in dataset_dict.items():
                part.to_parquet(str(config_dir / f"{split}-00000-of-00001.parquet"))
                progress.update()
    card = build_card(dataset, pretty_name=pretty_name, license=license)
    (folder / "README.md").write_text(str(card), encoding="utf-8")
    return folder


def push_rolebench(
    repo_id: str,
    dataset: dict[str, datasets.DatasetDict] | datasets.DatasetDict | None = None,
    data_dir: str | Path | None = None,
    configs: list[str] | None = None,
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    commit_message: str = "Upload RoleBench (parquet + dataset card)",
    api=None,
    **export_kwargs,
):
    """Export (see `export_rolebench`) and upload to a Hub dataset repo in one commit; returns the commit info.

    The repo is created when missing. Parquet files of the exported configs that the new export does not write are
    deleted in the same commit, so a config never mixes old and new shards.

    Args:
        repo_id (`str`): `"user/name"`; must not be the official release (`ZenMoore/RoleBench`).
        api (`huggingface_hub.HfApi`, *optional*): the client to use (default: `HfApi(token=token)`).
    """
    if repo_id == HUB_REPO_ID:  # before the export, which can take a while
        raise ValueError(f"refusing to push to the official release {HUB_REPO_ID}; pick your own repo id")
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_rolebench(tmp, dataset, data_dir=data_dir, configs=configs, **export_kwargs)
        return upload_export(folder, repo_id, private=private, token=token, revision=revision,
                             commit_message=commit_message, api=api)  # fmt: skip


def upload_export(
    folder: str | Path,
    repo_id: str,
    private: bool | None = None,
    token: str | None = None,
    revision: str | None = None,
    commit_message: str = "Upload RoleBench (parquet + dataset card)",
    api=None,
):
    """Upload a folder written by `export_rolebench` to a Hub dataset repo in one commit (see `push_rolebench`)."""
    if repo_id == HUB_REPO_ID:
        raise ValueError(f"refusing to push to the official release {HUB_REPO_ID}; pick your own repo id")
    from huggingface_hub import HfApi

    folder = Path(folder)
    if not (folder / "README.md").is_file():
        raise FileNotFoundError(f"{folder} has no README.md: upload a folder written by export_rolebench")
    api = api or HfApi(token=token)
    exported = sorted(path.name for path in folder.iterdir() if path.is_dir())
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        repo_type="dataset",
        revision=revision,
        commit_message=commit_message,
        delete_patterns=[f"{config}/*.parquet" for config in exported],
    )
