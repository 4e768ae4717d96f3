"""A pairwise judge against any baseline, with the length-controlled win rate beside the raw one, and the report.

Two "models" answer the Chinese RoleBench questions of two roles: a terse one (the baseline, a first
`rolellm evaluate` run) and a talkative one (the evaluated model, judged against the first run's folder). Offline,
both are local chat-completions test servers, and so is the judge, which prefers the longer answer, the more surely
the larger the difference: the talkative model wins most raw comparisons, and the length-controlled win rate shows
how much of that is only length. The report (`results.md`, `results.html` with SVG charts) is written beside.

Run: `python examples/judge_any_baseline.py [--data_dir ../shared/data/rolebench] [--output_dir runs/any-baseline]`
(under a minute). With real models: `rolellm evaluate ... --judge_model gpt-4o --baseline runs/qwen-zh`.
"""

import argparse
import json
import tempfile
import zlib
from pathlib import Path

from rolellm.scripts import cli
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.server import ChatCompletionsServer


def shown_answers(body):
    line = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('[{"model"'))
    return json.loads(line)


def length_loving_judge(body):
    """Ranks the longer answer first, except for a share of near ties (fixed by a checksum of the prompt)."""
    answers = sorted(shown_answers(body), key=lambda answer: -len(answer["answer"]))
    gap = len(answers[0]["answer"]) - len(answers[1]["answer"])
    question = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('{"question"'))
    if gap < 12 and zlib.crc32(question.encode()) % 3 == 0:
        answers.reverse()
    return str([{"model": a["model"], "reason": "", "rank": rank} for rank, a in enumerate(answers, start=1)])


def talkative(body):
    question = body["messages"][-1]["content"]
    return "俺老孙来也！" + "这个问题嘛，" * (1 + zlib.crc32(question.encode()) % 5)


def terse(body):
    question = body["messages"][-1]["content"]
    return "俺老孙来也！" + "好。" * (1 + zlib.crc32(question.encode()[::-1]) % 8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", help="the RoleBench release folder (default: ../shared/data/rolebench)")
    parser.add_argument("--output_dir", default=None, help="where the two runs go (default: a temporary folder)")
    args = parser.parse_args()
    data_dir = args.data_dir or (find_rolebench_data() / "rolebench")
    output = Path(args.output_dir or tempfile.mkdtemp(prefix="rolellm-any-baseline-"))
    common = ["--dataset_name", "zh", "--data_dir", str(data_dir), "--roles", "孙悟空", "华妃",
              "--max_samples_per_role", "10", "--allow_partial"]  # fmt: skip
    with ChatCompletionsServer(terse) as baseline, ChatCompletionsServer(talkative) as model, \
            ChatCompletionsServer(length_loving_judge) as judge:  # fmt: skip
        cli.main(["evaluate", "--model_name_or_path", "terse", "--base_url", baseline.base_url,
                  "--output_dir", str(output / "terse"), *common])  # fmt: skip
        cli.main(["evaluate", "--model_name_or_path", "talkative", "--base_url", model.base_url,
                  "--output_dir", str(output / "talkative"), "--judge_model", "judge", "--judge_base_url",
                  judge.base_url, "--baseline", str(output / "terse"), *common])  # fmt: skip
    judged = json.loads((output / "talkative" / "results.json").read_text(encoding="utf-8"))["win_rate"]
    print(f"raw win rate {judged['win_rate']:.2%}, length-controlled {judged['lc_win_rate']:.2%} "
          f"(95% CI {judged['lc_ci_low']:.2%}-{judged['lc_ci_high']:.2%}); answers of {judged['model_length']:.0f} "
          f"vs {judged['baseline_length']:.0f} characters")  # fmt: skip
    print(f"report: {output / 'talkative' / 'results.html'}")


if __name__ == "__main__":
    main()
