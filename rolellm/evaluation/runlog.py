"""The resumable run log that the multi-turn and CoSER evaluations keep: completed work appended as JSON lines and
synced at once (`append_synced`), replayed when a killed run starts again (`read_log`, which drops a last line cut
short), the run's settings saved beside it (`save_run`) and checked so that a folder is never resumed by another run
(`check_run`), and finished records written atomically (`write_records`)."""

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from rolellm.roles.profile import DataFormatError, parse_json_line, read_json_object, read_text


logger = logging.getLogger(__name__)


def read_log(path: Path, restore: Callable[[dict, str], None]) -> int:
    """Replay an append-only JSONL log (`append_synced`): `restore(record, "path:line")` for each complete line, in
    order; a line cut short by a crash is dropped (what it held is asked again) and the file is rewritten without it,
    so the next append starts on a line of its own. Returns the number of records restored (0 without a file)."""
    if not path.exists():
        return 0
    kept, restored = [], 0
    lines = read_text(path, allow_empty=True, log=True).splitlines(keepends=True)
    for line_no, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_json_line(line, path, line_no)
        except DataFormatError:
            if line_no < len(lines) or line.endswith("\n"):  # only the last write can be cut short by a crash
                raise
            logger.warning("%s:%d: incomplete line dropped; it is played again", path, line_no)
            continue
        try:
            restore(record, f"{path}:{line_no}")
        except KeyError as error:  # a complete line that is no record of this log: not ours, or edited
            raise DataFormatError(
                f"{path}:{line_no}: field {error.args[0]!r} is missing: not a record of this log; use a new output_dir"
            ) from None
        kept.append(line if line.endswith("\n") else line + "\n")
        restored += 1
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text("".join(kept), encoding="utf-8")
    partial.replace(path)
    return restored


def append_synced(log, records: Sequence[dict]) -> None:
    """Append `records` to an open log file as JSON lines and sync them to disk before returning: a process killed
    after this call loses none of them."""
    log.write("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))
    log.flush()
    os.fsync(log.fileno())


def check_run(folder: Path, run: dict, run_name: str, log_name: str) -> None:
    """Refuse to resume a folder whose log (`log_name`) holds another run's records: a setting in `run` differs from
    the one saved in `run_name` (only the keys of `run` are compared). Reads only; `save_run` writes `run`."""
    path = folder / run_name
    if path.exists():
        previous = read_json_object(path, "the run's settings", ": not the settings of a run; use a new output_dir")
        changed = sorted(k for k in run if previous.get(k) != run[k])
        if changed and (folder / log_name).exists():
            raise ValueError(
                f"{folder} holds turns of another run ({', '.join(changed)} differ): use a new output_dir"
            )


def save_run(folder: Path, run: dict, run_name: str) -> None:
    """Save `run` (checked by `check_run` first) as `run_name` in `folder`."""
    (folder / run_name).write_text(json.dumps(run, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_records(records: Sequence[dict], path: str | os.PathLike) -> Path:
    """Write `records` as JSON lines (one a line), atomically: a crash leaves the old file or the new one."""
    path = Path(path)
    partial = path.with_suffix(path.suffix + ".tmp")
    partial.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    partial.replace(path)
    return path
