"""CoSER's given-circumstance acting evaluation, offline: the test server plays the actor, the Environment, the
next-speaker predictor and the judge on a two-scene fixture in CoSER's test-set format
(`tests/fixtures/coser/test_set.json`, written for these tests).
"""

import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from fixtures.commands import ForkedCommand
from fixtures.examples import run_example

from rolellm.clients.config import ClientConfig
from rolellm.evaluation.coser.judge import parse_flaws
from rolellm.evaluation.coser.prompts import DIMENSIONS, checkout_prompts
from rolellm.evaluation.coser.scoring import (
    bleu_rouge,
    dimension_score,
    read_results,
    rescore_coser_results,
    severity_total,
)
from rolellm.evaluation.coser.simulation import END_CHAT, LOG_NAME, choose_next, parse_next_speaker
from rolellm.evaluation.coser.testset import CoserCase, read_coser_test_set
from rolellm.evaluation.coser.thoughts import reference_without_thoughts, remove_inner_thoughts
from rolellm.rewards.flaws import make_coser_flaw_reward
from rolellm.roles.profile import DataFormatError
from rolellm.scripts import coser as coser_script
from rolellm.testing import data as testing_data
from rolellm.testing.server import ChatCompletionsServer


FIXTURES = Path(__file__).parent / "fixtures" / "coser"
ACTOR_KEY, JUDGE_KEY = "sk-actor-host-only", "sk-judge-host-only"
TEST_SET = FIXTURES / "test_set.json"
HAMLET, PRIDE = "Hamlet-3-0", "Pride and Prejudice-7-1"
# what the judge finds on each dimension: severities (None: a flaw without one, which counts 1)
FLAWS = {DIMENSIONS[0]: [2], DIMENSIONS[1]: [3, 1], DIMENSIONS[2]: [None], DIMENSIONS[3]: []}


def character_line(body) -> str:
    """The actor: who it plays (from its system text) and how many times it spoke, with an inner thought."""
    system = body["messages"][0]["content"]
    name = re.match(r"You are (.+?), a character of", system) or re.search(r"You are (.+?) from ", system)
    turn = sum(m["role"] == "assistant" for m in body["messages"]) + 1
    return f"[{name.group(1)} hides a thought] ({name.group(1)} steps closer) I am {name.group(1)}, line {turn}."


def next_speaker(body) -> str:
    """The NSP: the speaker after the last one in the candidates' order; <END CHAT> too early in round 2 (not
    honoured) and from round 5 on; in the Hamlet scene's round 1 a name that is nobody's."""
    system, round_index = body["messages"][0]["content"], sum(m["role"] == "assistant" for m in body["messages"])
    candidates = re.search(r"The candidates are (.+?);", system)
    if candidates is None:
        return "Next Speaker: Environment"
    speakers = candidates.group(1).split(", ")
    if round_index >= 5 or round_index == 2:
        return "Reasoning: the scene is over.\nNext Speaker: <END CHAT>"
    if round_index == 1 and "Hamlet" in speakers:
        return "Reasoning: a new voice.\nNext Speaker: Ophelia"
    last = [m for m in body["messages"] if m["role"] == "user"][-1]["content"].split("\n\n")[-1].split(":")[0]
    following = speakers[(speakers.index(last) + 1) % len(speakers)] if last in speakers else speakers[0]
    return f"Reasoning: {following} reacts.\n**Next Speaker:** {following}"


def judge_verdict(body, garbage_for=()) -> str:
    """The judge: `FLAWS` for the dimension it is asked about (the last one with a trailing comma in a fence)."""
    system = body["messages"][0]["content"]
    dimension = next(d for d in DIMENSIONS if f"dimension, {d}:" in system or f"terms of {d}," in system)
    if any(f"simulated conversation of a scene from {book}" in system for book in garbage_for):
        return "What a lovely scene, no complaints!"
    flaws = [{"instance": f"line {i}", "type": dimension} | ({} if s is None else {"severity": s})
             for i, s in enumerate(FLAWS[dimension])]  # fmt: skip
    text = json.dumps({dimension: {"flaws": flaws}})
    return f"```json\n{text[:-2]},}}}}\n```" if dimension == DIMENSIONS[3] else f"Here it is: {text}"


def responder(body, garbage_for=()):
    if body["model"] == "judge":
        return judge_verdict(body, garbage_for)
    if body["model"] == "nsp":
        return next_speaker(body)
    return f"The wind rises ({len(body['messages'])})." if body["model"] == "env" else character_line(body)


