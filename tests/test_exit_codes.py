"""What a user sees when work cannot be done, through the command line as they run it: the exit code, a short
message naming the cause, and no output that looks like a finished result."""

import json
import socket

import pytest
from fixtures.mini_release import write_mini_release

from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.release import write_release_profiles
from rolellm.scripts.cli import main
from rolellm.testing.server import ChatCompletionsServer, Fault


QUESTIONS = ["Where is the rum?", "Who are you?", "What is the cursed gold?", "Where is the Pearl?"]


@pytest.fixture
def job(tmp_path):
    """A RoleGPT job on one role and four instructions: the arguments up to the endpoint."""
    lines = [("Gibbs", "The Pearl is gone, Captain!"), ("Jack Sparrow", "Then we take her back, savvy?")]
    dialogue = [Utterance(0, 0, speaker, content) for speaker, content in lines]
    profile = RoleProfile("Jack Sparrow", "en", "A witty pirate captain.", ["Savvy?"], dialogue=dialogue)
    write_release_profiles({"Jack Sparrow": profile}, tmp_path / "release")
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"instruction": q}) + "\n" for q in QUESTIONS), encoding="utf-8")
    return [
        "generate", "rolegpt", "--profiles", str(tmp_path / "release"), "--instructions", str(instructions),
        "--prompt_mode", "zero_shot", "--num_samples", "2", "--output_dir", str(tmp_path / "out"),
        "--model", "test-model", "--max_retries", "1",
    ]  # fmt: skip


def answer(body):
    return "Arr, that be a fine question, savvy?"


def messages(err: str) -> list[str]:
    """The lines rolellm itself wrote to stderr (progress bars left out)."""
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith("rolellm ")]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_all_done_is_0_with_no_failure_file(job, tmp_path):
    with ChatCompletionsServer(answer) as server:
        assert main([*job, "--base_url", server.base_url]) == 0
    assert (tmp_path / "out" / "rolebench-eng" / "instruction-generalization" / "general" / "train.jsonl").is_file()
    assert not (tmp_path / "out" / "generation" / "rolegpt" / "failures.jsonl").exists()


def test_some_rows_failed_is_1_with_the_rows_listed(job, tmp_path, capsys):
    def responder(body):
        return Fault("server_error", status=422) if "cursed" in body["messages"][-1]["content"] else answer(body)

    with ChatCompletionsServer(responder) as server:
        assert main([*job, "--base_url", server.base_url]) == 1
        failures = (tmp_path / "out" / "generation" / "rolegpt" / "failures.jsonl").read_text().splitlines()
        failures = [json.loads(line) for line in failures]
        assert main([*job, "--base_url", server.base_url, "--allow_partial", "true"]) == 0
    assert [(f["question"], f["sample_index"]) for f in failures] == [(QUESTIONS[2], 0), (QUESTIONS[2], 1)]
    assert failures[0]["role"] == "Jack Sparrow" and failures[0]["error"].startswith("HTTP 422")
    general = tmp_path / "out" / "rolebench-eng" / "instruction-generalization" / "general"
    rows = [line for split in ("train", "test") if (general / f"{split}.jsonl").exists()
            for line in (general / f"{split}.jsonl").read_text().splitlines()]  # fmt: skip
    assert len(rows) == 3  # the other rows are written
    err = capsys.readouterr().err
    assert "2 requests failed; listed in" in err and "--allow_partial" in err


