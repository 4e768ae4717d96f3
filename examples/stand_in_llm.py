"""An offline stand-in for the LLM endpoint of `rolellm generate`: a real chat-completions server, canned answers.

It answers the three generators' prompts (in English and Chinese) with well-formed answers built from the prompt
itself, so `rolellm generate describe|context-instruct|rolegpt` run end to end without a key or a network:

- `describe` gets `{"description": ..., "catchphrases": [...]}`, the catchphrase taken from the role's own lines;
- `context-instruct` gets a JSON array of items (questions naming the role, both types, high confidence);
- the paper's pairwise judge (`rolellm generate preferences`, `rolellm evaluate --judge_model`) gets a ranking that
  puts first the answer with more real words (a run of letters, three or more), so fluent text beats token soup;
- the rubric judge (`rolellm evaluate --rubric rubric`, `rolellm dialogue`) gets, on every dimension asked, the score
  `1 + real words // 4` of the role's lines (at most 5), so it too tells fluent text from token soup;
- anything else (a RoleGPT request: the role's system text, then a question) gets a short in-role answer that
  differs per question and per sample seed.

The answers are placeholders, not a model: use the stand-in to try the pipeline and in tests, and a real endpoint
(`--base_url http://localhost:8000/v1 --model ...` for vLLM, or OpenAI) for data worth training on.

    python examples/stand_in_llm.py --url_file /tmp/llm-url  # serves until interrupted; the URL is also printed
    rolellm generate rolegpt --base_url "$(cat /tmp/llm-url)" --model stand-in ...

>>> stand_in = StandInLLM()
>>> body = {"messages": [{"role": "system", "content": "You are Juniper, your description is: ..."},
...                      {"role": "user", "content": "Describe your favourite place."}], "seed": 0}
>>> stand_in(body)
'Hm. Your favourite place? Ask me again tomorrow and I will tell you the same, only louder.'
"""

import argparse
import json
import re
import signal
import threading
import zlib
from pathlib import Path

from rolellm.testing.server import ChatCompletionsServer


_CJK = re.compile(r"[\u3400-\u9fff]")
_ROLE = [re.compile(r'character "([^"\n]+)"'), re.compile(r"角色“([^”\n]+)”")]  # as the two prompts name the role
_QUESTION = re.compile(r"^(?:Question: |问题：)<(.+?)>[.。]")
_CLAUSE = re.compile(r"[^.!?。！？]+[.!?。！？]?")
TOPICS = {  # (question to the role, what the answer is about)
    "en": [
        ("what is your work like on an ordinary day", "My work"),
        ("who do you trust most, and why", "Trust"),
        ("what was the hardest day you remember", "The hardest day"),
        ("what are you afraid of", "Fear"),
        ("where do you feel at home", "Home"),
        ("what do you make of the weather today", "The weather"),
    ],
    "zh": [
        ("你平常一天都做些什么", "我的差事"),
        ("你最信任谁，为什么", "信任"),
        ("你记得最难熬的一天是哪天", "最难熬的一天"),
        ("你害怕什么", "害怕的事"),
        ("你觉得哪里才是家", "家"),
        ("你怎么看今天的天气", "天气"),
    ],
}
OPENERS = {
    "en": ["Hm.", "Well now.", "Listen.", "Ha!"],
    "zh": ["嗯。", "这个嘛，", "听好了，", "哈！"],
}
CLOSERS = {
    "en": [
        "Up where the wind decides things, and I write down what it decided.",
        "Keep your eyes open and your boots dry; the rest sorts itself out.",
        "Ask me again tomorrow and I will tell you the same, only louder.",
        "Nobody taught me that. The sky did, one bad day at a time.",
    ],
    "zh": [
        "风说了算，我只管把它说的记下来。",
        "眼睛放亮，脚下站稳，其余的自会分晓。",
        "你明天再问，我还是这么说，只是嗓门更大。",
        "没人教过我，是老天一回回教会的。",
    ],
}


def _lang(text: str) -> str:
    letters = [c for c in text if c.isalpha()]
    return "zh" if letters and sum(bool(_CJK.match(c)) for c in letters) * 10 >= len(letters) else "en"


def _first(patterns: list[re.Pattern], text: str, default: str) -> str:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return match[1].strip()
    return default


def _pick(options: list[str], *keys) -> str:
    return options[zlib.crc32("|".join(map(str, keys)).encode()) % len(options)]


