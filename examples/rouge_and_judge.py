"""ROUGE-L and the GPT-judge win rate, as the RoleLLM paper computes them, on the real RoleBench release files.

1. ROUGE-L: the RoleGPT baseline answers scored against the test references reproduce the paper's SPE (0.3229
   English, 0.2478 Chinese), with the same numbers as the `rouge` package and in a fraction of its time.
2. The win rate: a judge ranks two answers per question with the paper's prompt, in both orders. Offline, the
   judge is a local chat-completions test server that prefers answers in the role's voice; pass
   `--judge_model gpt-4` (and `--base_url` for a vLLM server, or `OPENAI_API_KEY` for OpenAI) to ask a real one.

Run: `python examples/rouge_and_judge.py [--data_dir ../shared/data]` (a few seconds).
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from rolellm import judge_win_rate, read_release_profiles, rouge_l, rouge_l_scores
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.server import ChatCompletionsServer


VOICE = ("俺老孙", "朕", "本宫", "臣妾", "俺")  # how the Chinese roles refer to themselves
PARTS = {
    "English SPE (Table 3)": "rolebench-eng/instruction-generalization/role_specific",
    "Chinese SPE (Table 4)": "rolebench-zh/role_specific",
}


def read_jsonl(path):
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file]


def baseline_and_references(folder):
    """RoleGPT's answer for each test row, matched on the exact (role, question): the files are not row-aligned."""
    tests = read_jsonl(folder / "test.jsonl")
    baseline = {(r["role"], r["question"]): r["generated"][0] for r in read_jsonl(folder / "rolegpt_baseline.jsonl")}
    return tests, [baseline[row["role"], row["question"]] for row in tests], [row["generated"] for row in tests]


def style_judge(body):
    """A stand-in judge: ranks first the answer with more of the roles' self-references ("朕", "本宫", "俺老孙")."""
    content = body["messages"][1]["content"]
    answers = json.loads(next(line for line in content.splitlines() if line.startswith('[{"model"')))
    flavour = [sum(a["answer"].count(word) for word in VOICE) for a in answers]
    first = 0 if flavour[0] >= flavour[1] else 1  # ties go to the first shown: a position bias, cancelled below
    return str([{"model": answers[i]["model"], "reason": "style", "rank": 1 if i == first else 2} for i in (0, 1)])


def main(args):
    data_dir = Path(args.data_dir) if args.data_dir else find_rolebench_data()
    if data_dir is None:
        raise SystemExit("RoleBench release files not found: pass --data_dir or set ROLEBENCH_DATA_DIR")
    for name, part in PARTS.items():
        _, predictions, references = baseline_and_references(data_dir / "rolebench" / part)
        start = time.perf_counter()
        score = rouge_l(predictions, references)
        print(
            f"RoleGPT {name}: ROUGE-L recall {score:.4f} ({len(predictions)} samples, {time.perf_counter() - start:.2f} s)"
        )

    # the judge: RoleGPT's Chinese answers against a plain model's (here: the same answers with the voice removed)
    rows, rolegpt, references = baseline_and_references(data_dir / "rolebench" / "rolebench-zh" / "role_specific")
    rows, rolegpt, references = rows[:20], rolegpt[:20], references[:20]
    plain = list(rolegpt)
    for word in VOICE:
        plain = [answer.replace(word, "我") for answer in plain]
    profiles = read_release_profiles(data_dir / "rolebench", "zh")
    descriptions = {name: profile.description_with_catchphrases() for name, profile in profiles.items()}
    print("per-sample SPE of the first 3:", [round(s, 3) for s in rouge_l_scores(rolegpt[:3], references[:3])])
    with tempfile.TemporaryDirectory() as folder, ChatCompletionsServer(style_judge) as server:
        base_url = args.base_url or (None if args.judge_model else server.base_url)
        client = OpenAIChatClient(args.judge_model or "style-judge", base_url=base_url, progress=False,
                                  cache_path=Path(folder) / "judge.sqlite")  # fmt: skip
        result = judge_win_rate(rows, rolegpt, plain, descriptions, client)
        print(f"win rate of RoleGPT vs plain answers: {result.win_rate:.2%} "
              f"(95% CI {result.ci_low:.2%}-{result.ci_high:.2%}), average rank {result.average_rank:.2f}, "
              f"{result.wins} wins / {result.ties} ties / {result.losses} losses / {result.failed} failed")  # fmt: skip
        again = judge_win_rate(rows, rolegpt, plain, descriptions, client, verbose=False)
        print(f"re-run: {again.cached} of {again.requests} judge requests answered from the cache")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=None, help="folder holding rolebench/ (default: ../shared/data)")
    parser.add_argument("--judge_model", default=None, help="a real judge model (default: the offline test judge)")
    parser.add_argument("--base_url", default=None, help="the judge's OpenAI-compatible endpoint (default: OpenAI)")
    main(parser.parse_args())
