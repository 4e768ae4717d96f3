"""Multi-turn evaluation: scenarios, simulated-user conversations with the tiny local model, resuming after SIGKILL.

The test chat-completions server plays the user simulator and two rubric judges; the tiny local Llama (through
`LocalChatClient`) is the evaluated model.
"""

import json
import re
import signal
import threading
import time
from dataclasses import replace

import pytest
from fixtures.commands import ForkedCommand
from fixtures.examples import run_example

from rolellm.clients.local import LocalChatClient
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.evaluation.multiturn.dialogue import (
    TRANSCRIPTS_NAME,
    TURNS_NAME,
    Scenario,
    generate_scenarios,
    read_scenarios,
    read_transcripts,
    run_dialogues,
    scenarios_from_card,
)
from rolellm.evaluation.multiturn.rubric import DIMENSIONS
from rolellm.roles.character_card import profile_from_card
from rolellm.roles.profile import DataFormatError, RoleProfile
from rolellm.roles.prompts import build_system_instruction
from rolellm.roles.release import write_release_profiles
from rolellm.roles.resolve import load_profiles
from rolellm.scripts import dialogue as dialogue_script
from rolellm.testing.server import ChatCompletionsServer, Fault


ROLES = {
    "Jack Sparrow": "A witty, unpredictable pirate captain of the Black Pearl.",
    "Sherlock Holmes": "A brilliant, aloof consulting detective in Victorian London.",
    "Po": "A clumsy, cheerful panda who became the Dragon Warrior.",
}
SITUATIONS = ["A quiet evening, nothing is happening.", "A storm is coming and everyone is nervous."]


def write_inputs(folder, roles=ROLES, situations=SITUATIONS, num_turns=4):
    """Release-layout profiles for `roles` and a YAML file with one scenario per role and situation."""
    profiles = {name: RoleProfile(name, "en", description) for name, description in roles.items()}
    write_release_profiles(profiles, folder / "profiles")
    lines = []
    for name in roles:
        for n, situation in enumerate(situations, start=1):
            lines += [f"- role: {name}", f"  situation: {situation}", f"  user_persona: Visitor {n} of {name}",
                      f"  opening_line: Hello {name}, I am visitor {n}.", f"  num_turns: {num_turns}"]  # fmt: skip
    (folder / "scenarios.yaml").write_text("\n".join(lines) + "\n")
    return folder / "profiles", folder / "scenarios.yaml"


def simulated_user_line(body) -> str:
    """The user simulator: who it is (from its prompt) and which turn it is (from the swapped conversation)."""
    persona = re.search(r"Who you are: (.*)", body["messages"][0]["content"]).group(1)
    turn = sum(m["role"] == "assistant" for m in body["messages"]) + 1
    return f"User: {persona} asks question {turn}."  # the "User:" label is stripped by parse_user_line


def judge_answer(body) -> str:
    """Judges score by the length of the conversation they were shown; judge-b is one point more generous."""
    content = body["messages"][1]["content"]
    dimensions = re.findall(r'^- "(\w+)"', content, re.M)
    conversation = content.split("<conversation>")[1].split("</conversation>")[0]
    score = 1 + len(conversation) % 4 + (body["model"] == "judge-b")
    return json.dumps({d: {"score": score, "rationale": f"{d} seen"} for d in dimensions})


def responder(body):
    return simulated_user_line(body) if body["model"] == "user-sim" else judge_answer(body)


def cli_args(profiles, scenarios, model, base_url, output_dir, judges=("judge-a", "judge-b")):
    argv = ["--profiles", str(profiles), "--scenarios", str(scenarios), "--model", str(model),
            "--chat_template", "chatml", "--max_new_tokens", "12", "--user_model", "user-sim",
            "--user_base_url", base_url, "--judge_base_url", base_url, "--num_turns", "4",
            "--output_dir", str(output_dir)]  # fmt: skip
    return argv + (["--judge_model", *judges] if judges else [])


def run_cli(argv):
    return dialogue_script.main(dialogue_script.make_parser().parse_args(argv))


# --- scenarios -------------------------------------------------------------------------------------------------------