def run_argv(base_url, output_dir, *extra):
    return ["run", "--test_file", str(TEST_SET), "--actor_model", "actor", "--base_url", base_url,
            "--env_model", "env", "--nsp_model", "nsp", "--judge_model", "judge", "--output_dir", str(output_dir),
            "--progress", "false", *extra]  # fmt: skip


def run_cli(argv):
    return coser_script.main(coser_script.make_parser().parse_args(argv))


def expected_scene_score(actor_rounds: int) -> float:
    scores = [max(0, min(100, 100 - 5 * (sum(1 if s is None else s for s in FLAWS[d]) - 0.3 * actor_rounds)))
              for d in DIMENSIONS]  # fmt: skip
    return sum(scores) / 4


# --- the test set -------------------------------------------------------------------------------------------------------


def test_reads_the_fixture_and_the_repositorys_example_set():
    hamlet, pride = read_coser_test_set(TEST_SET)
    assert (hamlet.id, pride.id) == (HAMLET, PRIDE)
    assert pride.speakers == ["Environment", "Mr. Darcy", "Elizabeth Bennet"]
    assert hamlet.speakers[-1] == "Environment" and pride.motivations["Mr. Darcy"].startswith("Darcy is struggling")
    assert hamlet.profiles["Horatio"].startswith("Hamlet's loyal friend from Wittenberg.\n\nHoratio is calm")
    data = testing_data.find_rolebench_data()
    example = data / "coser" / "example_test_set.json" if data is not None else None
    if example is None or not example.is_file():
        pytest.skip("CoSER's example test set is not in ../shared/data/coser (or $ROLEBENCH_DATA_DIR/coser)")
    cases = read_coser_test_set(example)
    assert [c.id for c in cases] == ["King Lear-17-0", "King Lear-16-0", "Othello-9-0"]
    assert all(c.speakers[-1] == "Environment" or "Environment" in c.speakers for c in cases)
    assert [len(c.reference) for c in cases] == [10, 10, 11]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c[1].pop("scenario"), r"case 1 \(Pride and Prejudice-7-1\): field 'scenario' must be"),
        (lambda c: c[0].update(i_c="0"), r"case 0: field 'i_c' must be an integer, got '0'"),
        (lambda c: c[1]["dialogues"].__setitem__(2, {"character": "Mr. Darcy"}),
         r"case 1 \(Pride and Prejudice-7-1\): field 'dialogues\[2\]' must be an object with string"),
        (lambda c: c[0].update(speaking_characters_w_env=["Environment"]), r"names no character besides"),
        (lambda c: c[1].update(plot="Hunsford"), r"case 1: field 'plot' must be an object"),
        (lambda c: c.append(dict(c[0])), r"case 2: id 'Hamlet-3-0' is already used by case 0"),
    ],
)  # fmt: skip
def test_malformed_test_file_names_case_and_field(tmp_path, change, message):
    cases = json.loads(TEST_SET.read_text())
    change(cases)
    path = tmp_path / "test_set.json"
    path.write_text(json.dumps(cases))
    with pytest.raises(DataFormatError, match=message):
        read_coser_test_set(path)


# --- pure parts -------------------------------------------------------------------------------------------------------


def test_inner_thoughts_are_removed():
    text = "[Fear.] (steps back) No!\n\n\n<system_thinking>plan\nmore</system_thinking>\n<think>x</think>Go [now]."
    assert remove_inner_thoughts(text) == "(steps back) No!\nGo ."
    assert remove_inner_thoughts("<role_thinking>only this</role_thinking>") == ""


def test_flaw_deduction_score():
    assert severity_total([{"severity": 5}, {}, {"severity": None}, {"severity": "4"}, {"severity": 2.0}]) == 7
    assert dimension_score([{"severity": 5}] * 6, actor_rounds=2) == 0  # 100 - 5 * (30 - 0.6) < 0
    assert dimension_score([{"severity": 1}], actor_rounds=10) == 100  # clipped at 100
    assert dimension_score([{"severity": 4}, {"severity": 3}], actor_rounds=5) == 100 - 5 * (7 - 1.5)


def test_judge_answers_are_read_robustly_and_garbage_is_refused():
    assert parse_flaws('{"Anthropomorphism": {"flaws": [{"type": "x", "severity": 2},],},}', "Anthropomorphism") == {
        "flaws": [{"type": "x", "severity": 2}]
    }
    assert (
        parse_flaws('Thinking... {"flaws": [{"instance": "a\nb"}]}', "Storyline Quality")["flaws"][0]["severity"] == 1
    )
    for garbage in ("Great scene!", '{"Anthropomorphism": {"flaws": "none"}}', '{"Anthropomorphism": 3}'):
        with pytest.raises(ValueError):
            parse_flaws(garbage, "Anthropomorphism")


