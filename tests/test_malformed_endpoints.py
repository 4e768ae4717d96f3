"""The other side malformed or failing: model endpoints and the Hugging Face Hub, through the commands users run.

Every endpoint case is `(id, serve, command, code, pattern)`: the real test server is started with `serve` (its
keyword arguments: a responder that answers with a `Fault`, a key it wants, the models it lists), `command` is run
in-process against it, and the user must see exit `code` with one `rolellm <command>: ...` line matching `pattern`
on stderr, no traceback, no API key anywhere (output or files), and nothing in the output folder that reads like a
finished result (results.json, scores, a dataset split, a report).

The Hub cases answer every request of `huggingface_hub` (pointed at a local server through `HF_ENDPOINT`) with one
status, and check the one line, the exit code, and that the token is never printed.
"""

import io
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from rolellm.scripts.cli import main
from rolellm.testing.server import SHUTDOWN_POLL, ChatCompletionsServer, Fault


ROOT = Path(__file__).parent.parent
DEMO = ROOT / "examples" / "data" / "demo-rolebench"
COSER_TEST_SET = Path(__file__).parent / "fixtures" / "coser" / "test_set.json"
API_KEY = "sk-test-do-not-print-0123456789"
HF_TOKEN = "hf_test_do_not_print_0123456789"
# files that only a finished run writes
FINISHED = {"results.json", "results.md", "scores.json", "report.md", "train.jsonl", "test.jsonl", "desc.json"}


@pytest.fixture
def inputs(tmp_path, slice_data_dir):
    """The small inputs of every command: release rows and profiles, a screenplay, a card, scenarios, questions."""
    instructions = tmp_path / "instructions.jsonl"
    instructions.write_text("".join(json.dumps({"instruction": q}) + "\n" for q in ("Who are you?", "Why?")))
    card = {"name": "Po", "description": "A kung fu panda.", "personality": "cheerful", "scenario": "A palace"}
    cards = tmp_path / "po.json"
    cards.write_text(json.dumps({"spec": "chara_card_v2", "spec_version": "2.0", "data": card}), encoding="utf-8")
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text(
        "- role: Sherlock Holmes\n  situation: a case\n  user_persona: a client\n  opening_line: Hello.\n"
        "  num_turns: 2\n"
    )
    return SimpleNamespace(
        slice=slice_data_dir / "rolebench",
        screenplay=slice_data_dir / "roleglm-screenplay" / "profile_xiyou",
        instructions=instructions,
        cards=cards,
        scenarios=scenarios,
    )


def command(name, url, out, data, *extra):
    """The argv of `name` against the endpoint at `url`, writing into `out` (no retries: a failure is final)."""
    model = ["--model", "m", "--base_url", url, "--max_retries", "0"]
    argv = {
        "rolegpt": ["generate", "rolegpt", "--profiles", str(data.screenplay), "--prompt_mode", "zero_shot",
                    "--instructions", str(data.instructions), "--num_samples", "2", "--output_dir", str(out),
                    "--progress", "false", *model],
        "context-instruct": ["generate", "context-instruct", "--profiles", str(data.screenplay), "--output_dir",
                             str(out), "--progress", "false", *model],
        "describe": ["generate", "describe", "--profiles", str(data.screenplay), "--output_dir", str(out), *model],
        "preferences": ["generate", "preferences", "--data_dir", str(DEMO), "--dataset_configs",
                        "en-instruction-general", "--profiles", str(DEMO), "--lang", "en", "--output_dir", str(out),
                        "--judge_model", "j", "--num_samples", "2", "--test_fraction", "0.25", "--progress", "false",
                        *model],
        "evaluate": ["evaluate", "--dataset_name", "zh-role_specific", "--data_dir", str(data.slice), "--roles",
                     "李白", "--max_samples_per_role", "2", "--output_dir", str(out), *model],
        "dialogue": ["dialogue", "--profiles", str(DEMO), "--scenarios", str(data.scenarios), "--user_model", "u",
                     "--judge_model", "j", "--output_dir", str(out), *model],
        "coser": ["coser", "run", "--test_file", str(COSER_TEST_SET), "--actor_model", "m", "--base_url", url,
                  "--env_model", "env", "--nsp_model", "nsp", "--judge_model", "j", "--output_dir", str(out),
                  "--progress", "false", "--max_retries", "0"],
        "chat": ["chat", "--profiles", str(data.cards), "--role", "Po", *model],
    }[name]  # fmt: skip
    return argv + list(extra)


