"""Multi-turn role-play evaluation, offline: a simulated user talks with a role model, two rubric judges score it.

Everything runs on this machine: the evaluated model is a tiny random Llama built in a temporary folder (its
answers are gibberish; point `model_client` at your checkpoint, `LocalChatClient("./rolellama")`, or at an endpoint,
`OpenAIChatClient("my-model", base_url=...)`), and a local chat-completions test server plays the user simulator and
two judges (replace them with `OpenAIChatClient("gpt-4o-mini", base_url=...)` and friends). Then the judges' scores
are checked against the example human labels with `rolellm judge agreement`, which writes the report of the folder
(`report.html` with radar charts per role, `transcripts.html`).

Run: `python examples/multi_turn_eval.py [--output_dir runs/multi-turn]` (about half a minute on a CPU).
"""

import argparse
import json
import re
import tempfile
from pathlib import Path

from rolellm import RoleProfile
from rolellm.clients.local import LocalChatClient
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.multiturn.dialogue import read_scenarios, run_dialogues
from rolellm.evaluation.multiturn.rubric import judge_transcripts
from rolellm.scripts import dialogue as dialogue_script
from rolellm.scripts import judge as judge_script
from rolellm.testing.models import build_tiny_llama
from rolellm.testing.server import ChatCompletionsServer


HERE = Path(__file__).parent
PROFILES = {
    "Jack Sparrow": RoleProfile(
        "Jack Sparrow", "en", "The witty, unpredictable captain of the Black Pearl.", ["Savvy?"]
    ),
    "Sherlock Holmes": RoleProfile("Sherlock Holmes", "en", "A brilliant, aloof consulting detective in London."),
    "孙悟空": RoleProfile("孙悟空", "zh", "齐天大圣，神通广大，桀骜不驯，保护唐僧西天取经。", ["俺老孙来也"]),
}


def offline_models(body):
    """The test server's answers: a user simulator that stays in its persona, and judges that score by length."""
    if body["model"] == "user-simulator":
        persona = re.search(r"(?:Who you are|你的身份)[:：] ?(.*)", body["messages"][0]["content"]).group(1)
        turn = sum(m["role"] == "assistant" for m in body["messages"]) + 1
        return f"({persona}) And then, question {turn}?"
    prompt = body["messages"][1]["content"]
    dimensions = re.findall(r'^- "(\w+)"', prompt, re.M)
    replies = len(prompt.split("<conversation>")[1])
    score = 1 + (replies // 40) % 4 + (body["model"] == "generous-judge")
    return json.dumps({d: {"score": score, "rationale": "Scored by the offline judge."} for d in dimensions})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=None, help="Where transcripts and scores go (default: a temp folder).")
    args = parser.parse_args()
    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix="multi-turn-"))
    scenarios = read_scenarios(HERE / "data" / "scenarios.yaml")
    model_path = build_tiny_llama(tempfile.mkdtemp(prefix="tiny-llama-"))
    model_client = LocalChatClient(model_path, max_new_tokens=24, chat_template="chatml", progress=False)

    with ChatCompletionsServer(offline_models) as server:
        user_client = OpenAIChatClient("user-simulator", base_url=server.base_url, progress=False)
        judges = [OpenAIChatClient(name, base_url=server.base_url, progress=False)
                  for name in ("strict-judge", "generous-judge")]  # fmt: skip
        # every turn is appended to output_dir/turns.jsonl as it is played: run again after a crash to go on
        transcripts = run_dialogues(scenarios, PROFILES, model_client, user_client, output_dir, max_tokens=24)
        scores = judge_transcripts(transcripts, PROFILES, judges)

    first = transcripts[0]
    print(f"{len(transcripts)} conversations, e.g. {first['id']} ({first['role']}):")
    for turn in first["turns"]:
        print(f"  user: {turn['user']}\n  role: {turn['assistant']!r}")
    (output_dir / "scores.json").write_text(json.dumps(scores, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(dialogue_script.format_scores(scores))

    print("\nAgreement of the averaged judges with the example human labels:")
    human = str(HERE / "data" / "human_labels.jsonl")
    judge_parser = judge_script.make_parser()
    judge_script.main(judge_parser.parse_args(["agreement", "--human", human, "--results", str(output_dir)]))


if __name__ == "__main__":
    main()
