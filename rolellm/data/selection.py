"""Which rows and role profiles a training run uses: the data flags every stage of `rolellm train` shares
(`RoleBenchArguments`) and what they select: the configs (`default_configs`), their rows (`load_rows`,
`train_and_eval_rows`) and the profiles (`load_profiles_for`)."""

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RoleBenchArguments:
    """Which RoleBench data to train and evaluate on.

    Args:
        dataset_configs (`list[str]`, *optional*): RoleBench configs to train on, concatenated (`zh`,
            `en-instruction`, `en-role`, or a `-general` / `-role_specific` variant of one; for `--stage dpo` the
            `-preference` configs, for `kto` the `-unpaired` ones); defaults to every such config whose train split
            is in `data_dir` (`rolellm.data.layout.configs_with_split`, printed), else `["zh"]`.
        data_dir (`str`, *optional*): a local folder in the release layout; `None` uses `dataset_name` or the Hub.
        dataset_name (`str`, *optional*): a dataset in the Hub layout (a Hub id or a local folder), loaded with
            `datasets.load_dataset(dataset_name, config)`.
        dataset_train_split (`str`, *optional*, defaults to `"train"`), dataset_test_split (`str`, *optional*,
            defaults to `"test"`): the splits; evaluation runs only when `eval_strategy` is not `"no"`.
        max_train_samples (`int`, *optional*), max_eval_samples (`int`, *optional*): keep the first rows only.
        roles (`list[str]`, *optional*): train only on these roles' rows (spelled as in the data or not), and read
            these roles from a screenplay file given in `profiles`.
    """

    dataset_configs: list[str] | None = field(
        default=None,
        metadata={"help": "RoleBench configs (default: those with a train split in --data_dir, else zh)."},
    )
    data_dir: str | None = field(default=None, metadata={"help": "Local RoleBench release folder."})
    dataset_name: str | None = field(default=None, metadata={"help": "Dataset in the Hub layout (id or folder)."})
    dataset_train_split: str = field(default="train", metadata={"help": "Training split."})
    dataset_test_split: str = field(default="test", metadata={"help": "Evaluation split."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep the first N evaluation rows."})
    roles: list[str] | None = field(
        default=None, metadata={"help": "Only these roles' rows; the roles read from a screenplay file in --profiles."}
    )


def load_rows(script_args, split, counts: dict | None = None):
    """The rows of `split` of every config in `dataset_configs`, concatenated; `counts` gets config -> rows."""
    import datasets

    from rolellm.data.builder import load_rolebench
    from rolellm.roles.lookup import RoleNames

    parts = []
    for name in script_args.dataset_configs:
        if script_args.dataset_name is not None:
            parts.append(datasets.load_dataset(script_args.dataset_name, name, split=split))
        else:
            parts.append(load_rolebench(name, data_dir=script_args.data_dir, splits=[split])[split])
    rows = datasets.concatenate_datasets(parts)
    if script_args.roles:
        names = RoleNames(rows.unique("role"), where=f"the {split} rows")
        wanted = {names.find(role) for role in script_args.roles} - {None}
        rows = rows.filter(lambda row: row["role"] in wanted)
        if not len(rows):
            raise ValueError(
                f"--roles {script_args.roles}: no {split} row of these roles in {script_args.dataset_configs}; "
                f"the roles of the data: {sorted(names)}"
            )
    flag = "max_train_samples" if split == script_args.dataset_train_split else "max_eval_samples"
    limit = getattr(script_args, flag)
    if limit is not None and limit < 1:
        raise ValueError(f"--{flag} {limit}: keep at least 1 row (leave it out to keep every row)")
    rows = rows.select(range(min(limit, len(rows)))) if limit is not None else rows
    if not len(rows):
        raise ValueError(
            f"no {split} row to train or evaluate on in {script_args.dataset_configs}: the files are empty"
        )
    if counts is not None:  # the rows each config contributes, after `limit` (which keeps the first rows)
        left = len(rows)
        for name, part in zip(script_args.dataset_configs, parts):
            counts[name], left = min(len(part), left), left - min(len(part), left)
    return rows


def train_and_eval_rows(script_args, training_args, counts: dict | None = None):
    """The rows of the train split (their counts per config into `counts`), and of the test split when the run
    evaluates (`eval_strategy` other than `"no"`), else None: what every stage trains and evaluates on."""
    train_rows = load_rows(script_args, script_args.dataset_train_split, counts)
    if training_args.eval_strategy == "no":
        return train_rows, None
    return train_rows, load_rows(script_args, script_args.dataset_test_split)


def default_configs(script_args, stage: str = "sft") -> list[str]:
    """`--dataset_configs`, else the configs with a train split in `--data_dir` (said in one line; for `stage` `dpo`
    the preference configs, for `kto` the unpaired ones), else `zh`."""
    if script_args.dataset_configs:
        return script_args.dataset_configs
    kind = {"dpo": "preference", "kto": "unpaired"}.get(stage)
    if script_args.data_dir is None:
        if kind is not None:
            raise ValueError(
                f"--stage {stage} trains on preference data: give --data_dir (a folder `rolellm generate "
                "preferences` wrote) or --dataset_name with --dataset_configs"
            )
        return ["zh"]
    from rolellm.data.layout import CONFIG_SPECS, available_splits, configs_with_split

    if not Path(script_args.data_dir).is_dir():
        raise FileNotFoundError(f"--data_dir {script_args.data_dir}: no such folder (a RoleBench release folder)")
    split = script_args.dataset_train_split
    if kind is not None:
        found = [
            name
            for name, spec in CONFIG_SPECS.items()
            if spec.kind == kind and split in available_splits(script_args.data_dir, name)
        ]
        if not found:
            raise FileNotFoundError(
                f"--data_dir {script_args.data_dir} holds no {kind} {split} split for --stage {stage} "
                f"(<release part>/{kind}/{split}.jsonl): write one with rolellm generate preferences"
            )
        print(f"rolellm train: training on the {kind} configs in {script_args.data_dir}: {' '.join(found)}")
        return found
    found = configs_with_split(script_args.data_dir, split)
    if not found:
        raise FileNotFoundError(
            f"--data_dir {script_args.data_dir} holds no RoleBench {split} split (rolebench-zh/ or rolebench-eng/ "
            f"with general/{split}.jsonl or role_specific/{split}.jsonl)"
        )
    print(f"rolellm train: training on the configs with a {split} split in {script_args.data_dir}: {' '.join(found)}")
    return found


def load_profiles_for(script_args, training_args):
    """The profiles to train with (`rolellm.roles.resolve.profiles_for`): the release's in `--data_dir`, with
    `--profiles` added; the release's on the Hub when neither is given."""
    from rolellm.data.builder import load_rolebench_profiles
    from rolellm.roles.lookup import Profiles
    from rolellm.roles.resolve import profiles_for

    if training_args.profiles or script_args.data_dir is not None:
        return profiles_for(training_args.profiles, data_dir=script_args.data_dir, roles=script_args.roles)
    langs = sorted({"zh" if name.startswith("zh") else "en" for name in script_args.dataset_configs})
    return Profiles({name: p for lang in langs for name, p in load_rolebench_profiles(lang).items()})
