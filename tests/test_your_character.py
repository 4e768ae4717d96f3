"""The worked example, run as a user runs it: `bash examples/your_character.sh WORK` goes from a Character Card and a
screenplay to a chatting model through `rolellm` commands only (against the offline stand-in LLM, on the tiny test
model); every step exits 0 and leaves non-empty outputs, and a fresh Python process loads the adapter folder and the
merged folder with `transformers.pipeline` and generates. The stand-in answers the generators' Chinese prompts too.

Each `rolellm` and `python` process of the walkthrough forks from one process that imported torch, transformers,
peft, TRL, datasets and accelerate once (`tests/fixtures/prewarmed.py`): the same commands and files, without paying
those imports sixteen times."""

import json
import os
import re
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import datasets
import pytest
from fixtures.prewarmed import prewarmed

from rolellm import ContextInstruct, ContextInstructConfig, OpenAIChatClient, ProfileDescriber, RoleGPT, RoleGPTConfig
from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.testing.server import ChatCompletionsServer, Fault


ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "your_character.sh"
PREFERENCE_EXAMPLE = ROOT / "examples" / "preference_your_character.sh"
ROLE = "Juniper"
RELEASE = Path("rolebench-eng") / "instruction-generalization"
PROMPT = "Will the storm reach the fair?"
LOAD_AND_GENERATE = textwrap.dedent(
    """
    import json, sys, transformers
    PROMPT = "Will the storm reach the fair?"
    for folder in sys.argv[1:]:
        pipe = transformers.pipeline("text-generation", model=folder, device="cpu")
        text = pipe(PROMPT, max_new_tokens=4, min_new_tokens=4, do_sample=False)[0]["generated_text"]
        print(json.dumps({"adapter": hasattr(pipe.model, "peft_config"), "text": text}))
    """
)


