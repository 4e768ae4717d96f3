"""The pairwise judge against any baseline: another run's answers or a model answering now; the length-controlled
win rate; what `rolellm evaluate` does when the judge is dead or talks nonsense."""

import json

import numpy as np
import pytest
from fixtures.examples import run_example

from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.judge.length_control import fit_length_logistic, length_controlled_win_rate
from rolellm.evaluation.judge.pairwise import judge_win_rate
from rolellm.scripts import cli
from rolellm.testing.server import ChatCompletionsServer


def shown_answers(body):
    line = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('[{"model"'))
    return json.loads(line)


def longer_first(body):
    """A judge that ranks the longer answer first, wherever it is shown."""
    answers = sorted(shown_answers(body), key=lambda answer: -len(answer["answer"]))
    return str([{"model": a["model"], "reason": "longer", "rank": rank} for rank, a in enumerate(answers, start=1)])


def strict_json(text):
    """JSON without NaN or Infinity: what results.json must be."""
    return json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in results.json"))


def question_of(body):
    line = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('{"question"'))
    return json.loads(line)["question"]


def test_a_judge_that_prefers_length_wins_raw_but_not_length_controlled():
    # The judge prefers the longer answer, the more surely the larger the difference: 3 of 5 times at 3 characters,
    # 4 of 5 at 10, always from 25 on, whichever side is longer. The model is longer in 4 of 5 samples.
    rows, predictions, baseline, contrary = [], [], [], set()
    for level, share in ((3, 0.6), (10, 0.8), (25, 1.0), (60, 1.0)):
        for sign, count in ((1, 20), (-1, 5)):
            for k in range(count):
                question = f"Question {len(rows)}: where is the rum?"
                rows.append({"role": "Jack Sparrow", "question": question})
                predictions.append("a" * (80 + sign * level))
                baseline.append("b" * 80)
                if k >= round(share * count):
                    contrary.add(question)

    def judge(body):
        answers = sorted(shown_answers(body), key=lambda answer: len(answer["answer"]))
        ranked = answers if question_of(body) in contrary else answers[::-1]
        return str([{"model": a["model"], "reason": "", "rank": rank} for rank, a in enumerate(ranked, start=1)])

    with ChatCompletionsServer(judge) as server:
        client = OpenAIChatClient("judge", base_url=server.base_url, progress=False)
        result = judge_win_rate(rows, predictions, baseline, {"Jack Sparrow": "A pirate."}, client, verbose=False)
    assert result.win_rate == 0.71 and (result.wins, result.losses, result.ties) == (71, 29, 0)
    assert abs(result.lc_win_rate - 0.5) < 0.05 and result.length_coefficient > 3
    assert result.lc_ci_low < 0.5 < result.lc_ci_high < result.win_rate
    assert (result.model_length, result.baseline_length) == (np.mean([len(p) for p in predictions]), 80.0)


def test_length_control_recovers_the_preference_at_equal_length():
    # verdicts drawn from P(win) = sigmoid(0.3 + 2 * tanh(diff / std)): the rate at equal length is sigmoid(0.3)
    rng = np.random.default_rng(0)
    lengths, baseline_lengths = rng.integers(10, 400, 3000), rng.integers(10, 400, 3000)
    difference = (lengths - baseline_lengths) / np.std(lengths - baseline_lengths)
    scores = (rng.random(3000) < 1 / (1 + np.exp(-(0.3 + 2 * np.tanh(difference))))).astype(float)
    result = length_controlled_win_rate(scores, lengths, baseline_lengths, num_bootstrap=200)
    assert result.ci_low < 1 / (1 + np.exp(-0.3)) < result.ci_high and abs(result.length_coefficient - 2) < 0.3


def test_a_judge_that_always_picks_the_longer_answer_leaves_length_control_undetermined():
    # verdicts that follow the length perfectly say nothing about equal lengths: the interval spans most of [0, 1]
    scores = np.array([1.0] * 16 + [0.0] * 4)
    lengths = np.array([81, 83, 90, 100] * 4 + [79, 77, 70, 60])
    result = length_controlled_win_rate(scores, lengths, np.full(20, 80))
    assert result.ci_low < 0.5 < result.ci_high and result.ci_high - result.ci_low > 0.4


def test_length_control_keeps_a_verdict_that_does_not_follow_length():
    # the model wins 3 of 4 at every length difference: length explains nothing, LC equals the raw rate
    scores = np.array([1.0, 1.0, 1.0, 0.0] * 6)
    lengths = np.repeat([10, 40, 60, 90, 120, 150], 4)
    result = length_controlled_win_rate(scores, lengths, np.full(24, 80))
    assert result.win_rate == pytest.approx(0.75, abs=1e-3) and abs(result.length_coefficient) < 1e-3
    assert fit_length_logistic(np.ones(5), np.zeros(5))[0] > 5  # all wins: finite, not NaN
    assert np.isnan(length_controlled_win_rate(np.array([]), np.array([]), np.array([])).win_rate)


def _evaluate(rolebench_slice_dir, output_dir, base_url, *extra):
    return cli.main([
        "evaluate", "--model_name_or_path", "served", "--base_url", base_url, "--dataset_name", "zh",
        "--data_dir", str(rolebench_slice_dir), "--roles", "孙悟空", "--max_samples_per_role", "2",
        "--output_dir", str(output_dir), "--max_retries", "0", *extra,
    ])  # fmt: skip


