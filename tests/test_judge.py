"""The GPT-judge win rate against a real chat-completions server on 127.0.0.1 that reads the prompts it is sent."""

import json

import numpy as np
import pytest
from fixtures.examples import run_example
from test_rouge import ENGLISH_SPE, release_pairs

from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.judge.pairwise import (
    NAMES,
    bootstrap_interval,
    build_judge_messages,
    judge_win_rate,
    parse_ranking,
)
from rolellm.rouge.score import rouge_l
from rolellm.testing.server import ChatCompletionsServer, Fault


DESCRIPTIONS = {"Jack Sparrow": 'A pirate captain. Your catchphrase is: "Savvy?"', "孙悟空": "齐天大圣。"}


def shown_answers(body):
    """The `[{"model": ..., "answer": ...}, ...]` line of a judge prompt, as the judge reads it."""
    line = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('[{"model"'))
    return json.loads(line)


def question_of(body):
    line = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('{"question"'))
    return json.loads(line)["question"]


def ranking(order):
    return str([{"model": name, "reason": "because", "rank": rank} for rank, name in enumerate(order, start=1)])


def content_judge(body):
    """A judge that reads the prompt: "biased" questions rank the first shown answer first; others prefer "Arr"."""
    answers = shown_answers(body)
    if "biased" in question_of(body):
        return ranking([a["model"] for a in answers])
    return ranking(sorted((a["model"] for a in answers), key=lambda name: "Arr" not in shown(answers, name)))


def shown(answers, name):
    return next(a["answer"] for a in answers if a["model"] == name)


def make_rows(kinds):
    """Rows, model answers and baseline answers: "good" (the model says Arr), "bad" (the baseline does), "biased"."""
    rows, predictions, baseline = [], [], []
    for i, kind in enumerate(kinds):
        rows.append({"role": "Jack Sparrow", "question": f"Question {i} ({kind}): where is the rum?"})
        predictions.append(f"Arr, answer {i}." if kind == "good" else f"The rum is gone ({i}).")
        baseline.append(f"Arr, baseline {i}." if kind == "bad" else f"It is gone ({i}).")
    return rows, predictions, baseline


def client_for(server, **kwargs):
    options = {"progress": False, "initial_backoff": 0.01, "max_backoff": 0.05, **kwargs}
    return OpenAIChatClient("judge-model", base_url=server.base_url, **options)


@pytest.mark.parametrize(
    "text",
    [
        '[{"model": "model_a", "reason": "x", "rank": 2}, {"model": "model_b", "reason": "y", "rank": 1}]',
        "[{'model': 'model_a', 'reason': 'x', 'rank': 2}, {'model': 'model_b', 'reason': 'y', 'rank': 1}]",
        "```python\n[{'model': 'model_b', 'rank': 1, 'reason': 'y'}, {'model': 'model_a', 'rank': 2}]\n```",
        "Here is my ranking:\n```json\n[{“model”: “model_a”, “reason”: “x”, “rank”: 2}, "
        "{“model”: “model_b”, “reason”: “y”, “rank”: 1}]\n```\nThanks.",
        "{'ranking': [{'model': 'model_a', 'rank': '2'}, {'model': 'MODEL_B', 'rank': '1'}]}",
        # an apostrophe inside a single-quoted reason breaks the literal: the fields are read block by block
        "[{'model': 'model_a', 'reason': 'it's flat', 'rank': 2}, {'model': 'model_b', 'reason': 'pirate's talk', 'rank': 1}]",
        "[{“model”：“model_a”，“reason”：“平淡”，“rank”：2}，{“model”：“model_b”，“reason”：“有“海盗”味”，“rank”：1}]",
    ],
)
def test_parse_ranking_reads_what_judges_write(text):
    assert parse_ranking(text) == {"model_a": 2, "model_b": 1}


