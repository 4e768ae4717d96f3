"""Evaluate like the paper: the RoleGPT baseline row, then a model under every prompting mode, in one table.

Runs offline on a CPU in about a minute with a tiny random model (its scores are near zero: it shows the pipeline,
not a result). Point `--model_name_or_path` at a real model folder or Hub id, or add `--base_url` for a vLLM server.

    python examples/evaluate_rolebench.py --data_dir ../shared/data/rolebench
    python examples/evaluate_rolebench.py --model_name_or_path ./runs/roleglm --max_samples_per_role 50

Writes `<output_dir>/<run>/results.json`, `results.md`, `results.html`, `per_role.svg` and `comparison.svg`; the
last run's `results.md` holds the table of all runs.
"""

import argparse
import tempfile
from pathlib import Path

from rolellm.clients.config import ClientConfig
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.evaluation.benchmark.report import format_table
from rolellm.evaluation.benchmark.runner import run_benchmark
from rolellm.roles.prompts import PROMPTING_MODES
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.models import build_tiny_llama


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data = find_rolebench_data()
    parser.add_argument("--data_dir", default=str(data / "rolebench") if data else None, help="RoleBench release.")
    parser.add_argument("--screenplay_dir", default=str(data / "roleglm-screenplay") if data else None)
    parser.add_argument("--model_name_or_path", default=None, help="Defaults to a tiny random Llama.")
    parser.add_argument("--base_url", default=None, help="OpenAI-compatible endpoint serving the model.")
    parser.add_argument("--modes", nargs="+", choices=PROMPTING_MODES, default=list(PROMPTING_MODES))
    parser.add_argument("--max_samples_per_role", type=int, default=2)
    parser.add_argument("--output_dir", default="runs/evaluate-example")
    args = parser.parse_args(argv)
    if args.data_dir is None:
        parser.error("--data_dir: no RoleBench folder found; pass the release folder (ZenMoore/RoleBench layout)")

    output_dir = Path(args.output_dir)
    baseline = run_benchmark(
        BenchmarkConfig(
            client=ClientConfig("rolegpt"),
            dataset_name="zh",
            data_dir=args.data_dir,
            output_dir=str(output_dir / "rolegpt"),
        )
    )
    model, label, chat_template = args.model_name_or_path, None, None
    if model is None:
        model, label, chat_template = str(build_tiny_llama(tempfile.mkdtemp())), "tiny-llama", "chatml"
    screenplays = [str(Path(args.screenplay_dir) / name) for name in ("profile_xiyou", "profile_zhenhuan")]
    results, previous = [baseline], [str(output_dir / "rolegpt" / "results.json")]
    for mode in args.modes:
        run = BenchmarkConfig(
            client=ClientConfig(model, base_url=args.base_url, chat_template=chat_template, max_new_tokens=32),
            model_label=label,
            dataset_name="zh",
            data_dir=args.data_dir,
            roles=["孙悟空", "华妃", "皇帝"],  # the roles with script dialogue, for the few-shot modes
            profiles=screenplays,
            max_samples_per_role=args.max_samples_per_role,
            mode=mode,
            output_dir=str(output_dir / mode),
            compare_with=list(previous),
        )
        results.append(run_benchmark(run))
        previous.append(str(output_dir / mode / "results.json"))
    print(format_table([result.to_dict() for result in results]))
    print(f"\nReport with all runs: {output_dir / args.modes[-1] / 'results.md'}")


if __name__ == "__main__":
    main()
