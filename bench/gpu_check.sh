#!/usr/bin/env bash
# One check of everything that needs a GPU, in at most 8 minutes on one H100/H200, printed as one Markdown table
# (format: docs/gpu-check.md). Each row runs in its own process under a hard time limit; a failed row prints FAIL
# with a one-line reason and the others still run. Nothing is downloaded: the model is built here from a config.
#
#   bench/gpu_check.sh             # on a GPU machine
#   bench/gpu_check.sh --dry-run   # the same code on a CPU with tiny sizes
#   bench/gpu_check.sh --rows packing,qlora
#
# Exit status: 0 when no row failed, 1 when one did (skipped rows do not count).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# a backstop over the rows' own limits (which add up to 480 s; four times that in a dry run)
LIMIT=540
for arg in "$@"; do [ "$arg" = --dry-run ] && LIMIT=2000; done
exec timeout --kill-after=10 "$LIMIT" "$PYTHON" bench/gpu_check.py "$@"
