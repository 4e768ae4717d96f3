"""Where the real RoleBench files are: `find_rolebench_data`."""

import os
from pathlib import Path


def find_rolebench_data() -> Path | None:
    """The folder of real RoleBench files: `$ROLEBENCH_DATA_DIR`, else `../shared/data` beside the project.

    Returns `None` when neither exists.
    """
    candidates = [os.environ.get("ROLEBENCH_DATA_DIR"), Path(__file__).resolve().parents[3] / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None
