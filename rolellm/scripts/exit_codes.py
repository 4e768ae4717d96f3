"""The exit codes of every `rolellm` command (documented in `docs/cli.md`).

| code | meaning |
|---|---|
| 0 | everything asked for was done |
| 1 | done in part: some rows failed (listed in `generation/<job>/failures.jsonl` of the output folder) or a check found problems |
| 2 | a usage or input error: a flag, a file, a recipe value; nothing was done |
| 3 | nothing could be done: the endpoint is unreachable or refuses the requests, or every request failed |
| 4 | an unexpected error in rolellm itself (a bug: run again with `--debug` and report the traceback) |

`evaluation_exit_code` maps the result of an evaluation (`rolellm.evaluation.base.EvaluationResult`) to one of them.
"""

import sys


EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_FAILED = 3
EXIT_BUG = 4


def evaluation_exit_code(command: str, result, config, retry_hint: str = "") -> int:
    """The exit code of an evaluation's `result` under its `config`, the reason printed to stderr: 3 when nothing was
    evaluated (`result.error`), 1 when some of it failed and `config` does not accept that (`--allow_partial`), else
    0. `retry_hint` ends the advice of a partial run (`"; run again to retry them"`)."""
    if result.error is not None:
        print(f"rolellm {command}: {result.error}", file=sys.stderr)
        return EXIT_FAILED
    if not config.accepts(result):
        print(f"rolellm {command}: {result.describe_failures()} (pass --allow_partial to accept a partial run"
              f"{retry_hint})", file=sys.stderr)  # fmt: skip
        return EXIT_PARTIAL
    return EXIT_OK
