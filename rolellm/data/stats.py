"""RoleBench statistics (the paper's Table 1) and leakage checks, for whatever release files are present.

Statistics count, per part (`zh`, `en-instruction`, `en-role`), split and subset: rows, distinct instructions,
roles, script-based / script-agnostic references and the average instruction and response length in words (English:
whitespace words; Chinese: jieba words). The RoleGPT baseline files are not part of the benchmark's data and are
left out.

>>> rows = [{"role": "Po", "question": "Who are you?", "generated": ["Po.", "The Dragon Warrior."],
...          "type": [], "subset": "general", "lang": "en"}]
>>> stats = compute_stats(rows)
>>> stats["rows"], stats["instructions"], stats["avg_response_words"]
(1, 1, 2.0)
>>> check_leakage(train=rows, test=rows).leaked_pairs
[('Po', 'Who are you?')]
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

from rolellm.data.layout import CONFIG_SPECS, available_splits, config_files
from rolellm.data.readers import iter_rolebench_jsonl
from rolellm.data.release import SUBSETS


STATS_SPLITS = ("train", "test")
PARTS = ("zh", "en-instruction", "en-role")
ROLE_GENERALIZATION_PARTS = ("en-role",)


class LeakageError(AssertionError):
    """Test data overlaps train data: a (role, question) pair, or a held-out role, is in both."""


def count_words(text: str, lang: str, zh_tokenizer: Literal["jieba", "chars"] = "jieba") -> int:
    """Words in `text`: whitespace-separated for English; for Chinese, jieba words or characters, punctuation and
    spaces left out (jieba comes with the `generation` extra).

    >>> count_words("Four score and seven", "en")
    4
    >>> count_words("俺老孙来也！", "zh", zh_tokenizer="chars")
    5
    """
    if lang == "en":
        return len(text.split())
    if zh_tokenizer == "chars":
        return sum(1 for ch in text if ch.isalnum())
    return _jieba_words(text)


@lru_cache(maxsize=200_000)  # the train+test and `all` rows count the same texts again
def _jieba_words(text: str) -> int:
    import jieba

    return sum(1 for token in jieba.lcut(text) if any(ch.isalnum() for ch in token))


def compute_stats(rows: Iterable[dict], zh_tokenizer: Literal["jieba", "chars"] = "jieba") -> dict:
    """Table 1 statistics of rows in the shared schema (`role`, `question`, `generated`, `type`, `lang`)."""
    n_rows = n_refs = instruction_words = response_words = 0
    questions, roles = set(), set()
    types = {"script_based": 0, "script_agnostic": 0}
    for row in rows:
        n_rows += 1
        questions.add(row["question"].strip())
        roles.add(row["role"])
        instruction_words += count_words(row["question"], row["lang"], zh_tokenizer)
        for answer in row["generated"]:
            n_refs += 1
            response_words += count_words(answer, row["lang"], zh_tokenizer)
        for kind in row["type"]:
            types[kind] += 1
    return {
        "rows": n_rows,
        "instructions": len(questions),
        "roles": len(roles),
        "references": n_refs,
        **types,
        "avg_instruction_words": round(instruction_words / n_rows, 2) if n_rows else 0.0,
        "avg_response_words": round(response_words / n_refs, 2) if n_refs else 0.0,
    }


def _part_rows(data_dir: Path, part: str, split: str, subset: str):
    name = f"{part}-{subset}"
    if split not in available_splits(data_dir, name):
        return None
    ((rel, _),) = config_files(name, [split])[split]
    return list(iter_rolebench_jsonl(data_dir / rel, subset, CONFIG_SPECS[name].lang))


def rolebench_stats(data_dir: str | Path, zh_tokenizer: Literal["jieba", "chars"] = "jieba") -> list[dict]:
    """Statistics for every (part, split, subset) whose file is in `data_dir`, with `subset="all"` rows for both
    subsets and `split="train+test"` rows for both splits (the paper's totals: Chinese general 7,384 samples of
    1,479 instructions).

    Returns:
        `list[dict]`: one dict per table line with `part`, `split`, `subset` and the `compute_stats` fields.
    """
    data_dir = Path(data_dir)
    table = []
    for part in PARTS:
        found = {
            (split, subset): rows
            for split in STATS_SPLITS
            for subset in SUBSETS
            if (rows := _part_rows(data_dir, part, split, subset)) is not None
        }
        for split in (*STATS_SPLITS, "train+test"):
            by_subset = {}
            for subset in SUBSETS:
                keys = [(s, subset) for s in STATS_SPLITS] if split == "train+test" else [(split, subset)]
                if all(key in found for key in keys):
                    by_subset[subset] = [row for key in keys for row in found[key]]
                    stats = compute_stats(by_subset[subset], zh_tokenizer)
                    table.append({"part": part, "split": split, "subset": subset, **stats})
            if len(by_subset) == 2:
                both = compute_stats(by_subset["general"] + by_subset["role_specific"], zh_tokenizer)
                table.append({"part": part, "split": split, "subset": "all", **both})
    return table


def dataset_stats(dataset_dict, zh_tokenizer: Literal["jieba", "chars"] = "jieba") -> list[dict]:
    """Table 1 statistics of any `DatasetDict` in the row schema (the release's configs, generated rows, an export
    loaded back), per split and subset, with an `all` row per split.

    >>> import datasets
    >>> rows = [{"role": "Po", "question": "Hi?", "generated": ["Hi."], "type": [], "subset": "general", "lang": "en"}]
    >>> [(r["split"], r["subset"], r["rows"]) for r in dataset_stats({"train": datasets.Dataset.from_list(rows)})]
    [('train', 'general', 1)]
    """
    table = []
    for split, dataset in dataset_dict.items():
        rows = dataset.with_format("arrow")[:].to_pylist()
        subsets = sorted({row["subset"] for row in rows})
        for subset in subsets:
            part = [row for row in rows if row["subset"] == subset]
            table.append({"split": split, "subset": subset, **compute_stats(part, zh_tokenizer)})
        if len(subsets) > 1:
            table.append({"split": split, "subset": "all", **compute_stats(rows, zh_tokenizer)})
    return table


@dataclass
class LeakageReport:
    """What a train/test pair of row sets share.

    Attributes:
        leaked_pairs (`list[tuple[str, str]]`): test (role, question) pairs that are also in train.
        leaked_roles (`list[str]`): test roles that are in train (a problem only for role generalization).
        role_generalization (`bool`): whether `leaked_roles` counts as leakage.
    """

    leaked_pairs: list[tuple[str, str]] = field(default_factory=list)
    leaked_roles: list[str] = field(default_factory=list)
    role_generalization: bool = False

    @property
    def ok(self) -> bool:
        return not self.leaked_pairs and not (self.role_generalization and self.leaked_roles)

    def describe(self, name: str = "test") -> str:
        if self.ok:
            return f"{name}: no leakage"
        lines = []
        if self.leaked_pairs:
            lines.append(f"{name}: {len(self.leaked_pairs)} test (role, question) pair(s) are also in train:")
            lines += [f"  - {role}: {question[:80]!r}" for role, question in self.leaked_pairs[:20]]
            if len(self.leaked_pairs) > 20:
                lines.append(f"  ... and {len(self.leaked_pairs) - 20} more")
        if self.role_generalization and self.leaked_roles:
            lines.append(f"{name}: held-out test role(s) appear in train: {', '.join(self.leaked_roles)}")
        return "\n".join(lines)

    def raise_for_leakage(self, name: str = "test") -> None:
        """Raise `LeakageError` with the report when there is leakage."""
        if not self.ok:
            raise LeakageError(self.describe(name))


def check_leakage(train: Iterable[dict], test: Iterable[dict], role_generalization: bool = False) -> LeakageReport:
    """Compare test rows with train rows (questions compared after the reader's whitespace normalisation).

    Args:
        train (`Iterable[dict]`), test (`Iterable[dict]`): rows with `role` and `question` (a `Dataset` works).
        role_generalization (`bool`, *optional*, defaults to `False`): test roles must not appear in train.
    """
    train_pairs, train_roles = set(), set()
    for row in train:
        train_pairs.add((row["role"], row["question"].strip()))
        train_roles.add(row["role"])
    pairs, roles = [], []
    for row in test:
        pair = (row["role"], row["question"].strip())
        if pair in train_pairs and pair not in pairs:
            pairs.append(pair)
        if row["role"] in train_roles and row["role"] not in roles:
            roles.append(row["role"])
    return LeakageReport(pairs, roles, role_generalization)


def check_release_files(data_dir: str | Path) -> tuple[list[str], list[str]]:
    """What `rolellm data check` finds in each train and test file present, whether or not its pair is there.

    Every file is checked for rows that repeat the (role, question) of an earlier row, and every test file for
    (role, question) pairs copied into the train file of another config of its language.

    Returns:
        `tuple[list[str], list[str]]`: the files checked (`{config}/{split}`) and one line per problem found.
    """
    data_dir = Path(data_dir)
    files = {
        (part, subset, split): _part_rows(data_dir, part, split, subset)
        for part in PARTS
        for subset in SUBSETS
        for split in STATS_SPLITS
    }
    files = {key: rows for key, rows in files.items() if rows is not None}
    checked, problems = [], []
    for (part, subset, split), rows in files.items():
        name = f"{part}-{subset}/{split}"
        checked.append(name)
        pairs = [(row["role"], row["question"]) for row in rows]  # as released: " Q" and " Q " differ
        if len(set(pairs)) < len(pairs):
            problems.append(
                f"{name}: {len(pairs) - len(set(pairs))} row(s) repeat the role and question of an earlier row"
            )
        if split != "test":
            continue
        for (other, other_subset, other_split), other_rows in files.items():
            if (
                other_split != "train"
                or other == part
                or CONFIG_SPECS[f"{other}-{other_subset}"].lang != CONFIG_SPECS[f"{part}-{subset}"].lang
            ):
                continue
            copied = set(pairs) & {(row["role"], row["question"]) for row in other_rows}
            if copied:
                problems.append(
                    f"{name}: {len(copied)} test (role, question) pair(s) are in {other}-{other_subset}/train"
                )
    return checked, problems


def check_release_leakage(data_dir: str | Path) -> dict[str, LeakageReport | None]:
    """Run `check_leakage` on every `{part}-{subset}` of the folder; `None` where train or test is missing."""
    data_dir = Path(data_dir)
    reports = {}
    for part in PARTS:
        for subset in SUBSETS:
            train, test = (_part_rows(data_dir, part, split, subset) for split in STATS_SPLITS)
            if train is None or test is None:
                reports[f"{part}-{subset}"] = None
                continue
            reports[f"{part}-{subset}"] = check_leakage(train, test, part in ROLE_GENERALIZATION_PARTS)
    return reports
