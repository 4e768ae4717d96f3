"""The benchmark runner end to end on real RoleBench files: RoleGPT's answers, a tiny local model, a local endpoint."""

import json
import os

import pytest
import rouge
from test_rouge import ENGLISH_SPE, release_pairs

from rolellm.clients.config import ClientConfig
from rolellm.evaluation.benchmark.runner import BenchmarkConfig, run_benchmark
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import write_release_profiles
from rolellm.rouge.score import rouge_l
from rolellm.testing.server import ChatCompletionsServer


def _paper_rouge_l(prediction: str, references: list[str], lang: str) -> float:
    """The paper's metric with the `rouge` package itself: recall, best reference, Chinese split into characters."""
    if lang == "zh":
        prediction, references = " ".join(prediction), [" ".join(r) for r in references]
    return max(rouge.Rouge(metrics=["rouge-l"]).get_scores(prediction, r)[0]["rouge-l"]["r"] for r in references)


def _released(path):
    with open(path, encoding="utf-8") as file:
        return [json.loads(line) for line in file]


def _type_counts(rows):
    counts = {}
    for row in rows:
        kind = row["type"][0] if len(set(row["type"])) == 1 else "mixed"
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def test_rolegpt_baseline_scores_as_the_release_files(rolebench_slice_dir, tmp_path):
    """`test_full_release.py` checks the paper's figures on the full release; here the same run on the slice, with
    expectations from its files."""
    english = run_benchmark(
        BenchmarkConfig(
            client=ClientConfig("rolegpt"),
            dataset_name="en-instruction-role_specific",
            data_dir=str(rolebench_slice_dir),
            output_dir=str(tmp_path / "en"),
        )
    )
    chinese = run_benchmark(
        BenchmarkConfig(
            client=ClientConfig("rolegpt"),
            dataset_name="zh",
            data_dir=str(rolebench_slice_dir),
            output_dir=str(tmp_path / "zh"),
        )
    )
    english_rows = _released(rolebench_slice_dir / f"{ENGLISH_SPE}/test.jsonl")
    specific_rows = _released(rolebench_slice_dir / "rolebench-zh/role_specific/test.jsonl")
    general_rows = _released(rolebench_slice_dir / "rolebench-zh/general/test.jsonl")
    assert english.metrics["SPE"] == pytest.approx(
        rouge_l(*release_pairs(rolebench_slice_dir, ENGLISH_SPE)), abs=1e-12
    )
    spe = rouge_l(*release_pairs(rolebench_slice_dir, "rolebench-zh/role_specific"))
    assert chinese.metrics["SPE"] == pytest.approx(spe, abs=1e-12)  # the paper's 0.2478: `test_full_release.py`
    assert chinese.metrics["CUS"] == pytest.approx(
        rouge_l(*release_pairs(rolebench_slice_dir, "rolebench-zh/general"))
    )
    assert english.counts == {
        "rows": len(english_rows),
        "general": 0,
        "role_specific": len(english_rows),
        "RAW": 0,
        "RAW_missing": 0,
        "failed": 0,
    }
    assert english.metrics["CUS"] is None and "no general rows" in english.unavailable["CUS"]
    assert {k: v["n"] for k, v in english.per_type.items()} == _type_counts(english_rows)
    assert len(english.per_role) == len({row["role"] for row in english_rows})
    assert {k: v["n"] for k, v in chinese.per_type.items()} == _type_counts(specific_rows)
    assert chinese.counts["general"] == len(general_rows) and chinese.counts["role_specific"] == len(specific_rows)
    assert chinese.metrics["RAW"] is None and "instructions-general.jsonl not found" in chinese.unavailable["RAW"]
    assert chinese.metrics["avg"] == pytest.approx((chinese.metrics["CUS"] + chinese.metrics["SPE"]) / 2)
    assert chinese.avg_over == ["CUS", "SPE"]

    # CUS of one role checked against the `rouge` package on the released files
    folder = rolebench_slice_dir / "rolebench-zh/general"
    answers = {
        r["question"]: r["generated"][0] for r in _released(folder / "rolegpt_baseline.jsonl") if r["role"] == "李白"
    }
    tests = [r for r in general_rows if r["role"] == "李白"]
    expected = sum(_paper_rouge_l(answers[r["question"]], r["generated"], "zh") for r in tests) / len(tests)
    assert chinese.per_role["李白"]["CUS"] == pytest.approx(expected, abs=1e-12)
    assert chinese.per_role["李白"]["n_CUS"] == len(tests) > 0

    table = (tmp_path / "zh" / "results.md").read_text(encoding="utf-8")
    cus, spe, avg = (f"{chinese.metrics[m]:.4f}" for m in ("CUS", "SPE", "avg"))
    assert f"| RoleGPT | – | {cus} | n/a | {spe} | {avg}* | n/a |" in table
    assert "### Chinese (paper Table 4)" in table and "| script_based | " in table


