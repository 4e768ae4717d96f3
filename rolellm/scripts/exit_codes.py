"""The exit codes of every `rolellm` command (documented in `docs/cli.md`).

| code | meaning |
|---|---|
| 0 | everything asked for was done |
| 1 | done in part: some rows failed (listed in `generation/<job>/failures.jsonl` of the output folder) or a check found problems |
| 2 | a usage or input error: a flag, a file, a recipe value; nothing was done |
| 3 | nothing could be done: the endpoint is unreachable or refuses the requests, or every request failed |
| 4 | an unexpected error in rolellm itself (a bug: run again with `--debug` and report the traceback) |
"""

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_BUG = 4
