"""Real role-play text through the stages that play a role: `rolellm dialogue`, `rolellm coser run` and `rolellm chat`
(one message per stdin line, and the Gradio UI) with the embedded SmolLM2-135M-Instruct as the actor, and the test
chat-completions server as the simulated user, the Environment, the next-speaker predictor and the judges.

A 135M model plays a role modestly; what these tests check is that its turns are its own English text (not the
stand-in server's, not empty) and reach every file the command writes. Each test prints one sample of the real text
(`pytest -s`); the docs quote such samples under "On the embedded real model".
"""

import html
import json
import re
from pathlib import Path

import pytest
from fixtures.commands import run_command

from rolellm.clients.gguf import GGUFError, embedded_model_file, resolve_model_name_or_path
from rolellm.evaluation.coser.thoughts import remove_inner_thoughts
from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME, TURNS_NAME, read_transcripts
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import write_release_profiles
from rolellm.scripts.chat import escape_line, free_port
from rolellm.testing.server import ChatCompletionsServer


try:
    SMOLLM2 = embedded_model_file()
except GGUFError as error:
    pytest.skip(f"the embedded real model is not installed: {error}", allow_module_level=True)
pytest.importorskip("gguf", reason="reading the embedded model's .gguf file needs the gguf package: pip install gguf")
pytestmark = pytest.mark.slow  # each test loads the 135M model and generates (5-15 s)

ROOT = Path(__file__).resolve().parents[1]
ADA_CARD = ROOT / "tests" / "fixtures" / "card_v2_ada.json"
COSER_TEST_SET = ROOT / "tests" / "fixtures" / "coser" / "test_set.json"
JACK = "Jack Sparrow"
MAX_NEW_TOKENS = "32"
# words an English sentence of a few words can hardly do without
COMMON_WORDS = {
    "a", "an", "the", "i", "i'm", "you", "your", "my", "me", "we", "our", "us", "he", "she", "it", "its", "they",
    "them", "is", "are", "was", "were", "be", "am", "do", "does", "did", "have", "has", "had", "not", "no", "to",
    "of", "in", "on", "at", "for", "with", "and", "but", "or", "so", "if", "what", "who", "where", "why", "how",
    "this", "that", "there", "here", "can", "will", "would", "could", "shall", "should", "must", "let", "just", "all",
}  # fmt: skip


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """The embedded model's GGUF file, resolved once into the tests' persistent cache (`ROLELLM_CACHE`)."""
    resolve_model_name_or_path(SMOLLM2)
    return SMOLLM2


def assert_real_english(text: str, canned: list[str]) -> None:
    """`text` is the model's own English: a few words, mostly Latin letters, with common English words among them,
    and none of the stand-in server's `canned` answers."""
    words = re.findall(r"[A-Za-z]+(?:'[a-z]+)?", text)
    assert len(words) >= 4, text
    assert sum(word.lower() in COMMON_WORDS for word in words) >= 2, text
    letters = [c for c in text if c.isalpha()]
    assert sum(c.isascii() for c in letters) >= 0.95 * len(letters), text
    assert all(line not in text and text not in line for line in canned), text


def show(title: str, text: str) -> None:
    """One sample of the real model's role-play, for a person to read (`pytest -s`)."""
    print(f"\n--- {title} (SmolLM2-135M-Instruct) ---\n{text}\n")


# --- rolellm dialogue ---------------------------------------------------------------------------------------------------

SAILOR = "What is the first thing you would teach a new hand on the Black Pearl?"


def dialogue_stand_in(body) -> str:
    """The user simulator's second line, and a judge giving 4 on every dimension it is asked about."""
    if body["model"] == "user-sim":
        return SAILOR
    dimensions = re.findall(r'^- "(\w+)"', body["messages"][1]["content"], re.M)
    return json.dumps({d: {"score": 4, "rationale": "stays a pirate"} for d in dimensions})


