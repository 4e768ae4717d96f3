"""`rolellm evaluate --rubric`: the judge scores every answer on the rubric of `rolellm dialogue`, against the real
chat-completions test server playing the evaluated model and the judge, on the RoleBench slice's Chinese files."""

import json

import pytest
from huggingface_hub import ModelCard

from rolellm.clients.base import EndpointError
from rolellm.clients.config import ClientConfig
from rolellm.evaluation.benchmark.runner import BenchmarkConfig, run_benchmark
from rolellm.evaluation.benchmark.scorers import NothingEvaluated
from rolellm.evaluation.multiturn.rubric import SINGLE_TURN_DIMENSIONS
from rolellm.scripts import cli
from rolellm.testing.server import ChatCompletionsServer, Fault


ROLE = "孙悟空"
# what the scripted judge gives an answer carrying each mark; a GARBAGE answer gets no JSON, however often it asks
VERDICTS = {
    "GOOD": {"character_consistency": 5, "knowledge": 4, "speaking_style": 5, "engagement": 3, "in_character": 4},
    "FAIR": {"character_consistency": 2, "knowledge": 3, "speaking_style": 2, "engagement": 2, "in_character": 1},
}


def released(folder, subset):
    path = folder / "rolebench-zh" / subset / "test.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def model_responder(data_dir, garbage_question=None):
    """The evaluated model: GOOD answers to general questions, FAIR to role-specific ones, a GARBAGE-marked answer
    to `garbage_question`."""
    marks = {r["question"].strip(): "GOOD" for r in released(data_dir, "general") if r["role"] == ROLE}
    marks.update({r["question"].strip(): "FAIR" for r in released(data_dir, "role_specific") if r["role"] == ROLE})
    if garbage_question is not None:
        marks[garbage_question] = "GARBAGE"

    def respond(body):
        return f"俺老孙{marks[body['messages'][-1]['content'].strip()]}答来！"

    return respond


def judge(body):
    """Scores by the mark in the role's answer (a re-ask repeats the request with the rejected answer and a reminder)."""
    shown = body["messages"][1]["content"]
    assert "<conversation>" in shown, "the judge got something other than a rubric request"
    conversation = shown.split("<conversation>")[1].split("</conversation>")[0]
    mark = next(mark for mark in ("GOOD", "FAIR", "GARBAGE") if mark in conversation)
    if mark == "GARBAGE":
        return "这个回答我打不了分。"
    return json.dumps({d: {"score": s, "rationale": f"{mark} answer."} for d, s in VERDICTS[mark].items()})


def mean(values):
    return sum(values) / len(values)


def expected_means(marks: list[str]) -> dict:
    """The rubric means the scripted verdicts imply for answers with these marks (GARBAGE left out)."""
    scored = [VERDICTS[mark] for mark in marks if mark != "GARBAGE"]
    per_dimension = {d: mean([verdict[d] for verdict in scored]) for d in SINGLE_TURN_DIMENSIONS}
    return {"per_dimension": per_dimension, "overall": mean(list(per_dimension.values())), "n": len(scored)}


def config_for(tmp_path, data_dir, model_url, judge_url, **options) -> BenchmarkConfig:
    return BenchmarkConfig(
        client=ClientConfig("served-model", base_url=model_url, progress=False), dataset_name="zh",
        data_dir=str(data_dir), roles=[ROLE], max_samples_per_role=2, output_dir=str(tmp_path / "run"),
        judge=ClientConfig("judge", base_url=judge_url, progress=False, max_retries=0), rubric="rubric",
        **{"baseline": "none", **options},
    )  # fmt: skip


