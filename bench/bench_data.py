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
`role_specific/train.jsonl` and a list in `test.jsonl`), so the ratio is over the configs both can build
(`zh-general`, `en-instruction-role_specific` with the files at hand). The two sides run in turns, each from a cold
cache, and the figures are the best of five runs, in seconds and rows per second, so that other work on a shared
machine skews both alike. Run: `python bench/bench_data.py` (about a minute).
"""

import sys
import tempfile
import time
import warnings
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REPEATS = 5


def best_of(fn, repeats=REPEATS):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main():
    import datasets

    from rolellm.data.builder import load_rolebench
    from rolellm.data.hub import export_rolebench, release_configs
    from rolellm.data.layout import CONFIG_NAMES, available_splits, config_files, get_spec
    from rolellm.testing.data import find_rolebench_data

    datasets.disable_progress_bars()
    warnings.simplefilter("ignore")
    found = find_rolebench_data()
    if found is None or not (found / "rolebench").is_dir():
        print("real RoleBench data not found: set ROLEBENCH_DATA_DIR or place it at ../shared/data")
        return 0
    data_dir = found / "rolebench"
    print(f"data: {data_dir}\n")
    print("| config | rows | load_rolebench s | rows/s | load_dataset('json') s | rows/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    total_rows = total_ours = total_plain = 0.0
    for name in CONFIG_NAMES:
        splits = available_splits(data_dir, name)
        if not splits:
            continue
        kind = get_spec(name).kind
        load_splits = None if kind == "profiles" or len(splits) == 3 else splits

        def ours(name=name, load_splits=load_splits):
            return load_rolebench(name, data_dir=data_dir, splits=load_splits, cache_dir=tempfile.mkdtemp())

        plain_cell, ratio_cell, plain = "n/a (not jsonl rows)", "", None
        if kind == "rows":
            files = {
                split: [str(data_dir / rel) for rel, _ in found_files]
                for split, found_files in config_files(name, splits).items()
            }

            def plain(files=files):
                return datasets.load_dataset("json", data_files=files, cache_dir=tempfile.mkdtemp())

        times, plain_times, dataset = [], [], None
        for _ in range(REPEATS):  # in turns: both sides see the same machine load
            seconds, dataset = best_of(ours, repeats=1)
            times.append(seconds)
            if plain is not None:
                try:
                    plain_times.append(best_of(plain, repeats=1)[0])
                except Exception as error:  # noqa: BLE001  (the comparison reports what plain datasets does)
                    plain_cell, plain = f"fails: {type(error).__name__} | ", None
        seconds = min(times)
        rows = sum(part.num_rows for part in dataset.values())
        if plain is not None:
            plain_seconds = min(plain_times)
            plain_cell = f"{plain_seconds:.2f} | {rows / plain_seconds:,.0f}"
            ratio_cell = f"{seconds / plain_seconds:.2f}x"
            total_rows, total_ours, total_plain = total_rows + rows, total_ours + seconds, total_plain + plain_seconds
        elif kind != "rows":
            plain_cell += " | "
        print(f"| {name} | {rows:,} | {seconds:.2f} | {rows / seconds:,.0f} | {plain_cell} | {ratio_cell} |")
    if total_plain:
        print(f"\nconfigs both can build: load_rolebench {total_rows / total_ours:,.0f} rows/s, "
              f"load_dataset('json') {total_rows / total_plain:,.0f} rows/s "
              f"(load_rolebench takes {total_ours / total_plain:.2f}x the time)")  # fmt: skip

    tables = release_configs(data_dir, cache_dir=tempfile.mkdtemp())
    rows = sum(part.num_rows for dataset in tables.values() for part in dataset.values())
    export_seconds, _ = best_of(lambda: export_rolebench(Path(tempfile.mkdtemp()) / "out", tables))

    def bare_parquet():
        out = Path(tempfile.mkdtemp())
        for config, dataset in tables.items():
            for split, part in dataset.items():
                part.to_parquet(str(out / config / f"{split}.parquet"))

    bare_seconds, _ = best_of(bare_parquet)
    print(f"\nexport_rolebench: {len(tables)} configs, {rows:,} rows in {export_seconds:.2f} s "
          f"({rows / export_seconds:,.0f} rows/s); bare Dataset.to_parquet: {bare_seconds:.2f} s "
          f"({rows / bare_seconds:,.0f} rows/s); ratio {export_seconds / bare_seconds:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
