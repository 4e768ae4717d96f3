"""A job killed with SIGKILL mid-run and restarted: nothing answered is asked again, nothing is lost."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from fixtures.cache import cached_rows

from rolellm.testing.server import ChatCompletionsServer, Fault, content_key


JOB = """
import json, sys
from rolellm.clients.base import ChatRequest
from rolellm.clients.openai_compatible import OpenAIChatClient

base_url, cache_path, output = sys.argv[1:4]
requests = [ChatRequest([{"role": "user", "content": f"question {i}"}], params={"max_tokens": 20}) for i in range(30)]
client = OpenAIChatClient("test-model", base_url=base_url, cache_path=cache_path, max_concurrency=4, progress=False)
results = client.generate(requests)
with open(output, "w") as f:
    json.dump({"texts": [r.text for r in results], "cached": client.usage.cached, "sent": client.usage.requests}, f)
"""

ANSWERED_BEFORE_KILL = 10


@pytest.mark.slow
def test_sigkill_mid_run_then_restart_sends_nothing_twice_and_loses_nothing(tmp_path):
    lock, started, killed = threading.Lock(), [0], threading.Event()

    def responder(body):
        with lock:
            started[0] += 1
            hold = started[0] > ANSWERED_BEFORE_KILL
        if hold and not killed.is_set():
            killed.wait(timeout=60)  # in flight when the job dies: never answered
            return Fault("server_error", status=503)
        return f"answer to {body['messages'][-1]['content']}"

    cache_path, output = tmp_path / "job.sqlite", tmp_path / "results.json"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-crash"}
    with ChatCompletionsServer(responder) as server:
        command = [sys.executable, "-c", JOB, server.base_url, str(cache_path), str(output)]
        job = subprocess.Popen(command, env=env)
        deadline = time.monotonic() + 60
        while cached_rows(cache_path) < ANSWERED_BEFORE_KILL and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cached_rows(cache_path) == ANSWERED_BEFORE_KILL
        job.kill()  # SIGKILL: no cleanup runs in the job
        assert job.wait() == -9
        killed.set()

        subprocess.run(command, env=env, check=True, timeout=120)
        answered = server.answered_counts()

    report = json.loads(output.read_text())
    assert report["texts"] == [f"answer to question {i}" for i in range(30)]
    assert (report["cached"], report["sent"]) == (ANSWERED_BEFORE_KILL, 30 - ANSWERED_BEFORE_KILL)
    # every request content was answered exactly once over both runs
    expected = {
        content_key(
            # the sampling settings the request left out are sent explicitly (OpenAI's defaults)
            {
                "messages": [{"role": "user", "content": f"question {i}"}],
                "model": "test-model",
                "max_tokens": 20,
                "temperature": 1.0,
                "top_p": 1.0,
            }
        )
        for i in range(30)
    }
    assert set(answered) == expected and set(answered.values()) == {1}
    # the only repeats are the requests the killed job had in flight (at most its concurrency), never answered
    held = [r for r in server.requests if r["status"] == 503]
    assert 1 <= len(held) <= 4
    assert len(server.requests) == 30 + len(held)
    assert {content_key(r["body"]) for r in held} <= expected
