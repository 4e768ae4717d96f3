"""RoleBench with `datasets`: load a config, join the profiles, check it, export it to the Hub's no-code layout.

    python examples/rolebench_data.py                                  # ../shared/data/rolebench or $ROLEBENCH_DATA_DIR
    python examples/rolebench_data.py --data-dir path/to/RoleBench     # a full download of ZenMoore/RoleBench
    python examples/rolebench_data.py --push-to-hub me/rolebench       # also push the export

Without any local copy, `load_rolebench("zh")` fetches only the files of that config from the Hub.
"""

import argparse
import tempfile
from pathlib import Path

import datasets

from rolellm import export_rolebench, load_rolebench, push_rolebench
from rolellm.data.layout import complete_configs
from rolellm.data.stats import check_release_leakage, rolebench_stats
from rolellm.testing.data import find_rolebench_data


def main(args):
    found = find_rolebench_data()
    data_dir = args.data_dir or (found / "rolebench" if found else None)
    print(f"configs complete in {data_dir}: {', '.join(complete_configs(data_dir)) if data_dir else '(Hub)'}")

    zh = load_rolebench("zh", data_dir=data_dir, with_profile=True)
    print(zh)
    row = zh["test"][0]
    print(f"\n{row['role']} ({', '.join(row['catchphrases'])}): {row['question']}\n  -> {row['generated'][0]}")

    if data_dir:
        table = rolebench_stats(data_dir, zh_tokenizer="chars")
        specific = next(r for r in table if (r["part"], r["split"], r["subset"]) == ("zh", "train", "role_specific"))
        print(f"\nChinese role-specific train: {specific['rows']:,} rows, {specific['script_based']} script-based, "
              f"{specific['script_agnostic']} script-agnostic")  # fmt: skip
        for name, report in check_release_leakage(data_dir).items():
            if report is not None:
                print(report.describe(name).splitlines()[0])

    with tempfile.TemporaryDirectory() as folder:
        out = export_rolebench(Path(folder) / "rolebench", {"zh": zh.remove_columns(["description", "catchphrases"])})
        reloaded = datasets.load_dataset(str(out), "zh")
        same = all(
            reloaded[s].to_list() == zh[s].remove_columns(["description", "catchphrases"]).to_list() for s in zh
        )
        print(f"\nexported to {out.name}/ and loaded back with plain datasets: same rows = {same}")
    if args.push_to_hub:
        print(push_rolebench(args.push_to_hub, data_dir=data_dir, private=True))


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="A folder in the release layout.")
    parser.add_argument("--push-to-hub", metavar="REPO_ID", default=None, help="Push the export to this dataset repo.")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
