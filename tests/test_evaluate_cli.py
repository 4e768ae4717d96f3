"""`rolellm evaluate` on the command line and from a YAML recipe."""

import json

import pytest

from rolellm.clients.config import ClientConfig
from rolellm.evaluation.benchmark.runner import BenchmarkConfig, run_benchmark
from rolellm.scripts import cli


def test_recipe_and_flags_give_the_api_result(rolebench_slice_dir, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"model_name_or_path: rolegpt\ndataset_name: zh-role_specific\ndata_dir: {rolebench_slice_dir}\n"
        f"output_dir: {tmp_path / 'cli'}\nroles: [张飞]\n",
        encoding="utf-8",
    )
    # a flag overrides the recipe
    assert cli.main(["evaluate", "--config", str(recipe), "--roles", "李白", "华妃"]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "cli" / "results.json").read_text(encoding="utf-8"))
    assert saved["config"]["roles"] == ["李白", "华妃"] and set(saved["per_role"]) == {"李白", "华妃"}
    api = run_benchmark(
        BenchmarkConfig(
            client=ClientConfig("rolegpt"), dataset_name="zh-role_specific", data_dir=str(rolebench_slice_dir),
            roles=["李白", "华妃"], output_dir=str(tmp_path / "api"),
        )
    )  # fmt: skip
    released = (rolebench_slice_dir / "rolebench-zh" / "role_specific" / "test.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in released.splitlines()]
    chosen = sum(row["role"] in ("李白", "华妃") for row in rows)
    assert saved["metrics"] == api.metrics and saved["counts"]["role_specific"] == chosen
    assert f"| RoleGPT | – | n/a | n/a | {api.metrics['SPE']:.4f} |" in printed
    assert "RAW: unavailable (no general rows in this config)" in printed


def test_bad_input_is_refused(tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("model_name_or_path: rolegpt\noutput_dir: out\nmodel_path: typo\n", encoding="utf-8")
    assert cli.main(["evaluate", "--config", str(recipe)]) == 2
    assert "recipe.yaml: unknown keys ['model_path']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["evaluate", "--model_name_or_path", "m", "--output_dir", "o", "--mode", "one-shot"])
    assert "invalid choice: 'one-shot'" in capsys.readouterr().err
    assert (
        cli.main(["evaluate", "--model_name_or_path", "rolegpt", "--output_dir", "o", "--base_url", "http://x/v1"])
        == 2
    )
    assert "drop base_url" in capsys.readouterr().err
    recipe.write_text("model_name_or_path: m\nmodel: n\noutput_dir: out\n", encoding="utf-8")
    assert cli.main(["evaluate", "--config", str(recipe)]) == 2  # one field under its two names
    assert "recipe.yaml: model and model_name_or_path are the same field: keep one" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag, content, message",
    [
        ("--compare_with", "{not json", "other.json:1: not valid JSON"),
        ("--compare_with", "[1, 2]", "not the results.json of a rolellm evaluate run"),
        ("--raw_targets_file", None, "does not exist"),
        ("--model_card", "---\nmodel-index: [\n---\n", "its YAML header cannot be read"),
    ],
)
def test_a_bad_side_file_stops_the_run_before_anything_is_sent(
    flag, content, message, rolebench_slice_dir, tmp_path, capsys
):
    """The files a run reads besides the data (other runs' results, the RAW targets, the model card) are read first:
    a bad one is exit 2 naming it, and the model is asked nothing."""
    from rolellm.testing.server import ChatCompletionsServer

    side = tmp_path / {"--compare_with": "other.json", "--raw_targets_file": "raw.jsonl"}.get(flag, "README.md")
    if content is not None:
        side.write_text(content, encoding="utf-8")
    with ChatCompletionsServer() as server:
        code = cli.main([
            "evaluate", "--model", "test-model", "--base_url", server.base_url, "--dataset_name", "zh-role_specific",
            "--data_dir", str(rolebench_slice_dir), "--roles", "李白", "--output_dir", str(tmp_path / "out"),
            flag, str(side),
        ])  # fmt: skip
        assert code == 2 and server.requests == []
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("rolellm evaluate")]  # besides datasets' progress
    assert len(said) == 1 and message in said[0] and side.name in said[0] and "Traceback" not in err
    assert not (tmp_path / "out" / "results.json").exists()


