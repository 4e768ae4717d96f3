"""Preference data: `rolellm generate preferences` against the test server (sampling, the pairwise judge in both
orders, ROUGE-L), a judge that dies mid-run and the resume, SillyTavern chats, the preference configs that
`load_rolebench` and `load_dataset("json")` read, and `rolellm train --stage dpo` on what was written."""

import json
import shutil
from pathlib import Path

import datasets
import pytest
from fixtures.commands import ForkedCommand

from rolellm.data.builder import load_rolebench
from rolellm.data.layout import available_splits, get_spec
from rolellm.data.preference import read_sillytavern_chat
from rolellm.roles.profile import DataFormatError
from rolellm.scripts.cli import main
from rolellm.testing.server import ChatCompletionsServer, Fault


DEMO = Path(__file__).parent.parent / "examples" / "data" / "demo-rolebench"
PAIRS = "rolebench-eng/instruction-generalization/preference"


def model_answer(body):
    """Sample 0 speaks like Holmes, sample 1 plainly, sample 2 not at all (an empty answer, counted)."""
    return {0: "Elementary: observe every detail, my friend.", 1: "I do not know.", 2: " "}[body["seed"] % 3]


def judge_ranking(body):
    """Ranks first the answer that says "Elementary", wherever it is shown."""
    shown = json.loads(body["messages"][1]["content"].split("this question are:\n")[1].split("\nNow,")[0])
    best = next((a["model"] for a in shown if "Elementary" in a["answer"]), shown[0]["model"])
    return str([{"model": a["model"], "reason": "", "rank": 1 if a["model"] == best else 2} for a in shown])


def command(server_url, out, *extra):
    return ["generate", "preferences", "--data_dir", str(DEMO), "--dataset_configs", "en-instruction-general",
            "--profiles", str(DEMO), "--lang", "en", "--output_dir", str(out), "--model", "answerer",
            "--base_url", server_url, "--judge_model", "judge", "--num_samples", "3", "--max_retries", "0",
            "--test_fraction", "0.25", "--progress", "false", *extra]  # fmt: skip


def test_generate_preferences_resumes_after_the_judge_dies(tmp_path, capsys):
    out, alive = tmp_path / "data", {"judge": 6}

    def respond(body):
        if body["model"] == "answerer":
            return model_answer(body)
        alive["judge"] -= 1
        return judge_ranking(body) if alive["judge"] >= 0 else Fault("server_error", status=503)

    with ChatCompletionsServer(respond) as server:
        code = main(command(server.base_url, out, "--judge_max_concurrency", "1"))
        first = [r["body"]["model"] for r in server.requests]
        assert code == 1  # a partial run: the failures are listed, the pairs judged so far written
        failures = (out / "generation" / "preferences" / "failures.jsonl").read_text().splitlines()
        assert failures and all("503" in json.loads(line)["error"] for line in failures)
        written = load_rolebench("en-instruction-preference", data_dir=out, splits=["train"])["train"]
        assert len(written) + len(failures) <= 8 and len(written) >= 1  # the three questions judged, where they fell
        alive["judge"] = 10**6  # the judge is back
        server.requests.clear()
        assert main(command(server.base_url, out)) == 0
        second = [r["body"]["model"] for r in server.requests]
    questions = 8
    assert first.count("answerer") == 3 * questions and "answerer" not in second  # answers came from the cache
    assert 6 + second.count("judge") == first.count("judge")  # what was judged before is not asked again
    assert not (out / "generation" / "preferences" / "failures.jsonl").exists()
    pairs = load_rolebench("en-instruction-preference", data_dir=out)  # 8 questions: 6 train, 2 test
    rows = [*pairs["train"], *pairs["test"]]
    assert len(rows) == questions and all(r["chosen"].startswith("Elementary") for r in rows)
    assert {r["rejected"] for r in rows} == {"I do not know."} and {r["source"] for r in rows} == {"judge:pairwise"}
    plain = datasets.load_dataset("json", data_files=str(out / PAIRS / "train.jsonl"), split="train")
    assert plain.column_names == ["role", "question", "chosen", "rejected", "lang", "source"]
    unpaired = load_rolebench("en-instruction-unpaired", data_dir=out)["train"]
    assert sorted(set(unpaired["label"])) == [False, True] and len(unpaired) == 2 * len(pairs["train"])
    stats = json.loads((out / "generation" / "preferences" / "generation_stats.json").read_text())
    assert stats["dropped"] == {"empty_answer": questions} and stats["pairs"] == questions and stats["runs"] == 2
    text = capsys.readouterr().out
    assert "rolellm train --stage dpo --data_dir" in text


