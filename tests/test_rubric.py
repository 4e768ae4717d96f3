"""Rubric judges against the real test chat-completions server: schema checks, re-asks, failures, several judges."""

import json
import re
import sqlite3

import pytest

from rolellm.clients.base import REASK_REMINDER
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.multiturn.rubric import (
    DIMENSIONS,
    SINGLE_TURN_DIMENSIONS,
    judge_answers,
    judge_transcripts,
    parse_rubric,
)
from rolellm.roles.profile import RoleProfile
from rolellm.testing.server import ChatCompletionsServer


PROFILES = {
    "Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A witty pirate captain.", ["Savvy?"]),
    "孙悟空": RoleProfile("孙悟空", "zh", "齐天大圣，桀骜不驯。", ["俺老孙来也"]),
}


def transcript(id, role, answers, lang="en"):
    turns = [{"user": f"question {i}", "assistant": answer} for i, answer in enumerate(answers)]
    return {"id": id, "role": role, "lang": lang, "turns": turns, "scenario": {"situation": "On deck."}}


TRANSCRIPTS = [
    transcript("a", "Jack Sparrow", ["Arr.", "Savvy?"]),
    transcript("b", "Jack Sparrow", ["The rum is gone, mate, gone with the tide.", "Aye."]),
    transcript("c", "孙悟空", ["俺老孙来也！", "师父莫慌。"], lang="zh"),
]


def requested_dimensions(body) -> list[str]:
    return re.findall(r'^- "(\w+)"', body["messages"][1]["content"], re.M)


def rubric_answer(body, score) -> str:
    return json.dumps({d: {"score": score, "rationale": "because"} for d in requested_dimensions(body)})


