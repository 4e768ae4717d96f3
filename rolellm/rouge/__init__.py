"""The project's metric, ROUGE-L as RoleBench scores it (`score`: tokenization, the LCS and its F-measure; `lcs`,
`lcs_numba`: the longest common subsequence in pure Python and compiled): shared by the benchmark, CoSER, the
preference judges, the rewards, the `evaluate` metric and the lm-evaluation-harness tasks."""
