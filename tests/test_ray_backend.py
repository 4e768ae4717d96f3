"""`--backend ray`: Ray Data's HTTP processor against the real test server, on a local Ray cluster of 2 CPUs.

One cluster serves the whole module (`ray_address`, one pytest-xdist worker runs the module's tests that use it: see
tests/conftest.py); the `rolellm generate` run that is killed joins it through `RAY_ADDRESS`, as a driver joins a real
cluster, and its re-run is a driver in this process, so the module pays one Ray start-up.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fixtures.cache import cached_rows

from rolellm.clients.base import ChatRequest, EndpointError
from rolellm.clients.engines import engine_version
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.testing.server import ChatCompletionsServer, Fault, content_key


ray = pytest.importorskip("ray", reason='needs Ray Data: pip install "rolellm[ray]"')

RECIPES = Path(__file__).resolve().parents[1] / "examples" / "recipes"


@pytest.fixture(scope="module")
def ray_address():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def rolegpt_answer(body):
    """A deterministic answer that depends on the whole request (role, question, sample seed)."""
    return f"{body['messages'][0]['content'][:12]}|{body['messages'][-1]['content'][:20]}|{body['seed']}"


@pytest.mark.slow
def test_client_skips_cached_requests_and_reports_failures(ray_address, tmp_path, monkeypatch):
    """Cached requests are never submitted, a request failing past its retries and an answer that never parses are
    counted failures, and the Ray tasks send the key of the variable `api_key_env` names."""
    from rolellm.clients.ray_backend import RayChatClient

    def responder(body):
        question = body["messages"][-1]["content"]
        if question == "question 3":
            return Fault("server_error", status=500, message="cannot answer question 3")
        if question == "question 4":
            return "not a number"
        return str(len(question))

    requests = [
        ChatRequest([{"role": "user", "content": f"question {i}"}], params={"max_tokens": 8}) for i in range(8)
    ]
    cache = tmp_path / "cache.sqlite"
    monkeypatch.setenv("RAY_TEST_KEY", "sk-ray-test")
    with ChatCompletionsServer(responder, api_key="sk-ray-test") as server:
        # two answers are in the cache already (the default backend's, the same keys)
        OpenAIChatClient("test-model", server.base_url, api_key_env="RAY_TEST_KEY", cache_path=cache,
                         progress=False).generate(requests[:2])  # fmt: skip
        before = len(server.requests)
        client = RayChatClient("test-model", server.base_url, api_key_env="RAY_TEST_KEY", max_concurrency=4,
                               max_retries=1, cache_path=cache, progress=False)  # fmt: skip
        results = client.generate(requests, parse=int)
        sent = [r["body"]["messages"][-1]["content"] for r in server.requests[before:]]
        assert server.authorizations() == {"Bearer sk-ray-test": len(server.requests) + len(server.model_listings)}

    assert [r.parsed for r in results] == [10, 10, 10, None, None, 10, 10, 10]
    assert sorted(set(sent)) == [f"question {i}" for i in range(2, 8)]  # the cached two were never submitted
    assert sent.count("question 4") == 3  # an unparseable answer is asked again, up to max_parse_attempts
    assert sent.count("question 3") == 2  # a 500 is retried (max_retries=1), then the request fails
    assert results[3].error == "gave up after 2 tries; last: HTTP 500: cannot answer question 3"
    assert results[4].error.startswith("unparseable answer after 3 attempts")
    assert (client.usage.cached, client.usage.failures) == (2, 2)


@pytest.mark.exhaustive  # the refusal is tested on the default backend; here, on Ray tasks
@pytest.mark.slow
def test_an_endpoint_refusing_mid_run_stops_the_job_and_keeps_the_answers(ray_address, tmp_path):
    """A refusal (HTTP 401: every request would get it) stops the job: the refused task sends nothing more, the other
    task is ended, and what came back before is in the cache."""
    from rolellm.clients.ray_backend import RayChatClient

    refused = threading.Event()

    def responder(body):
        question = body["messages"][-1]["content"]
        if question == "question 5":
            refused.set()
            return Fault("server_error", status=401, message="key revoked")
        # the other answers come back after the refusal, so no slot of the refused task is freed (and filled) first
        refused.wait(timeout=30)
        time.sleep(0.2)
        return question.upper()

    requests = [ChatRequest([{"role": "user", "content": f"question {i}"}]) for i in range(40)]
    cache = tmp_path / "cache.sqlite"
    with ChatCompletionsServer(responder) as server:
        # two tasks of 10 requests in flight: the odd questions' task is refused in its first ten
        client = RayChatClient("test-model", server.base_url, max_concurrency=20, cache_path=cache, progress=False)
        with pytest.raises(EndpointError, match=r"the Ray job stopped after \d+ of 40 answers \(http://127.0.0.1:\d+/v1 "
                           r"refused the request for model 'test-model': HTTP 401 key revoked\); the answers are "
                           r"cached, a re-run sends only the rest"):  # fmt: skip
            client.generate(requests)
        sent = {r["body"]["messages"][-1]["content"] for r in server.requests}
    assert cached_rows(cache) == client.usage.requests < 40
    assert not sent & {f"question {i}" for i in range(21, 40, 2)}  # the refused task's rest was never sent


@pytest.mark.exhaustive
@pytest.mark.slow
def test_http_mode_holds_max_concurrency_requests_in_flight(ray_address, tmp_path):
    """Ray's HTTP stage sends a batch's requests one after the other: `max_concurrency` in flight come from the Ray
    tasks a worker runs at once and the batches of each task, never more than asked."""
    from rolellm.clients.ray_backend import RayChatClient

    lock, arrived, in_flight, peak, gave_up = threading.Lock(), threading.Condition(), [0], [0], threading.Event()

    def responder(body):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        with arrived:  # the first requests wait until 8 are held at once (the first to wait 30 s in vain ends that)
            arrived.notify_all()
            if not arrived.wait_for(lambda: peak[0] >= 8 or gave_up.is_set(), timeout=30):
                gave_up.set()
        with lock:
            in_flight[0] -= 1
        return "ok"

    requests = [ChatRequest([{"role": "user", "content": f"question {i}"}]) for i in range(40)]
    with ChatCompletionsServer(responder) as server:
        client = RayChatClient("test-model", server.base_url, max_concurrency=8, cache_path=tmp_path / "cache.sqlite",
                               progress=False)  # fmt: skip
        results = client.generate(requests)
    assert all(r.text == "ok" for r in results) and len(server.requests) == 40
    assert (peak[0], gave_up.is_set()) == (8, False)  # 8 requests were held at once, and never a ninth


def test_dead_endpoint_stops_before_ray_runs():
    from rolellm.clients.ray_backend import RayChatClient

    with ChatCompletionsServer() as server:
        url = server.base_url
    client = RayChatClient("test-model", url, max_retries=0, progress=False)
    with pytest.raises(EndpointError, match="connection refused"):
        client.check_endpoint()


def test_a_rate_limit_it_cannot_keep_is_refused(tmp_path, capsys):
    """Ray's HTTP stage limits each batch while queuing it: a requests-per-minute limit would not hold, so it is an
    error naming the option (exit 2 on the command line), not a silent overrun of the endpoint's quota."""
    from rolellm.clients.ray_backend import RayChatClient
    from rolellm.scripts.cli import main

    with pytest.raises(ValueError, match="requests_per_minute=60 cannot be kept with backend ray"):
        RayChatClient("test-model", "http://127.0.0.1:9/v1", requests_per_minute=60, progress=False)
    profiles, instructions = tmp_path / "none.jsonl", tmp_path / "none.txt"
    command = generate_command(profiles, instructions, tmp_path / "out", "http://127.0.0.1:9/v1", "--backend", "ray")
    assert main([*command, "--requests_per_minute", "60"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 2 and "requests_per_minute" in err[-1] and "Traceback" not in "".join(err)
    assert not (tmp_path / "out").exists()


def generate_command(profiles, instructions, output_dir, base_url, *backend):
    return [
        "generate", "rolegpt", "--config", str(RECIPES / "generate_rolegpt.yaml"), "--profiles", str(profiles),
        "--instructions", str(instructions), "--max_instructions", "12", "--num_samples", "2",
        "--output_dir", str(output_dir), "--base_url", base_url, "--model", "test-model", "--max_concurrency", "4", "--batch_size", "2",
        *backend,
    ]  # fmt: skip


def release_files(folder: Path) -> dict[str, bytes]:
    """Every file of an output folder but the cache and the two run files that name the client and count its usage."""
    skipped = {"generation_config.json", "generation_stats.json"}
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith("cache.sqlite") and p.name not in skipped
    }


@pytest.mark.exhaustive
@pytest.mark.slow
def test_ray_generate_equals_the_default_backend_through_sigkill_and_resume(
    ray_address, screenplay_dir, shared_data_dir, tmp_path, monkeypatch
):
    from rolellm.scripts.cli import main

    profiles = screenplay_dir / "profile_zhenhuan"
    instructions = shared_data_dir / "rolebench" / "rolebench-zh" / "general" / "test.jsonl"
    reference, out = tmp_path / "default", tmp_path / "ray"
    with ChatCompletionsServer(rolegpt_answer) as server:
        assert main(generate_command(profiles, instructions, reference, server.base_url)) == 0
        total = len(server.requests)
    assert total == 2 * 12 * 2  # two roles (the recipe's), 12 instructions each, 2 samples

    lock, started, killed = threading.Lock(), [0], threading.Event()

    def responder(body):
        with lock:
            started[0] += 1
            hold = started[0] > total // 2
        if hold and not killed.is_set():
            killed.wait(timeout=120)  # in flight when the driver dies: never answered
            return Fault("server_error", status=503)
        return rolegpt_answer(body)

    env = {**os.environ, "RAY_ADDRESS": ray_address, "OPENAI_API_KEY": "sk-test-ray"}
    cache = out / "cache.sqlite"
    with ChatCompletionsServer(responder) as server:
        command = [sys.executable, "-m", "rolellm.scripts.cli", *generate_command(profiles, instructions, out, server.base_url, "--backend", "ray")]  # fmt: skip
        job = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while cached_rows(cache) < total // 4 and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.2)
        assert cached_rows(cache) >= total // 4, job.stderr.read().decode()[-2000:] if job.poll() is not None else ""
        job.send_signal(signal.SIGKILL)  # no cleanup runs in the driver
        assert job.wait() == -signal.SIGKILL
        job.stderr.close()
        killed.set()
        kept = cached_rows(cache)
        assert kept < total  # killed mid-run
        # the killed driver's Ray tasks may still finish requests they had sent: wait until the server is quiet
        answered_before, quiet_since = len(server.answered), time.monotonic()
        while time.monotonic() - quiet_since < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            if len(server.answered) != answered_before:
                answered_before, quiet_since = len(server.answered), time.monotonic()
        assert not (out / "rolebench-zh").exists()  # nothing written but the cache

        # the re-run, in this process: a driver on the module's cluster (the killed one joined it by RAY_ADDRESS)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-ray")
        resume = generate_command(profiles, instructions, out, server.base_url, "--backend", "ray")
        assert main(resume) == 0
        answered = server.answered_counts()

    assert release_files(out) == release_files(reference)  # byte for byte, rows, profiles and all
    stats = json.loads((out / "generation" / "rolegpt" / "generation_stats.json").read_text("utf-8"))
    # the resumed run sent exactly what the cache did not hold
    assert (stats["usage"]["cached"], stats["usage"]["requests"]) == (kept, total - kept)
    assert set(answered) == {content_key(r) for r in server.answered} and len(answered) == total
    # the only requests answered twice are answers that reached a Ray worker but not yet the driver when it died
    assert sum(answered.values()) - total == answered_before - kept
    assert all(count <= 2 for count in answered.values())
    config = json.loads((out / "generation" / "rolegpt" / "generation_config.json").read_text("utf-8"))
    assert config["client"]["class"] == "RayChatClient"


def test_engine_rows_carry_the_local_clients_token_ids_and_the_schema(tiny_model_path):
    """What the vLLM-engine mode hands Ray Data, built without a cluster: the stage's own input columns."""
    from rolellm.clients.local import LocalChatClient
    from rolellm.clients.ray_backend import RayChatClient, _shape

    local = LocalChatClient(tiny_model_path, chat_template="chatml", max_new_tokens=9, progress=False)
    client = RayChatClient(str(tiny_model_path), chat_template="chatml", max_new_tokens=9, progress=False)
    messages = [{"role": "user", "content": "<|im_start|>system\nYou are GPT.<|im_end|> Who are you?"}]
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    row = client._rows(ChatRequest(messages, params={"temperature": 0.5, "seed": 2}), 7, schema)
    assert row["index"] == 7 and row["tokenized_prompt"] == local.encode_prompt(messages)
    assert row["sampling_params"] == {
        "max_tokens": 9, "temperature": 0.5, "seed": 2, "stop_token_ids": local.stop_ids,
        "structured_outputs": {"json": json.dumps(schema)},
    }  # fmt: skip
    plain = client._rows(ChatRequest(messages), 8, None)
    assert _shape(plain) != _shape(row)  # a request without a seed goes through a dataset of its own
    assert client.key(ChatRequest(messages)) == local.key(ChatRequest(messages))  # the same cache entries


@pytest.mark.gpu
@pytest.mark.skipif(
    engine_version("vllm") is None,
    reason='needs vLLM: pip install "rolellm[vllm]"',
)
def test_engine_mode_answers_on_a_real_vllm_engine(ray_address, tiny_model_path, tmp_path):
    from rolellm.clients.ray_backend import RayChatClient

    client = RayChatClient(str(tiny_model_path), chat_template="chatml", max_new_tokens=8, progress=False,
                           cache_path=tmp_path / "cache.sqlite")  # fmt: skip
    requests = [ChatRequest([{"role": "user", "content": f"Question {i}?"}]) for i in range(6)]
    results = client.generate(requests)
    assert all(r.ok for r in results) and all(0 < r.usage["completion_tokens"] <= 8 for r in results)
    assert client.usage.requests == 6 and client.generate(requests) and client.usage.cached == 6
