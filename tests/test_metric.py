"""The RoleBench ROUGE-L `evaluate` module: loaded by path, imported as a class, its card's examples, its Space."""

import doctest
import json

import evaluate
import pytest
import yaml

from rolellm.metrics.rolebench_rouge.rolebench_rouge import RolebenchRouge
from rolellm.rouge.score import rouge_l, rouge_l_scores
from rolellm.scripts import cli
from rolellm.scripts.push_metric import METRICS_DIR


METRIC_DIR = METRICS_DIR / "rolebench_rouge"


def english_spe_pairs(rolebench_dir):
    """RoleGPT's baseline answers with the test references of the same (role, question)."""
    folder = rolebench_dir / "rolebench-eng" / "instruction-generalization" / "role_specific"
    read = lambda name: [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines()]  # noqa: E731
    baseline = {(row["role"], row["question"]): row["generated"][0] for row in read("rolegpt_baseline.jsonl")}
    tests = read("test.jsonl")
    return [baseline[row["role"], row["question"]] for row in tests], [row["generated"] for row in tests]


@pytest.fixture(scope="module")
def metric():
    return evaluate.load(str(METRIC_DIR))


def test_loaded_and_imported_module_score_the_release_as_rouge_l(metric, rolebench_dir):
    """On the full release this is the paper's English SPE, 0.3229 (`test_full_release.py`)."""
    predictions, references = english_spe_pairs(rolebench_dir)
    loaded = metric.compute(predictions=predictions, references=references)["rougeL"]
    imported = RolebenchRouge().compute(predictions=predictions, references=references)["rougeL"]
    assert loaded == imported == rouge_l(predictions, references)


def test_single_and_multi_reference_inputs(metric):
    single = metric.compute(predictions=["a b c", "俺老孙来也"], references=["a b", "俺老孙去也"])
    multi = metric.compute(predictions=["a b c", "俺老孙来也"], references=[["x", "a b"], ["俺老孙去也"]])
    assert single == multi == {"rougeL": (1.0 + 0.8) / 2}
    per_sample = metric.compute(predictions=["a b c", "z"], references=[["a b"], ["y"]], use_aggregator=False)
    assert per_sample == {"rougeL": [1.0, 0.0]}


def test_keyword_arguments_reach_rouge_l(metric):
    predictions, references = ["Hello, World!", "the cat"], [["hello world"], ["the cat and the dog"]]
    for kwargs in ({"measure": "precision"}, {"measure": "f"}, {"tokenizer": "rouge_score"}, {"lang": "en"}):
        scores = metric.compute(predictions=predictions, references=references, use_aggregator=False, **kwargs)
        assert scores["rougeL"] == rouge_l_scores(predictions, references, **kwargs)
    with pytest.raises(ValueError, match="measure='bleu'"):
        metric.compute(predictions=["a"], references=["a"], measure="bleu")


def test_a_failed_compute_leaves_no_cache_file_locked(tmp_path):
    """evaluate unlocks its cache file only when the score is computed: after a bad argument the file stayed locked,
    and each later `compute` in the process waited a second for it before taking another file."""
    from filelock import FileLock

    metric = evaluate.load(str(METRIC_DIR), cache_dir=str(tmp_path), experiment_id="failing")
    with pytest.raises(ValueError, match="no reference"):
        metric.compute(predictions=["a"], references=[[]])
    [lock_path] = tmp_path.rglob("failing-1-0.arrow.lock")
    FileLock(lock_path).acquire(timeout=0)  # raises filelock.Timeout while the failed call holds it
    assert not list(tmp_path.rglob("failing-*.arrow"))
    assert metric.compute(predictions=["a b"], references=["a b c"]) == {"rougeL": 2 / 3}


def test_metric_card_examples_run():
    results = doctest.testfile(str(METRIC_DIR / "README.md"), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert results.attempted == 5 and results.failed == 0


def test_push_metric_builds_a_loadable_space(tmp_path, capsys):
    requirement = "git+https://github.com/example/rolellm"
    assert cli.main(["push-metric", "--output_dir", str(tmp_path), "--requirement", requirement]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "app.py", "requirements.txt", "rolebench_rouge.py"]  # fmt: skip
    front_matter = yaml.safe_load((tmp_path / "README.md").read_text(encoding="utf-8").split("---")[1])
    assert front_matter["sdk"] == "gradio" and front_matter["app_file"] == "app.py"
    assert {"evaluate", "metric"} <= set(front_matter["tags"])
    assert requirement in (tmp_path / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert 'evaluate.load(str(Path(__file__).parent / "rolebench_rouge.py"))' in (tmp_path / "app.py").read_text()
    space_module = evaluate.load(str(tmp_path / "rolebench_rouge.py"))
    assert space_module.compute(predictions=["a b"], references=["a b c"]) == {"rougeL": 2 / 3}
    assert "Space files for rolebench_rouge" in capsys.readouterr().out


def test_push_metric_needs_a_target():
    with pytest.raises(SystemExit, match="pass --repo_id"):
        cli.main(["push-metric"])
