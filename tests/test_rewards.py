"""rolellm.rewards: each reward's scores, its failure paths (None counted, failure share, missing profiles), and the
maths of per-role normalisation; the rewards in a real GRPO run are in tests/test_grpo.py."""

import asyncio
import json
import logging

import numpy as np
import pytest

from rolellm.clients.config import ClientConfig
from rolellm.evaluation.multiturn.rubric import SINGLE_TURN_DIMENSIONS
from rolellm.rewards.combine import per_role_normalized, reward_settings
from rolellm.rewards.judge import JudgeFailureError, RubricJudgeReward
from rolellm.rewards.reference import reference_rouge_l
from rolellm.rewards.style import CatchphraseReward, LanguageReward, LengthPenalty
from rolellm.roles.profile import RoleProfile
from rolellm.testing.server import ChatCompletionsServer, Fault


PROFILES = {
    "Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A witty pirate captain.", ["Savvy?", "Why is the rum gone"]),
    "孙悟空": RoleProfile("孙悟空", "zh", "齐天大圣。", ["俺老孙来也"]),
    "Po": RoleProfile("Po", "en", "A kung fu panda."),  # no catchphrase
}
PROMPT = [{"role": "system", "content": "Be the role."}, {"role": "user", "content": "Where is the rum?"}]


def conversational(text):
    return [{"role": "assistant", "content": text}]


def test_reference_rouge_l_exact_copy_scores_one_plain_and_conversational():
    references = [[" The sea is a cruel mistress. ", "Savvy?"], ["俺老孙来也！"], ["Arr."]]
    plain = reference_rouge_l([PROMPT] * 3, [" The sea is a cruel mistress. ", "俺老孙来也！", "Arr."], references)
    chats = reference_rouge_l(
        [PROMPT] * 3, [conversational(t) for t in ("Savvy?", "俺老孙来也！", "Arr.")], references
    )
    assert plain == [1.0, 1.0, 1.0] and chats == [1.0, 1.0, 1.0]
    # the benchmark's own numbers: 4 of 5 characters, half of the English words
    assert reference_rouge_l([PROMPT] * 2, ["俺老孙去也", "The sea."], [["俺老孙来也"], ["The sea is cruel."]]) == [
        0.8,
        0.5,
    ]


def test_reference_rouge_l_counts_rows_without_references_and_scores_empty_answers_zero(caplog):
    with caplog.at_level(logging.WARNING):
        rewards = reference_rouge_l([PROMPT] * 4, ["Arr.", "", "x", "y"], [["Arr."], ["Arr."], [], None])
    assert rewards == [1.0, 0.0, None, None]
    assert "2 of 4 rows have no reference answer" in caplog.text
    assert "1 of 2 predictions are empty" in caplog.text
    with pytest.raises(ValueError, match="needs a 'references' column"):
        reference_rouge_l([PROMPT], ["Arr."])


def test_style_rewards_read_the_profile():
    roles = ["Jack Sparrow", "Jack Sparrow", "孙悟空", "孙悟空", "Po"]
    texts = [
        "Rum, SAVVY ?".replace(" ?", "?"),
        "Where is the ship?",
        "俺老孙来也！妖怪休走",
        "Arr, matey.",
        "Skadoosh!",
    ]
    assert CatchphraseReward(PROFILES)([PROMPT] * 5, texts, role=roles) == [1.0, 0.0, 1.0, 0.0, None]
    assert LanguageReward(PROFILES)([PROMPT] * 5, texts, role=roles) == [1.0, 1.0, 1.0, 0.0, 1.0]
    # the row's `lang` column wins over the profile's language; an empty answer is in no language
    assert LanguageReward(PROFILES)([PROMPT] * 2, ["Arr.", ""], role=["孙悟空", "Po"], lang=["en", "en"]) == [1.0, 0.0]
    penalty = LengthPenalty(max_length=4)
    assert penalty(
        [PROMPT] * 4, ["one two three four", "one two three four five six", "一二三四五六七八九十", ""]
    ) == [
        0.0,
        -0.5,
        -1.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="positive number"):
        LengthPenalty(0)


def test_rows_whose_roles_have_no_profile_are_an_error_naming_them():
    for reward in (CatchphraseReward(PROFILES), LanguageReward(PROFILES)):
        with pytest.raises(ValueError, match=r"no profile for 1 role\(s\) of the rows scored by \w+: \['Shifu'\]"):
            reward([PROMPT], ["Inner peace."], role=["Shifu"])
        with pytest.raises(ValueError, match="'role' column"):
            reward([PROMPT], ["Inner peace."])


def test_multi_turn_transcripts_score_the_role_lines_only():
    transcript = [{"turns": [{"user": "Savvy?", "assistant": "Arr."}, {"user": "?", "assistant": "Aye."}]}]
    assert CatchphraseReward(PROFILES)(
        [PROMPT], ["Savvy? Arr. Aye."], role=["Jack Sparrow"], transcript=transcript
    ) == [0.0]
    assert reference_rouge_l([PROMPT], ["x"], references=[["Arr.\nAye."]], transcript=transcript) == [1.0]


def rubric_answer(score):
    return json.dumps({d: {"score": score, "rationale": "Fine."} for d in SINGLE_TURN_DIMENSIONS})


