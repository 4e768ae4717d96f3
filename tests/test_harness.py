"""RoleBench as lm-evaluation-harness tasks: lm-eval runs them on a tiny local model, offline, and reports the
paper's ROUGE-L exactly as rolellm computes it on the samples lm-eval logged."""

from pathlib import Path

import pytest

import rolellm
from rolellm.evaluation.benchmark.rouge import rouge_l
from rolellm.lm_eval_tasks.utils import load_docs
from rolellm.roles.prompts import build_system_instruction


lm_eval = pytest.importorskip("lm_eval", reason="the harness extra (pip install rolellm[harness]) is not installed")


def test_tasks_ship_in_the_package():
    folder = Path(rolellm.lm_eval_tasks_dir())
    names = {path.stem for path in folder.glob("rolebench_*.yaml")}
    assert names == {f"rolebench_{lang}{part}" for lang in ("zh", "en") for part in ("", "_raw", "_cus", "_spe")}
    assert (folder / "_default_template_yaml").is_file() and (folder / "utils.py").is_file()


def test_documents_carry_the_role_system_instruction(rolebench_slice_dir, monkeypatch):
    from rolellm.data.builder import load_rolebench_profiles

    monkeypatch.setenv("ROLEBENCH_RELEASE_DIR", str(rolebench_slice_dir))  # no data_dir metadata: the variable is used
    docs = load_docs("zh", "role_specific", version=1.0)["test"]
    assert len(docs) == 239
    profile = load_rolebench_profiles("zh", data_dir=rolebench_slice_dir)[docs[0]["role"]]
    assert docs[0]["system"] == build_system_instruction(profile, lang="zh") and docs[0]["lang"] == "zh"
    with pytest.raises(FileNotFoundError, match="instructions-zh/instructions-general.jsonl does not exist"):
        load_docs("zh", "general", targets="raw", data_dir=str(rolebench_slice_dir))


@pytest.mark.slow
def test_lm_eval_reports_rolellms_rouge_l_on_its_logged_samples(rolebench_slice_dir, tiny_model_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    tasks = TaskManager(include_path=rolellm.lm_eval_tasks_dir(), metadata={"data_dir": str(rolebench_slice_dir)})
    output = lm_eval.simple_evaluate(
        model="hf", model_args=f"pretrained={tiny_model_path},dtype=float32",
        tasks=["rolebench_zh_spe", "rolebench_zh_cus"],
        task_manager=tasks, limit=4, log_samples=True, device="cpu", batch_size=4, gen_kwargs="max_gen_toks=24",
    )  # fmt: skip
    for task in ("rolebench_zh_spe", "rolebench_zh_cus"):
        samples = output["samples"][task]
        assert len(samples) == 4
        answers = [sample["filtered_resps"][0] for sample in samples]
        references = [sample["doc"]["references"] for sample in samples]
        reported = output["results"][task]["rouge_l,none"]
        assert reported == pytest.approx(rouge_l(answers, references, lang="zh"), abs=1e-12)
        assert [sample["rouge_l"] for sample in samples] == pytest.approx(
            [rouge_l([a], [r], lang="zh") for a, r in zip(answers, references)], abs=1e-12
        )
        # the prompt is the role's system instruction, then the question
        first = samples[0]
        assert first["arguments"][0][0] == first["doc"]["system"] + first["doc"]["question"]
