"""`rolellm data`: RoleBench statistics, leakage checks and Hub export.

    rolellm data stats  --data-dir ../shared/data/rolebench        # the paper's Table 1 for the files present
    rolellm data check  --data-dir ../shared/data/rolebench        # exit 1 when test data leaks into train
    rolellm data export ./rolebench-hub --data-dir ../shared/data/rolebench [--push-to-hub user/rolebench]

Without `--data-dir` the release files are fetched from the Hub (`ZenMoore/RoleBench`).
"""

import argparse
import json
import sys
from pathlib import Path

from rolellm.data.release import HUB_REPO_ID
from rolellm.scripts.exit_codes import EXIT_PARTIAL, EXIT_USAGE


DESCRIPTION = "RoleBench data: statistics (paper Table 1), leakage checks, export/push in the Hub's no-code layout."
STATS_COLUMNS = ["part", "split", "subset", "rows", "instructions", "roles", "script_based", "script_agnostic",
                 "avg_instruction_words", "avg_response_words"]  # fmt: skip


def make_parser(subparsers=None):
    if subparsers is not None:
        parser = subparsers.add_parser("data", help=DESCRIPTION, description=DESCRIPTION)
    else:
        parser = argparse.ArgumentParser(prog="rolellm data", description=DESCRIPTION)
    actions = parser.add_subparsers(dest="action", metavar="<action>", required=True)

    def add_common(sub):
        sub.add_argument("--data_dir", "--data-dir", dest="data_dir", type=Path, default=None,
                         help="A folder in the release layout (default: fetch the files from the Hub).")  # fmt: skip
        sub.add_argument(
            "--repo_id",
            "--repo-id",
            dest="repo_id",
            default=HUB_REPO_ID,
            help="The Hub dataset read without --data_dir.",
        )
        sub.add_argument("--revision", default=None, help="The Hub revision read without --data_dir.")

    stats = actions.add_parser("stats", help="Print the paper's Table 1 statistics for the files present.")
    add_common(stats)
    stats.add_argument("--zh_tokenizer", "--zh-tokenizer", dest="zh_tokenizer", choices=["jieba", "chars"],
                       default="jieba",
                       help="How Chinese words are counted for the average lengths.")  # fmt: skip
    stats.add_argument("--json", action="store_true", help="Print JSON lines instead of a table.")
    check = actions.add_parser(
        "check", help="Fail (exit 1) when a test (role, question) pair or held-out role is in train."
    )
    add_common(check)
    export = actions.add_parser("export", help="Write parquet + README card per config; optionally push to the Hub.")
    export.add_argument("output_dir", type=Path, help="Where to write the no-code Hub layout.")
    add_common(export)
    export.add_argument("--configs", nargs="+", default=None, help="Only these configs (default: every one present).")
    export.add_argument(
        "--push_to_hub",
        "--push-to-hub",
        dest="push_to_hub",
        metavar="REPO_ID",
        default=None,
        help="Also push the export to this repo.",
    )
    export.add_argument("--private", action="store_true", help="Create the pushed repo as private.")
    return parser


def resolve_data_dir(args) -> Path:
    if args.data_dir is not None:
        if not args.data_dir.is_dir():
            raise NotADirectoryError(f"--data_dir {args.data_dir} is not a folder")
        return args.data_dir
    from huggingface_hub import snapshot_download

    patterns = ["rolebench-zh/*/*.jsonl", "rolebench-eng/*/*/*.jsonl", "profiles-*/*"]
    return Path(snapshot_download(args.repo_id, repo_type="dataset", revision=args.revision, allow_patterns=patterns))


def format_table(rows: list[dict], columns: list[str]) -> str:
    """Rows as a Markdown table with thousands separators.

    >>> print(format_table([{"part": "zh", "rows": 5933}], ["part", "rows"]))
    | part | rows |
    |---|---|
    | zh | 5,933 |
    """
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [f"{row[c]:,}" if isinstance(row[c], int) else str(row[c]) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_stats(args) -> int:
    from rolellm.data.stats import rolebench_stats

    data_dir = resolve_data_dir(args)
    table = rolebench_stats(data_dir, zh_tokenizer=args.zh_tokenizer)
    if not table:
        print(f"no RoleBench train/test files found in {data_dir}", file=sys.stderr)
        return 1
    if args.json:
        for row in table:
            print(json.dumps(row, ensure_ascii=False))
    else:
        print(f"RoleBench statistics of {data_dir} (RoleGPT baseline files left out)\n")
        print(format_table(table, STATS_COLUMNS))
    return 0


def run_check(args) -> int:
    from rolellm.data.stats import check_release_files, check_release_leakage

    data_dir = resolve_data_dir(args)
    reports = check_release_leakage(data_dir)
    files, problems = check_release_files(data_dir)
    failed = 0
    for name, report in reports.items():
        if report is None:
            present = [file for file in files if file.startswith(f"{name}/")]
            print(f"{name}: no train/test leakage check (train or test file missing); checked {present or 'nothing'}")
        else:
            print(report.describe(name))
            failed += not report.ok
    for problem in problems:
        print(problem)
    checked = sum(report is not None for report in reports.values())
    print(
        f"\n{checked} part(s) checked for leakage, {failed} with leakage; {len(files)} file(s) checked for repeated "
        f"and copied rows, {len(problems)} problem(s)"
    )
    if not files:
        print(
            f"rolellm data check: no RoleBench train or test file in {data_dir}: nothing was checked (pass "
            "--data-dir with a folder in the release layout)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return EXIT_PARTIAL if failed or problems else 0


def run_export(args) -> int:
    from rolellm.data.hub import export_rolebench, upload_export

    data_dir = resolve_data_dir(args)
    folder = export_rolebench(args.output_dir, data_dir=data_dir, configs=args.configs)
    configs = sorted(path.name for path in folder.iterdir() if path.is_dir())
    print(f"wrote {len(configs)} config(s) to {folder}: {', '.join(configs)}")
    if args.push_to_hub:
        commit = upload_export(folder, args.push_to_hub, private=args.private or None)
        print(f"pushed to https://huggingface.co/datasets/{args.push_to_hub} ({commit.commit_url})")
    return 0


def main(args) -> int:
    return {"stats": run_stats, "check": run_check, "export": run_export}[args.action](args)


if __name__ == "__main__":
    sys.exit(main(make_parser().parse_args()))