def test_a_dead_endpoint_is_3_with_nothing_written(job, tmp_path, capsys):
    code = main([*job, "--base_url", f"http://127.0.0.1:{closed_port()}/v1"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    [message] = messages(err)
    assert message.startswith("rolellm generate: cannot reach http://127.0.0.1:")
    assert message.endswith("connection refused (2 tries)")
    assert not (tmp_path / "out" / "rolebench-eng").exists() and not (tmp_path / "out" / "generation").exists()


@pytest.mark.parametrize(
    ("status", "message"), [(401, "Incorrect API key provided"), (400, "Unknown model: test-model")]
)
def test_a_refused_request_is_3_with_the_servers_message(job, tmp_path, capsys, status, message):
    with ChatCompletionsServer(lambda body: Fault("server_error", status=status, message=message)) as server:
        code = main([*job, "--base_url", server.base_url, "--max_concurrency", "1"])
        sent = len(server.requests)
    err = capsys.readouterr().err
    assert code == 3 and f"HTTP {status} {message}" in err and "Traceback" not in err
    assert sent == 1  # the run stopped on the first answer: the other seven requests were never sent
    assert not (tmp_path / "out" / "rolebench-eng").exists()


def test_every_request_failing_is_3_with_only_the_failures_written(job, tmp_path, capsys):
    with ChatCompletionsServer(lambda body: Fault("server_error", status=422)) as server:
        assert main([*job, "--base_url", server.base_url]) == 3
    assert "no row generated and 8 requests failed" in capsys.readouterr().err
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert [p for p in written if not p.startswith("cache.sqlite")] == ["generation/rolegpt/failures.jsonl"]


def test_evaluate_against_a_dead_endpoint_is_3_and_writes_no_scores(tmp_path, capsys):
    data = write_mini_release(tmp_path / "release")
    card = tmp_path / "README.md"
    card.write_text("---\nlicense: apache-2.0\n---\n# model\n")
    code = main([
        "evaluate", "--model_name_or_path", "test-model", "--base_url", f"http://127.0.0.1:{closed_port()}/v1",
        "--dataset_name", "en-instruction-role_specific", "--data_dir", str(data), "--split", "test",
        "--output_dir", str(tmp_path / "run"), "--max_retries", "0", "--model_card", str(card),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and "cannot reach" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "results.json").exists()
    assert card.read_text() == "---\nlicense: apache-2.0\n---\n# model\n"  # no model-index from a failed run


def test_data_check_on_an_empty_folder_is_an_error(tmp_path, capsys):
    assert main(["data", "check", "--data-dir", str(tmp_path)]) == 2
    assert "nothing was checked" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["generate", "rolegpt", "--model", "m", "--profiles", "/no/such/folder", "--output_dir", "o",
          "--instructions", "i.jsonl"], "rolellm generate: /no/such/folder: no such file or folder"),
        (["generate", "rolegpt", "--config", "/no/such/recipe.yaml"], "rolellm generate: "),
        (["evaluate", "--model_name_or_path", "rolegpt", "--output_dir", "o", "--dataset_name", "xx"],
         "rolellm evaluate: "),
    ],
)  # fmt: skip
def test_a_user_mistake_is_2_in_a_few_lines_and_debug_shows_the_traceback(argv, expected, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert messages(err)[0].startswith(expected) and "Traceback" not in err and len(err.strip().splitlines()) <= 5
    with pytest.raises(Exception):  # noqa: B017  (any error: --debug lets it through)
        main([*argv, "--debug"])


def test_a_dry_run_counts_the_requests_and_sends_nothing(job, tmp_path, capsys):
    with ChatCompletionsServer(answer) as server:
        assert main([*job, "--base_url", server.base_url, "--dry_run", "true"]) == 0
        assert server.requests == []
        assert not any(tmp_path.rglob("cache.sqlite*"))  # nothing written, not even an empty cache
        assert main([*job, "--base_url", server.base_url]) == 0  # the real run fills the cache...
        capsys.readouterr()
        assert main([*job, "--base_url", server.base_url, "--dry_run", "true"]) == 0
    out = capsys.readouterr().out
    assert "RoleGPT would send 8 requests (8 already cached, 0 to send)" in out  # ...which the dry run counts


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (PermissionError(13, "Permission denied", "data/train.jsonl"), "data/train.jsonl: permission denied"),
        (IsADirectoryError(21, "Is a directory", "recipes"), "recipes is a folder, not a file"),
        (NotADirectoryError(20, "Not a directory", "notes.txt/out"), "notes.txt/out: a part of this path is a file"),
        (FileNotFoundError(2, "No such file or directory", "none.yaml"), "none.yaml: no such file or folder"),
    ],
)
def test_a_file_system_error_is_2_with_the_path_in_words(error, message):
    from rolellm.scripts.cli import describe_error

    code, text = describe_error(error)
    assert code == 2 and text.startswith(message) and "Errno" not in text