@pytest.fixture(scope="module")
def english_data_dir(rolebench_slice_dir, tmp_path_factory):
    """The English test files beside a `profiles-eng/` folder for two of their roles (absent from the data here)."""
    folder = tmp_path_factory.mktemp("release")
    os.symlink(rolebench_slice_dir / "rolebench-eng", folder / "rolebench-eng")
    profiles = {
        "Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A witty, eccentric pirate captain.", ["Savvy?"]),
        "Sheldon Cooper": RoleProfile(
            "Sheldon Cooper", "en", "A brilliant, socially awkward physicist.", ["Bazinga!"]
        ),
    }
    write_release_profiles(profiles, folder)
    return folder


def _first_reference_responder(rows_by_prompt):
    def respond(body):
        system = body["messages"][0]["content"]
        question = body["messages"][-1]["content"]
        return next(answer for (role, q), answer in rows_by_prompt.items() if q == question and role in system)

    return respond


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_run_on_endpoint_scores_and_resumes(lang, rolebench_slice_dir, english_data_dir, tmp_path):
    if lang == "zh":
        data_dir, name, roles = rolebench_slice_dir, "zh", ["李白", "华妃"]
        released = _released(rolebench_slice_dir / "rolebench-zh/general/test.jsonl")
        released += _released(rolebench_slice_dir / "rolebench-zh/role_specific/test.jsonl")
    else:
        data_dir, name, roles = english_data_dir, "en-instruction-role_specific", ["Jack Sparrow", "Sheldon Cooper"]
        released = _released(rolebench_slice_dir / "rolebench-eng/instruction-generalization/role_specific/test.jsonl")
    # the endpoint answers every question with its first released reference, so CUS = SPE = 1 exactly
    answers = {(r["role"], r["question"].strip()): r["generated"][0] for r in released if r["role"] in roles}
    raw_file = tmp_path / "instructions-general.jsonl"
    general = [r for r in released if "type" not in r and r["role"] in roles]
    targets = {r["question"].strip(): f"Target {i}: {r['generated'][-1][:40]}" for i, r in enumerate(general[:2])}
    raw_file.write_text("".join(json.dumps({"instruction": q, "target": t}) + "\n" for q, t in targets.items()))

    with ChatCompletionsServer(_first_reference_responder(answers)) as server:
        config = BenchmarkConfig(
            client=ClientConfig("served-model", base_url=server.base_url),
            dataset_name=name,
            data_dir=str(data_dir),
            roles=roles,
            max_samples_per_role=3,
            raw_targets_file=str(raw_file) if lang == "zh" else None,
            output_dir=str(tmp_path / "run"),
        )
        results = run_benchmark(config)
        sent = len(server.requests)
        assert run_benchmark(config).metrics == results.metrics
        assert len(server.requests) == sent  # the second run re-sends nothing
    n_specific = 6
    assert sent == (12 if lang == "zh" else n_specific)
    assert results.counts["role_specific"] == n_specific and results.counts["failed"] == 0
    assert results.metrics["SPE"] == 1.0
    if lang == "zh":
        assert results.metrics["CUS"] == 1.0
        # RAW: the two questions with a target, scored against it with the `rouge` package
        records = _released(tmp_path / "run/generations.jsonl")
        predictions = {(r["role"], r["question"]): r["prediction"] for r in records}
        scored = [(p, targets[q.strip()]) for (role, q), p in predictions.items() if q.strip() in targets]
        assert results.counts["RAW"] == len(scored) and results.counts["RAW_missing"] == 6 - len(scored)
        expected = sum(_paper_rouge_l(p, [t], "zh") for p, t in scored) / len(scored)
        assert results.metrics["RAW"] == pytest.approx(expected, abs=1e-12)
        assert results.avg_over == ["CUS", "RAW", "SPE"]
    else:
        assert results.unavailable["CUS"] == "no general rows in this config"
    assert set(results.per_role) == set(roles)
    saved = json.loads((tmp_path / "run/results.json").read_text(encoding="utf-8"))
    assert saved["metrics"] == results.metrics and saved["model"] == "served-model" and saved["mode"] == "system"


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["zh", "en"])
def test_run_with_tiny_local_model(lang, rolebench_slice_dir, english_data_dir, tiny_model_path, tmp_path):
    data_dir, name = (
        (rolebench_slice_dir, "zh") if lang == "zh" else (english_data_dir, "en-instruction-role_specific")
    )
    roles = ["张飞"] if lang == "zh" else ["Jack Sparrow"]
    config = BenchmarkConfig(
        client=ClientConfig(str(tiny_model_path), chat_template="chatml", max_new_tokens=12, batch_size=4),
        dataset_name=name, data_dir=str(data_dir), roles=roles, max_samples_per_role=2, mode="no-system",
        output_dir=str(tmp_path / "run"),
    )  # fmt: skip
    results = run_benchmark(config)
    records = _released(tmp_path / "run/generations.jsonl")
    assert len(records) == results.counts["rows"] == (4 if lang == "zh" else 2)
    # what was generated is what was scored: SPE recomputed from the saved answers with the `rouge` package
    released = {r["question"]: r["generated"] for r in _released(
        rolebench_slice_dir / ("rolebench-zh/role_specific/test.jsonl" if lang == "zh"
                         else "rolebench-eng/instruction-generalization/role_specific/test.jsonl"))}  # fmt: skip
    specific = [r for r in records if r["subset"] == "role_specific"]
    expected = [_paper_rouge_l(r["prediction"], released[r["question"]], lang) if r["prediction"].strip(". ") else 0.0
                for r in specific]  # fmt: skip
    assert results.metrics["SPE"] == pytest.approx(sum(expected) / len(expected), abs=1e-12)
    assert results.model_label == tiny_model_path.name and results.mode == "no-system"