def test_read_scenarios_from_yaml_and_jsonl(tmp_path):
    _, path = write_inputs(tmp_path)
    scenarios = read_scenarios(path)
    assert [s.id for s in scenarios] == ["jacksparrow-1", "jacksparrow-2", "sherlockholmes-1", "sherlockholmes-2",
                                         "po-1", "po-2"]  # fmt: skip
    assert scenarios[3].situation == SITUATIONS[1] and scenarios[3].num_turns == 4
    jsonl = tmp_path / "scenarios.jsonl"
    record = {"role": "Po", "situation": "s", "user_persona": "p", "opening_line": "o", "id": "x", "lang": "en"}
    jsonl.write_text(json.dumps(record) + "\n\n" + json.dumps({**record, "id": "y", "num_turns": 2}) + "\n")
    assert [(s.id, s.num_turns) for s in read_scenarios(jsonl)] == [("x", 4), ("y", 2)]


@pytest.mark.parametrize(
    "text, suffix, message",
    [
        ("- role: Po\n  situation: s\n  user_persona: p\n  opening_line: o\n- role: Po\n  situation: ''\n",
         ".yaml", r"scenarios.yaml:5: field 'situation' must be a non-empty string"),
        ("- role: Po\n  situation: s\n  user_persona: p\n", ".yaml",
         r"scenarios.yaml:1: field 'opening_line' is missing"),
        ("- role: Po\n  situation: s\n  user_persona: p\n  opening_line: o\n  num_turns: two\n", ".yaml",
         r"scenarios.yaml:1: field 'num_turns' must be a positive integer, got 'two'"),
        ("- role: Po\n  situation: s\n  user_persona: p\n  opening_line: o\n  mood: sad\n", ".yaml",
         r"scenarios.yaml:1: unknown fields \['mood'\]"),
        ("role: Po\n", ".yaml", r"scenarios.yaml:1: expected a YAML list"),
        ('{"role": "Po", "situation": "s", "user_persona": "p", "opening_line": "o"}\n{"role": "Po"', ".jsonl",
         r"scenarios.jsonl:2: not valid JSON"),
        ('{"role": "Po", "situation": "s", "user_persona": "p", "opening_line": "o", "id": "a"}\n'
         '{"role": "Po", "situation": "s", "user_persona": "p", "opening_line": "o", "id": "a"}\n', ".jsonl",
         r"scenarios.jsonl:2: field 'id' 'a' is already used at .*scenarios.jsonl:1"),
        ("", ".yaml", r"scenarios.yaml: the file is empty"),
        ("x", ".txt", r"ends in .yaml, .yml or .jsonl"),
    ],
)  # fmt: skip
def test_scenario_file_errors_name_file_line_and_field(tmp_path, text, suffix, message):
    path = tmp_path / f"scenarios{suffix}"
    path.write_text(text)
    with pytest.raises(DataFormatError, match=message):
        read_scenarios(path)


def test_scenarios_from_a_character_card():
    data = {"name": "Seraphina", "description": "A forest guardian.",
            "scenario": "{{user}} wakes up in {{char}}'s glade.", "first_mes": "*{{char}} smiles* Rest."}  # fmt: skip
    card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": data}
    [scenario] = scenarios_from_card(profile_from_card(card), num_turns=3)
    assert (scenario.id, scenario.source, scenario.num_turns) == ("seraphina-card", "card", 3)
    assert scenario.situation == "User wakes up in Seraphina's glade."
    assert scenario.greeting == "*Seraphina smiles* Rest." and scenario.opening_line == ""
    assert scenarios_from_card(profile_from_card({**card, "data": {"name": "Nobody"}})) == []
    assert scenarios_from_card(RoleProfile("Po", "en")) == []


