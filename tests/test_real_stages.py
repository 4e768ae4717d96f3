"""Real role-play text through the stages that play a role in process: `rolellm dialogue` and `rolellm chat` (one message
per stdin line) with the embedded SmolLM2-135M-Instruct's GGUF file as `--model`, and the test chat-completions server
as the simulated user and the judge. `rolellm coser run` plays its scene with the same model served by `transformers
serve` (tests/test_real_servers.py), and the chat UI answers with it in a browser (tests/test_chat_browser.py).

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
from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME, TURNS_NAME, read_transcripts
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import write_release_profiles
from rolellm.scripts.chat import escape_line
from rolellm.testing.server import ChatCompletionsServer


try:
    SMOLLM2 = embedded_model_file()
except GGUFError as error:
    pytest.skip(f"the embedded real model is not installed: {error}", allow_module_level=True)
pytest.importorskip("gguf", reason="reading the embedded model's .gguf file needs the gguf package: pip install gguf")
pytestmark = [pytest.mark.slow, pytest.mark.exhaustive]  # each test loads the 135M model and generates (5-15 s)

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