def test_next_speaker_rules():
    case = CoserCase("b-1-0", "b", "s", "", ["Fool", "King Lear", "Environment"], ["Fool", "King Lear"])
    assert parse_next_speaker("1. Reasoning: Lear broods.\n2. **Next Speaker**: *King Lear*.") == "King Lear"
    assert choose_next("KING LEAR", case, "Fool", 0) == ("King Lear", True)
    assert choose_next(END_CHAT, case, "Fool", 5) == (END_CHAT, True)
    for name, round_index in ((END_CHAT, 4), ("Fool", 3), ("Cordelia", 3), ("", 3)):  # too early, same, nobody
        chosen, valid = choose_next(name, case, "Fool", round_index)
        assert not valid and chosen in ("King Lear", "Environment")
        assert choose_next(name, case, "Fool", round_index) == (chosen, False)  # the same draw on a re-run


def test_bleu_and_rouge_follow_the_reference_packages():
    rouge = pytest.importorskip("rouge")
    reference = [{"character": "Hamlet", "message": "Swear it. Rest, perturbed spirit."}]
    simulation = [{"role": "Hamlet", "content": "Hamlet: Swear it now. The spirit rests."}]
    bleu, rouge_l = bleu_rouge(reference, simulation)
    expected = rouge.Rouge().get_scores(simulation[0]["content"], "Hamlet: " + reference[0]["message"])[0]
    assert rouge_l == pytest.approx(expected["rouge-l"]["f"], abs=1e-12)
    assert 0 <= bleu < 1


# --- rescoring ----------------------------------------------------------------------------------------------------------