def test_dialogue_with_the_real_model_as_the_role(smollm2, tmp_path):
    from rolellm.evaluation.multiturn.rubric import DIMENSIONS

    descriptions = json.loads((ROOT / "examples" / "data" / "roles-eng.json").read_text(encoding="utf-8"))
    write_release_profiles({JACK: RoleProfile(JACK, "en", descriptions[JACK])}, tmp_path / "profiles")
    opening = "Captain Sparrow? They say you are looking for a crew."
    (tmp_path / "scenarios.yaml").write_text(
        f"- id: jack-tortuga\n  role: {JACK}\n"
        "  situation: A noisy tavern in Tortuga at midnight; the Black Pearl is anchored in the bay.\n"
        "  user_persona: A young sailor who wants to join a pirate crew but has never been at sea.\n"
        f"  opening_line: {opening}\n  num_turns: 2\n",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    with ChatCompletionsServer(dialogue_stand_in) as server:
        argv = ["dialogue", "--profiles", str(tmp_path / "profiles"), "--scenarios", str(tmp_path / "scenarios.yaml"),
                "--model", str(smollm2), "--max_new_tokens", MAX_NEW_TOKENS, "--user_model", "user-sim",
                "--user_base_url", server.base_url, "--judge_model", "judge", "--judge_base_url", server.base_url,
                "--output_dir", str(out)]  # fmt: skip
        code, printed, err = run_command(argv)
        bodies = [request["body"] for request in server.requests]
    assert code == 0, err
    [transcript] = read_transcripts(out / TRANSCRIPTS_NAME)
    assert transcript["complete"] and transcript["model"] == str(smollm2)  # the file given, not its cache folder
    assert [turn["user"] for turn in transcript["turns"]] == [opening, SAILOR]
    answers = [turn["assistant"] for turn in transcript["turns"]]
    for answer in answers:
        assert_real_english(answer, [SAILOR, opening, "stays a pirate"])
    assert answers[0] != answers[1]  # the second answer was made for the second line
    # the simulator was shown the role's first answer as the other side, the judge the whole conversation
    [simulated] = [b for b in bodies if b["model"] == "user-sim"]
    assert simulated["messages"][-1] == {"role": "user", "content": answers[0]}
    [judged] = [b for b in bodies if b["model"] == "judge"]
    assert all(answer in judged["messages"][1]["content"] for answer in answers)
    # what the command printed is what it wrote: the turns, the scores, the conversations page
    assert f"Played 2 turns in 1 conversations; wrote {out / TRANSCRIPTS_NAME}" in printed
    assert len((out / TURNS_NAME).read_text(encoding="utf-8").splitlines()) == 2
    scores = json.loads((out / "scores.json").read_text(encoding="utf-8"))
    assert scores["failures"]["count"] == 0 and scores["items"][0]["scores"] == dict.fromkeys(DIMENSIONS, 4)
    assert all(f"| {dimension} | 4" in printed for dimension in DIMENSIONS)
    page = (out / "transcripts.html").read_text(encoding="utf-8")
    assert all(html.escape(answer) in page or html.escape(answer, quote=False) in page for answer in answers)
    show("rolellm dialogue, Jack Sparrow", "\n".join(f"user: {t['user']}\n{JACK}: {t['assistant']}"
                                                    for t in transcript["turns"]))  # fmt: skip


# --- rolellm coser run --------------------------------------------------------------------------------------------------

PRIDE = "Pride and Prejudice-7-1"
WIND = "The wind rises."


def coser_stand_in(body) -> str:
    """The Environment; the next-speaker predictor (Mr. Darcy after Elizabeth, then the end of the scene); a judge
    finding one flaw of severity 2 on every dimension."""
    if body["model"] == "env":
        return WIND
    if body["model"] == "nsp":
        last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"].split("\n\n")[-1]
        return "Next Speaker: Mr. Darcy" if last.startswith("Elizabeth Bennet:") else "Next Speaker: <END CHAT>"
    system = body["messages"][0]["content"]
    dimension = re.search(r"dimension, ([\w ]+):|terms of ([\w ]+),", system)
    dimension = dimension.group(1) or dimension.group(2)
    return json.dumps({dimension: {"flaws": [{"instance": "a line", "type": dimension, "severity": 2}]}})


def test_coser_run_with_the_real_model_as_the_actor(smollm2, tmp_path):
    from rolellm.evaluation.coser.prompts import DIMENSIONS
    from rolellm.evaluation.coser.scoring import dimension_score
    from rolellm.evaluation.coser.testset import read_coser_test_set

    out = tmp_path / "run"
    with ChatCompletionsServer(coser_stand_in) as server:
        # the first four rounds from the book, then the actor plays Elizabeth and Darcy (one line each)
        argv = ["coser", "run", "--test_file", str(COSER_TEST_SET), "--cases", PRIDE, "--continue_from", "4",
                "--actor_model", str(smollm2), "--max_new_tokens", MAX_NEW_TOKENS,
                "--env_model", "env", "--env_base_url", server.base_url, "--nsp_model", "nsp",
                "--nsp_base_url", server.base_url, "--judge_model", "judge", "--judge_base_url", server.base_url,
                "--output_dir", str(out), "--progress", "false"]  # fmt: skip
        code, printed, err = run_command(argv)
        judged = [b for b in (r["body"] for r in server.requests) if b["model"] == "judge"]
    assert code == 0, err
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    scene = results["cases"][PRIDE]
    assert (scene["rounds"], scene["ended"], scene["nsp_fallbacks"]) == (6, "end_chat", 0)
    [case] = read_coser_test_set(COSER_TEST_SET)[1:]
    reference = [(m["character"], remove_inner_thoughts(m["message"])) for m in case.reference[:4]]
    assert [(m["role"], m["content"]) for m in scene["simulation"][:4]] == reference
    played = scene["simulation"][4:]
    assert [m["role"] for m in played] == ["Elizabeth Bennet", "Mr. Darcy"]
    for message in played:
        assert_real_english(message["content"], [WIND, *(text for _, text in reference)])
    # the log holds the actor's lines as said, the results without their inner thoughts, as the judge saw them
    log = [json.loads(line) for line in (out / "simulation.jsonl").read_text(encoding="utf-8").splitlines()]
    said = [r["content"] for r in log if r["kind"] == "message" and not r["reference"]]
    assert [remove_inner_thoughts(text) for text in said] == [m["content"] for m in played]
    assert len(judged) == len(DIMENSIONS)
    assert all(m["content"] in scene["simulation_str"] for m in played)
    shown = [" ".join(m["content"] for m in body["messages"]) for body in judged]
    assert all(m["content"] in text for m in played for text in shown)
    actor_rounds = sum(m["role"] != "Environment" for m in scene["simulation"])  # the book's three and the two played
    expected = dimension_score([{"severity": 2}], actor_rounds=actor_rounds)
    assert results["scores"]["avg"] == scene["score"] == expected
    assert f"1 of 1 scenes scored; wrote {out}/results.json" in printed
    page = (out / "conversations.html").read_text(encoding="utf-8")
    assert all(html.escape(m["content"]) in page or html.escape(m["content"], quote=False) in page for m in played)
    show(f"rolellm coser run, {PRIDE} from round 5",
         "\n".join(f"{m['role']}: {m['content']}" for m in scene["simulation"]))  # fmt: skip


# --- rolellm chat -------------------------------------------------------------------------------------------------------

QUESTION = "Can you fix the lamp before the storm?"  # "lamp" calls up the card's lorebook entry
GREETING = "*Ada drops a crate of brass parts on the floor.* Right. Where's the patient?"


@pytest.fixture(scope="module")
def stdin_chat(smollm2, tmp_path_factory):
    """`rolellm chat` with Ada Quill's Character Card, greedy, given a message and `/save` on stdin: its exit code,
    stdout, stderr and the saved transcript."""
    transcript = tmp_path_factory.mktemp("chat") / "ada.json"
    argv = ["chat", "--model", str(smollm2), "--profiles", str(ADA_CARD), "--temperature", "0",
            "--max_new_tokens", MAX_NEW_TOKENS]  # fmt: skip
    code, out, err = run_command(argv, stdin=f"{QUESTION}\n/save {transcript}\n")
    return {"code": code, "out": out, "err": err, "saved": json.loads(transcript.read_text(encoding="utf-8"))}


def test_chat_on_stdin_answers_as_the_card_and_saves_what_it_printed(smollm2, stdin_chat):
    assert stdin_chat["code"] == 0, stdin_chat["err"]
    saved = stdin_chat["saved"]
    assert (saved["role"], saved["model"], saved["sampling"]["temperature"]) == ("Ada Quill", str(smollm2), 0.0)
    assert "The lamp is a first-order Fresnel lens." in saved["system"]  # the lorebook entry the message called up
    assert f"Ada Quill: {GREETING}" in stdin_chat["err"]  # a model rolellm did not train gets the card's greeting
    messages = [(m["role"], m["content"]) for m in saved["messages"]]
    assert [role for role, _ in messages] == ["assistant", "user", "assistant"]
    assert messages[:2] == [("assistant", GREETING), ("user", QUESTION)]
    answer = messages[2][1]
    assert_real_english(answer, [GREETING, QUESTION])
    assert stdin_chat["out"] == escape_line(answer) + "\n"  # the one line printed is the answer saved
    show("rolellm chat, Ada Quill's card", "\n".join(f"{role}: {content}" for role, content in messages))


def test_chat_ui_answers_like_the_terminal(smollm2, stdin_chat):
    """The Gradio UI, served in this process and asked through `gradio_client` as a browser's page asks it, gives
    the first answer of the stdin chat: the same greeting, message and greedy decoding."""
    pytest.importorskip("gradio", reason="the chat UI needs gradio (the `ui` extra)")
    from gradio_client import Client

    from rolellm.clients.chat_session import ChatSession
    from rolellm.clients.config import ClientConfig
    from rolellm.clients.inference_settings import resolve_card_extras
    from rolellm.roles.resolve import load_profiles
    from rolellm.scripts.chat import load_client
    from rolellm.scripts.chat_ui import build_chat_ui

    config = ClientConfig(str(smollm2), max_new_tokens=int(MAX_NEW_TOKENS))
    session = ChatSession(  # as `rolellm chat --ui` makes it
        load_client(config), load_profiles(str(ADA_CARD)), "Ada Quill", max_new_tokens=config.max_new_tokens,
        temperature=0.0, card_extras=resolve_card_extras(config),
    )  # fmt: skip
    app = build_chat_ui(session)
    app.launch(server_name="127.0.0.1", server_port=free_port(), quiet=True, prevent_thread_lock=True)
    try:
        client = Client(app.local_url, verbose=False, download_files=False)
        answer = client.predict(QUESTION, "Ada Quill", api_name="/chat")
    finally:
        app.close()
    assert answer == stdin_chat["saved"]["messages"][2]["content"]
    assert_real_english(answer, [GREETING, QUESTION])
    show("rolellm chat --ui, Ada Quill's card", f"user: {QUESTION}\nAda Quill: {answer}")
