"""Where the real RoleBench files are: `find_rolebench_data`, else the slice the tests ship (`find_rolebench_slice`)."""

import os
from pathlib import Path


ROLEBENCH_SLICE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "rolebench-slice"


def find_rolebench_data() -> Path | None:
    """The folder of real RoleBench files: `$ROLEBENCH_DATA_DIR`, else `../shared/data` beside the project.

    Returns `None` when neither exists.
    """
    candidates = [os.environ.get("ROLEBENCH_DATA_DIR"), Path(__file__).resolve().parents[3] / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def find_rolebench_slice() -> Path | None:
    """`tests/fixtures/rolebench-slice` of a source checkout: a few hundred real release rows per file, the same
    layout as the full data folder (see its README). Returns `None` outside a checkout (an installed package)."""
    return ROLEBENCH_SLICE if ROLEBENCH_SLICE.is_dir() else None


def find_test_data() -> Path | None:
    """The full data folder when there is one (`find_rolebench_data`), else the slice (`find_rolebench_slice`)."""
    return find_rolebench_data() or find_rolebench_slice()