def test_generated_scenarios_are_validated_reasked_and_reproducible(tmp_path):
    good = json.dumps([{"situation": f"Scene {i}", "user_persona": f"Person {i}", "opening_line": f"Hi {i}"}
                       for i in range(2)])  # fmt: skip
    asked = []

    def writer(body):
        asked.append(body)
        role = "Po" if '"Po"' in body["messages"][0]["content"] else "other"
        if role == "other":
            return "Sorry, no."  # never a JSON list: a counted failure
        return good if len(body["messages"]) > 1 else good.replace("Person 1", "")  # an empty field first

    profiles = [RoleProfile("Po", "en", "A panda."), RoleProfile("Tai Lung", "en", "A snow leopard.")]
    with ChatCompletionsServer(writer) as server:
        client = OpenAIChatClient("writer", base_url=server.base_url, cache_path=tmp_path / "c.sqlite", progress=False)
        scenarios, failures = generate_scenarios(profiles, client, num_scenarios=2, num_turns=3, seed=7)
        sent = len(server.requests)
        again, _ = generate_scenarios(profiles, client, num_scenarios=2, num_turns=3, seed=7)
    assert [(s.id, s.user_persona, s.num_turns, s.source) for s in scenarios] == [
        ("po-gen-1", "Person 0", 3, "generated"), ("po-gen-2", "Person 1", 3, "generated")]  # fmt: skip
    assert again == scenarios
    po_reask = next(b for b in asked if '"Po"' in b["messages"][0]["content"] and len(b["messages"]) > 1)
    assert "field 'user_persona' must be a non-empty string" in po_reask["messages"][-1]["content"]
    assert list(failures) == ["Tai Lung"] and "unparseable answer after 3 attempts" in failures["Tai Lung"]
    assert all(body["temperature"] == 0.7 and body["seed"] % 1_000_000 == 7 for body in asked)
    assert len(server.requests) - sent == 3  # the re-run asks the failed role again, answers Po from the cache


# --- conversations ---------------------------------------------------------------------------------------------------


def test_three_roles_two_scenarios_four_turns_end_to_end(tmp_path, tiny_model_path):
    profiles, scenarios = write_inputs(tmp_path)
    out = tmp_path / "run"
    with ChatCompletionsServer(responder) as server:
        assert run_cli(cli_args(profiles, scenarios, tiny_model_path, server.base_url, out)) == 0
        bodies = [r["body"] for r in server.requests]
    transcripts = read_transcripts(out / TRANSCRIPTS_NAME)
    assert [t["id"] for t in transcripts] == [s.id for s in read_scenarios(scenarios)]
    assert all(t["complete"] and t["error"] is None and len(t["turns"]) == 4 for t in transcripts)
    assert len((out / TURNS_NAME).read_text().splitlines()) == 24
    first = transcripts[0]
    assert (first["role"], first["model"], first["user_model"]) == ("Jack Sparrow", str(tiny_model_path), "user-sim")
    assert [turn["user"] for turn in first["turns"]] == [
        "Hello Jack Sparrow, I am visitor 1.",
        *(f"Visitor 1 of Jack Sparrow asks question {n}." for n in (2, 3, 4)),
    ]
    # the simulator saw the role's replies as the other side of the conversation, in its persona and situation
    simulated = [b for b in bodies if b["model"] == "user-sim"]
    assert len(simulated) == 6 * 3
    for body in simulated:
        persona = re.search(r"Who you are: (.*)", body["messages"][0]["content"]).group(1)
        transcript = next(t for t in transcripts if t["scenario"]["user_persona"] == persona)
        assert transcript["scenario"]["situation"] in body["messages"][0]["content"]
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        assert body["messages"][-1] == {"role": "user", "content": transcript["turns"][turn - 1]["assistant"]}
    # the role model answered the role's system instruction and the conversation so far
    client = LocalChatClient(tiny_model_path, max_new_tokens=12, chat_template="chatml", progress=False)
    system = build_system_instruction(load_profiles(profiles)["Jack Sparrow"])
    assert system.startswith("You are Jack Sparrow, your description is: " + ROLES["Jack Sparrow"])
    messages = [{"role": "system", "content": system}]
    for turn in first["turns"][:2]:
        messages += [{"role": "user", "content": turn["user"]}, {"role": "assistant", "content": turn["assistant"]}]
    [result] = client.generate([messages[:-1]])
    assert result.text.strip() == first["turns"][1]["assistant"]
    # two judges scored every transcript on every dimension, with their agreement and the answer lengths
    scores = json.loads((out / "scores.json").read_text())
    # the report: every conversation linked from report.md and readable in transcripts.html
    report, conversations = (out / "report.md").read_text(), (out / "transcripts.html").read_text()
    assert all(f"(transcripts.html#{t['id']})" in report and f'id="{t["id"]}"' in conversations for t in transcripts)
    assert (out / "report.html").read_text().count("<svg") == 2
    assert scores["judges"] == ["judge-a", "judge-b"] and scores["dimensions"] == list(DIMENSIONS)
    assert len([b for b in bodies if b["model"] in ("judge-a", "judge-b")]) == 12
    assert scores["failures"]["count"] == 0 and len(scores["items"]) == 6
    for item in scores["items"]:
        a, b = item["judges"]["judge-a"]["scores"], item["judges"]["judge-b"]["scores"]
        assert all(b[d] == a[d] + 1 and item["scores"][d] == a[d] + 0.5 for d in DIMENSIONS)
        assert item["length"]["answers"] == 4
    assert set(scores["agreement"]) == set(DIMENSIONS)
    assert scores["agreement"]["memory"]["mean_spearman"] == 1.0 and scores["agreement"]["memory"]["n"] == 6
    assert set(scores["summary"]["per_role"]) == set(ROLES)
    scenarios_written = [json.loads(line) for line in (out / "scenarios.jsonl").read_text().splitlines()]
    assert len(scenarios_written) == 6