def test_rubric_judge_scores_caches_and_counts_failed_verdicts(tmp_path):
    def respond(body):
        conversation = body["messages"][1]["content"]  # re-asks add turns after it
        if "Jack Sparrow: GARBAGE" in conversation:
            return "I refuse to give a score."
        return rubric_answer(5 if "Jack Sparrow: Savvy?" in conversation else 2)

    with ChatCompletionsServer(respond) as server:
        config = ClientConfig("judge", base_url=server.base_url, cache_path=str(tmp_path / "judge.sqlite"),
                              max_retries=0, progress=False)  # fmt: skip
        reward = RubricJudgeReward(config, PROFILES, max_failure_share=0.5)
        completions = [conversational("Savvy?"), conversational("Arr."), conversational("GARBAGE"), ""]
        rewards = asyncio.run(reward([PROMPT] * 4, completions, role=["Jack Sparrow"] * 4))
        assert rewards == [1.0, 0.25, None, 0.25]  # (5 - 1) / 4, (2 - 1) / 4; an empty answer is judged too
        assert (reward.failures, reward.asked) == (1, 4)
        asked = len(server.requests)
        # the answers are cached: asking again sends only the failed verdict again (re-asks included)
        again = asyncio.run(reward([PROMPT] * 4, completions, role=["Jack Sparrow"] * 4))
        assert again == rewards and len(server.requests) - asked == asked - 3
        assert (reward.failures, reward.asked) == (2, 8)


def test_rubric_judge_stops_the_run_when_too_many_verdicts_fail():
    with ChatCompletionsServer(lambda body: "no scores") as server:
        reward = RubricJudgeReward(ClientConfig("judge", base_url=server.base_url, max_retries=0, progress=False),
                                   PROFILES, max_failure_share=0.2)  # fmt: skip
        with pytest.raises(JudgeFailureError, match=r"2 of 2 verdicts of this batch failed .* max_failure_share=0.2"):
            asyncio.run(reward([PROMPT] * 2, ["Arr.", "Aye."], role=["Jack Sparrow"] * 2))


def test_rubric_judge_that_dies_mid_run_stops_the_run():
    calls = {"n": 0}

    def respond(body):
        calls["n"] += 1
        return rubric_answer(4) if calls["n"] <= 2 else Fault("server_error", status=503)

    with ChatCompletionsServer(respond) as server:
        config = ClientConfig("judge", base_url=server.base_url, max_retries=0, timeout=5, progress=False)
        reward = RubricJudgeReward(config, PROFILES, max_failure_share=0.4)
        assert asyncio.run(reward([PROMPT] * 2, ["Arr.", "Aye."], role=["Jack Sparrow"] * 2)) == [0.75, 0.75]
        with pytest.raises(JudgeFailureError, match="judge: 2 of 2 verdicts of this batch failed"):
            asyncio.run(reward([PROMPT] * 2, ["Yo.", "Ho."], role=["Jack Sparrow"] * 2))
    with pytest.raises(ValueError, match="max_failure_share"):
        RubricJudgeReward(config, PROFILES, max_failure_share=1.0)


def test_per_role_normalisation_is_a_running_z_score_per_role():
    batches = [[1.0, 2.0, None, 10.0], [3.0, 4.0, 20.0, 30.0]]
    roles = ["Po", "Po", "Po", "Shifu"]
    feed = iter(batches)
    normalized = per_role_normalized(lambda prompts, completions, **kwargs: next(feed))
    assert normalized.__name__ == "<lambda>_per_role"
    out = [normalized([PROMPT] * 4, ["c"] * 4, role=roles) for _ in batches]
    seen = {"Po": [], "Shifu": []}
    for batch, result in zip(batches, out):
        for role, r in zip(roles, batch):
            if r is not None:
                seen[role].append(r)
        for role, r, z in zip(roles, batch, result):
            if r is None:
                assert z is None
            else:
                expected = (r - np.mean(seen[role])) / (np.std(seen[role]) + 1e-4)
                assert z == pytest.approx(expected, abs=1e-9)
    assert out[0][3] == 0.0  # one reward of a role: no spread, no signal

    async def judge(prompts, completions, **kwargs):
        return [1.0, 3.0]

    wrapped = per_role_normalized(judge)
    assert asyncio.run(wrapped([PROMPT] * 2, ["a", "b"], role=["Po", "Po"])) == pytest.approx(
        [-1 / 1.0001, 1 / 1.0001]
    )
    with pytest.raises(ValueError, match="'role' column"):
        asyncio.run(wrapped([PROMPT] * 2, ["a", "b"]))


def test_reward_settings_give_grpo_config_fields():
    from trl import GRPOConfig

    funcs, settings = reward_settings([(reference_rouge_l, 2), (LengthPenalty(10), 0.5)], "normalize_then_sum")
    config = GRPOConfig("out", use_cpu=True, bf16=False, **settings)
    assert funcs[0] is reference_rouge_l
    assert config.reward_weights == [2.0, 0.5] and config.multi_objective_aggregation == "normalize_then_sum"
    with pytest.raises(ValueError, match="not one of"):
        reward_settings([(reference_rouge_l, 1.0)], "average")
    with pytest.raises(ValueError, match="finite number"):
        reward_settings([(reference_rouge_l, float("nan"))])


def test_rubric_judge_reads_a_rollouts_whole_conversation():
    from rolellm.evaluation.multiturn.rubric import DIMENSIONS

    asked = []

    def respond(body):
        asked.append(body["messages"][1]["content"])
        return json.dumps({d: {"score": 5, "rationale": "Good."} for d in DIMENSIONS})

    transcript = [{"turns": [{"user": "Rum?", "assistant": "Gone."}, {"user": "Why?", "assistant": "Savvy?"}]}]
    with ChatCompletionsServer(respond) as server:
        reward = RubricJudgeReward(ClientConfig("judge", base_url=server.base_url, progress=False), PROFILES)
        assert asyncio.run(reward([PROMPT], ["x"], role=["Jack Sparrow"], transcript=transcript)) == [1.0]
    assert "User: Rum?\nJack Sparrow: Gone.\nUser: Why?\nJack Sparrow: Savvy?" in asked[0] and '"memory"' in asked[0]