def example_env() -> dict:
    """This interpreter's `python` and `rolellm` first on PATH, this checkout importable, no real endpoint."""
    env = {key: value for key, value in os.environ.items() if key not in ("OPENAI_BASE_URL", "BASE_MODEL")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


@pytest.fixture
def user_env(tmp_path):
    """`example_env()` with its `rolellm` and `python` forked from one process that imported the heavy libraries."""
    with prewarmed(example_env(), tmp_path / "bin") as env:
        yield env


@pytest.mark.exhaustive  # each stage and hand-off is tested on its own in `make test`
@pytest.mark.slow
def test_the_example_goes_from_a_card_and_a_screenplay_to_a_chatting_model(tmp_path, user_env):
    work = tmp_path / "work"
    run = subprocess.run(["bash", str(EXAMPLE), str(work)], env=user_env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert all(f"=== {i}/6" in run.stdout for i in range(7)) and "Traceback" not in run.stderr
    assert "using the offline stand-in" in run.stdout

    # one release folder with the rows of both generators, every split non-empty, and the card's role in it
    out = work / "data"
    rows = {
        (subset, split): read_rows(out / RELEASE / subset / f"{split}.jsonl")
        for subset in ("general", "role_specific")
        for split in ("train", "test")
    }
    assert all(rows.values()) and {r["role"] for part in rows.values() for r in part} == {ROLE}
    assert all(r["generated"] and all(r["generated"]) for part in rows.values() for r in part)
    assert ROLE in json.loads((out / "profiles-eng" / "desc.json").read_text("utf-8"))

    # the LoRA checkpoint holds what it needs to load alone; evaluate scored every test row
    adapter = work / "lora"
    names = (
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
        "role_profiles.jsonl",
    )
    for name in names:
        assert (adapter / name).stat().st_size > 0, name
    # the checkpoint may be pushed: its profiles keep what reaches a prompt, not the card's notes, tags or creator
    saved = (adapter / "role_profiles.jsonl").read_text("utf-8")
    assert "first_mes" in saved and "personality" in saved and "character_book" in saved
    assert not any(key in saved for key in ('"creator_notes"', '"tags"', '"creator"'))
    # the model card shows the system text one sample was trained with, rendered: the card's own fields, no macros
    card = (adapter / "README.md").read_text("utf-8")
    assert "The system text of one training sample, as it was trained:" in card and "{{char}}" not in card
    assert "personality" in card.lower() and "name, description, catchphrases" not in card
    results = json.loads((work / "eval" / "results.json").read_text("utf-8"))
    assert results["metrics"]["CUS"] is not None and results["metrics"]["SPE"] is not None
    assert results["counts"]["rows"] == len(rows["general", "test"]) + len(rows["role_specific", "test"])
    assert results["counts"]["failed"] == 0

    # the merged export is a plain full model; the chat answered both stdin lines, one line each
    merged = work / "merged"
    assert (merged / "model.safetensors").stat().st_size > 0 and (merged / "config.json").stat().st_size > 0
    assert not (merged / "adapter_config.json").exists()
    answers = (work / "chat.txt").read_text("utf-8").splitlines()
    assert len(answers) == 2 and all(answer.strip() for answer in answers)
    # the merged model gets the conversation it was trained on: the card's greeting is not made its first turn
    assert "Juniper taps the barometer" not in run.stderr
    assert json.loads((merged / "rolellm_inference.json").read_text("utf-8"))["card_extras"] is False

    # a fresh process loads the adapter (peft's auto-loading) and the merged model with `pipeline` and generates
    check = subprocess.run(
        ["python", "-c", LOAD_AND_GENERATE, str(adapter), str(merged)], env=user_env, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr[-3000:]
    loaded = [json.loads(line) for line in check.stdout.splitlines() if line.startswith("{")]
    assert [item["adapter"] for item in loaded] == [True, False]
    assert all(item["text"].startswith(PROMPT) and len(item["text"]) > len(PROMPT) for item in loaded)
    assert loaded[0]["text"] == loaded[1]["text"]  # merging kept what the adapter computes (greedy decoding)

    # the preference continuation on the same folder (examples/preference_your_character.sh): the adapter's answers
    # and the references ranked by the stand-in judge in both orders, DPO from the adapter, evaluate, a chat turn
    more = subprocess.run(["bash", str(PREFERENCE_EXAMPLE), str(work)], env=user_env, capture_output=True, text=True)
    assert more.returncode == 0, more.stdout[-3000:] + more.stderr[-3000:]
    assert all(f"=== {i}/4" in more.stdout for i in range(5)) and "Traceback" not in more.stderr
    pairs = [
        row for split in ("train", "test") for row in read_rows_if(out / RELEASE / "preference" / f"{split}.jsonl")
    ]
    questions = len(rows["general", "train"]) + len(rows["role_specific", "train"])
    assert 0 < len(pairs) <= questions and {p["source"] for p in pairs} == {"judge:pairwise"}

    def real_words(text):  # the stand-in judge's rule: more words of three letters or more ranks first
        return len(re.findall(r"[A-Za-z]{3,}|[\u3400-\u9fff]", text))

    assert all(p["chosen"] != p["rejected"] and real_words(p["chosen"]) > real_words(p["rejected"]) for p in pairs)
    dpo = work / "dpo"
    assert (dpo / "adapter_model.safetensors").stat().st_size > 0 and (dpo / "role_profiles.jsonl").is_file()
    assert "with DPO (TRL, loss `['sigmoid']`" in (dpo / "README.md").read_text("utf-8")
    # evaluate before (the RoCIT adapter's answers of the first script, reused) and after DPO: ROUGE-L and the rubric
    before = json.loads((work / "eval" / "results.json").read_text("utf-8"))
    after = json.loads((work / "eval-dpo" / "results.json").read_text("utf-8"))
    assert before["metrics"]["CUS"] == results["metrics"]["CUS"] and before["counts"] == results["counts"]
    assert after["metrics"]["CUS"] is not None and after["counts"] == results["counts"]
    assert after["metrics"]["win_rate"] is not None  # the stand-in judged DPO's answers against RoCIT's
    for run, folder in ((before, "eval"), (after, "eval-dpo")):
        rubric = run["rubric"]
        assert rubric["failed"] == 0 and rubric["n"] == rubric["asked"] == results["counts"]["rows"]
        assert set(rubric["per_subset"]) == {"general", "role_specific"}
        # the stand-in scores every dimension 1 + real words // 4 (at most 5): recomputed from the saved answers
        answers = [r["prediction"] for r in read_rows(work / folder / "generations.jsonl")]
        expected = sum(min(5, 1 + real_words(a.strip()) // 4) for a in answers) / len(answers)
        assert run["metrics"]["rubric"] == pytest.approx(expected, abs=1e-3)
        assert set(rubric["per_dimension"].values()) == {run["metrics"]["rubric"]}
    assert "before (RoCIT)" in more.stdout and "after (DPO)" in more.stdout and "win rate of DPO" in more.stdout
    assert len((work / "chat-dpo.txt").read_text("utf-8").strip().splitlines()) == 1


def read_rows_if(path: Path) -> list[dict]:
    """The rows of a file that may be absent (a split with no row gets no file)."""
    return read_rows(path) if path.is_file() else []


def test_the_example_fails_loudly_on_a_missing_input(tmp_path):
    env = {**example_env(), "CARD": str(tmp_path / "no-card.json")}
    run = subprocess.run(["bash", str(EXAMPLE), str(tmp_path / "work")], env=env, capture_output=True, text=True)
    assert run.returncode != 0
    assert "no-card.json" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "work" / "lora").exists()  # it stopped at the first step


@pytest.fixture(scope="module")
def stand_in():
    """The responder of examples/stand_in_llm.py behind a real chat-completions server."""
    responder = runpy.run_path(str(ROOT / "examples" / "stand_in_llm.py"))["StandInLLM"]()
    with ChatCompletionsServer(responder) as server:
        yield OpenAIChatClient("stand-in", base_url=server.base_url, max_retries=0)


def poet() -> RoleProfile:
    lines = [(0, "杜甫", "太白兄，今日又去何处饮酒？"), (0, "李白", "天生我材必有用，千金散尽还复来！"),
             (1, "杜甫", "长安米贵，居大不易。"), (1, "李白", "且放白鹿青崖间，须行即骑访名山。")]  # fmt: skip
    dialogue = [Utterance(act, act, speaker, content) for act, speaker, content in lines]
    return RoleProfile("李白", "zh", "唐代诗人。", dialogue=dialogue)


def test_the_stand_in_answers_the_chinese_prompts_of_the_three_generators(stand_in):
    described = ProfileDescriber().generate(stand_in, [poet()])
    assert described.stats["failed"] == {} and described.dataset[0]["catchphrases"] == [
        "天生我材必有用，千金散尽还复来！"
    ]
    items = ContextInstruct(ContextInstructConfig(num_questions=4, test_fraction=0.5)).generate(stand_in, [poet()])
    questions = [q for split in ("train", "test") for q in items.dataset[split]["question"]]
    assert len(questions) == 4 and all(q.startswith("李白，") for q in questions)
    instructions = datasets.Dataset.from_list(
        [{"instruction": "写一首关于春天的短诗。"}, {"instruction": "你怎么看待朋友？"}]
    )
    config = RoleGPTConfig(num_samples=2, prompt_mode="few_shot", include_reference=False, test_fraction=0.5)
    answered = RoleGPT(config).generate(stand_in, [poet()], instructions)
    assert answered.stats["rows"] == 2 and answered.stats["rejected"] == {} and answered.stats["failed"] == {}


def test_the_stand_in_answers_the_english_prompts_of_the_three_generators(stand_in):
    profile = RoleProfile(ROLE, "en", "A cloud cartographer.", dialogue=[
        Utterance(0, 0, "Toby", "So we go up?"), Utterance(0, 0, ROLE, "We go up. Bring the blue pencils."),
    ])  # fmt: skip
    described = ProfileDescriber().generate(stand_in, [profile])
    assert described.dataset[0]["catchphrases"] == ["We go up."]
    items = ContextInstruct(ContextInstructConfig(num_questions=3)).generate(stand_in, [profile])
    assert sum(items.dataset[split].num_rows for split in ("train", "test")) == 3
    instructions = datasets.Dataset.from_list([{"instruction": "Name a colour.", "target": "Blue."}])
    config = RoleGPTConfig(num_samples=2, prompt_mode="zero_shot", include_reference=True)
    answered = RoleGPT(config).generate(stand_in, [profile], instructions)
    assert answered.stats["rows"] == 1 and answered.stats["rejected"] == {}


def test_the_example_uses_the_endpoint_the_user_sets(tmp_path):
    """With `OPENAI_BASE_URL` set, the data are asked of that endpoint (here one refusing every request, so the
    run stops at the first step with the endpoint's error), with the model `LLM_MODEL`."""
    with ChatCompletionsServer(lambda body: Fault("server_error", status=422, message="model is asleep")) as server:
        base_url = server.base_url
        env = {**example_env(), "OPENAI_BASE_URL": base_url, "LLM_MODEL": "my-model"}
        run = subprocess.run(["bash", str(EXAMPLE), str(tmp_path)], env=env, capture_output=True, text=True)
    assert run.returncode == 3 and f"using {base_url} (my-model)" in run.stdout, run.stdout[-2000:] + run.stderr
    assert server.requests and {request["body"]["model"] for request in server.requests} == {"my-model"}
    assert "model is asleep" in (tmp_path / "data" / "generation" / "context-instruct" / "failures.jsonl").read_text()
    assert not (tmp_path / "llm-url").exists() and not (tmp_path / "lora").exists()