class StandInLLM:
    """The responder of the stand-in server: `body` (a chat-completions request) -> the assistant's text."""

    def __call__(self, body: dict) -> str:
        messages = body["messages"]
        prompt = messages[-1]["content"]
        if "Script segment:" in prompt or "剧本片段：" in prompt:
            return self.context_instruct(prompt)
        if '"catchphrases"' in prompt:
            return self.describe(prompt)
        if "The respective answers from the models to this question are:" in prompt:
            return self.judge(prompt)
        if len(messages) > 1 and "<conversation>" in messages[1]["content"]:  # a re-ask adds turns after the first
            return self.rubric(messages[1]["content"])
        return self.answer(messages, body.get("seed", 0))

    def describe(self, prompt: str) -> str:
        """A description and one catchphrase: the first clause of the role's first line in the dialogue shown."""
        lang, role = _lang(prompt), _first(_ROLE, prompt, "the character")
        own = [line.split(":", 1)[1].strip() for line in prompt.splitlines() if line.startswith(f"{role}:")]
        clause = _CLAUSE.match(own[0]) if own else None
        catchphrases = [clause[0].strip()] if clause and clause[0].strip() else []
        description = (
            f"{role}说话直率，脾气倔强，心地善良，对自己的手艺一丝不苟。"
            if lang == "zh"
            else f"{role} is blunt, stubborn and kind, precise about their craft and careless about everything else."
        )
        return json.dumps({"description": description, "catchphrases": catchphrases}, ensure_ascii=False)

    def judge(self, prompt: str) -> str:
        """The paper's ranking format: the answer with more words of three letters or more ranks first."""
        shown = json.loads(prompt.split("this question are:\n")[1].split("\nNow,")[0])
        words = [len(re.findall(r"[A-Za-z]{3,}|[\u3400-\u9fff]", item["answer"])) for item in shown]
        best = max(range(len(shown)), key=lambda i: (words[i], -i))
        return json.dumps([{"model": item["model"], "reason": "more real words" if i == best else "fewer real words",
                            "rank": 1 if i == best else 2} for i, item in enumerate(shown)])  # fmt: skip

    def rubric(self, prompt: str) -> str:
        """The rubric's JSON form: every dimension asked gets `1 + real words // 4` of the role's lines, at most 5."""
        role = _first([re.compile(r'The model plays "([^"\n]+)"'), re.compile(r"模型扮演的是“([^”\n]+)”")], prompt, "")
        conversation = prompt.split("<conversation>")[1].split("</conversation>")[0].strip("\n")
        lines, speaker = [], None
        for line in conversation.splitlines():  # an answer may run over several lines
            label = re.match(r"^(User|用户|.+?)(?:: |：)", line)
            if label and label[1] in ("User", "用户", role):
                speaker, line = label[1], line[label.end() :]
            if speaker == role:
                lines.append(line)
        words = len(re.findall(r"[A-Za-z]{3,}|[\u3400-\u9fff]", " ".join(lines)))
        score = min(5, 1 + words // 4)
        form = prompt.rsplit("\n", 1)[-1]  # the JSON form asked for, one key per dimension
        dimensions = re.findall(r'"([a-z_]+)": \{"score"', form)
        return json.dumps({d: {"score": score, "rationale": f"{words} real words."} for d in dimensions})

    def context_instruct(self, prompt: str) -> str:
        """`num_questions` items (one per topic, then the topics again, numbered), both types, naming the role."""
        lang, role = _lang(prompt), _first(_ROLE, prompt, "friend")
        match = re.search(r"(?:Write |设计)(\d+)", prompt)
        count = int(match[1]) if match else 5
        items = []
        for i in range(count):
            asked, subject = TOPICS[lang][i % len(TOPICS[lang])]
            again = "" if i < len(TOPICS[lang]) else (f"（{i + 1}）" if lang == "zh" else f" ({i + 1})")
            if lang == "zh":
                question, answer = f"{role}，{asked}？{again}", f"说起{subject}，{_pick(CLOSERS['zh'], asked)}"
            else:
                question, answer = f"{role}, {asked}?{again}", f"{subject}? {_pick(CLOSERS['en'], asked)}"
            items.append({
                "question": question, "type": "script_based" if i % 2 else "script_agnostic",
                "completeness": "High", "confidence": 0.9, "answer": answer,
            })  # fmt: skip
        return json.dumps(items, ensure_ascii=False)

    def answer(self, messages: list[dict], seed: int) -> str:
        """A short answer in the role's voice that echoes the question's subject (differs per question and seed)."""
        question = messages[-1]["content"].strip().splitlines()[-1]
        quoted = _QUESTION.match(question)  # the wording with a reference answer: `Question: <...>. Reference ...`
        question = quoted[1] if quoted else question
        lang = _lang(question)
        subject = question.rstrip("?？.。!！").split("。")[-1]
        subject = re.sub(r"^(?:Describe|Explain|What is|What would you do if|How do you|Give|Write|Tell me)\s*", "",
                         subject, flags=re.IGNORECASE)  # fmt: skip
        subject = subject[:1].upper() + subject[1:60] if lang == "en" else subject[:30]
        opener, closer = _pick(OPENERS[lang], question, seed), _pick(CLOSERS[lang], question)
        return f"{opener}{subject}？{closer}" if lang == "zh" else f"{opener} {subject}? {closer}"


def main(argv=None):
    parser = argparse.ArgumentParser(description="Serve the offline stand-in LLM on 127.0.0.1 until interrupted.")
    parser.add_argument("--url_file", help="write the server's base URL (http://127.0.0.1:PORT/v1) to this file")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with ChatCompletionsServer(StandInLLM()) as server:
        if args.url_file:
            Path(args.url_file).write_text(server.base_url + "\n", encoding="utf-8")
        print(f"stand-in LLM serving at {server.base_url}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
