"""RoleBench rows -> conversational RoCIT samples: profiles, reference choice, general/role-specific mixing.

>>> import datasets
>>> from rolellm import RoleProfile
>>> rows = datasets.Dataset.from_list([
...     {"role": "李白", "question": "你好", "generated": ["幸会！", "你好啊"], "type": [], "subset": "general",
...      "lang": "zh"},
... ])
>>> samples = rolebench_to_conversations(rows, {"李白": RoleProfile("李白", "zh", "诗人")}, reference="all")
>>> sorted(samples.column_names), len(samples)
(['messages', 'role', 'subset'], 2)
"""

import logging

import datasets

from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import to_role_messages


logger = logging.getLogger(__name__)

SUBSET_IDS = {"general": 0, "role_specific": 1}


def mix_subsets(dataset: datasets.Dataset, role_specific_fraction: float | None, seed: int = 0) -> datasets.Dataset:
    """Down-sample the larger of the `general` / `role_specific` subsets so role-specific rows make up the fraction.

    >>> rows = datasets.Dataset.from_dict({"subset": ["general"] * 8 + ["role_specific"] * 2})
    >>> mixed = mix_subsets(rows, 0.5)
    >>> sorted(mixed["subset"])
    ['general', 'general', 'role_specific', 'role_specific']
    """
    if role_specific_fraction is None:
        return dataset
    subsets = dataset["subset"]
    general = [i for i, s in enumerate(subsets) if s == "general"]
    specific = [i for i, s in enumerate(subsets) if s == "role_specific"]
    fraction = role_specific_fraction
    if fraction == 0.0:
        keep_general, keep_specific = len(general), 0
    elif fraction == 1.0:
        keep_general, keep_specific = 0, len(specific)
    elif len(specific) / max(len(general) + len(specific), 1) < fraction:
        keep_specific, keep_general = len(specific), round(len(specific) * (1 - fraction) / fraction)
    else:
        keep_general, keep_specific = len(general), round(len(general) * fraction / (1 - fraction))
    if (keep_general + keep_specific) == 0 or (0 < fraction < 1 and 0 in (keep_general, keep_specific)):
        raise ValueError(
            f"role_specific_fraction={fraction} cannot be reached from {len(general)} general and {len(specific)} "
            "role-specific rows: pass rows of both subsets, or set role_specific_fraction=None"
        )
    import random

    rng = random.Random(seed)
    keep = sorted(rng.sample(general, keep_general) + rng.sample(specific, keep_specific))
    logger.info(
        "Mixed %d/%d general and %d/%d role-specific rows (role_specific_fraction=%s)",
        keep_general, len(general), keep_specific, len(specific), fraction,
    )  # fmt: skip
    return dataset.select(keep)


def rolebench_to_conversations(
    dataset: datasets.Dataset,
    profiles: dict[str, RoleProfile],
    reference: str = "first",
    seed: int = 0,
    lang: str | None = None,
    template: str | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Turn RoleBench rows into `messages` samples (see `rolellm.to_role_messages`), keeping `role` and `subset`.

    Rows are matched to profiles by role name across the release's spellings (the rule of `rolellm.roles.lookup`);
    rows of roles without a profile raise an error that lists those roles.
    """
    profiles = Profiles(profiles).require(
        dataset.unique("role"), "the data", "pass profiles= (or RoCITConfig.profiles) that cover every role"
    )
    has_subset = "subset" in dataset.column_names

    def convert(batch):
        out = {"messages": [], "role": [], "subset": []}
        for i, role in enumerate(batch["role"]):
            row = {key: batch[key][i] for key in batch}
            for messages in to_role_messages(row, profiles[role], reference, seed, lang, template):
                out["messages"].append(messages)
                out["role"].append(role)
                out["subset"].append(row["subset"] if has_subset else "")
        return out

    return dataset.map(
        convert, batched=True, remove_columns=dataset.column_names, num_proc=num_proc, desc="RoleBench rows to chats"
    )