def test_win_rate_against_rolegpt_with_a_judge_endpoint(rolebench_slice_dir, tmp_path):
    marker = "俺老孙来也"

    def judge(body):  # ranks first whichever answer carries the marker, in either position
        shown = body["messages"][-1]["content"]
        first_is_model = shown.index(marker) < shown.index("model_b") if marker in shown else False
        ranks = (1, 2) if first_is_model else (2, 1)
        return str(
            [
                {"model": "model_a", "reason": "", "rank": ranks[0]},
                {"model": "model_b", "reason": "", "rank": ranks[1]},
            ]
        )

    with ChatCompletionsServer(lambda body: marker + "！") as model, ChatCompletionsServer(judge) as judge_server:
        config = BenchmarkConfig(
            client=ClientConfig("served-model", base_url=model.base_url), dataset_name="zh",
            data_dir=str(rolebench_slice_dir), roles=["孙悟空"], max_samples_per_role=2,
            judge=ClientConfig("judge", base_url=judge_server.base_url),
            output_dir=str(tmp_path),
        )  # fmt: skip
        results = run_benchmark(config)
        assert len(judge_server.requests) == 8  # 4 rows, both orders
        again = run_benchmark(config)
        assert len(judge_server.requests) == 8 and again.win_rate["cached"] == 8
        assert again.win_rate["outcomes"] == results.win_rate["outcomes"] == ["win"] * 4
    judged = results.win_rate
    assert (judged["wins"], judged["ties"], judged["losses"], judged["failed"]) == (4, 0, 0, 0)
    assert results.metrics["win_rate"] == judged["win_rate"] == 1.0 and judged["average_rank"] == 1.0
    assert "win_rate" not in results.unavailable
    assert "| served-model | system | " in (tmp_path / "results.md").read_text(encoding="utf-8")
    assert (tmp_path / "results.md").read_text(encoding="utf-8").split("\n")[4].endswith("| 100.00 |")
    with pytest.raises(ValueError, match="drop judge_model"):
        BenchmarkConfig(client=ClientConfig("rolegpt"), output_dir="o", judge=ClientConfig("judge", backend="openai"))