def every(fault):
    """A responder that answers every request with `fault`."""
    return {"responder": lambda body: fault}


def only(model, fault, answer="诗酒趁年华。"):
    """A responder that fails the requests for `model` with `fault` and answers every other one with `answer`."""
    return {"responder": lambda body: fault if body["model"] == model else answer}


REFUSED = r"refused the request for model '{}': HTTP {} "
WRONG_KEY = {"api_key": "the-right-key"}  # the server wants another key than the one in OPENAI_API_KEY
NOTHING_GENERATED = r"no row generated and \d+ requests failed; nothing written but .*failures.jsonl .*"
CUT = Fault("cut_empty")
HTML_502 = Fault("html", status=502)
FORBIDDEN = Fault("server_error", status=403, message="You are not allowed to sample from this model")
RUBRIC_ONLY = ("--rubric", "rubric", "--judge_model", "j", "--baseline", "none")
MODEL_404 = Fault("server_error", status=404, message="The model `m` does not exist", code="model_not_found")

# fmt: off
ENDPOINT_CASES = [
    # an HTTP 200 whose body is not JSON
    ("not-json", every(Fault("garbled")), "rolegpt", 3, NOTHING_GENERATED + "malformed response"),
    ("not-json", every(Fault("garbled")), "evaluate", 3, r"all 2 generations failed, so nothing was scored"),
    ("not-json", every(Fault("garbled")), "chat", 3, r"answered a streamed request with neither events nor a comp"),
    # an HTML 502 page from a proxy in front of the model
    ("html-502", every(HTML_502), "context-instruct", 3, NOTHING_GENERATED + "HTTP 502"),
    ("html-502", every(HTML_502), "coser", 3, r"no scene could be scored; run again to go on"),
    ("html-502", every(HTML_502), "chat", 3, r"answered with an error to model 'm': HTTP 502"),
    # JSON without `choices`, and `choices: []`
    ("no-choices", every(Fault("no_choices")), "describe", 3, NOTHING_GENERATED + "no answer in the response"),
    ("no-choices", every(Fault("no_choices")), "dialogue", 3, r"no turn could be played"),
    ("choices-empty", every(Fault("empty")), "preferences", 3, NOTHING_GENERATED + "no answer in the response"),
    ("choices-empty", every(Fault("empty")), "coser", 3, r"no scene could be scored"),
    # `message.content: null`
    ("content-null", every(Fault("null_content")), "evaluate", 3, r"all 2 generations failed"),
    ("content-null", every(Fault("null_content")), "rolegpt", 3, NOTHING_GENERATED + "message content is None"),
    ("content-null", every(Fault("null_content")), "chat", 3, r"m gave an empty answer; the message was not kept"),
    # `finish_reason: "length"` with an empty content: a failed request, not an answer scored as empty
    ("cut-empty", every(CUT), "evaluate", 3, r"all 2 generations failed, so nothing was scored"),
    ("cut-empty", every(CUT), "rolegpt", 3, NOTHING_GENERATED + "cut at max_tokens before any text"),
    ("cut-empty", every(CUT), "coser", 3, r"no scene could be scored"),
    ("cut-empty", every(CUT), "chat", 3, r"m gave an empty answer"),
    # a wrong key: HTTP 401 with OpenAI's error body, for every command
    *[("wrong-key", WRONG_KEY, name, 3, REFUSED.format(r"\w+", 401) + "Incorrect API key provided")
      for name in ("rolegpt", "context-instruct", "describe", "preferences", "evaluate", "dialogue", "coser",
                   "chat")],
    # 403 and 404 with an OpenAI-style error body
    ("forbidden", every(FORBIDDEN), "preferences", 3, REFUSED.format("m", 403) + "You are not allowed"),
    ("forbidden", every(FORBIDDEN), "dialogue", 3, REFUSED.format("m", 403) + "You are not allowed"),
    ("model-404", every(MODEL_404), "context-instruct", 3, REFUSED.format("m", 404) + "The model `m` does not"),
    ("model-404", every(MODEL_404), "chat", 3, REFUSED.format("m", 404) + "The model `m` does not exist"),
    # a model the endpoint does not serve: each endpoint of a run is checked before anything is generated
    ("judge-not-served", {"models": ["m", "b"]}, ("evaluate", "--judge_model", "j", "--baseline_model", "b"), 3,
     REFUSED.format("j", 404) + r".*\(the endpoint lists: m, b\)"),
    ("baseline-not-served", {"models": ["m", "j"]}, ("evaluate", "--judge_model", "j", "--baseline_model", "b"), 3,
     REFUSED.format("b", 404) + r".*\(the endpoint lists: m, j\)"),
    ("rubric-judge-not-served", {"models": ["m"]}, ("evaluate", *RUBRIC_ONLY), 3, REFUSED.format("j", 404)),
    ("user-not-served", {"models": ["m", "j"]}, "dialogue", 3, REFUSED.format("u", 404)),
    ("env-not-served", {"models": ["m", "nsp", "j"]}, "coser", 3, REFUSED.format("env", 404)),
    # a judge or baseline that fails while the model answers
    ("judge-refuses", only("j", Fault("server_error", status=401, message="Incorrect API key provided")),
     ("evaluate", "--judge_model", "j", "--baseline_model", "b"), 3, REFUSED.format("j", 401)),
    ("baseline-502", only("b", HTML_502), ("evaluate", "--judge_model", "j", "--baseline_model", "b"), 3,
     r"no sample was judged against b: 2 verdicts of j failed \(e.g. no baseline answer \(its generation failed"),
    ("judge-garbage", only("j", "I cannot rank these."),
     ("evaluate", "--judge_model", "j", "--baseline_model", "b", "--allow_partial"), 3,
     r"no sample was judged against b: 2 verdicts of j failed \(e.g. unparseable answer"),
    ("rubric-judge-garbage", only("j", "no scores here"), ("evaluate", *RUBRIC_ONLY), 3,
     r"all 2 rubric verdicts of j failed \(e.g. .*\), so no result was written"),
]
# fmt: on


