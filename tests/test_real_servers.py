"""Real inference servers behind the OpenAI-compatible client: `transformers serve` on the embedded SmolLM2-135M-Instruct
(its dequantized folder) and, where llama-cpp-python is installed, `python -m llama_cpp.server` on its GGUF file, each
started once on 127.0.0.1 and a free port, and, as a third kind, the GGUF file in process (`--backend llamacpp`),
asked by `rolellm generate`, `evaluate`, `chat`, `dialogue` and `coser run` (the model the role; the simulated user,
the Environment, the next-speaker predictor and the judges are the stand-in server). Requests are few and short (8
tokens, 16 in a scene): what is checked is that each command's answers are the model's own, reach the files it writes,
and that every request carried its budget and sampling settings.
"""

import html
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from fixtures.commands import run_command

from rolellm.clients.engines import engine_version
from rolellm.clients.gguf import GGUFError, embedded_model_file, resolve_model_name_or_path
from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME, read_transcripts
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import write_release_profiles
from rolellm.scripts.chat import free_port
from rolellm.testing.models import cpu_model_dtype
from rolellm.testing.server import ChatCompletionsServer


try:
    SMOLLM2 = embedded_model_file()
except GGUFError as error:
    pytest.skip(f"the embedded real model is not installed: {error}", allow_module_level=True)
pytest.importorskip("gguf", reason="reading the embedded model's .gguf file needs the gguf package: pip install gguf")
pytest.importorskip(
    "fastapi", reason="transformers serve needs FastAPI and Uvicorn (pip install transformers[serving])"
)
pytestmark = pytest.mark.slow  # a real server on the 135M model: 8 s to start, 1-2 s an answer

ROOT = Path(__file__).resolve().parents[1]
COSER_TEST_SET = ROOT / "tests" / "fixtures" / "coser" / "test_set.json"
PRIDE = "Pride and Prejudice-7-1"
JACK = "Jack Sparrow"
MAX_NEW_TOKENS = "8"  # generate, evaluate, chat: a few words of the model's own (a decode step is 60-90 ms)
# dialogue and coser run: the model may first repeat the user's line, or give an action, before words of its own
SCENE_TOKENS = "16"
STAND_IN = "Aye, the stand-in speaks."
NO_LLAMA_CPP = 'needs llama-cpp-python (pip install "rolellm[llamacpp]")'
needs_llama_cpp = pytest.mark.skipif(engine_version("llamacpp") is None, reason=NO_LLAMA_CPP)
SERVER_KINDS = ["transformers", pytest.param("llama_cpp", marks=needs_llama_cpp)]


def wait_until_up(process: subprocess.Popen, url: str, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the server did not answer {url} in {timeout:g} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module", params=[*SERVER_KINDS, pytest.param("in_process", marks=needs_llama_cpp)])
def served(request, tmp_path_factory):
    """The embedded model behind a real server, stopped after the module, or in process (`--backend llamacpp`):
    `{"kind", "flags"}`, the flags naming it (`--model`, and `--base_url` or `--backend`)."""
    if request.param == "in_process":
        yield {"kind": request.param, "flags": ["--backend", "llamacpp", "--model", str(SMOLLM2)]}
        return
    port, folder = free_port(), tmp_path_factory.mktemp(f"served-{request.param}")
    log = folder / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if request.param == "transformers":
        model = resolve_model_name_or_path(SMOLLM2)  # the dequantized folder in the tests' cache
        # the CPU's fastest dtype (bfloat16 where it has bfloat16 units); the answers only need to be the model's
        command = [str(Path(sys.executable).parent / "transformers"), "serve", model, "--host", "127.0.0.1",
                   "--port", str(port), "--device", "cpu", "--dtype", cpu_model_dtype()]  # fmt: skip
        health = f"http://127.0.0.1:{port}/health"
    else:
        model = "smollm2"
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(SMOLLM2), "--model_alias", model,
                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
                   "--n_threads_batch", "1"]  # fmt: skip
        health = f"http://127.0.0.1:{port}/v1/models"
    with open(log, "w") as stream:
        process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, env=env, cwd=folder)
    try:
        wait_until_up(process, health, log)
        yield {"kind": request.param, "flags": ["--model", model, "--base_url", f"http://127.0.0.1:{port}/v1"]}
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def stand_in():
    """The simulated user, the Environment, the next-speaker predictor and the judges (4 on every dimension, one
    flaw of severity 2 for CoSER)."""

    def answer(body):
        model, system = body["model"], body["messages"][0]["content"]
        if model == "nsp":
            last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"].split("\n\n")[-1]
            return "Next Speaker: Mr. Darcy" if last.startswith("Elizabeth Bennet:") else "Next Speaker: <END CHAT>"
        if model == "judge" and re.search(r'^- "(\w+)"', body["messages"][1]["content"], re.M):
            dimensions = re.findall(r'^- "(\w+)"', body["messages"][1]["content"], re.M)
            return json.dumps({d: {"score": 4, "rationale": "in character"} for d in dimensions})
        if model == "judge":
            dimension = re.search(r"dimension, ([\w ]+):|terms of ([\w ]+),", system)
            dimension = dimension.group(1) or dimension.group(2)
            return json.dumps({dimension: {"flaws": [{"instance": "a line", "type": dimension, "severity": 2}]}})
        return STAND_IN

    with ChatCompletionsServer(answer) as server:
        yield server


