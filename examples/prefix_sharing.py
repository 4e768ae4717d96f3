"""Prefix-shared role packing, step by step: pack samples by role, collate a batch, draw its attention mask.

    python examples/prefix_sharing.py [--output outputs/prefix_mask.png]

The samples here are a few token ids written by hand, so the picture stays readable; with real data the same happens
inside `RoCITTrainer` (`prefix_sharing=True`, the default). With the real RoleBench files present, the script also
packs the Chinese training set with the tiny tokenizer and prints what prefix sharing saves.
"""

import argparse
from pathlib import Path

from rolellm.training.attention import build_attention_mask
from rolellm.training.packing import DataCollatorForPrefixSharing, pack_samples, shared_prefix_length


def sample(prefix, question, answer):
    """A tokenized sample: prefix + question untrained, answer trained (ids are arbitrary)."""
    ids = [*prefix, *question, *answer]
    return {"input_ids": ids, "labels": [-100] * (len(prefix) + len(question)) + answer}


def demo_batch():
    wukong, libai = [1, 2, 3, 4, 5, 6], [7, 8, 9, 10]  # two roles' system prompts
    group_a = [sample(wukong, [20, 21], [30, 31]), sample(wukong, [22], [32, 33]), sample(wukong, [23, 24], [34])]
    group_b = [sample(libai, [25], [35, 36])]
    row = pack_samples([(shared_prefix_length(group_a), group_a), (shared_prefix_length(group_b), group_b)])
    return DataCollatorForPrefixSharing(pad_token_id=0, pad_to_multiple_of=8)([row])


def draw_mask(batch, output: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    segments, prefixes = batch["segment_ids"][0], batch["prefix_segment_ids"][0]
    mask = build_attention_mask(batch["segment_ids"], batch["prefix_segment_ids"])[0, 0]
    # 0 = masked, 1 = a prefix key, 2 = a key of the query's own sample
    kind = np.where(mask, np.where((segments == prefixes)[None, :].expand_as(mask), 1, 2), 0)
    kind[(segments < 0).numpy()] = np.where(mask[(segments < 0)], 3, 0)
    labels, length = [], len(segments)
    for i in range(length):
        s = int(segments[i])
        labels.append("pad" if s < 0 else ("P" if s == int(prefixes[i]) else "S") + str(s))
    colors = matplotlib.colors.ListedColormap(["#f4f4f4", "#e8a33d", "#3d7fe8", "#bbbbbb"])
    fig, ax = plt.subplots(figsize=(5.6, 5.6), dpi=110)
    ax.imshow(kind, cmap=colors, vmin=0, vmax=3)
    ax.set_xticks(range(length), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(length), [f"{lab} @{int(p)}" for lab, p in zip(labels, batch["position_ids"][0])], fontsize=7)
    ax.set_xlabel("key (segment)")
    ax.set_ylabel("query (segment @ position id)")
    ax.set_title("Two roles in one row: [P0 S1 S2 S3][P4 S5] + padding", fontsize=9)
    ax.set_xticks(np.arange(-0.5, length), minor=True)
    ax.set_yticks(np.arange(-0.5, length), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.6)
    names = ["shared prefix", "own sample"]
    handles = [matplotlib.patches.Patch(color=c, label=t) for c, t in zip(colors.colors[1:3], names)]
    ax.legend(handles=handles, loc="upper right", fontsize=7)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    print(f"wrote {output}")


def pack_real_data():
    """Pack the Chinese RoleBench train rows (tiny tokenizer) and print the saving, when the data is present."""
    import datasets

    from rolellm.data.readers import read_rolebench_jsonl
    from rolellm.encoding.chat_template import set_role_chat_template
    from rolellm.encoding.encode import encode_chat
    from rolellm.roles.resolve import load_profiles
    from rolellm.testing.data import find_rolebench_data
    from rolellm.testing.models import train_tiny_tokenizer
    from rolellm.training.data import rolebench_to_conversations
    from rolellm.training.packing import pack_with_shared_prefix

    data = find_rolebench_data()
    if data is None:
        print("RoleBench data not found: skipping the real-data packing")
        return
    root = data / "rolebench" / "rolebench-zh"
    rows = read_rolebench_jsonl(root / "general" / "train.jsonl", "general", "zh")
    rows += read_rolebench_jsonl(root / "role_specific" / "train.jsonl", "role_specific", "zh")
    datasets.disable_progress_bars()
    conversations = rolebench_to_conversations(
        datasets.Dataset.from_list(rows), load_profiles(data / "rolebench" / "profiles-zh")
    )
    tokenizer = train_tiny_tokenizer(sorted({t for r in rows for t in [r["question"], *r["generated"]]}), 6000)
    set_role_chat_template(tokenizer)

    def tokenize(example):
        encoded = encode_chat(tokenizer, example["messages"])
        labels = [t if bit else -100 for t, bit in zip(encoded["input_ids"], encoded["assistant_masks"])]
        return {"input_ids": encoded["input_ids"], "labels": labels}

    tokenized = conversations.map(tokenize, remove_columns=["messages"])
    _, stats = pack_with_shared_prefix(tokenized, max_length=1024)
    print(f"Chinese RoleBench train set: {stats}")


def main(args):
    batch = demo_batch()
    for name in ("input_ids", "labels", "position_ids", "segment_ids", "prefix_segment_ids"):
        print(f"{name:>19}: {batch[name][0].tolist()}")
    draw_mask(batch, Path(args.output))
    if args.real_data:
        pack_real_data()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="outputs/prefix_mask.png", help="where to save the mask picture")
    parser.add_argument("--real_data", action="store_true", help="also pack the real Chinese RoleBench train set")
    main(parser.parse_args())
