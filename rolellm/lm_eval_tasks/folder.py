"""Where rolellm's lm-evaluation-harness tasks are, for `lm_eval --include_path`.

>>> sorted(path.name for path in Path(lm_eval_tasks_dir()).glob("rolebench_zh*.yaml"))
['rolebench_zh.yaml', 'rolebench_zh_cus.yaml', 'rolebench_zh_raw.yaml', 'rolebench_zh_spe.yaml']
"""

from pathlib import Path


def lm_eval_tasks_dir() -> str:
    """The folder of rolellm's lm-evaluation-harness tasks, for `lm_eval --include_path` or
    `lm_eval.tasks.TaskManager(include_path=...)`."""
    return str(Path(__file__).parent)