def test_rescore_reproduces_a_hand_written_results_file_in_the_originals_format(tmp_path, capsys):
    recorded = json.loads((FIXTURES / "original_results.json").read_text())
    recomputed = rescore_coser_results(read_results(FIXTURES / "original_results.json"))
    assert recomputed["mismatches"] == []
    assert recomputed["cases"] == {HAMLET: 84.5, PRIDE: 67.125}  # written by hand from the critiques
    assert recomputed["scores"]["avg"] == recorded["scores"]["avg"] == 75.8125
    assert run_cli(["rescore", str(FIXTURES / "original_results.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cases"] == {HAMLET: 84.5, PRIDE: 67.125}
    # a file with the means of BLEU and ROUGE-L but not the scenes' values: they are not checked, and not mismatches
    partial = json.loads(json.dumps(recorded))
    for case in partial["cases"].values():
        del case["critique"]["bleu"], case["critique"]["rouge_l"]
    (tmp_path / "no_bleu.json").write_text(json.dumps(partial))
    capsys.readouterr()
    assert run_cli(["rescore", str(tmp_path / "no_bleu.json")]) == 0
    assert "the recorded bleu and rouge_l cannot be recomputed: the file has no per-scene values" in (
        capsys.readouterr().err
    )
    # a recorded score that the critiques do not give is named, scene and field
    recorded["cases"][PRIDE]["critique"]["Anthropomorphism"]["flaws"].append({"severity": 1})
    (tmp_path / "edited.json").write_text(json.dumps(recorded))
    assert run_cli(["rescore", str(tmp_path / "edited.json")]) == 1
    err = capsys.readouterr().err
    assert f"scene {PRIDE}: Anthropomorphism recorded 79.5" in err and f"(scenes: {PRIDE})" in err
    assert "the run's means: avg recorded 75.8125" in err
    (tmp_path / "broken.json").write_text(
        json.dumps({"scores": {}, "cases": {HAMLET: {"score": 1, "simulation": []}}})
    )
    from rolellm.scripts.cli import main

    assert main(["coser", "rescore", str(tmp_path / "broken.json")]) == 2
    assert "case 'Hamlet-3-0': field 'critique.Storyline Consistency.flaws' must be a list" in capsys.readouterr().err


# --- a run ---------------------------------------------------------------------------------------------------------------


def test_a_run_plays_judges_scores_and_resumes_without_asking_again(tmp_path, capsys, monkeypatch):
    """The actor, Environment and next-speaker on one server, the judge on another: each gets only its own key (the
    main endpoint's `OPENAI_API_KEY`, the judge's `--judge_api_key_env`), and neither key is printed or written."""
    out = tmp_path / "run"
    monkeypatch.setenv("OPENAI_API_KEY", ACTOR_KEY)
    monkeypatch.setenv("COSER_JUDGE_KEY", JUDGE_KEY)
    with (
        ChatCompletionsServer(responder, api_key=ACTOR_KEY) as server,
        ChatCompletionsServer(responder, api_key=JUDGE_KEY) as judge,
    ):
        argv = run_argv(server.base_url, out, "--judge_base_url", judge.base_url, "--judge_api_key_env",
                        "COSER_JUDGE_KEY")  # fmt: skip
        assert run_cli(argv) == 0
        first = len(server.requests) + len(judge.requests)
        bodies = [r["body"] for r in server.requests]
        assert run_cli(argv) == 0  # again: everything from the log and the cache
        assert len(server.requests) + len(judge.requests) == first
        assert server.authorizations() == {f"Bearer {ACTOR_KEY}": len(server.requests) + len(server.model_listings)}
        assert judge.authorizations() == {f"Bearer {JUDGE_KEY}": len(judge.requests) + len(judge.model_listings)}
        assert {r["body"]["model"] for r in judge.requests} == {"judge"} and len(judge.requests) == 2 * 4
        from rolellm.scripts.cli import main

        saved = (out / "results.json").read_bytes()
        assert main(["coser", *argv, "--limit", "1"]) == 2  # would drop a scene's results
        assert (out / "results.json").read_bytes() == saved
        assert len(server.requests) + len(judge.requests) == first
    printed = capsys.readouterr()
    assert (
        f"results.json holds 2 scenes, 1 of them not in this run ({PRIDE}): it would be rewritten with 1"
        in printed.err
    )
    for written in [printed.out, printed.err, *(p.read_bytes().decode("utf-8", "replace") for p in out.rglob("*")
                                                if p.is_file())]:  # fmt: skip
        assert ACTOR_KEY not in written and JUDGE_KEY not in written
    results = json.loads((out / "results.json").read_text())
    assert set(results) >= {"scores", "cases", "run"} and list(results["cases"]) == [HAMLET, PRIDE]
    hamlet, pride = results["cases"][HAMLET], results["cases"][PRIDE]
    # <END CHAT> in round 2 is too early (a random main character or the Environment speaks), from round 5 it ends
    assert hamlet["rounds"] == pride["rounds"] == 6 and hamlet["ended"] == "end_chat"
    assert hamlet["nsp_fallbacks"] == 2 and pride["nsp_fallbacks"] == 1  # "Ophelia" is nobody; round 2's end
    assert [m["role"] for m in pride["simulation"]][:3] == ["Environment", "Mr. Darcy", "Elizabeth Bennet"]
    # the judge saw the simulation without thoughts, each message labelled with its speaker
    assert (
        "hides a thought" not in hamlet["simulation_str"]
        and "Hamlet: (Hamlet steps closer)" in hamlet["simulation_str"]
    )
    for case in (hamlet, pride):
        rounds = sum(m["role"] != "Environment" for m in case["simulation"])
        assert case["score"] == expected_scene_score(rounds)
        assert case["critique"]["Character Fidelity"]["flaws"][0]["severity"] == 1  # given none
    assert rescore_coser_results(results)["mismatches"] == []
    reference = reference_without_thoughts(read_coser_test_set(TEST_SET)[0].reference)  # compared without thoughts
    assert all("[" not in m["message"] for m in reference) and (
        hamlet["critique"]["bleu"],
        hamlet["critique"]["rouge_l"],
    ) == bleu_rouge(reference, hamlet["simulation"])
    assert results["run"]["judge_model"] == "judge" and "not gpt-4o-2024-08-06" in results["run"]["warning"]
    assert results["run"]["prompts"] == "rolellm"
    # what each agent saw: the others' messages without thoughts, labelled; its own as its turns
    darcy = [
        b for b in bodies if b["model"] == "actor" and b["messages"][0]["content"].startswith("You are Mr. Darcy")
    ]
    last = darcy[-1]["messages"]
    assert last[1]["role"] == "user" and last[1]["content"].startswith("The scene begins.\n\nEnvironment: The wind")
    assert any(m["role"] == "assistant" and "[Mr. Darcy hides a thought]" in m["content"] for m in last)
    assert all("hides a thought" not in m["content"] for m in last if m["role"] == "user")
    assert "Elizabeth Bennet: (Elizabeth Bennet steps closer)" in last[-1]["content"]
    # the report
    report = (out / "report.md").read_text()
    assert (
        "(conversations.html#Hamlet-3-0)" in report
        and 'id="Pride-and-Prejudice-7-1"' in (out / "conversations.html").read_text()
    )
    assert (out / "report.html").read_text().count("<svg") == 5
    assert len((out / LOG_NAME).read_text().splitlines()) == 2 * 2 * 6


def test_garbage_verdicts_are_counted_failures_not_scores(tmp_path, capsys):
    out = tmp_path / "run"
    with ChatCompletionsServer(lambda body: responder(body, garbage_for=("Pride and Prejudice",))) as server:
        assert run_cli(run_argv(server.base_url, out)) == 1
        judge_asks = [r for r in server.requests if r["body"]["model"] == "judge"]
    assert "rolellm coser: 4 judge answers failed, in 1 scene (pass --allow_partial" in capsys.readouterr().err
    assert len(judge_asks) == 4 + 4 * 3  # Hamlet's four, and three attempts of each of Pride's (with a reminder)
    results = json.loads((out / "results.json").read_text())
    pride = results["cases"][PRIDE]
    assert pride["score"] is None and set(pride["errors"]) == set(DIMENSIONS)
    assert "unparseable answer after 3 attempts" in pride["errors"]["Anthropomorphism"]
    # the run's means are Hamlet's alone
    assert results["scores"]["avg"] == results["cases"][HAMLET]["score"]
    # with every verdict garbage nothing is scored: exit 3
    with ChatCompletionsServer(lambda body: responder(body, garbage_for=("Hamlet", "Pride and Prejudice"))) as server:
        assert run_cli(run_argv(server.base_url, tmp_path / "none", "--allow_partial")) == 3
    assert "no scene could be scored" in capsys.readouterr().err


def test_dead_endpoint_and_usage_errors_exit_before_playing(tmp_path, capsys):
    from rolellm.scripts.cli import main

    with ChatCompletionsServer(responder, models=["actor", "env", "nsp"]) as server:  # no judge served
        assert main(["coser", *run_argv(server.base_url, tmp_path / "run")]) == 3
        assert {r["body"]["model"] for r in server.requests} <= {"judge"}  # the pre-flight's probe only
    assert not (tmp_path / "run" / LOG_NAME).exists()
    assert "refused the request for model 'judge'" in capsys.readouterr().err
    argv = run_argv("http://127.0.0.1:9/v1", tmp_path / "run")
    assert main(["coser", *[a for a in argv if a not in ("--judge_model", "judge")]]) == 2
    assert "--judge_model" in capsys.readouterr().err
    assert main(["coser", *argv, "--continue_from", "7"]) == 2  # checked before any request is sent
    assert "--continue_from 7 is more than the reference messages of ['Hamlet-3-0']" in capsys.readouterr().err
    assert main(["coser", *argv, "--cases", "Nope-1-1"]) == 2
    assert "--cases ['Nope-1-1'] are not in the test set" in capsys.readouterr().err
    assert main(["coser", *argv, "--dry_run"]) == 0


def test_a_refused_resume_leaves_the_folder_as_it_was(tmp_path, capsys):
    """`rolellm coser` into the folder of a run with other settings is exit 2 before any client is made, any request
    sent or any file written: every file stays byte for byte."""
    import gc

    from rolellm.scripts.cli import main

    out = tmp_path / "run"
    with ChatCompletionsServer(responder) as server:
        argv = ["coser", *run_argv(server.base_url, out, "--limit", "1")]
        assert main(argv) == 0
        gc.collect()  # the first run's cache connection closed, as when its process ends
        before = {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        assert {"coser_run.json", LOG_NAME, "results.json", "cache.sqlite"} <= set(before)
        asked = len(server.requests)
        capsys.readouterr()
        for extra, changed in [(["--max_new_tokens", "99"], "max_tokens differ"), (["--no_thoughts"], "no_thoughts")]:
            assert main([*argv, *extra]) == 2
            err = capsys.readouterr().err
            assert "holds turns of another run" in err and changed in err and "Traceback" not in err, err
            assert {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
        assert len(server.requests) == asked


def test_continue_from_starts_with_the_reference(tmp_path):
    out = tmp_path / "run"
    with ChatCompletionsServer(responder) as server:
        assert run_cli(run_argv(server.base_url, out, "--continue_from", "3", "--cases", HAMLET)) == 0
        judge = [r["body"] for r in server.requests if r["body"]["model"] == "judge"]
    [hamlet] = json.loads((out / "results.json").read_text())["cases"].values()
    reference = read_coser_test_set(TEST_SET)[0].reference
    assert [m["role"] for m in hamlet["simulation"][:3]] == ["Hamlet", "Horatio", "Hamlet"]
    assert hamlet["simulation"][1]["content"] == remove_inner_thoughts(reference[1]["message"])
    assert hamlet["simulation"][3]["role"] == "Environment"  # the reference's next speaker
    assert all("The first 3 messages of the simulated conversation are taken from the original" in b["messages"][0]["content"]
               for b in judge)  # fmt: skip


# --- the original's prompts from a checkout -----------------------------------------------------------------------------


FAKE_CHECKOUT = {
    "prompts.py": "critic_prompts = {\n"
    '    "self-play-deduct-template": "CRITIC of {book}: {dimension_name} ({dimension_brief}) mains '
    '{major_characters} {additional_instructions}\\n{dimension_criteria}",\n'
    '    "dimension_details": {'
    + ", ".join(
        f'"{d}": {{"dimension_brief": "brief {d}", "dimension_criteria": "criteria {{major_characters}}"}}'
        for d in DIMENSIONS
    )
    + "},\n}\n",
    "utils.py": (
        "import openai  # never imported by rolellm\n"
        "def get_character_prompt(book_name, character, character_profile, background, scenario, motivation, "
        "thoughtless=False, other_character_profiles=None, exclude_plot_summary=False, fixed_template=False, "
        "add_output_example=False, add_rag=False):\n"
        "    return f'You are {character} from {book_name}. ' + random.choice(['A', 'B']) + "
        "(' NO THOUGHTS' if thoughtless else ' THOUGHTS') + '\\n'\n"
        "def get_environment_prompt(major_characters, scenario):\n    return f'WORLD of {scenario}'\n"
        "def get_nsp_prompt(all_characters, scenario):\n    return f'PICK from {all_characters}'\n"
    ),
    "agent.py": (
        "class Agent:\n    def __init__(self, model, name, database, system_prompt=None):\n"
        "        if self.name not in special_characters:\n"
        "            self.system_prompt = self.system_prompt + ' BE BRIEF.'\n"
    ),
    "main.py": (
        "for character in characters:\n    character_agent.update('user', 'START.')\n"
        "if args.continue_from > 0:\n"
        "    additional_instructions = f'FIRST {args.continue_from} ARE REFERENCE.'\n"
    ),
}


def write_fake_checkout(folder: Path) -> Path:
    """A checkout laid out like the CoSER repository, with templates of its own (`gca_evaluation/*.py`)."""
    (folder / "gca_evaluation").mkdir(parents=True)
    for name, text in FAKE_CHECKOUT.items():
        (folder / "gca_evaluation" / name).write_text(text)
    return folder


def test_prompts_from_a_checkout_are_used_and_recorded(tmp_path, capsys):
    checkout = write_fake_checkout(tmp_path / "CoSER")
    prompts = checkout_prompts(checkout)
    hamlet = read_coser_test_set(TEST_SET)[0]
    assert prompts.actor(hamlet, "Hamlet", False, "actor") in ("You are Hamlet from Hamlet. A NO THOUGHTS BE BRIEF.",
                                                               "You are Hamlet from Hamlet. B NO THOUGHTS BE BRIEF.")  # fmt: skip
    assert prompts.actor(hamlet, "Hamlet", False, "actor") == prompts.actor(hamlet, "Hamlet", False, "actor")
    judge = prompts.judge(hamlet, "Anthropomorphism", 2)
    assert judge == ("CRITIC of Hamlet: Anthropomorphism (brief Anthropomorphism) mains Hamlet, Horatio FIRST 2 ARE "
                     "REFERENCE.\ncriteria {major_characters}")  # filled in the original's order  # fmt: skip
    out = tmp_path / "run"

    def answer(body):
        system = body["messages"][0]["content"]
        if body["model"] == "judge":
            dimension = re.search(r"Hamlet: (.+?) \(brief", system).group(1)
            return json.dumps({dimension: {"flaws": []}})
        if body["model"] == "nsp":
            return "Next Speaker: <END CHAT>"
        return "(nods)" if body["model"] == "env" else "[thinks] (bows) Aye."

    with ChatCompletionsServer(answer) as server:
        argv = run_argv(server.base_url, out, "--prompts_from", str(checkout), "--no_thoughts", "--cases", HAMLET)
        assert run_cli(argv) == 0
        systems = {r["body"]["messages"][0]["content"] for r in server.requests}
        firsts = {r["body"]["messages"][1]["content"][:6] for r in server.requests if r["body"]["model"] != "judge"}
    assert "WORLD of " + hamlet.scenario in systems and any(s.startswith("PICK from ['Hamlet'") for s in systems)
    assert any(s.endswith(" NO THOUGHTS BE BRIEF.") for s in systems) and firsts == {"START."}
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["prompts"] == str(checkout) and results["run"]["no_thoughts"] is True
    assert results["cases"][HAMLET]["simulation_str"].startswith("(bows) Aye.")  # as written, no speaker label
    from rolellm.scripts.cli import main

    os.remove(checkout / "gca_evaluation" / "agent.py")
    assert main(["coser", *run_argv("http://127.0.0.1:9/v1", tmp_path / "x", "--prompts_from", str(checkout))]) == 2
    assert "agent.py: not found; --prompts_from takes a checkout of the CoSER repository" in capsys.readouterr().err


# --- the reward function ------------------------------------------------------------------------------------------------


def test_the_flaw_judge_as_a_trl_reward_function():
    case = json.loads(TEST_SET.read_text())[0]
    before = [{"role": "Horatio", "content": "[Worried.] My lord, what did it say?"}]
    completions = [[{"role": "assistant", "content": "[Careful.] (looks away) Swear it, Horatio."}], "garbage please"]

    def answer(body):
        if "garbage please" in body["messages"][1]["content"]:
            return "I refuse."
        return judge_verdict(body)

    with ChatCompletionsServer(answer) as server:
        reward = make_coser_flaw_reward(ClientConfig("judge", base_url=server.base_url, progress=False))
        scores = reward(["p", "p"], completions, case=[case, json.dumps(case)], character=["Hamlet", "Hamlet"],
                        simulation=[before, before], completion_ids=[[1], [2]])  # fmt: skip
        judged = [r["body"]["messages"][1]["content"] for r in server.requests]
    assert reward.__name__ == "coser_flaw_reward"
    assert scores == [expected_scene_score(2), None]
    assert "Horatio: My lord, what did it say?\n\nHamlet: (looks away) Swear it, Horatio." in judged


# --- killed mid-way -----------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_midway_then_restart_loses_and_repeats_nothing(tmp_path):
    lock, answered_nsp, killed = threading.Lock(), [0], threading.Event()

    def crashing(body):
        if body["model"] == "nsp":
            with lock:
                answered_nsp[0] += 1
                hold = answered_nsp[0] > 5  # rounds 0-1 and round 2's messages are saved; one prediction hangs
            if hold and not killed.is_set():
                killed.wait(timeout=120)
                from rolellm.testing.server import Fault

                return Fault("server_error", status=503)
        return responder(body)

    out = tmp_path / "crashed"
    with ChatCompletionsServer(crashing) as server:
        job = ForkedCommand(["coser", *run_argv(server.base_url, out)])  # a process of its own, killed below
        log, deadline = out / LOG_NAME, time.monotonic() + 120
        while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 10):
            time.sleep(0.05)
        time.sleep(0.3)  # the job now waits on held predictions
        saved = log.read_text().splitlines()
        assert len(saved) == 10 and job.poll() is None  # round 2's other prediction is answered, in the cache only
        job.send_signal(signal.SIGKILL)
        assert job.wait() == -9
        assert not (out / "results.json").exists()
        killed.set()
        assert run_cli(run_argv(server.base_url, out)) == 0  # the restart, in this process (no second import cost)
        answered = server.answered_counts()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert log.read_text().splitlines()[: len(saved)] == saved  # what was saved stays, in order
    keys = [(r["id"], r["round"], r["kind"]) for r in records]
    assert len(keys) == len(set(keys)) == 2 * 2 * 6
    assert set(answered.values()) == {1}  # every request answered once over both runs
    # and the result is the one of a run that was never interrupted
    with ChatCompletionsServer(responder) as server:
        assert run_cli(run_argv(server.base_url, tmp_path / "clean")) == 0
    crashed, clean = (json.loads((folder / "results.json").read_text()) for folder in (out, tmp_path / "clean"))
    assert crashed["cases"] == clean["cases"] and crashed["scores"] == clean["scores"]
    shutil.rmtree(tmp_path / "clean")


def test_the_example_runs_offline(tmp_path):
    stdout = run_example("coser_eval.py", "--test_file", TEST_SET, "--output_dir", tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert "2 of 2 scenes scored; failures: 0" in stdout and "0 mismatches" in stdout
    for case in results["cases"].values():  # the canned judge finds one flaw of severity 3 per dimension
        rounds = sum(m["role"] != "Environment" for m in case["simulation"])
        assert case["rounds"] == 6 and case["score"] == min(100, 100 - 5 * (3 - 0.3 * rounds))


def test_the_flaw_judge_as_a_rubric_of_rolellm_dialogue(tmp_path):
    from rolellm.roles.profile import RoleProfile
    from rolellm.roles.release import write_release_profiles
    from rolellm.scripts import dialogue as dialogue_script

    write_release_profiles({"Po": RoleProfile("Po", "en", "A clumsy, cheerful panda.")}, tmp_path / "profiles")
    (tmp_path / "scenarios.yaml").write_text(
        "- role: Po\n  situation: The Jade Palace at dawn.\n  user_persona: A new student.\n  opening_line: Master?\n"
    )

    def answer(body):
        if body["model"] == "judge":
            return judge_verdict(body)
        return "Teach me more!" if body["model"] == "user-sim" else "[Be brave.] (bows) Skadoosh!"

    argv = ["--profiles", str(tmp_path / "profiles"), "--scenarios", str(tmp_path / "scenarios.yaml"), "--model", "po",
            "--user_model", "user-sim", "--judge_model", "judge", "--num_turns", "2", "--rubric", "coser_flaws",
            "--output_dir", str(tmp_path / "run"), "--progress", "false"]  # fmt: skip
    with ChatCompletionsServer(answer) as server:
        parser = dialogue_script.make_parser()
        assert dialogue_script.main(parser.parse_args([*argv, "--base_url", server.base_url])) == 0
        judged = [r["body"]["messages"] for r in server.requests if r["body"]["model"] == "judge"]
    scores = json.loads((tmp_path / "run" / "scores.json").read_text())
    assert scores["rubric"] == "coser_flaws" and scores["scale"] == [0, 100]
    assert scores["dimensions"] == ["Anthropomorphism", "Character Fidelity", "Storyline Quality"]
    [item] = scores["items"]
    # two lines of Po: 0.3 * 2 forgiven; FLAWS gives severities 3 + 1, one without (1), none
    assert item["scores"] == {"Anthropomorphism": 83.0, "Character Fidelity": 98.0, "Storyline Quality": 100}
    assert len(judged) == 3 and "original conversation" not in judged[0][0]["content"]
    assert (
        judged[0][1]["content"]
        == "User: Master?\n\nPo: (bows) Skadoosh!\n\nUser: Teach me more!\n\nPo: (bows) Skadoosh!"
    )
    assert "scale 0-100" in (tmp_path / "run" / "report.md").read_text()


# --- the command line and its output -------------------------------------------------------------------------------------


def test_the_run_help_says_what_each_flag_does_and_lists_only_flags_that_apply():
    import argparse

    parser = coser_script.make_parser()
    [run] = [a.choices["run"] for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    flags = {option: action for action in run._actions for option in action.option_strings}
    assert flags["--no_progress"].help == "Same as --progress false."
    assert flags["--judge_model"].help.startswith("Judge model: required, except with --dry_run")
    assert not {"--card_extras", "--card-extras"} & set(flags)  # CoSER's prompts, never a Character Card's


def test_a_dry_run_estimates_requests_tokens_and_batches(capsys):
    argv = [*run_argv("http://127.0.0.1:9/v1", "unused"), "--dry_run"]
    assert run_cli(argv) == 0
    out = capsys.readouterr().out
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in out.splitlines() if line.count("|") == 6
    }
    # two scenes of at most 20 rounds, a message and a prediction each; 4 judge calls a scene, each asked up to 3 times
    assert rows["actor and Environment"][:2] == ["actor, env", "40"] and rows["next speaker"][:2] == ["nsp", "40"]
    assert rows["judge"][:2] == ["judge", "24"]
    assert int(rows["judge"][3].strip(" |").replace(",", "")) == 24 * 4096  # the judge's budget a call
    assert "at most 72 batches one after the other" in out and "at each model's price" in out
    assert not Path("unused").exists()


def test_every_batch_summary_is_written_once_and_the_run_shows_its_rounds(tmp_path, capsys):
    import logging

    handler = logging.StreamHandler(sys.stderr)  # the command's logging (`setup_logging`), into this test's stderr
    logger = logging.getLogger("rolellm")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        with ChatCompletionsServer(responder) as server:
            argv = [
                a
                for a in run_argv(server.base_url, tmp_path / "run", "--limit", "1")
                if a not in ("--progress", "false")
            ]
            assert run_cli(argv) == 0
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    err = capsys.readouterr().err.replace("\r", "\n")
    assert err.count("Round 1: actor: requests=1") == 1 and err.count("Judge: Anthropomorphism: requests=1") == 1
    assert "round 1 of 20: 1 of 1 scenes open, 0s so far" in err
    assert re.search(r"round 2 of 20: 1 of 1 scenes open, \d+s so far; at most \S+ of play left", err)


def test_the_docs_say_a_request_in_flight_at_a_kill_is_sent_again():
    docs = (Path(__file__).parent.parent / "docs" / "coser.md").read_text(encoding="utf-8")
    resuming = " ".join(docs[docs.index("**Resuming.**") :].split("\n\n")[0].split())
    assert "nothing is lost and nothing is asked twice" not in resuming
    assert "in flight when the run was killed" in resuming and "sent once more" in resuming