@pytest.mark.parametrize(
    "text,message",
    [
        ("I think model_b is better.", "expected one rank"),
        ("[{'model': 'model_a', 'rank': 1}]", "expected one rank"),
        ("[{'model': 'model_a', 'rank': 'first'}, {'model': 'model_b', 'rank': 2}]", "is not a number"),
        ("[{'model': 'model_a', 'rank': 1}, {'model': 'model_c', 'rank': 2}]", "expected one rank"),
    ],
)
def test_parse_ranking_rejects_non_rankings(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ranking(text)


def test_prompt_is_the_papers_and_anonymous():
    system, user = build_judge_messages("Jack Sparrow", DESCRIPTIONS["Jack Sparrow"], "Rum?", ["Arr!", "No."])
    assert system["content"].startswith("You are a role-playing performance comparison assistant.")
    assert (
        'The role description of "Jack Sparrow" is "A pirate captain. Your catchphrase is: "Savvy?""'
        in user["content"]
    )
    assert user["content"].endswith("aligns with the intuition of most people.")
    assert [a["model"] for a in json.loads(user["content"].splitlines()[6])] == list(NAMES)
    system_zh, user_zh = build_judge_messages("孙悟空", "齐天大圣。", "你好？", ["俺老孙！", "你好。"], lang="zh")
    assert system_zh["content"].startswith("你是一个角色扮演表现比较助手")
    assert "“孙悟空”的角色描述是“齐天大圣。”" in user_zh["content"]


def test_win_rate_ties_and_average_rank(capsys):
    rows, predictions, baseline = make_rows(["good"] * 6 + ["bad"] * 2 + ["biased"] * 2)
    with ChatCompletionsServer(content_judge) as server:
        result = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server))
        bodies = [entry["body"] for entry in server.requests]
    assert "20 requests (0 already cached, 20 to send)" in capsys.readouterr().out
    assert (result.wins, result.ties, result.losses, result.failed) == (6, 2, 2, 0)
    assert result.outcomes == ["win"] * 6 + ["loss"] * 2 + ["tie"] * 2
    assert result.win_rate == 0.7
    # ranks: good 1+1 (x6), bad 2+2 (x2), biased 1+2 (x2): 26 over 20 judged orders
    assert result.average_rank == 1.3
    assert result.ci_low < 0.7 < result.ci_high
    assert (result.ci_low, result.ci_high) == bootstrap_interval(np.array([1.0] * 6 + [0.0] * 2 + [0.5] * 2))
    # both orders of every sample, greedy, and only position names in the prompt
    assert len(bodies) == 20 and all(body["temperature"] == 0.0 for body in bodies)
    shown_first = {(question_of(b), shown_answers(b)[0]["answer"]) for b in bodies}
    assert (rows[0]["question"], predictions[0]) in shown_first and (rows[0]["question"], baseline[0]) in shown_first
    assert {a["model"] for b in bodies for a in shown_answers(b)} == set(NAMES)


def test_one_order_only_keeps_the_position_bias():
    rows, predictions, baseline = make_rows(["biased"] * 3)
    with ChatCompletionsServer(content_judge) as server:
        result = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server), both_orders=False)
        assert len(server.requests) == 3
    assert result.outcomes == ["win"] * 3 and result.win_rate == 1.0 and result.average_rank == 1.0


def test_faults_are_retried_and_garbled_rankings_reasked():
    rows, predictions, baseline = make_rows(["good", "bad", "good"])
    asked = {}

    def flaky_judge(body):
        key = (question_of(body), shown_answers(body)[0]["answer"])
        asked[key] = asked.get(key, 0) + 1
        if key == (rows[1]["question"], baseline[1]) and asked[key] == 1:
            return "Both answers are fine, I would not rank them."  # not a ranking: asked again
        return content_judge(body)

    with ChatCompletionsServer(flaky_judge) as server:
        server.add_faults(Fault("rate_limit"), Fault("server_error"), Fault("garbled"), Fault("slow", delay=2.0))
        client = client_for(server, timeout=1.0, max_concurrency=1)
        result = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client, verbose=False)
    assert result.outcomes == ["win", "loss", "win"] and result.failed == 0
    # one retry per fault (more only if this machine is so loaded that an ordinary answer takes over a second)
    assert client.usage.retries >= 4 and client.usage.reasks == 1
    assert [entry["status"] for entry in server.requests[:3]] == [429, 500, 200]
    assert asked[rows[1]["question"], baseline[1]] >= 2  # 3 when the slow fault (answered late) fell on it


def test_unparseable_answers_are_counted_failed():
    rows, predictions, baseline = make_rows(["good", "good", "bad"])

    def stubborn_judge(body):
        return "I refuse to rank." if question_of(body) == rows[1]["question"] else content_judge(body)

    with ChatCompletionsServer(stubborn_judge) as server:
        client = client_for(server, max_parse_attempts=3)
        result = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client, verbose=False)
        stubborn = [e for e in server.requests if question_of(e["body"]) == rows[1]["question"]]
    assert result.outcomes == ["win", "failed", "loss"]
    assert (result.failed, result.win_rate) == (1, 0.5)
    assert "unparseable answer after 3 attempts" in result.errors[1]
    assert len(stubborn) == 6  # both orders, three attempts each