def test_the_rubric_means_are_those_of_the_judges_verdicts_and_a_garbage_verdict_is_counted(
    rolebench_slice_dir, tmp_path
):
    role_specific = [
        r["question"].strip() for r in released(rolebench_slice_dir, "role_specific") if r["role"] == ROLE
    ]
    with (
        ChatCompletionsServer(model_responder(rolebench_slice_dir, garbage_question=role_specific[0])) as model,
        ChatCompletionsServer(judge) as judge_server,
    ):
        config = config_for(tmp_path, rolebench_slice_dir, model.base_url, judge_server.base_url)
        results = run_benchmark(config)
        asked_model, asked_judge = len(model.requests), len(judge_server.requests)
        again = run_benchmark(config)  # a restart: only the verdict that never parsed is asked again
        resent = judge_server.requests[asked_judge:]
        assert len(model.requests) == asked_model
    assert resent and all("GARBAGE" in json.dumps(r["body"], ensure_ascii=False) for r in resent)
    assert again.rubric == results.rubric

    records = [json.loads(line) for line in (tmp_path / "run" / "generations.jsonl").read_text("utf-8").splitlines()]
    marks = {record["index"]: record["prediction"][3:-3] for record in records}
    subsets = {record["index"]: record["subset"] for record in records}
    assert sorted(marks.values()) == ["FAIR", "GARBAGE", "GOOD", "GOOD"]  # 2 general rows, 2 role-specific rows
    rubric = results.rubric
    expected = expected_means(list(marks.values()))
    assert rubric["per_dimension"] == pytest.approx(expected["per_dimension"], abs=1e-4)
    assert rubric["overall"] == pytest.approx(expected["overall"], abs=1e-4) == results.metrics["rubric"]
    for subset in ("general", "role_specific"):
        mine = expected_means([mark for i, mark in marks.items() if subsets[i] == subset])
        assert rubric["per_subset"][subset]["per_dimension"] == pytest.approx(mine["per_dimension"], abs=1e-4)
        assert rubric["per_subset"][subset]["overall"] == pytest.approx(mine["overall"], abs=1e-4)
        assert rubric["per_subset"][subset]["n"] == mine["n"]
    # the garbage verdict: counted with its row and reason, not in the means, and the run is partial
    garbage = next(i for i, mark in marks.items() if mark == "GARBAGE")
    assert (rubric["asked"], rubric["n"], rubric["failed"], rubric["unscored"]) == (4, 3, 1, 1)
    assert rubric["errors"][0]["id"] == str(garbage) and "no JSON object" in rubric["errors"][0]["error"]
    assert results.metrics["CUS"] is not None and "rubric" not in results.unavailable
    assert results.unavailable["win_rate"] == "not requested (baseline none)"
    # each answer's verdict in scores.json (what `rolellm judge agreement` reads), the table in results.md
    scores = json.loads((tmp_path / "run" / "scores.json").read_text("utf-8"))
    assert [item["id"] for item in scores["items"]] == [str(i) for i in range(4)]
    assert scores["items"][garbage]["scores"] == dict.fromkeys(SINGLE_TURN_DIMENSIONS)
    report = (tmp_path / "run" / "results.md").read_text("utf-8")
    overall = f"{expected['overall']:.2f}"
    assert "### Rubric scores" in report and f"| served-model | zh | judge | **overall** | {overall} |" in report
    assert "3 of 4 answers scored, 1 verdicts failed" in report


def test_a_judge_answering_only_errors_leaves_no_results(rolebench_slice_dir, tmp_path):
    """Every rubric verdict failed: an error, and no results.json (nor the one of an earlier run in the folder)."""
    error = Fault("server_error", status=500, message="judge overloaded")
    with (
        ChatCompletionsServer(model_responder(rolebench_slice_dir)) as model,
        ChatCompletionsServer(lambda body: error) as judge_server,
    ):
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "results.json").write_text("{}", encoding="utf-8")  # an earlier run's
        with pytest.raises(NothingEvaluated, match="all 4 rubric verdicts of judge failed .*judge overloaded"):
            run_benchmark(config_for(tmp_path, rolebench_slice_dir, model.base_url, judge_server.base_url))
        assert judge_server.requests
    assert not (tmp_path / "run" / "results.json").exists() and not (tmp_path / "run" / "scores.json").exists()
    assert len((tmp_path / "run" / "generations.jsonl").read_text("utf-8").splitlines()) == 4  # answers kept


def cli_args(tmp_path, data_dir, model_url, judge_url) -> list[str]:
    return [
        "evaluate", "--model_name_or_path", "served-model", "--base_url", model_url, "--dataset_name", "zh",
        "--data_dir", str(data_dir), "--roles", ROLE, "--max_samples_per_role", "1", "--output_dir",
        str(tmp_path / "cli"), "--judge_model", "judge", "--judge_base_url", judge_url, "--rubric", "rubric",
        "--baseline", "none", "--max_retries", "0", "--progress", "false",
    ]  # fmt: skip


def test_the_command_line_hands_the_rubric_and_the_judge_over(rolebench_slice_dir, tmp_path, capsys):
    with (
        ChatCompletionsServer(model_responder(rolebench_slice_dir)) as model,
        ChatCompletionsServer(judge) as judge_server,
    ):
        judge_url = judge_server.base_url
        card = tmp_path / "card" / "README.md"
        assert (
            cli.main([*cli_args(tmp_path, rolebench_slice_dir, model.base_url, judge_url), "--model_card", str(card)])
            == 0
        )
        assert {r["body"]["model"] for r in judge_server.requests} == {"judge"}
        assert {r["body"]["model"] for r in model.requests} == {"served-model"}
        assert {r["body"]["max_tokens"] for r in judge_server.requests} == {1024}  # the rubric's budget
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "cli" / "results.json").read_text("utf-8"))
    assert saved["config"]["rubric"] == "rubric" and saved["config"]["judge"]["base_url"] == judge_url
    expected = expected_means(["GOOD", "FAIR"])  # one general row, one role-specific row
    assert saved["metrics"]["rubric"] == pytest.approx(expected["overall"], abs=1e-4)
    assert f"Rubric (1-5, judge judge): overall all {saved['rubric']['overall']}; general 4.2; role_specific " in (
        printed
    )
    assert "2 of 2 answers scored, 0 verdicts failed" in printed
    # the model card's model-index gets the rubric's overall mean beside ROUGE-L
    entries = {e.metric_name: e for e in ModelCard.load(card).data.eval_results}
    rubric_entry = entries["Rubric score (1-5, judge judge) [system]"]
    assert rubric_entry.metric_type == "rubric" and rubric_entry.metric_value == round(saved["metrics"]["rubric"], 4)
    assert "SPE (ROUGE-L recall) [system]" in entries


