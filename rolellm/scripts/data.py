"""`rolellm data`: RoleBench statistics, leakage checks and Hub export.

    rolellm data stats  --data-dir ../shared/data/rolebench        # the paper's Table 1 for the files present
    rolellm data check  --data-dir ../shared/data/rolebench        # exit 1 when test data leaks into train
    rolellm data export ./rolebench-hub --data-dir ../shared/data/rolebench [--push-to-hub user/rolebench]

Without `--data-dir` the release files are fetched from the Hub (`ZenMoore/RoleBench`).
"""

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.data.release import HUB_REPO_ID
from rolellm.scripts.exit_codes import EXIT_PARTIAL, EXIT_USAGE
from rolellm.scripts.recipe import make_command_group, make_command_parser, require_hub_token


DESCRIPTION = "RoleBench data: statistics (paper Table 1), leakage checks, export/push in the Hub's no-code layout."
STATS_COLUMNS = ["part", "split", "subset", "rows", "instructions", "roles", "script_based", "script_agnostic",
                 "avg_instruction_words", "avg_response_words"]  # fmt: skip


@dataclass
class ReleaseArguments:
    """Where every `rolellm data` action reads the RoleBench release.

    Args:
        data_dir (`str`, *optional*): a folder in the release layout; default: fetch the files from the Hub.
        repo_id (`str`, *optional*, defaults to `"ZenMoore/RoleBench"`): the Hub dataset read without `data_dir`.
        revision (`str`, *optional*): the Hub revision read without `data_dir`.
    """

    data_dir: str | None = field(
        default=None, metadata={"help": "A folder in the release layout (default: fetch the files from the Hub)."}
    )
    repo_id: str = field(default=HUB_REPO_ID, metadata={"help": "The Hub dataset read without --data_dir."})
    revision: str | None = field(default=None, metadata={"help": "The Hub revision read without --data_dir."})


@dataclass
class StatsArguments(ReleaseArguments):
    """`rolellm data stats`: the paper's Table 1 for the release files present.

    Args:
        zh_tokenizer (`Literal["jieba", "chars"]`, *optional*, defaults to `"jieba"`): how Chinese words are counted
            for the average lengths.
        json (`bool`, *optional*, defaults to `False`): print JSON lines instead of a table.
    """

    zh_tokenizer: Literal["jieba", "chars"] = field(
        default="jieba", metadata={"help": "How Chinese words are counted for the average lengths."}
    )
    json: bool = field(default=False, metadata={"help": "Print JSON lines instead of a table."})


@dataclass
class CheckArguments(ReleaseArguments):
    """`rolellm data check`: exit 1 when a test (role, question) pair or held-out role is in train, or a file repeats
    or copies rows; the fields are those of `ReleaseArguments`."""


@dataclass
class ExportArguments(ReleaseArguments):
    """`rolellm data export`: parquet files and a README card per config, in the Hub's no-code layout.

    Args:
        output_dir (`str`): where to write the no-code Hub layout (the positional argument).
        configs (`list[str]`, *optional*): only these configs; default: every one present.
        push_to_hub (`str`, *optional*): also push the export to this dataset repo.
        private (`bool`, *optional*, defaults to `False`): create the pushed repo as private.
    """

    output_dir: str = field(
        default=None, metadata={"positional": True, "help": "Where to write the no-code Hub layout."}
    )
    configs: list[str] | None = field(
        default=None, metadata={"help": "Only these configs (default: every one present)."}
    )
    push_to_hub: str | None = field(
        default=None, metadata={"help": "Also push the export to this repo.", "metavar": "REPO_ID"}
    )
    private: bool = field(default=False, metadata={"help": "Create the pushed repo as private."})


ACTIONS = {
    "stats": (StatsArguments, "Print the paper's Table 1 statistics for the files present."),
    "check": (CheckArguments, "Fail (exit 1) when a test (role, question) pair or held-out role is in train."),
    "export": (ExportArguments, "Write parquet + README card per config; optionally push to the Hub."),
}


def make_parser(subparsers=None):
    parser, actions = make_command_group("data", DESCRIPTION, subparsers)
    for name, (dataclass_type, help_text) in ACTIONS.items():
        make_command_parser(name, [dataclass_type], help_text, actions)
    return parser


def resolve_data_dir(args) -> Path:
    if args.data_dir is not None:
        if not Path(args.data_dir).is_dir():
            raise NotADirectoryError(f"--data_dir {args.data_dir} is not a folder")
        return Path(args.data_dir)
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
        print(
            f"rolellm data stats: no RoleBench train or test file in {data_dir}: nothing was counted (pass "
            "--data-dir with a folder in the release layout)",
            file=sys.stderr,
        )
        return EXIT_USAGE
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

    if args.push_to_hub:
        require_hub_token("--push_to_hub")
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