def folder_bytes(folder):
    """Every file under `folder` by its relative path, with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_refused_resume_leaves_the_folder_as_it_was(rolebench_slice_dir, tmp_path, capsys):
    """A run whose settings differ from those of the generations in output_dir (or in its baseline/) is refused with
    exit 2, before anything in the folder is written or removed: the earlier run's results, answers, run_config.json
    and caches stay byte for byte."""
    import gc

    from rolellm.testing.server import ChatCompletionsServer

    def answer(body):  # the judge ranks the answers as shown; the models answer
        shown = next(
            (line for line in body["messages"][-1]["content"].splitlines() if line.startswith('[{"model"')), ""
        )
        return (
            str([{"model": a["model"], "reason": "", "rank": r} for r, a in enumerate(json.loads(shown), 1)])
            if shown
            else "诗酒趁年华。"
        )

    out = tmp_path / "out"
    with ChatCompletionsServer(answer) as server:

        def evaluate(*extra):
            return cli.main([
                "evaluate", "--model", "m", "--base_url", server.base_url, "--dataset_name", "zh-role_specific",
                "--data_dir", str(rolebench_slice_dir), "--roles", "李白", "--max_samples_per_role", "2",
                "--output_dir", str(out), "--judge_model", "j", "--baseline_model", "b1", *extra,
            ])  # fmt: skip

        assert evaluate() == 0
        gc.collect()  # the first run's cache connections closed, as when its process ends
        before = folder_bytes(out)
        assert {"results.json", "results.md", "run_config.json", "generations.jsonl", "baseline/run_config.json",
                "baseline/generations.jsonl", "judge_cache.sqlite"} <= set(before)  # fmt: skip
        asked = len(server.requests)
        capsys.readouterr()
        for extra, changed in [
            (["--max_new_tokens", "77"], "max_new_tokens: 256 there, 77 now"),
            (["--mode", "no-system"], "mode: 'system' there, 'no-system' now"),
            (["--baseline_model", "b2"], "model_name_or_path: 'b1' there, 'b2' now"),
        ]:
            assert evaluate(*extra) == 2
            err = capsys.readouterr().err
            assert "holds generations of another run" in err and changed in err and "Traceback" not in err, err
            assert folder_bytes(out) == before
        # the same settings, but the saved answers are of other rows (the data changed): refused the same way
        log = out / "generations.jsonl"
        log.write_bytes(log.read_bytes().replace(b'"question": "', b'"question": "x', 1))
        before = folder_bytes(out)
        assert evaluate() == 2
        assert "generations.jsonl:1: row 0 is not the row this run selects" in capsys.readouterr().err
        assert folder_bytes(out) == before
        assert len(server.requests) == asked


def test_a_role_without_a_profile_stops_the_run_before_anything_is_removed_or_asked(
    rolebench_slice_dir, tmp_path, capsys
):
    """The profiles are read, and checked against the rows, before an earlier run's results are removed and before
    any endpoint is asked (the endpoint here is dead)."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(rolebench_slice_dir / "rolebench-zh", data / "rolebench-zh")  # rows, but no profiles-zh/
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.json").write_text('{"model": "an earlier run"}\n', encoding="utf-8")
    code = cli.main(
        ["evaluate", "--model", "m", "--base_url", "http://127.0.0.1:9/v1", "--dataset_name", "zh-role_specific",
         "--data_dir", str(data), "--max_samples_per_role", "1", "--output_dir", str(out)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no profile for 5 role(s) of the evaluation rows: ['华妃', '孙悟空'" in err and "Traceback" not in err
    assert "profiles-zh/desc.json" in err
    assert folder_bytes(out) == {"results.json": b'{"model": "an earlier run"}\n'}