def test_a_dead_judge_is_a_clear_error_before_anything_is_generated(rolebench_slice_dir, tmp_path, capsys):
    with ChatCompletionsServer(lambda body: "unused") as gone:
        dead_url = gone.base_url
    with ChatCompletionsServer(model_responder(rolebench_slice_dir)) as model:
        (tmp_path / "cli").mkdir()
        (tmp_path / "cli" / "results.json").write_text("{}", encoding="utf-8")  # an earlier run's
        assert cli.main(cli_args(tmp_path, rolebench_slice_dir, model.base_url, dead_url)) == 3
        assert model.requests == []
    err = capsys.readouterr().err
    assert f"cannot reach {dead_url}" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert not (tmp_path / "cli" / "results.json").exists()


def test_a_garbage_verdict_makes_the_command_exit_1_unless_a_partial_run_is_accepted(rolebench_slice_dir, tmp_path):
    first = next(r["question"].strip() for r in released(rolebench_slice_dir, "general") if r["role"] == ROLE)
    with (
        ChatCompletionsServer(model_responder(rolebench_slice_dir, garbage_question=first)) as model,
        ChatCompletionsServer(judge) as judge_server,
    ):
        args = cli_args(tmp_path, rolebench_slice_dir, model.base_url, judge_server.base_url)
        assert cli.main(args) == 1
        saved = json.loads((tmp_path / "cli" / "results.json").read_text("utf-8"))
        assert (saved["rubric"]["failed"], saved["rubric"]["n"]) == (1, 1)
        assert cli.main([*args, "--allow_partial"]) == 0


def test_the_rubric_needs_a_judge_and_a_judge_needs_something_to_judge():
    with pytest.raises(ValueError, match="rubric='rubric' is scored by the judge: set judge_model too"):
        BenchmarkConfig(client=ClientConfig("m"), output_dir="o", rubric="rubric")
    with pytest.raises(ValueError, match="baseline='none' leaves the judge nothing to do"):
        BenchmarkConfig(client=ClientConfig("m"), output_dir="o", judge=ClientConfig("j"), baseline="none")
    with pytest.raises(ValueError, match="or baseline_model, not both"):
        BenchmarkConfig(
            client=ClientConfig("m"), output_dir="o", judge=ClientConfig("j"), baseline="none",
            baseline_client=ClientConfig("b"), rubric="rubric",
        )  # fmt: skip


def test_the_win_rate_and_the_rubric_share_one_judge_checked_before_anyone_answers(rolebench_slice_dir, tmp_path):
    """One judge serves both judged scorers: one pre-flight check, one cache; a baseline model answers after that
    check and before the model; a dead judge stops the run before the baseline or the model is asked anything."""
    answered = []  # which server answered, in order

    def ranking_or_rubric(body):
        if "<conversation>" in body["messages"][1]["content"]:
            return judge(body)
        answered.append("judge")
        shown = next(line for line in body["messages"][1]["content"].splitlines() if line.startswith('[{"model"'))
        ranked = sorted(json.loads(shown), key=lambda answer: -len(answer["answer"]))
        return str([{"model": a["model"], "reason": "longer", "rank": i} for i, a in enumerate(ranked, start=1)])

    def answering(name, respond):
        def answer(body):
            answered.append(name)
            return respond(body)

        return answer

    with (
        ChatCompletionsServer(answering("model", model_responder(rolebench_slice_dir))) as model,
        ChatCompletionsServer(answering("baseline", lambda body: "来也。")) as baseline,
        ChatCompletionsServer(ranking_or_rubric) as judge_server,
    ):
        baseline_client = ClientConfig("baseline-model", base_url=baseline.base_url, progress=False)
        dead = ChatCompletionsServer().start()
        dead_url = dead.base_url
        dead.close()
        with pytest.raises(EndpointError, match="cannot reach"):
            run_benchmark(
                config_for(tmp_path / "dead", rolebench_slice_dir, model.base_url, dead_url,
                           baseline_client=baseline_client, baseline="rolegpt")
            )  # fmt: skip
        assert answered == [] and not (tmp_path / "dead" / "run" / "results.json").exists()

        config = config_for(
            tmp_path, rolebench_slice_dir, model.base_url, judge_server.base_url, baseline_client=baseline_client,
            baseline="rolegpt",
        )  # fmt: skip
        results = run_benchmark(config)
        assert len(judge_server.model_listings) == 1  # one pre-flight for the two judged scorers
    assert answered == ["baseline"] * 4 + ["model"] * 4 + ["judge"] * 8  # both orders of 4 rows judged
    assert results.win_rate["baseline"] == "baseline-model" and results.win_rate["judged"] == 4
    assert results.metrics["win_rate"] == 1.0 and results.rubric["asked"] == 4
    assert "win_rate" not in results.unavailable and "rubric" not in results.unavailable
