"""RoleBench build and export speed on the real release files, against plain `datasets` on the same files.

What it compares, in one run, for every config whose files are in `../shared/data/rolebench` (or
`$ROLEBENCH_DATA_DIR/rolebench`), each from a cold cache (a fresh cache folder per run):

- `load_rolebench(config)` (the `RoleBench` builder: reading, validating, normalising, Arrow cache);
- `datasets.load_dataset("json", data_files=...)` on the same files (what a user would otherwise do: no
  normalisation, no `subset`/`lang` columns, and it cannot put `type` as a string in train and a list in test under
  one schema, so its failures are reported as such);
- `export_rolebench` (parquet per config and split + README card) against bare `Dataset.to_parquet` calls on the
  same tables.

Both sides return the same kind of object (a `DatasetDict` of Arrow-backed `Dataset`s) from the same files. The
`zh` and `zh-role_specific` configs cannot be read by `load_dataset("json")` (`type` is a string in
`role_specific/train.jsonl` and a list in `test.jsonl`), so the ratio is over the configs both can build.

Every load is the first call of a fresh Python process (imports done, timer around the one call), as a user's script
meets it: a second call in the same process is faster on both sides and says little. The two sides run in turns,
`--runs` times each; printed are the minimum and the median seconds, and the ratio of the medians.
Run: `python bench/bench_data.py [--runs 5]` (about two minutes).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TQDM_DISABLE", "1")  # export_rolebench's progress bar; read when tqdm is first imported


def timed_in_turns(sides: dict, runs: int) -> dict:
    """{side: [seconds per run]}: the sides' callables called in turns, `runs` times each, in this process."""
    times = {side: [] for side in sides}
    for _ in range(runs):
        for side, fn in sides.items():
            start = time.perf_counter()
            fn()
            times[side].append(time.perf_counter() - start)
    return times


def load_once(side: str, name: str, data_dir: str) -> dict:
    """One cold load in this (fresh) process: {"seconds", "rows"} or {"error"}."""
    import datasets

    from rolellm.data.builder import load_rolebench
    from rolellm.data.layout import available_splits, config_files, get_spec

    datasets.disable_progress_bars()
    warnings.simplefilter("ignore")
    root = Path(data_dir)
    splits = available_splits(root, name)
    cache = tempfile.mkdtemp()
    if side == "ours":
        load_splits = None if get_spec(name).kind == "profiles" or len(splits) == 3 else splits
        start = time.perf_counter()
        dataset = load_rolebench(name, data_dir=root, splits=load_splits, cache_dir=cache)
    else:
        files = {split: [str(root / rel) for rel, _ in found] for split, found in config_files(name, splits).items()}
        start = time.perf_counter()
        try:
            dataset = datasets.load_dataset("json", data_files=files, cache_dir=cache)
        except Exception as error:  # noqa: BLE001  (the comparison reports what plain datasets does)
            return {"error": type(error).__name__}
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows": sum(part.num_rows for part in dataset.values())}


def in_fresh_process(side: str, name: str, data_dir: Path) -> dict:
    command = [sys.executable, __file__, "--one", side, name, str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(args):
    from rolellm.data.layout import CONFIG_NAMES, available_splits, get_spec
    from rolellm.testing.data import find_rolebench_data

    found = find_rolebench_data()
    if found is None or not (found / "rolebench").is_dir():
        print("real RoleBench data not found: set ROLEBENCH_DATA_DIR or place it at ../shared/data")
        return 0
    data_dir = found / "rolebench"
    names = [name for name in CONFIG_NAMES if available_splits(data_dir, name)]
    print(f"data: {data_dir}; {args.runs} runs of each side, each the first call of a fresh process\n")
    times = {(name, side): [] for name in names for side in ("ours", "plain")}
    rows, failures = {}, {}
    for _ in range(args.runs):  # in turns: both sides see the same machine load
        for name in names:
            for side in ("ours", "plain"):
                if side == "plain" and (get_spec(name).kind != "rows" or name in failures):
                    continue
                result = in_fresh_process(side, name, data_dir)
                if "error" in result:
                    failures[name] = result["error"]
                    continue
                times[name, side].append(result["seconds"])
                rows[name] = result["rows"]
    print("| config | rows | load_rolebench min / median s | load_dataset('json') min / median s | median ratio |")
    print("|---|---:|---:|---:|---:|")
    both_ours, both_plain = [], []
    for name in names:
        ours = times[name, "ours"]
        cell = f"{min(ours):.2f} / {statistics.median(ours):.2f}"
        if name in failures:
            plain_cell, ratio = f"fails: {failures[name]}", ""
        elif not times[name, "plain"]:
            plain_cell, ratio = "n/a (not jsonl rows)", ""
        else:
            plain = times[name, "plain"]
            plain_cell = f"{min(plain):.2f} / {statistics.median(plain):.2f}"
            ratio = f"{statistics.median(ours) / statistics.median(plain):.2f}x"
            both_ours.append(statistics.median(ours))
            both_plain.append(statistics.median(plain))
        print(f"| {name} | {rows[name]:,} | {cell} | {plain_cell} | {ratio} |")
    if both_plain:
        print(f"\nconfigs both can build: load_rolebench takes {sum(both_ours) / sum(both_plain):.2f}x the time of "
              "load_dataset('json') (sum of medians)")  # fmt: skip
    export_speed(data_dir, args.runs)
    return 0


def export_speed(data_dir: Path, runs: int) -> None:
    import datasets

    from rolellm.data.hub import export_rolebench, release_configs

    datasets.disable_progress_bars()
    warnings.simplefilter("ignore")
    tables = release_configs(data_dir, cache_dir=tempfile.mkdtemp())
    rows = sum(part.num_rows for dataset in tables.values() for part in dataset.values())

    def export():
        export_rolebench(Path(tempfile.mkdtemp()) / "out", tables)

    def bare_parquet():
        out = Path(tempfile.mkdtemp())
        for config, dataset in tables.items():
            for split, part in dataset.items():
                part.to_parquet(str(out / config / f"{split}.parquet"))

    times = timed_in_turns({"export": export, "bare": bare_parquet}, runs)
    ours, bare = statistics.median(times["export"]), statistics.median(times["bare"])
    print(f"\nexport_rolebench: {len(tables)} configs, {rows:,} rows, min / median {min(times['export']):.2f} / "
          f"{ours:.2f} s; bare Dataset.to_parquet: {min(times['bare']):.2f} / {bare:.2f} s; median ratio "
          f"{ours / bare:.2f}x (in turns, {runs} runs, one process: the tables are already in memory)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh-process loads of each side and config")
    parser.add_argument("--one", nargs=3, metavar=("SIDE", "CONFIG", "DATA_DIR"), help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.one:
        print(json.dumps(load_once(*cli.one)))
        sys.exit(0)
    sys.exit(main(cli))
