"""RoleBench: the row schema, the `datasets` builder, statistics, leakage checks and Hub export.

`read_rolebench_jsonl` needs only the standard library; the names backed by `datasets` load on first use.
"""

import importlib

from rolellm.data.readers import iter_rolebench_jsonl, normalize_row, read_rolebench_jsonl
from rolellm.data.release import CITATION, HUB_REPO_ID, LANGS, SUBSETS, TYPES


_LAZY = {
    "ROW_FEATURES": "rolellm.data.schema",
    "PROFILE_FEATURES": "rolellm.data.layout",
    "CONFIG_NAMES": "rolellm.data.layout",
    "RoleBench": "rolellm.data.builder",
    "RoleBenchConfig": "rolellm.data.builder",
    "MissingFilesError": "rolellm.data.layout",
    "load_rolebench": "rolellm.data.builder",
    "load_rolebench_profiles": "rolellm.data.builder",
    "add_profile_columns": "rolellm.data.builder",
    "rolebench_stats": "rolellm.data.stats",
    "check_leakage": "rolellm.data.stats",
    "LeakageError": "rolellm.data.stats",
    "export_rolebench": "rolellm.data.hub",
    "push_rolebench": "rolellm.data.hub",
}

__all__ = [
    "CITATION",
    "HUB_REPO_ID",
    "LANGS",
    "SUBSETS",
    "TYPES",
    "iter_rolebench_jsonl",
    "normalize_row",
    "read_rolebench_jsonl",
    *_LAZY,
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rolellm.data' has no attribute {name!r}")