def test_judged_against_another_runs_folder_and_a_baseline_model(rolebench_slice_dir, tmp_path, capsys):
    with (
        ChatCompletionsServer(lambda body: "俺老孙来也！师父莫慌，待俺去看看那妖怪。") as model,
        ChatCompletionsServer(lambda body: "来也。") as other,
        ChatCompletionsServer(longer_first) as judge,
    ):
        assert _evaluate(rolebench_slice_dir, tmp_path / "other", other.base_url) == 0
        judge_flags = ["--judge_model", "judge", "--judge_base_url", judge.base_url]
        code = _evaluate(
            rolebench_slice_dir, tmp_path / "run", model.base_url, *judge_flags, "--baseline", str(tmp_path / "other")
        )
        assert code == 0
        printed = capsys.readouterr().out
        # the same baseline, now answered by a model during the run
        code = _evaluate(
            rolebench_slice_dir, tmp_path / "live", model.base_url, *judge_flags, "--baseline_model", "other-model",
            "--baseline_base_url", other.base_url,
        )  # fmt: skip
        assert code == 0
        assert len(other.requests) == 8  # 4 rows for the folder's run, 4 for the live baseline
    results = strict_json((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    judged = results["win_rate"]
    assert judged["baseline"] == "served" == json.loads((tmp_path / "other/results.json").read_text())["model"]
    assert (judged["wins"], judged["judged"], judged["failed"]) == (4, 4, 0) and judged["win_rate"] == 1.0
    assert judged["model_length"] == 20 and judged["baseline_length"] == 3
    assert results["metrics"]["lc_win_rate"] == judged["lc_win_rate"]
    assert "Win rate vs served: 100.00%" in printed and "length-controlled" in printed
    live = strict_json((tmp_path / "live" / "results.json").read_text(encoding="utf-8"))
    assert live["win_rate"]["baseline"] == "other-model" and live["win_rate"]["outcomes"] == ["win"] * 4
    lines = (tmp_path / "live/baseline/generations.jsonl").read_text(encoding="utf-8").splitlines()
    generated = [json.loads(line) for line in lines]
    assert [record["prediction"] for record in generated] == ["来也。"] * 4


def test_dead_judge_garbage_verdicts_and_bad_baselines(rolebench_slice_dir, tmp_path, capsys):
    dead = ChatCompletionsServer().start()
    dead_url = dead.base_url
    dead.close()

    def sometimes_garbage(body):  # never ranks the answers to questions that name the role, however often asked
        return "I cannot rank these." if "孙悟空" in question_of(body) else longer_first(body)

    with (
        ChatCompletionsServer(lambda body: "俺老孙来也！") as model,
        ChatCompletionsServer(sometimes_garbage) as judge,
    ):
        assert _evaluate(rolebench_slice_dir, tmp_path / "dead", model.base_url, "--judge_model", "j",
                         "--judge_base_url", dead_url) == 3  # fmt: skip
        assert "cannot reach" in capsys.readouterr().err  # one line, exit 3, no result that looks finished
        assert not (tmp_path / "dead/results.json").exists()

        code = _evaluate(rolebench_slice_dir, tmp_path / "garbage", model.base_url, "--judge_model", "j",
                         "--judge_base_url", judge.base_url)  # fmt: skip
        results = strict_json((tmp_path / "garbage/results.json").read_text(encoding="utf-8"))
        judged = results["win_rate"]
        assert judged["failed"] > 0 and judged["judged"] + judged["failed"] == 4
        assert (judged["judged"], judged["failed"], code) == (2, 2, 1)  # partial: exit 1 without --allow_partial
        assert judged["win_rate"] == 0.0 and judged["outcomes"].count("failed") == 2  # RoleGPT's answers are longer
        assert all(outcome in ("win", "tie", "loss", "failed") for outcome in judged["outcomes"])

        with ChatCompletionsServer(lambda body: "Both are fine.") as refusing:
            assert _evaluate(rolebench_slice_dir, tmp_path / "refused", model.base_url, "--judge_model", "j",
                             "--judge_base_url", refusing.base_url, "--allow_partial") == 3  # fmt: skip
        err = capsys.readouterr().err
        assert (
            "no sample was judged against RoleGPT" in err and "4 verdicts of j failed (e.g. unparseable answer" in err
        )
        assert not (tmp_path / "refused/results.json").exists()  # nothing that reads like a finished run
        assert (tmp_path / "refused/generations.jsonl").exists()  # the answers are kept for the re-run

        assert _evaluate(rolebench_slice_dir, tmp_path / "x", model.base_url, "--judge_model", "j", "--baseline",
                         str(tmp_path / "nowhere")) == 2  # fmt: skip
        assert "has no generations.jsonl" in capsys.readouterr().err
        assert _evaluate(rolebench_slice_dir, tmp_path / "x", model.base_url, "--baseline_model", "m") == 2
        assert "set judge_model too" in capsys.readouterr().err


@pytest.mark.slow
def test_example_judges_against_another_run(rolebench_slice_dir, tmp_path):
    stdout = run_example("judge_any_baseline.py", "--data_dir", rolebench_slice_dir, "--output_dir", tmp_path)
    judged = json.loads((tmp_path / "talkative" / "results.json").read_text(encoding="utf-8"))["win_rate"]
    assert judged["baseline"] == "terse" and judged["judged"] == 40
    assert judged["lc_win_rate"] < judged["win_rate"] and judged["model_length"] > judged["baseline_length"]
    assert f"raw win rate {judged['win_rate']:.2%}, length-controlled {judged['lc_win_rate']:.2%}" in stdout
    assert (tmp_path / "talkative" / "results.html").is_file() and (tmp_path / "talkative" / "win_rate.svg").is_file()
