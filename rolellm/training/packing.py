"""Prefix-shared role packing: samples of one role share one copy of the role's system prompt in a packed row.

Every RoleBench sample repeats its role's system instruction (90-200 tokens in Chinese, more in English) before a
short question and answer. Packing samples of the same role as `[prefix][Q1 A1][Q2 A2]...[Qk Ak]`, with an attention
mask under which each `Qi Ai` sees the prefix and itself only and position ids that restart at the prefix length for
every sample, trains on exactly what each sample would see alone while computing the prefix once.

This module holds the data side: `shared_prefix_length` finds how many leading tokens a group of tokenized samples
can share, `plan_rows` packs groups into rows of at most `max_length` tokens (best fit, one role per group, several
groups per row when a role does not fill a row), `pack_with_shared_prefix` turns a tokenized `datasets.Dataset` into
packed rows, and `DataCollatorForPrefixSharing` pads rows into batches with `position_ids` and the segment ids the
attention mask is built from (`rolellm.training.attention`).

>>> samples = [
...     {"input_ids": [1, 2, 3, 10, 11], "labels": [-100, -100, -100, -100, 11]},
...     {"input_ids": [1, 2, 3, 20, 21, 22], "labels": [-100, -100, -100, -100, 21, 22]},
... ]
>>> shared_prefix_length(samples)
3
>>> row = pack_samples([(3, samples)])
>>> row["input_ids"], row["labels"]
([1, 2, 3, 10, 11, 20, 21, 22], [-100, -100, -100, -100, 11, -100, 21, 22])
>>> batch = DataCollatorForPrefixSharing(pad_token_id=0)([row])
>>> batch["position_ids"].tolist(), batch["segment_ids"].tolist(), batch["prefix_segment_ids"].tolist()
([[0, 1, 2, 3, 4, 3, 4, 5]], [[0, 0, 0, 1, 1, 2, 2, 2]], [[0, 0, 0, 0, 0, 0, 0, 0]])
"""

import bisect
import logging
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from rolellm.clients.prefill import system_text


logger = logging.getLogger(__name__)

IGNORE_INDEX = -100


def shared_prefix_length(samples: Sequence[dict]) -> int:
    """How many leading tokens a group of tokenized samples can share without changing any sample's loss.

    The shared part must be token-for-token identical in every sample (so its hidden states are the same), must
    hold no trained label, and the first token after it must not be trained either: in a packed row that token is
    predicted from the previous sample's last token, so its label has to be ignored anyway. Each sample keeps at
    least one token of its own.

    Args:
        samples (`Sequence[dict]`): tokenized samples with `input_ids` and `labels` (`-100` where not trained),
            lists or 1D arrays.

    Returns:
        `int`: the prefix length `P` (0 when nothing can be shared).

    >>> shared_prefix_length([{"input_ids": [5, 6, 7], "labels": [5, 6, 7]}])  # full-sequence loss: nothing shared
    0
    """
    first = np.asarray(samples[0]["input_ids"])
    length = min(len(sample["input_ids"]) for sample in samples) - 1
    for sample in samples[1:]:
        span = min(length, len(first))
        differ = np.flatnonzero(first[:span] != np.asarray(sample["input_ids"])[:span])
        length = int(differ[0]) if len(differ) else span
    for sample in samples:
        # the loss never predicts position 0: the first target is the first trained label after it
        trained = np.flatnonzero(np.asarray(sample["labels"])[1:] != IGNORE_INDEX)
        length = min(length, int(trained[0]) if len(trained) else len(sample["labels"]) - 1)
    return max(length, 0)


