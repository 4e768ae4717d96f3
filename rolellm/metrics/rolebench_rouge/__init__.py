"""The RoleBench ROUGE-L `evaluate` module: the script `rolebench_rouge.py` and its metric card `README.md`."""
