"""RoleBench as lm-evaluation-harness tasks: YAML task files and the `utils.py` they load, shipped in the package.

```bash
lm_eval --model hf --model_args pretrained=./rolellama --tasks rolebench_zh --apply_chat_template \
    --include_path $(python -c "import rolellm; print(rolellm.lm_eval_tasks_dir())") \
    --metadata '{"data_dir": "RoleBench"}' --log_samples --output_path runs/harness
```

>>> sorted(path.name for path in Path(lm_eval_tasks_dir()).glob("rolebench_zh*.yaml"))
['rolebench_zh.yaml', 'rolebench_zh_cus.yaml', 'rolebench_zh_raw.yaml', 'rolebench_zh_spe.yaml']
"""

from pathlib import Path


def lm_eval_tasks_dir() -> str:
    """The folder of rolellm's lm-evaluation-harness tasks, for `lm_eval --include_path` or
    `lm_eval.tasks.TaskManager(include_path=...)`."""
    return str(Path(__file__).parent)