def plan_rows(
    groups: dict[Hashable, tuple[int, list[int]]], max_length: int
) -> list[list[tuple[Hashable, list[int]]]]:
    """Pack samples into rows of at most `max_length` tokens, one shared prefix per group of a row.

    Each group (a role) is first cut into chunks that fit a row next to one copy of its prefix (first fit, longest
    samples first); the chunks of all groups are then placed into rows by best-fit decreasing, so a role whose
    samples do not fill a row shares it with other roles, each chunk with its own prefix.

    Args:
        groups (`dict`): group key -> `(prefix_length, suffix_lengths)`, the lengths of each sample after the prefix.
        max_length (`int`): the most tokens in a row.

    Returns:
        `list[list[tuple]]`: the rows; each row is a list of `(group key, sample indices into suffix_lengths)`.

    >>> plan_rows({"a": (4, [3, 3, 3]), "b": (2, [1])}, max_length=10)
    [[('a', [0, 1])], [('a', [2]), ('b', [0])]]
    """
    chunks = []  # (size, key, sample indices)
    for key, (prefix_length, suffix_lengths) in groups.items():
        capacity = max_length - prefix_length
        order = sorted(range(len(suffix_lengths)), key=lambda i: -suffix_lengths[i])
        free, members = [], []
        for i in order:
            if suffix_lengths[i] > capacity:
                raise ValueError(
                    f"a sample of group {key!r} has {prefix_length + suffix_lengths[i]} tokens, more than "
                    f"max_length={max_length}: truncate the samples first or raise max_length"
                )
            slot = next((c for c, room in enumerate(free) if room >= suffix_lengths[i]), None)
            if slot is None:
                free.append(capacity)
                members.append([])
                slot = len(free) - 1
            free[slot] -= suffix_lengths[i]
            members[slot].append(i)
        chunks += [(max_length - room, key, sorted(ids)) for room, ids in zip(free, members)]

    rows, room_keys = [], []  # room_keys: sorted (free room, row index) for best fit
    for size, key, ids in sorted(chunks, key=lambda chunk: -chunk[0]):
        at = bisect.bisect_left(room_keys, (size, -1))  # the fullest row that still has room
        if at < len(room_keys):
            room, row = room_keys.pop(at)
            rows[row].append((key, ids))
            bisect.insort(room_keys, (room - size, row))
        else:
            rows.append([(key, ids)])
            bisect.insort(room_keys, (max_length - size, len(rows) - 1))
    return rows


def _layout_row(groups: Sequence[tuple[int, Sequence[dict]]], token_columns: Sequence[str]) -> dict:
    """`pack_samples` with 1D arrays for the per-token columns."""
    pieces = {name: [] for name in ("input_ids", "labels", *token_columns)}
    prefix_lengths, sample_lengths = [], []
    for prefix_length, samples in groups:
        pieces["input_ids"].append(np.asarray(samples[0]["input_ids"][:prefix_length]))
        pieces["labels"].append(np.full(prefix_length, IGNORE_INDEX))
        for name in token_columns:
            pieces[name].append(np.full(prefix_length, -1))
        for sample in samples:
            pieces["input_ids"].append(np.asarray(sample["input_ids"][prefix_length:]))
            labels = np.array(sample["labels"][prefix_length:])
            labels[0] = IGNORE_INDEX  # predicted from whatever precedes the sample in the row: never trained here
            pieces["labels"].append(labels)
            for name in token_columns:
                pieces[name].append(np.asarray(sample[name][prefix_length:]))
        prefix_lengths.append(prefix_length)
        sample_lengths.append([len(sample["input_ids"]) - prefix_length for sample in samples])
    row = {name: np.concatenate(arrays).astype(np.int64) for name, arrays in pieces.items()}
    return {**row, "prefix_lengths": prefix_lengths, "sample_lengths": sample_lengths}


def pack_samples(groups: Sequence[tuple[int, Sequence[dict]]], token_columns: Sequence[str] = ()) -> dict[str, list]:
    """Lay out one packed row from `(prefix_length, samples)` groups.

    Returns a dict with `input_ids` and `labels` (the row's tokens, the first token after each prefix or sample
    boundary untrained), `prefix_lengths` (one per group) and `sample_lengths` (per group, the length of each
    sample after the prefix), from which `DataCollatorForPrefixSharing` builds positions and segments. Per-token
    `token_columns` (for example `subset_ids`) follow the tokens, `-1` on shared prefixes.
    """
    row = _layout_row(groups, token_columns)
    return {name: value.tolist() if isinstance(value, np.ndarray) else value for name, value in row.items()}


@dataclass
class PackingStats:
    """What `pack_with_shared_prefix` did: counts and token totals, for logs and benchmarks."""

    num_samples: int
    num_rows: int
    num_groups: int
    sample_tokens: int  # tokens of the samples as they would be trained alone
    row_tokens: int  # tokens in the packed rows (each shared prefix counted once per group)
    max_length: int

    @property
    def fill(self) -> float:
        """Fraction of the `num_rows * max_length` slots holding a token."""
        return self.row_tokens / max(self.num_rows * self.max_length, 1)

    def __str__(self):
        return (
            f"{self.num_samples} samples in {self.num_rows} rows of <= {self.max_length} tokens "
            f"({self.num_groups} prefix groups): {self.row_tokens} tokens instead of {self.sample_tokens} "
            f"({self.sample_tokens / max(self.row_tokens, 1):.2f}x fewer), rows {self.fill:.0%} full"
        )


