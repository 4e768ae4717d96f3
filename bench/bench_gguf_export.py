"""The round trip of `rolellm export --gguf TYPE` for every type of docs/sillytavern.md's table: a LoRA checkpoint
trained from the embedded SmolLM2-135M-Instruct (one step of `rolellm train` on the Chinese role rows of the bundled
slice) goes to GGUF as `f16`, `q8_0` (llama.cpp's converter) and `q4_k_m` (llama.cpp's quantizer, from the `f16`
file), and each file runs in llama.cpp against the merged model in transformers (float32) on `--prompts` of 李白's role
prompts with their reference answers (`rolellm.testing.gguf_roundtrip`): teacher-forced, the same next token, the
log-probability gaps and the mean KL; greedy, the same answer for 16 tokens. tests/test_gguf_export.py asserts the
`f16` row on two prompts; this prints all three, and the seconds each export took.

    python bench/bench_gguf_export.py [--prompts 4] [--types f16 q8_0 q4_k_m]
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import require_rolebench_data  # sets the offline environment


# isort: split
from rolellm.clients.gguf import embedded_model_file
from rolellm.scripts import cli
from rolellm.testing.gguf_roundtrip import (
    ROLE,
    compare_in_llama_cpp,
    format_figures,
    one_step_training_argv,
    role_chats,
    role_rows,
    transformers_reference,
)


ROOT = Path(__file__).resolve().parents[1]
SLICE = ROOT / "tests" / "fixtures" / "rolebench-slice" / "rolebench"


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=4, help=f"{ROLE}'s role prompts of the comparison")
    parser.add_argument("--types", nargs="+", default=["f16", "q8_0", "q4_k_m"], help="the --gguf types compared")
    return parser


def main(args):
    data_dir = SLICE if SLICE.is_dir() else require_rolebench_data() / "rolebench"
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        trained = work / "rolesmol"
        if cli.main(one_step_training_argv(embedded_model_file(), data_dir, trained)) != 0:
            sys.exit("rolellm train failed")
        rows = role_rows(data_dir, args.prompts)
        reference = transformers_reference(trained, role_chats(trained, rows), 16)
        table = []
        for gguf_type in args.types:
            out = work / f"gguf-{gguf_type}"
            started = time.perf_counter()
            if cli.main(["export", str(trained), "--gguf", gguf_type, "--output_dir", str(out)]) != 0:
                sys.exit(f"rolellm export --gguf {gguf_type} failed")
            seconds = time.perf_counter() - started
            [gguf_file] = out.glob("*.gguf")
            figures = compare_in_llama_cpp(gguf_file, reference)
            print(format_figures(gguf_type, figures), flush=True)
            table.append((gguf_type, gguf_file.stat().st_size / 1e6, seconds, figures))
    print(f"\n{len(rows)} prompts of {ROLE}, one-step LoRA of SmolLM2-135M-Instruct; llama.cpp against transformers")
    print(
        "| type | size | export | same next token | largest top-10 gap (vocabulary) | mean KL | same greedy answer |"
    )
    print("|---|---|---|---|---|---|---|")
    for gguf_type, size, seconds, f in table:
        print(f"| {gguf_type} | {size:.0f} MB | {seconds:.0f} s | {f['same']} / {f['positions']} | "
              f"{f['top10_gap']:.2f} ({f['full_gap']:.2f}) | {f['mean_kl']:.5f} | {f['greedy']} / {f['prompts']} |")  # fmt: skip


if __name__ == "__main__":
    main(make_parser().parse_args())