def test_rerun_sends_only_what_was_not_answered(tmp_path):
    rows, predictions, baseline = make_rows(["good", "bad", "biased", "good"])
    down = {"on": True}

    def judge_with_outage(body):  # the endpoint fails every request about question 2 during the first run
        if down["on"] and question_of(body) == rows[2]["question"]:
            return Fault("server_error", status=503)
        return content_judge(body)

    cache = tmp_path / "judge.sqlite"
    with ChatCompletionsServer(judge_with_outage) as server:
        first = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server, cache_path=cache, max_retries=1), verbose=False)  # fmt: skip
        assert first.outcomes == ["win", "loss", "failed", "win"]
        answered_before = server.answered_counts()
        down["on"] = False
        second = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server, cache_path=cache), verbose=False)  # fmt: skip
        answered = server.answered_counts()
        third = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server, cache_path=cache), verbose=False)  # fmt: skip
        assert server.answered_counts() == answered
    assert second.outcomes == ["win", "loss", "tie", "win"] and (second.requests, second.cached) == (8, 6)
    assert sum(answered.values()) - sum(answered_before.values()) == 2 and max(answered.values()) == 1
    assert third.outcomes == second.outcomes and (third.requests, third.cached) == (8, 8)


def test_a_failed_verdict_is_not_cached_and_a_reask_names_the_problem(tmp_path):
    rows, predictions, baseline = make_rows(["good", "bad"])
    healthy = {"on": False}

    def judge(body):
        return content_judge(body) if healthy["on"] else "I refuse to rank."

    cache = tmp_path / "judge.sqlite"
    with ChatCompletionsServer(judge) as server:
        first = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server, cache_path=cache), verbose=False)  # fmt: skip
        reasks = [entry["body"] for entry in server.requests if len(entry["body"]["messages"]) > 2]
        healthy["on"] = True
        second = judge_win_rate(rows, predictions, baseline, DESCRIPTIONS, client_for(server, cache_path=cache), verbose=False)  # fmt: skip
    assert first.outcomes == ["failed", "failed"] and (first.judged, first.failed) == (0, 2)
    assert first.to_dict()["win_rate"] is None and first.to_dict()["judged"] == 0
    json.dumps(first.to_dict(), allow_nan=False)  # valid JSON: no NaN
    assert len(reasks) == 2 * 2 * 2  # two samples, both orders, two re-asks each
    assert reasks[0]["messages"][-2] == {"role": "assistant", "content": "I refuse to rank."}
    assert "expected one rank for each of" in reasks[0]["messages"][-1]["content"]
    # the healthy judge is asked again: nothing of the failed run was kept as a verdict
    assert second.outcomes == ["win", "loss"] and (second.judged, second.failed) == (2, 0)
    assert (second.requests, second.cached) == (4, 0) and second.to_dict()["win_rate"] == 0.5


def test_chinese_rows_get_the_chinese_prompt():
    rows = [{"role": "孙悟空", "question": "大圣，你去哪里？"}]
    with ChatCompletionsServer(lambda body: ranking(list(NAMES))) as server:
        result = judge_win_rate(rows, ["俺老孙去也！"], ["我走了。"], DESCRIPTIONS, client_for(server), verbose=False)
        system = server.requests[0]["body"]["messages"][0]["content"]
    assert system.startswith("你是一个角色扮演表现比较助手") and result.outcomes == ["tie"]


def test_bad_inputs_are_named():
    rows, predictions, baseline = make_rows(["good"])
    with pytest.raises(ValueError, match="1 rows, 1 predictions and 0 baseline"):
        judge_win_rate(rows, predictions, [], DESCRIPTIONS, client=None)
    with pytest.raises(ValueError, match=r"No description for roles \['Jack Sparrow'\]"):
        judge_win_rate(rows, predictions, baseline, {}, client=None)


@pytest.mark.slow
def test_example_reproduces_spe_and_judges(rolebench_dir):
    stdout = run_example("rouge_and_judge.py", "--data_dir", rolebench_dir.parent)
    # the paper's 0.3229 and 0.2478 on the full release (`test_full_release.py`)
    english = rouge_l(*release_pairs(rolebench_dir, ENGLISH_SPE))
    chinese = rouge_l(*release_pairs(rolebench_dir, "rolebench-zh/role_specific"))
    assert f"English SPE (Table 3): ROUGE-L recall {english:.4f}" in stdout
    assert f"Chinese SPE (Table 4): ROUGE-L recall {chinese:.4f}" in stdout
    assert "re-run: 40 of 40 judge requests answered from the cache" in stdout


@pytest.mark.parametrize("ranks", [(1, 3), (0, 1), (1.5, 2), (True, 2), ("2", "9")])
def test_a_ranking_outside_one_and_two_is_not_a_verdict(ranks):
    text = str([{"model": "model_a", "rank": ranks[0]}, {"model": "model_b", "rank": ranks[1]}])
    with pytest.raises(ValueError):
        parse_ranking(text)


def test_whole_ranks_in_any_spelling_are_read():
    assert parse_ranking("[{'model': 'model_a', 'rank': 2.0}, {'model': 'model_b', 'rank': '1'}]") == {
        "model_a": 2,
        "model_b": 1,
    }