def pack_with_shared_prefix(
    dataset,
    max_length: int,
    group_column: str | None = "role",
    sample_columns: Sequence[str] = (),
    token_columns: Sequence[str] = (),
):
    """Pack a tokenized dataset into rows where samples of one group (role) share their common prefix.

    Args:
        dataset (`datasets.Dataset`): tokenized samples with `input_ids`, `labels` and `group_column`.
        max_length (`int`): the most tokens in a packed row (attention cost grows with the square of the row).
        group_column (`str`, *optional*, defaults to `"role"`): samples with the same value are candidates to share
            a prefix; the prefix actually shared is computed from the tokens (`shared_prefix_length`). `None` puts
            all samples in one group (they share only what all of them start with).
        sample_columns (`Sequence[str]`, *optional*): per-sample columns kept in each row as lists, one value per
            sample in row order (for example `"subset"`).
        token_columns (`Sequence[str]`, *optional*): per-token columns laid out like `input_ids` (for example
            `"subset_ids"`), `-1` on shared prefixes.

    Returns:
        `tuple[datasets.Dataset, PackingStats]`: the rows (`input_ids`, `labels`, `prefix_lengths`,
        `sample_lengths`, and the `sample_columns`), and what the packing did.
    """
    import pyarrow as pa
    from datasets import Dataset
    from datasets.table import InMemoryTable

    needed = ["input_ids", "labels", *([group_column] if group_column else []), *sample_columns, *token_columns]
    missing = sorted(set(needed) - set(dataset.column_names))
    if missing:
        raise ValueError(
            f"prefix-shared packing needs the columns {missing}, the dataset has {dataset.column_names}: "
            f"tokenize it with labels first and keep the {group_column!r} column"
        )
    # Arrow buffers viewed as numpy: no Python list per token, so the English release (140k samples) fits too.
    table = dataset.select_columns(needed).with_format("arrow")[:]
    flat = {}
    for name in ("input_ids", "labels", *token_columns):
        array = table.column(name).combine_chunks()
        offsets = array.offsets.to_numpy()
        flat[name] = (array.flatten().to_numpy(), offsets - offsets[0])
    samples = [
        {name: values[offsets[i] : offsets[i + 1]] for name, (values, offsets) in flat.items()}
        for i in range(len(table))
    ]
    members = defaultdict(list)
    for index, key in enumerate(table.column(group_column).to_pylist() if group_column else [None] * len(samples)):
        members[key].append(index)
    prefix = {key: shared_prefix_length([samples[i] for i in ids]) for key, ids in members.items()}
    groups = {
        key: (prefix[key], [len(samples[i]["input_ids"]) - prefix[key] for i in ids]) for key, ids in members.items()
    }
    per_sample = {name: table.column(name).to_pylist() for name in sample_columns}
    rows = {name: [] for name in ("input_ids", "labels", *token_columns, "prefix_lengths", "sample_lengths")}
    rows.update({name: [] for name in sample_columns})
    planned_rows = plan_rows(groups, max_length)
    for planned in tqdm(planned_rows, desc="Packing rows with shared prefixes", disable=len(samples) < 10_000):
        picked = [(key, [members[key][i] for i in ids]) for key, ids in planned]
        row = _layout_row([(prefix[key], [samples[i] for i in ids]) for key, ids in picked], token_columns)
        for name, value in row.items():
            rows[name].append(value)
        for name in sample_columns:
            rows[name].append([per_sample[name][i] for _, ids in picked for i in ids])
    lengths = np.array([len(row) for row in rows["input_ids"]])
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    columns = {
        name: pa.ListArray.from_arrays(
            offsets, pa.array(np.concatenate(rows[name]) if len(lengths) else [], pa.int64())
        )
        if name in ("input_ids", "labels", *token_columns)
        else pa.array(rows[name])
        for name in rows
    }
    stats = PackingStats(
        num_samples=len(samples),
        num_rows=len(lengths),
        num_groups=sum(map(len, rows["prefix_lengths"])),
        sample_tokens=int(len(flat["input_ids"][0])),
        row_tokens=int(lengths.sum()),
        max_length=max_length,
    )
    return Dataset(InMemoryTable(pa.table(columns))), stats


