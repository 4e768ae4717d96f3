"""RoleBench as lm-evaluation-harness tasks: lm-eval runs them on a tiny local model, offline, and reports the
paper's ROUGE-L exactly as rolellm computes it on the samples lm-eval logged."""

from pathlib import Path

import pytest

import rolellm
from rolellm.lm_eval_tasks.utils import load_docs
from rolellm.roles.prompts import build_system_instruction
from rolellm.rouge.score import rouge_l


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
    released = rolebench_slice_dir / "rolebench-zh" / "role_specific" / "test.jsonl"
    assert len(docs) == len(released.read_text(encoding="utf-8").splitlines())
    profile = load_rolebench_profiles("zh", data_dir=rolebench_slice_dir)[docs[0]["role"]]
    assert docs[0]["system"] == build_system_instruction(profile, lang="zh") and docs[0]["lang"] == "zh"
    with pytest.raises(FileNotFoundError, match="instructions-zh/instructions-general.jsonl does not exist"):
        load_docs("zh", "general", targets="raw", data_dir=str(rolebench_slice_dir))


@pytest.mark.slow
def test_lm_eval_reports_rolellms_rouge_l_on_its_logged_samples(rolebench_slice_dir, tiny_model_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    tasks = TaskManager(  # rolellm's tasks only: indexing lm-eval's own 28,000 task files would take seconds
        include_path=rolellm.lm_eval_tasks_dir(),
        include_defaults=False,
        metadata={"data_dir": str(rolebench_slice_dir)},
    )
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


@pytest.fixture(scope="module")
def model_ending_turns(tmp_path_factory, tiny_model_path):
    """The tiny model, made to write `<|im_end|>` wherever it would have written ' legs' (a token its greedy answers
    hold a few tokens in), so that answers end at the template's end of turn before their token budget."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path_factory.mktemp("ends-turns")
    shutil.copytree(tiny_model_path, path, dirs_exist_ok=True)
    model, tokenizer = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    end, legs = tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.encode(" legs")[0]
    with torch.no_grad():
        model.lm_head.weight[end] = model.lm_head.weight[legs] * 1.5
    model.save_pretrained(path)
    return path


@pytest.mark.slow
def test_harness_example_prompts_and_stops_as_rolellm_evaluate(
    model_ending_turns, rolebench_slice_dir, monkeypatch, tmp_path
):
    """examples/harness_rolebench.py (lm-eval with the chat template) against `rolellm evaluate`'s prompts and client:
    the same token ids, the same stop tokens, the same answers, ended at `<|im_end|>`."""
    import runpy

    from rolellm.clients.config import ClientConfig, make_client
    from rolellm.data.builder import load_rolebench_profiles
    from rolellm.evaluation.benchmark.answers import build_requests
    from rolellm.evaluation.benchmark.config import BenchmarkConfig

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "harness_rolebench.py"))
    lm, output = example["evaluate_with_harness"](
        str(model_ending_turns), rolebench_slice_dir, ["rolebench_zh_spe"], limit=4, max_new_tokens=16,
        chat_template="chatml",
    )  # fmt: skip
    samples = output["samples"]["rolebench_zh_spe"]
    config = BenchmarkConfig(
        output_dir=str(tmp_path), dataset_name="zh",
        client=ClientConfig(str(model_ending_turns), backend="local", chat_template="chatml", max_new_tokens=16),
    )  # fmt: skip
    client = make_client(config.client)
    docs = [sample["doc"] for sample in samples]
    profiles = load_rolebench_profiles("zh", data_dir=rolebench_slice_dir)
    requests = build_requests(docs, range(len(docs)), profiles, config)  # what `rolellm evaluate` sends

    end_of_turn = client.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn in client.stop_ids
    assert lm.model.generation_config.eos_token_id == client.stop_ids  # lm-eval's model stops where evaluate's does
    for sample, request in zip(samples, requests):
        context, generation_kwargs = sample["arguments"][0]
        assert generation_kwargs["until"] == []  # lm-eval adds the end of text; the end of turn is a stop token id
        harness_ids = lm.tok_batch_encode([context])[0][0].tolist()
        assert harness_ids == client.encode_prompt(request.messages)
        assert context.startswith("<|im_start|>system\n" + sample["doc"]["system"] + "<|im_end|>")
    results = client.generate(requests)
    answers = [result.text for result in results]
    assert [sample["filtered_resps"][0] for sample in samples] == answers
    # the answers ended at the end of turn, before the 16-token budget
    assert all(result.usage["completion_tokens"] < 16 for result in results), [r.usage for r in results]
    assert output["results"]["rolebench_zh_spe"]["rouge_l,none"] == pytest.approx(
        rouge_l(answers, [doc["references"] for doc in docs], lang="zh"), abs=1e-12
    )


@pytest.mark.parametrize("family", ["gemma-2-it", "deepseek-r1"])
def test_harness_model_refuses_a_template_lm_eval_would_render_otherwise(family, shared_data_dir, tmp_path, caplog):
    """Gemma refuses a system turn (lm-eval then drops the role's instruction); DeepSeek-R1 prefills `<think>`."""
    from rolellm.clients.config import ClientConfig
    from rolellm.lm_eval_tasks.model import harness_model
    from rolellm.testing.models import build_tiny_llama, tiny_tokenizer_for_template

    folder = shared_data_dir / "chat-templates" / family
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    model = build_tiny_llama(tmp_path / family, tokenizer=tiny_tokenizer_for_template(folder))
    with pytest.raises(ValueError, match="lm-eval would prompt .* with other tokens than rolellm evaluate") as error:
        harness_model(ClientConfig(str(model), backend="local"))
    harness_part, rolellm_part = str(error.value).split("lm-eval sends ")[1].split(", rolellm ")
    if family == "gemma-2-it":  # lm-eval dropped the system turn, the role's instruction; rolellm folds it in
        assert "You are Ada" in rolellm_part and "You are Ada" not in harness_part, str(error.value)
    else:  # lm-eval keeps the prefilled think block, rolellm answers without it (keep_think=False)
        assert "<think>" in harness_part and "<think>" not in rolellm_part, str(error.value)