def score_by_length(body) -> int:
    """A judge that likes long conversations: 1 to 4 by the length of the transcript it was shown."""
    conversation = body["messages"][1]["content"].split("<conversation>")[1].split("</conversation>")[0]
    return min(4, 1 + len(conversation) // 25)


def test_parse_rubric_accepts_what_judges_write_and_names_what_is_wrong():
    fenced = '```json\n{"memory": {"score": "4", "rationale": " ok "}, "extra": 1}\n```'
    assert parse_rubric(fenced, ["memory"]) == {"memory": {"score": 4, "rationale": "ok"}}
    thinking = 'I think {memory} is fine. {"memory": {"score": 2.0, "rationale": "forgets"}}'
    assert parse_rubric(thinking, ["memory"])["memory"]["score"] == 2
    with pytest.raises(ValueError, match="no JSON object with the keys"):
        parse_rubric("Great role-play, 5/5!", ["memory"])
    with pytest.raises(ValueError, match='"knowledge" is missing'):
        parse_rubric('{"memory": {"score": 3, "rationale": "r"}}', ["memory", "knowledge"])
    with pytest.raises(ValueError, match='"memory": score 0 is not an integer from 1 to 5'):
        parse_rubric('{"memory": {"score": 0, "rationale": "r"}}', ["memory"])
    with pytest.raises(ValueError, match="score True"):
        parse_rubric('{"memory": {"score": true, "rationale": "r"}}', ["memory"])


def test_two_judges_are_averaged_with_agreement_lengths_and_language():
    def responder(body):
        if body["model"] == "judge-a":
            return rubric_answer(body, score_by_length(body))
        return f"Here is my verdict:\n```json\n{rubric_answer(body, score_by_length(body) + 1)}\n```"

    with ChatCompletionsServer(responder) as server:
        judges = [OpenAIChatClient(name, base_url=server.base_url, progress=False) for name in ("judge-a", "judge-b")]
        result = judge_transcripts(TRANSCRIPTS, PROFILES, judges)
        bodies = [r["body"] for r in server.requests]
    json.dumps(result, allow_nan=False)  # JSON-safe
    assert result["judges"] == ["judge-a", "judge-b"] and result["dimensions"] == list(DIMENSIONS)
    assert len(bodies) == 6 and result["failures"] == {"count": 0, "unscored": 0, "reasons": []}
    for item in result["items"]:
        a, b = (item["judges"][name]["scores"] for name in ("judge-a", "judge-b"))
        assert item["scores"] == {d: (a[d] + b[d]) / 2 for d in DIMENSIONS}
        assert item["judges"]["judge-a"]["rationales"]["memory"] == "because"
    # the length of the role's answers is next to every score
    assert result["items"][1]["length"] == {
        "answers": 2, "chars": 46, "words": 10, "cjk_chars": 0, "chars_per_answer": 23.0}  # fmt: skip
    assert result["items"][2]["length"]["cjk_chars"] == 9 and result["items"][2]["length"]["words"] == 0
    summary = result["summary"]
    assert summary["per_dimension"]["memory"]["n"] == 3
    assert summary["per_dimension"]["memory"]["length_spearman"] is not None
    assert set(summary["per_role"]) == {"Jack Sparrow", "孙悟空"}
    assert summary["per_judge"]["judge-b"]["memory"] >= summary["per_judge"]["judge-a"]["memory"]
    # judge-b is judge-a plus one: perfectly rank-correlated, but not equal
    assert result["agreement"]["memory"]["mean_spearman"] == 1.0 and result["agreement"]["memory"]["n"] == 3
    assert -1 <= result["agreement"]["memory"]["krippendorff_alpha"] < 1  # rank-correlated, never equal
    # the Chinese role is judged with the Chinese prompt, the transcript rendered with its name
    chinese = [b for b in bodies if "孙悟空" in b["messages"][1]["content"]]
    assert chinese and all("孙悟空：俺老孙来也！" in b["messages"][1]["content"] for b in chinese)
    assert all("角色扮演评审专家" in b["messages"][0]["content"] for b in chinese)
    assert all(b["temperature"] == 0.0 for b in bodies)


def test_garbage_answers_are_reasked_then_counted_failures_never_cached(tmp_path):
    seen = {}

    def responder(body):
        if body["model"] == "stubborn":
            return "I refuse to use JSON."
        key = body["messages"][1]["content"]
        seen[key] = seen.get(key, 0) + 1
        return "5/5, great!" if seen[key] == 1 else rubric_answer(body, 3)  # garbage first, then a fitting answer

    cache = tmp_path / "cache.sqlite"
    with ChatCompletionsServer(responder) as server:
        fickle = OpenAIChatClient("fickle", base_url=server.base_url, cache_path=cache, progress=False)
        stubborn = OpenAIChatClient("stubborn", base_url=server.base_url, cache_path=cache, progress=False)
        result = judge_transcripts(TRANSCRIPTS[:2], PROFILES, [fickle, stubborn])
        reasks = [r["body"] for r in server.requests if len(r["body"]["messages"]) > 2]
        sent = len(server.requests)
        again = judge_transcripts(TRANSCRIPTS[:2], PROFILES, [fickle, stubborn])
        sent_again = len(server.requests) - sent
    # the fickle judge's garbage was asked again, with a reminder and another seed, and then fitted
    assert all(item["judges"]["fickle"]["attempts"] == 2 for item in result["items"])
    fickle_reasks = [b for b in reasks if b["model"] == "fickle"]
    assert len(fickle_reasks) == 2
    assert all(b["messages"][-1]["content"].startswith(REASK_REMINDER.split("{")[0]) for b in fickle_reasks)
    assert all(b["messages"][-2]["content"] == "5/5, great!" and b["seed"] != 0 for b in fickle_reasks)
    # the stubborn judge failed on every item: counted with reasons, the items still scored by the other judge
    assert result["failures"]["count"] == 2 and result["failures"]["unscored"] == 0
    assert {r["judge"] for r in result["failures"]["reasons"]} == {"stubborn"}
    assert all("unparseable answer after 3 attempts" in r["error"] for r in result["failures"]["reasons"])
    assert all(item["scores"]["memory"] == 3 for item in result["items"])
    assert "agreement" in result and result["agreement"]["memory"]["krippendorff_alpha"] is None
    json.dumps(result, allow_nan=False)
    # a re-run answers the fitted judge from the cache and asks the stubborn judge again: its failure was not kept
    assert sent_again == 2 * 3 and again["failures"]["count"] == 2
    with sqlite3.connect(cache) as connection:
        models = [row[0] for row in connection.execute("SELECT model FROM completions")]
    assert "stubborn" not in models and models.count("fickle") == 4  # the garbage + the fitting answer, per item


def test_transcripts_without_turns_are_counted_not_dropped():
    empty = {**transcript("x", "Jack Sparrow", []), "error": "user simulator, turn 1: HTTP 500"}
    with ChatCompletionsServer(lambda body: rubric_answer(body, 4)) as server:
        judge = OpenAIChatClient("judge", base_url=server.base_url, progress=False)
        result = judge_transcripts([TRANSCRIPTS[0], empty], PROFILES, [judge])
    assert [item["id"] for item in result["items"]] == ["a", "x"]
    assert result["items"][1]["scores"]["memory"] is None and result["failures"]["unscored"] == 1
    assert "no turns to judge (user simulator, turn 1: HTTP 500)" in result["failures"]["reasons"][0]["error"]
    assert result["summary"]["per_dimension"]["memory"]["n"] == 1


def test_single_turn_answers_skip_memory_and_check_inputs():
    rows = [{"role": "Jack Sparrow", "question": " Where is the rum?"}, {"role": "孙悟空", "question": "你是谁？"}]
    with ChatCompletionsServer(lambda body: rubric_answer(body, 2)) as server:
        judge = OpenAIChatClient("judge", base_url=server.base_url, progress=False)
        result = judge_answers(rows, ["Gone.", "俺老孙！"], PROFILES, [judge])
        with pytest.raises(ValueError, match="unknown rubric dimensions"):
            judge_answers(rows, ["a", "b"], PROFILES, [judge], dimensions=["humour"])
        with pytest.raises(ValueError, match=r"no profile for 1 role\(s\) of the transcripts: \['Po'\]"):
            judge_answers([{"role": "Po", "question": "?"}], ["a"], PROFILES, [judge])
    assert result["dimensions"] == list(SINGLE_TURN_DIMENSIONS) and "memory" not in result["items"][0]["scores"]
    assert [item["id"] for item in result["items"]] == ["0", "1"] and result["summary"]["overall"] == 2.0
    assert "agreement" not in result  # one judge