@dataclass
class DataCollatorForPrefixSharing:
    """Pad prefix-shared rows into a batch with `position_ids` and the segment ids of the attention mask.

    Each token gets a segment id (its prefix or its sample) and the id of the prefix segment it may also see;
    `rolellm.training.attention.build_attention_mask` turns these into the 4D mask once per batch, on the device
    the model runs on. Padding gets segment `-1` (it sees only padding, no real token sees it).

    Args:
        pad_token_id (`int`): the id used to pad `input_ids`.
        pad_to_multiple_of (`int`, *optional*): pad the row length up to a multiple of this.
        token_columns (`Sequence[str]`, *optional*): other per-token columns of the rows to pad with `-1` and return
            when the rows have them (for example `subset_ids`).

    Returns (from `__call__`):
        `dict[str, torch.Tensor]` with `input_ids`, `labels`, `position_ids`, `segment_ids`,
        `prefix_segment_ids` and the `token_columns`, each of shape `(batch, length)`.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = None
    token_columns: Sequence[str] = ()

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        import torch

        token_columns = [name for name in self.token_columns if name in rows[0]]
        length = max(len(row["input_ids"]) for row in rows)
        if self.pad_to_multiple_of:
            length = -(-length // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {
            name: torch.full((len(rows), length), fill, dtype=torch.long)
            for name, fill in [
                ("input_ids", self.pad_token_id),
                ("labels", IGNORE_INDEX),
                ("position_ids", 0),
                ("segment_ids", -1),
                ("prefix_segment_ids", -1),
                *[(name, -1) for name in token_columns],
            ]
        }
        for b, row in enumerate(rows):
            positions, segments, prefixes = [], [], []
            segment = 0
            for prefix_length, lengths in zip(row["prefix_lengths"], row["sample_lengths"]):
                prefix_segment = segment
                positions += range(prefix_length)
                segments += [segment] * prefix_length
                prefixes += [segment] * prefix_length
                for n in lengths:
                    segment += 1
                    positions += range(prefix_length, prefix_length + n)
                    segments += [segment] * n
                    prefixes += [prefix_segment] * n
                segment += 1
            n = len(row["input_ids"])
            batch["input_ids"][b, :n] = torch.tensor(row["input_ids"])
            batch["labels"][b, :n] = torch.tensor(row["labels"])
            batch["position_ids"][b, :n] = torch.tensor(positions)
            batch["segment_ids"][b, :n] = torch.tensor(segments)
            batch["prefix_segment_ids"][b, :n] = torch.tensor(prefixes)
            for name in token_columns:
                batch[name][b, :n] = torch.tensor(row[name])
        return batch


PREFIX_GROUP_COLUMN = "prefix_group"
PACKED_COLUMNS = ("prefix_lengths", "sample_lengths")


def prefix_groups(conversations: Sequence[list[dict]]) -> list[str]:
    """The group key of each conversation: its system message (samples of one role share it), else `""`
    (`rolellm.clients.prefill.system_text`, the local backend's grouping too)."""
    return [system_text(messages) for messages in conversations]


def prepare_prefix_shared_dataset(dataset, args, dataset_name: str = "train"):
    """Pack a tokenized dataset with labels for training (the `RoCITTrainer` hook).

    Groups by the `prefix_group` column when present (see `prefix_groups`), carries `subset_ids`, logs what the
    packing saved, and shuffles the rows when `args.shuffle_dataset` is set. Every row is a whole unit of data, so
    under DDP each rank gets whole rows.
    """
    if args.max_length is None:
        raise ValueError("prefix_sharing=True needs max_length: the length of a packed row (1024 is a good start)")
    group_column = PREFIX_GROUP_COLUMN if PREFIX_GROUP_COLUMN in dataset.column_names else None
    if group_column is None:
        logger.warning(
            f"the {dataset_name} dataset has no {PREFIX_GROUP_COLUMN!r} column: all samples form one group and share "
            "only the tokens they all start with"
        )
    token_columns = [name for name in ("subset_ids",) if name in dataset.column_names]
    packed, stats = pack_with_shared_prefix(dataset, args.max_length, group_column, token_columns=token_columns)
    logger.info(f"prefix-shared packing of the {dataset_name} dataset: {stats}")
    return packed.shuffle(seed=args.seed) if args.shuffle_dataset else packed