def test_rouge_l_ranking_needs_no_judge(tmp_path, capsys):
    out = tmp_path / "data"

    def respond(body):  # sample 0 shares words with the references, sample 1 none
        return "Observe, listen and deduce; practise the rules daily, my friend." if body["seed"] == 0 else "Zzz."

    with ChatCompletionsServer(respond) as server:
        args = [a for a in command(server.base_url, out) if a not in ("--judge_model", "judge")]
        at = args.index("--profiles")
        del args[at : at + 2]  # the profiles of --data_dir, as `rolellm train` and `evaluate` read them
        assert main([*args, "--judge", "rouge_l", "--num_samples", "2"]) == 0
        server.requests.clear()
        same = [a for a in command(server.base_url, tmp_path / "same") if a not in ("--judge_model", "judge")]
        server.responder = lambda body: "Observe."  # both samples one text: one candidate, nothing to pair
        assert main([*same, "--judge", "rouge_l", "--num_samples", "2"]) == 3  # nothing made: exit 3, counted
    pairs = load_rolebench("en-instruction-preference", data_dir=out)
    rows = [*pairs["train"], *pairs["test"]]
    stats = json.loads((out / "generation" / "preferences" / "generation_stats.json").read_text())
    assert rows and {r["rejected"] for r in rows} == {"Zzz."} and {r["source"] for r in rows} == {"judge:rouge_l"}
    assert len(rows) + sum(stats["dropped"].values()) == 8
    stats = json.loads((tmp_path / "same" / "generation" / "preferences" / "generation_stats.json").read_text())
    assert stats["dropped"] == {"fewer_than_two_judged": 8} and stats["pairs"] == 0
    assert "no pair made from 8 questions: {'fewer_than_two_judged': 8}" in capsys.readouterr().err


def write_chat(path, messages, header=None):
    header = header or {"user_name": "You", "character_name": "Sherlock Holmes", "create_date": "2025-1-1",
                        "chat_metadata": {}}  # fmt: skip
    path.write_text("\n".join(json.dumps(line) for line in [header, *messages]) + "\n", encoding="utf-8")
    return path


def test_sillytavern_chats_become_pairs(tmp_path, capsys):
    greeting = {"name": "Sherlock Holmes", "is_user": False, "mes": "Hello.", "swipes": ["Hello.", "Hi."],
                "swipe_id": 0}  # fmt: skip
    chat = write_chat(tmp_path / "chat.jsonl", [
        greeting,
        {"name": "You", "is_user": True, "mes": "Where is the dog?"},
        {"name": "Sherlock Holmes", "is_user": False, "mes": "In the kennel, obviously.",
         "swipes": ["It ran off.", "In the kennel, obviously.", "", "In the kennel, obviously."], "swipe_id": 1},
    ])  # fmt: skip
    rows, skipped = read_sillytavern_chat(chat)
    assert [(r["chosen"], r["rejected"]) for r in rows] == [("In the kennel, obviously.", "It ran off.")]
    assert skipped == {"one_swipe": 0, "no_question": 1, "same_as_kept": 1, "empty": 1}
    out = tmp_path / "data"
    assert main(["generate", "sillytavern", "--chats", str(chat), "--profiles", str(DEMO), "--lang", "en",
                 "--output_dir", str(out)]) == 0  # fmt: skip
    written = load_rolebench("en-instruction-preference", data_dir=out, splits=["train"])["train"]
    assert len(written) == 1 and written[0]["source"] == "sillytavern"  # the one question hashes to train

    header = {"user_name": "You", "character_name": "Moriarty", "chat_metadata": {}}
    stranger = write_chat(tmp_path / "stranger.jsonl", [
        {"name": "You", "is_user": True, "mes": "Who are you?"},
        {"name": "Moriarty", "is_user": False, "mes": "Your end.", "swipes": ["Your end.", "A friend."], "swipe_id": 0},
    ], header)  # fmt: skip
    assert main(["generate", "sillytavern", "--chats", str(stranger), "--profiles", str(DEMO), "--lang", "en",
                 "--output_dir", str(out)]) == 2  # fmt: skip
    assert "stranger.jsonl: the chat's character 'Moriarty' has no profile among" in capsys.readouterr().err
    bad = write_chat(tmp_path / "bad.jsonl", [{"name": "Sherlock Holmes", "mes": "x", "swipes": ["x"], "swipe_id": 4}])
    with pytest.raises(DataFormatError, match=r"bad.jsonl:2: field 'swipe_id' must index 'swipes'"):
        read_sillytavern_chat(bad)
    (tmp_path / "notchat.jsonl").write_text('{"mes": "hi"}\n')
    assert main(["generate", "sillytavern", "--chats", str(tmp_path / "notchat.jsonl"), "--profiles", str(DEMO),
                 "--output_dir", str(out)]) == 2  # fmt: skip
    assert "notchat.jsonl:1: not a SillyTavern chat export" in capsys.readouterr().err


