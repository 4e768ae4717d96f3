"""RoleBench as lm-evaluation-harness tasks: YAML task files and the `utils.py` they load, shipped in the package.

```bash
lm_eval --model hf --model_args pretrained=./rolellama --tasks rolebench_zh --apply_chat_template \
    --include_path $(python -c "import rolellm; print(rolellm.lm_eval_tasks_dir())") \
    --metadata '{"data_dir": "RoleBench"}' --log_samples --output_path runs/harness
```

The folder is `rolellm.lm_eval_tasks_dir()` (defined in `folder`); the tasks load documents and score through `utils`;
`model.harness_model` gives lm-eval the model `rolellm evaluate` answers with (its chat template and stop tokens).
"""