def test_resume_replays_only_missing_turns_and_drops_a_torn_line(tmp_path):
    scenarios = [Scenario("Po", f"Scene {i}", f"Student {i}", f"Teach me {i}!", num_turns=3) for i in range(2)]
    profiles = {"Po": RoleProfile("Po", "en", "A panda.")}
    with ChatCompletionsServer(lambda body: f"reply {len(body['messages'])}") as server:
        client = OpenAIChatClient("m", base_url=server.base_url, progress=False)  # no cache: only the log resumes
        full = run_dialogues(scenarios, profiles, client, client, tmp_path)
        log = (tmp_path / TURNS_NAME).read_text()
        lines = log.splitlines(keepends=True)
        assert len(lines) == 6
        # a crash after 3 saved turns and half of the 4th
        (tmp_path / TURNS_NAME).write_text("".join(lines[:3]) + lines[3][: len(lines[3]) // 2])
        before = len(server.requests)
        resumed = run_dialogues(scenarios, profiles, client, client, tmp_path)
        sent = server.requests[before:]
        resumed_log = (tmp_path / TURNS_NAME).read_text()
        with pytest.raises(ValueError, match="holds turns of another run"):
            other = OpenAIChatClient("other", base_url=server.base_url, progress=False)
            run_dialogues(scenarios, profiles, other, client, tmp_path)
        with pytest.raises(ValueError, match=r"holds turns of another run \(scenarios differ\)"):
            moved = [replace(s, situation="Elsewhere.") for s in scenarios]
            run_dialogues(moved, profiles, client, client, tmp_path)
        # more turns go on from the saved ones; fewer show the first ones
        before = len(server.requests)
        longer = run_dialogues([replace(s, num_turns=4) for s in scenarios], profiles, client, client, tmp_path)
        assert len(server.requests) - before == 2 * 2 and [len(t["turns"]) for t in longer] == [4, 4]
        assert [t["turns"][:3] for t in longer] == [t["turns"] for t in full]
        shorter = run_dialogues([replace(s, num_turns=2) for s in scenarios], profiles, client, client, tmp_path)
        assert [t["turns"] for t in shorter] == [t["turns"][:2] for t in full] and shorter[0]["complete"]
    assert resumed == full
    assert resumed_log.startswith("".join(lines[:3])) and sorted(resumed_log.splitlines()) == sorted(log.splitlines())
    # 3 turns missing: 3 role answers and 3 simulator lines
    assert len(sent) == 6


def test_a_failed_request_stops_that_conversation_only(tmp_path):
    scenarios = [Scenario("Po", f"Scene {i}", f"Student {i}", f"Teach me {i}!", num_turns=2) for i in range(2)]

    def flaky(body):
        if body["model"] == "user-sim" and "Student 1" in body["messages"][0]["content"]:
            return Fault("server_error", status=500)
        return "Skadoosh!"

    with ChatCompletionsServer(flaky) as server:
        user = OpenAIChatClient("user-sim", base_url=server.base_url, max_retries=0, progress=False)
        model = OpenAIChatClient("m", base_url=server.base_url, progress=False)
        transcripts = run_dialogues(scenarios, {"Po": RoleProfile("Po", "en", "A panda.")}, model, user, tmp_path)
    assert [len(t["turns"]) for t in transcripts] == [2, 1]
    assert transcripts[0]["complete"] and not transcripts[1]["complete"]
    assert transcripts[1]["error"].startswith("user simulator, turn 2:")
    with pytest.raises(ValueError, match=r"scenarios name roles with no profile: \['Po'\]"):
        run_dialogues(scenarios, {}, model, user, tmp_path / "x")


@pytest.mark.slow
def test_sigkill_midway_then_restart_loses_and_repeats_nothing(tmp_path, tiny_model_path):
    profiles, scenarios = write_inputs(tmp_path, situations=SITUATIONS[:1])  # 3 conversations
    lock, started, killed = threading.Lock(), [0], threading.Event()

    def crashing(body):
        if body["model"] == "user-sim":
            with lock:
                started[0] += 1
                hold = started[0] > 3  # turn 2's lines are answered, turn 3's are held until the job dies
            if hold and not killed.is_set():
                killed.wait(timeout=120)
                return Fault("server_error", status=503)
        return responder(body)

    out = tmp_path / "crashed"
    with ChatCompletionsServer(crashing) as server:
        argv = cli_args(profiles, scenarios, tiny_model_path, server.base_url, out, judges=())
        job = ForkedCommand(["dialogue", *argv])  # a process of its own, killed below
        deadline = time.monotonic() + 120
        turns = out / TURNS_NAME
        while time.monotonic() < deadline and (not turns.exists() or len(turns.read_text().splitlines()) < 6):
            time.sleep(0.05)
        time.sleep(0.3)  # the job is now waiting on turn 3's held simulator requests
        assert len(turns.read_text().splitlines()) == 6 and job.poll() is None
        job.send_signal(signal.SIGKILL)
        assert job.wait() == -9
        assert not (out / TRANSCRIPTS_NAME).exists()
        killed.set()
        assert run_cli(argv) == 0  # the restart, in this process: a new process would pay its imports again
        answered = server.answered_counts()
    # every turn is in the log once, in order
    records = [json.loads(line) for line in turns.read_text().splitlines()]
    assert sorted((r["id"], r["turn"]) for r in records) == sorted(
        (f"{key}-1", turn) for key in ("jacksparrow", "sherlockholmes", "po") for turn in range(1, 5)
    )
    # every simulator request was answered exactly once over both runs (the re-run took turn 2 from the cache)
    simulator = {key: count for key, count in answered.items() if json.loads(key)["model"] == "user-sim"}
    assert len(simulator) == 3 * 3 and set(simulator.values()) == {1}
    # and the result is the one of a run that was never interrupted
    with ChatCompletionsServer(responder) as server:
        assert run_cli(cli_args(profiles, scenarios, tiny_model_path, server.base_url, tmp_path / "clean", ())) == 0
    assert read_transcripts(out / TRANSCRIPTS_NAME) == read_transcripts(tmp_path / "clean" / TRANSCRIPTS_NAME)


def test_cli_generates_scenarios_and_exits_1_on_judge_failures(tmp_path, capsys):
    profiles, _ = write_inputs(tmp_path, roles={"Po": ROLES["Po"]})
    written = json.dumps([{"situation": "The Jade Palace.", "user_persona": "A student.", "opening_line": "Master?"}])

    def models(body):
        if body["model"] == "user-sim" and body["messages"][0]["role"] == "user":  # the scenario writer's prompt
            return written
        if body["model"] == "stubborn-judge":
            return "Ten out of ten!"
        return "Skadoosh!" if body["model"] == "role-model" else responder(body)

    argv = ["--profiles", str(profiles), "--model", "role-model", "--user_model", "user-sim", "--num_scenarios", "1",
            "--num_turns", "2", "--output_dir", str(tmp_path / "run"), "--judge_model", "judge-a", "stubborn-judge"]  # fmt: skip
    with ChatCompletionsServer(models) as server:
        assert run_cli([*argv, "--base_url", server.base_url]) == 1
        assert "1 conversations or judge answers failed (pass --allow_partial" in capsys.readouterr().err
        assert run_cli([*argv, "--base_url", server.base_url, "--allow_partial"]) == 0
    [scenario] = [json.loads(line) for line in (tmp_path / "run" / "scenarios.jsonl").read_text().splitlines()]
    assert (scenario["id"], scenario["source"], scenario["num_turns"]) == ("po-gen-1", "generated", 2)
    [transcript] = read_transcripts(tmp_path / "run" / TRANSCRIPTS_NAME)
    assert [t["assistant"] for t in transcript["turns"]] == ["Skadoosh!", "Skadoosh!"]
    scores = json.loads((tmp_path / "run" / "scores.json").read_text())
    assert scores["failures"]["count"] == 1 and scores["failures"]["reasons"][0]["judge"] == "stubborn-judge"
    assert scores["items"][0]["scores"]["memory"] == scores["items"][0]["judges"]["judge-a"]["scores"]["memory"]
    # with the stubborn judge alone nothing is scored: exit 3, as `rolellm evaluate` does, even with --allow_partial
    alone = [*argv[:-2], "stubborn-judge", "--output_dir", str(tmp_path / "alone"), "--allow_partial"]
    with ChatCompletionsServer(models) as server:
        assert run_cli([*alone, "--base_url", server.base_url]) == 3
    assert "no judge answer could be read (1 failed), so nothing was scored" in capsys.readouterr().err
    # nothing that looks like a finished result: the transcripts only (a radar of n/a is tested in test_report_html)
    written = {path.name for path in (tmp_path / "alone").iterdir()}
    assert TRANSCRIPTS_NAME in written and not written & {"scores.json", "report.md", "report.html", "radar.svg"}


def folder_bytes(folder):
    """Every file under `folder` by its relative path, with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_a_refused_resume_leaves_the_folder_as_it_was(tmp_path, capsys):
    """`rolellm dialogue` into the folder of another run (other settings, other scenarios: from a file, or written by
    the user model) is exit 2 before anything is asked or written: every file stays byte for byte."""
    import gc

    from rolellm.scripts.cli import main

    profiles, scenarios = write_inputs(tmp_path, roles={"Po": ROLES["Po"]}, situations=SITUATIONS[:1], num_turns=2)
    written = json.dumps([{"situation": "The Jade Palace.", "user_persona": "A student.", "opening_line": "Master?"}])

    def models(body):
        if body["model"] == "user-sim" and body["messages"][0]["role"] == "user":  # the scenario writer's prompt
            return written
        return "Skadoosh!" if body["model"] == "role-model" else responder(body)

    with ChatCompletionsServer(models) as server:
        argv = ["--profiles", str(profiles), "--model", "role-model", "--user_model", "user-sim", "--judge_model",
                "judge-a", "--base_url", server.base_url]  # fmt: skip
        from_file = [*argv, "--scenarios", str(scenarios), "--output_dir", str(tmp_path / "file")]
        generated = [*argv, "--num_scenarios", "1", "--num_turns", "2", "--output_dir", str(tmp_path / "gen")]
        assert run_cli(from_file) == 0 and run_cli(generated) == 0
        gc.collect()  # the first runs' cache connections closed, as when their process ends
        before = {name: folder_bytes(tmp_path / name) for name in ("file", "gen")}
        assert {"dialogue_config.json", "scenarios.jsonl", TURNS_NAME, "scores.json"} <= set(before["file"])
        asked = len(server.requests)
        moved = tmp_path / "moved.yaml"
        moved.write_text(scenarios.read_text().replace(SITUATIONS[0], "A storm over the Jade Palace."))
        capsys.readouterr()
        for argv, changed in [
            ([*from_file, "--max_new_tokens", "7"], "max_tokens differ"),
            ([*from_file, "--scenarios", str(moved)], "scenarios differ"),
            ([*generated, "--user_model", "other-sim"], "user_model differ"),
        ]:
            assert main(["dialogue", *argv]) == 2
            err = capsys.readouterr().err
            assert "holds turns of another run" in err and changed in err and "Traceback" not in err, err
        assert {name: folder_bytes(tmp_path / name) for name in ("file", "gen")} == before
        assert len(server.requests) == asked


@pytest.mark.slow
def test_multi_turn_example_runs_offline(tmp_path):
    stdout = run_example("multi_turn_eval.py", "--output_dir", tmp_path)
    transcripts = read_transcripts(tmp_path / TRANSCRIPTS_NAME)
    assert [len(t["turns"]) for t in transcripts] == [4, 3, 4, 4, 4, 4] and all(t["complete"] for t in transcripts)
    assert json.loads((tmp_path / "scores.json").read_text())["failures"]["count"] == 0
    agreement = json.loads((tmp_path / "agreement.json").read_text())
    assert set(agreement["scores"]) == {"character_consistency", "speaking_style", "in_character"}
    assert "| character_consistency | 6 |" in stdout
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Agreement with people" in report and "| 孙悟空 |" in report
    assert "孙悟空" in (tmp_path / "radar.svg").read_text(encoding="utf-8")
    assert (tmp_path / "transcripts.html").is_file()
