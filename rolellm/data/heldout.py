"""Held-out questions: each role's questions split into train and held-out rows, deterministically, in the spirit of
the paper's instruction-generalization split, and written as a release folder that `rolellm train` and `rolellm
evaluate` read (`--data_dir`).

The English release's instruction-generalization folder ships the 50 role-specific test questions of each of its 95
roles, and no English train file: splitting those questions is how a model is trained on some questions of a role and
scored on others. A question goes to the held-out side by the rank of its hash among its role's questions, so the
split depends on the questions alone (not on their order in the file, nor on the other roles).

>>> rows = [{"role": role, "question": f" {role} question {i}?", "generated": [" An answer."]}
...         for role in ("Jack Sparrow", "Sheldon Cooper") for i in range(10)]
>>> train, held_out = split_role_questions(rows, held_out=3)
>>> len(train), len(held_out), sorted({row["role"] for row in held_out})
(14, 6, ['Jack Sparrow', 'Sheldon Cooper'])
>>> split_role_questions(rows, held_out=3) == (train, held_out)
True
"""

import hashlib
import json
import os
from pathlib import Path

from rolellm.data.layout import CONFIG_SPECS
from rolellm.roles.profile import RoleProfile, Utterance, parse_description
from rolellm.roles.release import write_release_profiles


def question_hash(role: str, question: str, seed: int = 0) -> float:
    """A number in [0, 1) from a hash of `(seed, role, question)` alone (surrounding whitespace ignored): the one rule
    that places a question on a side of a split, here by its rank among its role's questions, in
    `rolellm.generation.job.stable_split` by a threshold.

    >>> question_hash("李白", "你最喜欢哪首诗？") == question_hash("李白", " 你最喜欢哪首诗？")
    True
    """
    key = "\0".join((str(seed), role.strip(), question.strip())).encode("utf-8")
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2**64


def split_role_questions(rows, held_out: int | float = 0.2, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Split each role's rows into train rows and held-out rows.

    Args:
        rows (`Iterable[dict]`): RoleBench rows (`role`, `question`, `generated`, ...).
        held_out (`int` or `float`, *optional*, defaults to 0.2): held-out questions per role: a count, or a fraction
            of the role's questions (rounded, at least one). A role keeps at least one train question.
        seed (`int`, *optional*, defaults to 0): another seed draws another split.

    Returns:
        `tuple[list[dict], list[dict]]`: the train rows and the held-out rows, each in the order of `rows`.
    """
    if isinstance(held_out, float) and not 0 < held_out < 1:
        raise ValueError(f"held_out={held_out}: a fraction must be between 0 and 1 (or give a count of questions)")
    if isinstance(held_out, int) and held_out < 1:
        raise ValueError(f"held_out={held_out}: hold out at least one question per role")
    rows = list(rows)
    by_role: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        by_role.setdefault(row["role"], []).append(index)
    chosen = set()
    for indices in by_role.values():
        count = held_out if isinstance(held_out, int) else max(1, round(held_out * len(indices)))
        count = min(count, len(indices) - 1)
        chosen.update(sorted(indices, key=lambda i: question_hash(rows[i]["role"], rows[i]["question"], seed))[:count])
    return (
        [row for index, row in enumerate(rows) if index not in chosen],
        [row for index, row in enumerate(rows) if index in chosen],
    )


def write_split_release(
    train: list[dict],
    held_out: list[dict],
    data_dir: str | os.PathLike,
    descriptions: dict[str, str],
    lang: str = "en",
    train_dialogue: bool = False,
) -> Path:
    """Write train and held-out role-specific rows as a release folder: `train.jsonl` and `test.jsonl` of the
    role-specific rows of `en-instruction` (or `zh`), and the roles' profiles (`profiles-*/desc.json`).

    Args:
        train (`list[dict]`), held_out (`list[dict]`): rows, as `split_role_questions` returns them.
        data_dir (`str` or `os.PathLike`): the folder to write (made if missing).
        descriptions (`dict[str, str]`): role -> description (the release's `desc.json` text, catchphrase sentence
            included); every role of the rows must have one.
        lang (`str`, *optional*, defaults to `"en"`): `"en"` or `"zh"`.
        train_dialogue (`bool`, *optional*, defaults to `False`): also write each role's train questions and first
            answers as its profile dialogue (one exchange with the user each), the examples the few-shot prompting
            modes retrieve where the role's script is not in the data. Held-out rows are never written there.

    Returns:
        `Path`: `data_dir`, to pass as `--data_dir` (config `en-instruction-role_specific` or `zh-role_specific`).
    """
    roles = sorted({row["role"] for row in [*train, *held_out]})
    missing = [role for role in roles if role not in descriptions]
    if missing:
        raise ValueError(f"no description for the roles {missing}: add them to the descriptions")
    data_dir = Path(data_dir)
    config = CONFIG_SPECS["en-instruction" if lang == "en" else "zh"]
    folder = data_dir / config.release_dir / "role_specific"
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train), ("test", held_out)):
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as stream:
            for row in rows:
                stream.write(json.dumps(row, ensure_ascii=False) + "\n")
    profiles = {}
    for role in roles:
        description, catchphrases, extra = parse_description(descriptions[role], lang)
        profiles[role] = RoleProfile(role, lang, description, catchphrases, extra=extra)
    if train_dialogue:
        for number, row in enumerate(train):
            profiles[row["role"]].dialogue += [
                Utterance(0, number, "User", row["question"].strip()),
                Utterance(0, number, row["role"], row["generated"][0].strip()),
            ]
    write_release_profiles(profiles, data_dir)
    return data_dir