@pytest.fixture(scope="module")
def jack(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jack")
    profile = RoleProfile(JACK, "en", "The captain of the Black Pearl, a pirate who trusts his compass.")
    write_release_profiles({JACK: profile}, folder / "profiles")
    return folder / "profiles"


def assert_served(text: str) -> None:
    """`text` is an answer of the served model: words of its own besides the stand-in's line (which a 135M model may
    repeat when it is what the user said)."""
    assert len(re.findall(r"\w+", text.replace(STAND_IN, ""))) >= 2, text


def test_generate_rolegpt_against_the_real_server(served, jack, tmp_path):
    instructions = tmp_path / "instructions.jsonl"
    questions = ["What do you value most at sea?", "Describe your compass."]
    instructions.write_text("".join(json.dumps({"instruction": q}) + "\n" for q in questions), encoding="utf-8")
    out = tmp_path / "out"
    code, printed, err = run_command([
        "generate", "rolegpt", "--profiles", str(jack), "--roles", JACK, "--instructions", str(instructions),
        "--prompt_mode", "system", "--num_samples", "1", "--num_baseline", "0", "--max_tokens", MAX_NEW_TOKENS,
        "--temperature", "0", "--test_fraction", "0", *served["flags"],
        "--output_dir", str(out), "--progress", "false",
    ])  # fmt: skip
    assert code == 0, err
    rows = [json.loads(line) for path in out.rglob("train.jsonl") for line in path.read_text("utf-8").splitlines()]
    assert sorted(row["question"] for row in rows) == sorted(questions)
    for row in rows:
        assert row["role"] == JACK
        assert_served(row["generated"][0])


def test_evaluate_against_the_real_server(served, slice_data_dir, tmp_path):
    out = tmp_path / "out"
    code, printed, err = run_command([
        "evaluate", *served["flags"], "--dataset_name",
        "zh-role_specific", "--data_dir", str(slice_data_dir / "rolebench"), "--roles", "李白",
        "--max_samples_per_role", "1", "--max_new_tokens", MAX_NEW_TOKENS, "--output_dir", str(out),
    ])  # fmt: skip
    assert code == 0, err
    generations = [json.loads(line) for line in (out / "generations.jsonl").read_text("utf-8").splitlines()]
    assert len(generations) == 1 and generations[0]["prediction"].strip(), generations
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["counts"]["rows"] == 1 and results["counts"]["failed"] == 0
    assert 0 <= results["metrics"]["SPE"] <= 1  # scored against the references


def test_chat_against_the_real_server(served, jack, tmp_path):
    transcript = tmp_path / "jack.json"
    code, out, err = run_command(
        ["chat", *served["flags"], "--profiles", str(jack),
         "--temperature", "0", "--max_new_tokens", MAX_NEW_TOKENS],
        stdin=f"Where is the Black Pearl?\n/save {transcript}\n",
    )  # fmt: skip
    assert code == 0, err
    saved = json.loads(transcript.read_text(encoding="utf-8"))
    answer = saved["messages"][-1]["content"]
    assert [(m["role"], m["content"]) for m in saved["messages"][-2:-1]] == [("user", "Where is the Black Pearl?")]
    assert_served(answer)
    assert answer.replace("\n", " ") in out.replace("\\n", " ")  # the printed line is the answer saved


def test_dialogue_against_the_real_server(served, stand_in, jack, tmp_path):
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(
        f"- id: jack-tortuga\n  role: {JACK}\n  situation: A tavern in Tortuga at midnight.\n"
        "  user_persona: A young sailor.\n  opening_line: Captain, are you hiring?\n  num_turns: 2\n",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    code, printed, err = run_command([
        "dialogue", "--profiles", str(jack), "--scenarios", str(scenarios), *served["flags"], "--max_new_tokens",
        SCENE_TOKENS, "--user_model", "user-sim",
        "--user_base_url", stand_in.base_url, "--judge_model", "judge", "--judge_base_url", stand_in.base_url,
        "--output_dir", str(out),
    ])  # fmt: skip
    assert code == 0, err
    [transcript] = read_transcripts(out / TRANSCRIPTS_NAME)
    assert transcript["complete"] and [turn["user"] for turn in transcript["turns"]] == [
        "Captain, are you hiring?",
        STAND_IN,
    ]
    for turn in transcript["turns"]:
        assert_served(turn["assistant"])


def test_coser_run_against_the_real_server(served, stand_in, tmp_path):
    """The first four rounds from the book, then the served model plays Elizabeth and Darcy (one line each): its
    lines, without their inner thoughts, reach the log, the results, the judge and the conversations page."""
    from rolellm.evaluation.coser.prompts import DIMENSIONS
    from rolellm.evaluation.coser.scoring import dimension_score
    from rolellm.evaluation.coser.testset import read_coser_test_set
    from rolellm.evaluation.coser.thoughts import remove_inner_thoughts

    out = tmp_path / "run"
    asked = len(stand_in.requests)
    code, printed, err = run_command([
        "coser", "run", "--test_file", str(COSER_TEST_SET), "--cases", PRIDE, "--continue_from", "4",
        *served["flags"], "--max_new_tokens", SCENE_TOKENS,
        "--env_model", "env", "--env_base_url", stand_in.base_url, "--nsp_model", "nsp",
        "--nsp_base_url", stand_in.base_url, "--judge_model", "judge", "--judge_base_url", stand_in.base_url,
        "--output_dir", str(out), "--progress", "false",
    ])  # fmt: skip
    assert code == 0, err
    judged = [r["body"] for r in stand_in.requests[asked:] if r["body"]["model"] == "judge"]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    scene = results["cases"][PRIDE]
    assert (scene["rounds"], scene["ended"], scene["nsp_fallbacks"]) == (6, "end_chat", 0)
    [case] = read_coser_test_set(COSER_TEST_SET)[1:]
    reference = [(m["character"], remove_inner_thoughts(m["message"])) for m in case.reference[:4]]
    assert [(m["role"], m["content"]) for m in scene["simulation"][:4]] == reference
    played = scene["simulation"][4:]
    assert [m["role"] for m in played] == ["Elizabeth Bennet", "Mr. Darcy"]
    for message in played:
        assert_served(message["content"])
        assert all(message["content"] not in text for _, text in reference)
    log = [json.loads(line) for line in (out / "simulation.jsonl").read_text(encoding="utf-8").splitlines()]
    said = [r["content"] for r in log if r["kind"] == "message" and not r["reference"]]
    assert [remove_inner_thoughts(text) for text in said] == [m["content"] for m in played]
    assert len(judged) == len(DIMENSIONS)
    shown = [" ".join(m["content"] for m in body["messages"]) for body in judged]
    assert all(m["content"] in text for m in played for text in shown)
    actor_rounds = sum(m["role"] != "Environment" for m in scene["simulation"])  # the book's three and the two played
    assert results["scores"]["avg"] == scene["score"] == dimension_score([{"severity": 2}], actor_rounds=actor_rounds)
    assert f"1 of 1 scenes scored; wrote {out}/results.json" in printed
    page = (out / "conversations.html").read_text(encoding="utf-8")
    assert all(html.escape(m["content"]) in page or html.escape(m["content"], quote=False) in page for m in played)
    print(f"\n--- rolellm coser run, {PRIDE} from round 5 ({served['kind']}) ---\n"
          + "\n".join(f"{m['role']}: {m['content']}" for m in scene["simulation"]))  # fmt: skip
