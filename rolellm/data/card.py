"""The README dataset card of an exported RoleBench: YAML `configs:` and `dataset_info:`, roles table, citation.

The YAML blocks are written by `datasets`' own `MetadataConfigs` and `DatasetInfosDict`, the code behind
`push_to_hub`, so the Hub and `load_dataset(folder, config)` read them as they read any no-code dataset.
"""

from collections import Counter, defaultdict

import datasets
from datasets.info import DatasetInfosDict
from datasets.utils.metadata import MetadataConfigs
from huggingface_hub import DatasetCard, DatasetCardData

from rolellm.data.layout import CONFIG_SPECS
from rolellm.data.release import CITATION


def data_file_pattern(config: str, split: str) -> str:
    return f"{config}/{split}-*.parquet"


def _part_of(config: str) -> str:
    for suffix in ("-general", "-role_specific"):
        if config in CONFIG_SPECS and config.endswith(suffix):
            return config[: -len(suffix)]
    return config


def roles_table(configs: dict[str, datasets.DatasetDict]) -> str:
    """A Markdown table of rows per role and split, one line per (part, role), for the row configs."""
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    langs = {}
    parts_done = set()
    # a combined config (`zh`) already counts what its subset configs (`zh-general`, ...) hold
    for config in sorted(configs, key=lambda name: (_part_of(name) != name, name)):
        dataset_dict = configs[config]
        part = _part_of(config)
        if not {"role", "lang"} <= set(next(iter(dataset_dict.values())).column_names):
            continue
        if part != config and part in parts_done and part in configs:
            continue
        parts_done.add(part)
        for split, dataset in dataset_dict.items():
            table = dataset.select_columns(["role", "lang"]).with_format("arrow")[:]
            for group in table.group_by(["role", "lang"]).aggregate([([], "count_all")]).to_pylist():
                counts[(part, group["role"])][split] += group["count_all"]
                langs[(part, group["role"])] = group["lang"]
    splits = sorted({split for counter in counts.values() for split in counter}, key=_split_order)
    lines = ["| part | role | lang | " + " | ".join(splits) + " |", "|---|---|---|" + "---:|" * len(splits)]
    for (part, role), counter in sorted(counts.items()):
        cells = " | ".join(f"{counter[split]:,}" for split in splits)
        lines.append(f"| {part} | {role} | {langs[(part, role)]} | {cells} |")
    return "\n".join(lines)


def _split_order(split: str):
    order = ["train", "test", "rolegpt_baseline"]
    return (order.index(split) if split in order else len(order), split)


def build_card(
    configs: dict[str, datasets.DatasetDict],
    pretty_name: str = "RoleBench",
    license: str = "apache-2.0",
    citation: str = CITATION,
    description: str | None = None,
) -> DatasetCard:
    """The dataset card for `configs` (`{config name: DatasetDict}`), parquet files under `{config}/{split}-*`."""
    languages = sorted(
        {
            lang
            for d in configs.values()
            for split in d.values()
            if "lang" in split.column_names
            for lang in split.unique("lang")
        }
    )
    card_data = DatasetCardData(
        license=license,
        language=languages,
        pretty_name=pretty_name,
        task_categories=["text-generation"],
        tags=["role-playing", "rolebench", "rolellm"],
    )
    infos, metadata = {}, {}
    for config, dataset_dict in configs.items():
        split_dict = datasets.SplitDict()
        for split, dataset in dataset_dict.items():
            split_dict.add(
                datasets.SplitInfo(name=split, num_bytes=dataset.data.nbytes, num_examples=dataset.num_rows)
            )
        features = next(iter(dataset_dict.values())).features
        infos[config] = datasets.DatasetInfo(features=features, splits=split_dict)
        metadata[config] = {
            "data_files": [{"split": split, "path": data_file_pattern(config, split)} for split in dataset_dict]
        }
    DatasetInfosDict(infos).to_dataset_card_data(card_data)
    MetadataConfigs(metadata).to_dataset_card_data(card_data)
    return DatasetCard(f"---\n{card_data.to_yaml()}\n---\n\n{_body(configs, pretty_name, citation, description)}")


def _body(configs, pretty_name, citation, description) -> str:
    first = next(iter(configs))
    config_lines = ["| config | " + " | ".join(["splits (rows)"]) + " |", "|---|---|"]
    for config, dataset_dict in configs.items():
        cells = ", ".join(f"{split} ({dataset.num_rows:,})" for split, dataset in dataset_dict.items())
        config_lines.append(f"| `{config}` | {cells} |")
    description = description or (
        "RoleBench, the role-playing benchmark of RoleLLM (Wang et al., 2023, arXiv 2310.00746): general instructions "
        "answered in each role's speaking style (RoleGPT) and role-specific questions answered from the role's "
        "script knowledge (Context-Instruct). Rows: `role`, `question`, `generated` (references), `type` "
        "(`script_based`/`script_agnostic` per reference, role-specific rows), `subset`, `lang`."
    )
    return "\n".join(
        [
            f"# {pretty_name}",
            "",
            description,
            "",
            "## Configs",
            "",
            *config_lines,
            "",
            "```python",
            "from datasets import load_dataset",
            "",
            f'dataset = load_dataset("<this repo or folder>", "{first}")',
            "```",
            "",
            "## Roles",
            "",
            roles_table(configs),
            "",
            "## Citation",
            "",
            "```bibtex",
            citation.strip(),
            "```",
            "",
        ]
    )