def said(err, name):
    """The command's own lines on stderr (besides logging, progress bars and its warnings)."""
    prefix = f"rolellm {name.split()[0]}:"
    return [line for line in err.splitlines() if line.startswith(prefix) and not line.startswith(f"{prefix} warning")]


def folder_text(folder):
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def run_command(argv, capsys, monkeypatch, stdin="Hello\n"):
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "case_id, serve, name, code, pattern",
    ENDPOINT_CASES,
    ids=[f"{c[0]}-{c[2] if isinstance(c[2], str) else '-'.join(c[2][:2])}" for c in ENDPOINT_CASES],
)
def test_a_malformed_or_failing_endpoint(case_id, serve, name, code, pattern, inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    name, *extra = (name,) if isinstance(name, str) else name
    out = tmp_path / "out"
    with ChatCompletionsServer(**serve) as server:
        argv = command(name, server.base_url, out, inputs, *extra)
        got, printed, err = run_command(argv, capsys, monkeypatch)
        assert server.requests or server.model_listings, "the case never reached the endpoint"
    lines = said(err, argv[0])
    assert (got, len(lines)) == (code, 1), err
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in err and API_KEY not in printed + err
    written = {p.name for p in out.rglob("*")} if out.exists() else set()
    assert not written & FINISHED, f"a run that did not finish wrote {written & FINISHED}"
    assert out.exists() is False or API_KEY not in folder_text(out)


def test_answers_received_before_a_refusal_are_kept_for_the_rerun(inputs, tmp_path, capsys, monkeypatch):
    """The endpoint answers the first question, then refuses the key (exit 3, no results.json); the re-run against
    a working endpoint asks only the question that was not answered."""
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    out, asked, revoked = tmp_path / "out", [], {"after": 1}

    def first_then_refuse(body):
        asked.append(body["messages"][-1]["content"])
        if len(asked) > revoked["after"]:
            return Fault("server_error", status=401, message="Key revoked")
        return "诗酒趁年华。"

    with ChatCompletionsServer(first_then_refuse) as server:
        argv = [*command("evaluate", server.base_url, out, inputs), "--max_concurrency", "1"]
        code, _, err = run_command(argv, capsys, monkeypatch)
        assert code == 3 and "refused the request for model 'm': HTTP 401 Key revoked" in err
        assert not (out / "results.json").exists()
        revoked["after"], first = 10**6, asked[0]  # the key works again
        asked.clear()
        code, _, err = run_command(argv, capsys, monkeypatch)
        again = list(asked)
    assert code == 0, err
    assert first not in again and len(again) == 1  # the answered question is not asked twice
    assert json.loads((out / "results.json").read_text())["counts"]["failed"] == 0


# fmt: off
BASE_URL_CASES = [
    ("no-scheme", "localhost:8000/v1", 2, r"base_url is not an http:// or https:// URL with a host"),
    ("ftp", "ftp://127.0.0.1/v1", 2, r"base_url is not an http:// or https:// URL with a host"),
    ("path-only", "/v1", 2, r"base_url is not an http:// or https:// URL with a host"),
    ("no-host", "http://", 2, r"base_url is not an http:// or https:// URL with a host"),
    ("key-without-scheme", f"{API_KEY}@llm.example.com/v1", 2, r"base_url is not an http:// or https:// URL"),
    ("key-in-userinfo", f"https://me:{API_KEY}@llm.example.com/v1", 2, r"base_url holds credentials"),
    ("key-in-query", f"https://llm.example.com/v1?api_key={API_KEY}", 2, r"base_url holds a secret in its query"),
    ("bad-port", "http://127.0.0.1:99999/v1", 3, r"cannot reach http://127.0.0.1:99999/v1: connection refused"),
    ("nobody-listens", "http://127.0.0.1:9/v1", 3, r"cannot reach http://127.0.0.1:9/v1: connection refused"),
]
# fmt: on


@pytest.mark.parametrize("case_id, url, code, pattern", BASE_URL_CASES, ids=[c[0] for c in BASE_URL_CASES])
@pytest.mark.parametrize("name", ["rolegpt", "evaluate", "dialogue", "coser", "chat"])
def test_a_malformed_base_url(case_id, url, code, pattern, name, inputs, tmp_path, capsys, monkeypatch):
    """A URL that is no http(s) URL with a host is a usage error (exit 2) before anything is sent, naming the flag
    and never the URL's text (it may hold a key); one nobody answers at is exit 3."""
    if code == 3 and name == "chat":
        pattern = pattern.replace("cannot reach ", "").replace(": connection refused", " cannot be reached")
    argv = command(name, url, tmp_path / "out", inputs)
    got, printed, err = run_command(argv, capsys, monkeypatch)
    lines = said(err, argv[0])
    assert (got, len(lines)) == (code, 1), err
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in err and API_KEY not in printed + err
    assert not (tmp_path / "out" / "results.json").exists()


# --- the Hugging Face Hub -----------------------------------------------------------------------------------------

HUB_ERRORS = {
    401: "Invalid credentials in Authorization header",
    403: 'You don\'t have the rights to create a model under the namespace "org"',
    404: "Repository not found",
    500: "Internal Error - We're working hard to fix this as soon as possible!",
    501: "Not Implemented",
}


@pytest.fixture
def hub(monkeypatch, tmp_path):
    """A local Hub that answers every request with `hub.status` (a JSON error body as the Hub's, with the Hub's
    `X-Error-Code` on a 404), reached through HF_ENDPOINT, with a token set and offline mode off."""
    import huggingface_hub.constants as constants

    state = SimpleNamespace(status=401, paths=[])

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.paths.append(self.path)
            body = json.dumps({"error": HUB_ERRORS[state.status]}).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            if state.status == 404:
                self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_HEAD = do_PUT = _answer

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    # huggingface_hub reads these variables once, on import (the test process imported it already)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))  # nothing cached to fall back on
    yield state
    server.shutdown()
    server.server_close()


HUB_LINES = {
    401: (2, r"the Hub refused the request \(401 on /\S+\): log in \(`hf auth login`\) or set HF_TOKEN"),
    403: (2, r"the Hub refused the request \(403 on /\S+\): log in"),
    404: (2, None),  # the command's own words, below
    500: (3, None),
}
NOT_FOUND = {
    "export": r"the Hub has no such repository or file \(404 on /api/repos/create\)",
    "data-export": r"the Hub has no such repository or file \(404 on /api/repos/create\)",
    "push-metric": r"the Hub has no such repository or file \(404 on /api/repos/create\)",
    "load-rolebench": r"could not fetch RoleBench config 'zh-role_specific' from the Hub dataset 'ZenMoore/Role",
    "model-id": r"org/tiny is not a local folder and is not a valid model identifier",
    "chat-model-id": r"--model org/tiny: not a model folder, and not loadable as a Hub id",
}
FAILING = {
    "export": r"the Hub answered with an error \(500 on /api/repos/create\): try again later",
    "data-export": r"the Hub answered with an error \(500 on /api/repos/create\): try again later",
    "push-metric": r"the Hub answered with an error \(500 on /api/repos/create\): try again later",
    "load-rolebench": r"could not fetch RoleBench config .*500 Internal Server Error",
    "model-id": r"We couldn't connect to 'http://127.0.0.1:\d+' to load the files",
    "chat-model-id": r"--model org/tiny: not a model folder, and not loadable as a Hub id \(We couldn't connect",
}


def hub_command(name, tmp_path, inputs, chat_url, model=None):
    return {
        "export": ["export", str(model), "--output_dir", str(tmp_path / "exported"), "--push_to_hub", "org/tiny"],
        "data-export": ["data", "export", str(tmp_path / "export"), "--data_dir", str(DEMO), "--push_to_hub",
                        "org/rolebench"],
        "push-metric": ["push-metric", "--repo_id", "org/metric"],
        "load-rolebench": ["evaluate", "--model", "m", "--base_url", chat_url, "--dataset_name", "zh-role_specific",
                           "--roles", "李白", "--max_samples_per_role", "1", "--output_dir", str(tmp_path / "out")],
        "model-id": ["evaluate", "--model", "org/tiny", "--dataset_name", "zh-role_specific", "--data_dir",
                     str(inputs.slice), "--roles", "李白", "--max_samples_per_role", "1", "--output_dir",
                     str(tmp_path / "out")],
        "chat-model-id": ["chat", "--model", "org/tiny", "--profiles", str(inputs.cards), "--role", "Po"],
    }[name]  # fmt: skip


@pytest.mark.parametrize("status", [401, 403, 404, 500])
@pytest.mark.parametrize(
    "name", ["export", "data-export", "push-metric", "load-rolebench", "model-id", "chat-model-id"]
)
def test_the_hub_refuses_or_fails(status, name, hub, inputs, tmp_path, capsys, monkeypatch, request):
    """A bad token (401), no rights (403), no such repo (404) and a failing Hub (500), through every command that
    pushes to or loads from the Hub: one true line, exit 2 for what the user can fix, 3 for the Hub failing, and
    the token never printed."""
    # huggingface_hub retries a model file's download on 500 and 502-504 for some 45 s; 501 fails the same at once
    hub.status = 501 if status == 500 and name in ("model-id", "chat-model-id") else status
    with ChatCompletionsServer() as chat:
        model = request.getfixturevalue("tiny_model_path") if name == "export" else None
        argv = hub_command(name, tmp_path, inputs, chat.base_url, model)
        code, printed, err = run_command(argv, capsys, monkeypatch)
        assert chat.requests == []  # nothing was asked of the model
    assert hub.paths, "the command never asked the Hub"
    expected_code, pattern = HUB_LINES[status]
    pattern = pattern or (NOT_FOUND if status == 404 else FAILING)[name]
    lines = said(err, argv[0])
    assert (code, len(lines)) == (expected_code, 1), err
    assert re.search(pattern, lines[0]), lines[0]
    assert "Traceback" not in err and HF_TOKEN not in printed + err
    assert not (tmp_path / "out" / "results.json").exists()


DERIVED_URLS = [
    (f"https://me:{API_KEY}@h/v1", "holds credentials (user:password@h): give the URL without them and put the key in "
     "OPENAI_API_KEY (or the variable api_key_env names)"),
    ("ftp://h/v1", "is not an http:// or https:// URL with a host, e.g. http://localhost:8000/v1"),
]  # fmt: skip


@pytest.mark.parametrize("url, message", DERIVED_URLS, ids=["credentials", "ftp"])
@pytest.mark.parametrize("flag", ["--judge_base_url", "--baseline_base_url"])
def test_a_malformed_derived_base_url_names_its_flag(flag, url, message, inputs, tmp_path, capsys, monkeypatch):
    """The judge's and the baseline's own URLs are checked by the same rule, the message naming the flag."""
    with ChatCompletionsServer() as server:
        extra = ["--judge_model", "j", "--baseline_model", "b", flag, url]
        got, printed, err = run_command(command("evaluate", server.base_url, tmp_path, inputs, *extra), capsys,
                                        monkeypatch)  # fmt: skip
        assert server.requests == []
    assert got == 2 and said(err, "evaluate") == [f"rolellm evaluate: {flag} {message}"]
    assert API_KEY not in printed + err