def test_a_malformed_preference_file_names_file_line_and_field(tmp_path):
    folder = tmp_path / get_spec("zh-preference").release_dir
    folder.mkdir(parents=True)
    (folder / "train.jsonl").write_text('{"role": "李白", "question": "你好", "chosen": "幸会", "rejected": 1}\n')
    shutil.copy(folder / "train.jsonl", folder / "test.jsonl")
    with pytest.raises(DataFormatError, match=r"preference/train.jsonl:1: field 'rejected' must be a str, got 1"):
        load_rolebench("zh-preference", data_dir=tmp_path)


def test_repeated_pairs_are_kept_and_counted(tmp_path, caplog):
    from rolellm.data.preference import read_preference_rows

    row = {"role": "李白", "question": "你好", "chosen": "幸会", "rejected": "嗯", "lang": "zh"}
    lines = [row, {**row, "source": "sillytavern"}, {**row, "rejected": "好"}, row]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines), encoding="utf-8")
    with caplog.at_level("WARNING", logger="rolellm.data.preference"):
        rows = read_preference_rows(path, "preference")
    assert len(rows) == 4  # nothing dropped
    assert "2 row(s) repeat an earlier row exactly (line 2 repeats line 1, line 4 repeats line 1)" in caplog.text


def test_rubric_ranking_scores_each_answer(tmp_path):
    from rolellm.evaluation.multiturn.rubric import SINGLE_TURN_DIMENSIONS

    out = tmp_path / "data"

    def respond(body):
        if body["model"] == "answerer":
            return model_answer(body)
        text = " ".join(message["content"] for message in body["messages"])  # a re-ask repeats the prompt
        if "What is the best way" in text and "observe every detail" in text:
            return "no verdict"  # garbage, asked again, then counted as a failure (one question of each role)
        score = 5 if "observe every detail" in text else 2
        return json.dumps({d: {"score": score, "rationale": "."} for d in SINGLE_TURN_DIMENSIONS})

    with ChatCompletionsServer(respond) as server:
        code = main(
            [*command(server.base_url, out, "--judge", "rubric", "--num_samples", "2"), "--allow_partial", "true"]
        )
    assert code == 0  # one verdict failed: listed, and accepted with --allow_partial
    splits = available_splits(out, "en-instruction-preference")
    rows = [
        row
        for part in load_rolebench("en-instruction-preference", data_dir=out, splits=splits).values()
        for row in part
    ]
    assert len(rows) == 6 and all(r["chosen"].startswith("Elementary") and r["source"] == "judge:rubric" for r in rows)
    failures = (out / "generation" / "preferences" / "failures.jsonl").read_text().splitlines()
    assert len(failures) == 2 and all("What is the best way" in json.loads(line)["question"] for line in failures)
    stats = json.loads((out / "generation" / "preferences" / "generation_stats.json").read_text())
    assert stats["dropped"] == {"fewer_than_two_judged": 2}


@pytest.mark.slow
def test_sigkill_mid_judging_then_restart_asks_nothing_twice(tmp_path):
    import os
    import sqlite3
    import threading
    import time

    out, lock, judged, killed = tmp_path / "data", threading.Lock(), [0], threading.Event()

    def respond(body):
        if body["model"] == "answerer":
            return model_answer(body)
        with lock:
            judged[0] += 1
            hold = judged[0] > 5
        if hold and not killed.is_set():
            killed.wait(timeout=60)  # in flight when the job dies: never answered
            return Fault("server_error", status=503)
        return judge_ranking(body)

    def cached(path):
        try:
            with sqlite3.connect(path) as connection:
                return connection.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
        except sqlite3.OperationalError:
            return 0

    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    with ChatCompletionsServer(respond) as server:
        args = command(server.base_url, out, "--judge_max_concurrency", "2")
        job = ForkedCommand(args, env=env)  # a process of its own, killed below
        deadline = time.monotonic() + 120
        while cached(out / "judge_cache.sqlite") < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        job.kill()  # SIGKILL: no cleanup runs
        assert job.wait() == -9 and cached(out / "judge_cache.sqlite") == 5
        killed.set()
        assert main(args) == 0
        answered = server.answered_counts()
    assert set(answered.values()) == {1}  # every answer and every verdict asked for once over both runs
    assert sum(1 for r in server.answered if r["model"] == "answerer") == 3 * 8
    pairs = load_rolebench("en-instruction-preference", data_dir=out)
    assert sum(len(split) for split in pairs.values()) == 8
