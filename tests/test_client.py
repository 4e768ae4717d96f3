"""OpenAIChatClient against a real chat-completions server on 127.0.0.1: answers, faults, cache, parse, secrets."""

import asyncio
import json
import logging
import socket
import threading
import time

import pytest
from fixtures.examples import run_example

from rolellm.clients.base import REASK_SEED_STRIDE, ChatRequest, EndpointError
from rolellm.clients.budget import RateLimiter
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.testing.server import ChatCompletionsServer, Fault


SECRET = "sk-test-NEVER-WRITE-THIS-1234567890"


def shout(body):
    """The answer depends on the request: the last user message upper-cased, tagged with the sample index."""
    return body["messages"][-1]["content"].upper()


def ask(text, **kwargs):
    return ChatRequest(
        [{"role": "system", "content": "You are Jack Sparrow."}, {"role": "user", "content": text}], **kwargs
    )


@pytest.fixture(params=["aiohttp", "httpx"])
def backend(request):
    """The fault tests run on both HTTP transports of the `openai` client."""
    return request.param


def make_client(server, tmp_path=None, **kwargs):
    kwargs.setdefault("progress", False)
    kwargs.setdefault("initial_backoff", 0.01)
    cache_path = tmp_path / "cache.sqlite" if tmp_path is not None else None
    return OpenAIChatClient("test-model", base_url=server.base_url, api_key=SECRET, cache_path=cache_path, **kwargs)


def test_answers_follow_the_requests_in_order():
    questions = [f"question {i}" for i in range(20)]
    with ChatCompletionsServer(shout) as server:
        client = make_client(server, max_concurrency=5)
        results = client.generate([ask(q, params={"temperature": 0.7, "max_tokens": 30}) for q in questions])
    assert [r.text for r in results] == [q.upper() for q in questions]
    assert all(r.ok and not r.cached for r in results)
    assert len(server.requests) == 20
    body = server.requests[0]["body"]
    assert body["model"] == "test-model" and body["temperature"] == 0.7 and body["max_tokens"] == 30
    assert body["messages"][0] == {"role": "system", "content": "You are Jack Sparrow."}
    # the server counts whitespace words: 4 prompt words ("You are Jack Sparrow." + "question i"), 2 answer words
    assert (client.usage.requests, client.usage.prompt_tokens, client.usage.completion_tokens) == (20, 120, 40)
    assert results[3].usage == {"prompt_tokens": 6, "completion_tokens": 2}


def test_bare_message_lists_are_accepted_and_bad_messages_name_the_field():
    with ChatCompletionsServer(shout) as server:
        [result] = make_client(server).generate([[{"role": "user", "content": "ahoy"}]])
    assert result.text == "AHOY"
    with pytest.raises(ValueError, match=r"messages\[1\] needs a 'role'"):
        ChatRequest([{"role": "user", "content": "a"}, {"role": "pirate", "content": "b"}])
    with pytest.raises(ValueError, match=r"messages\[0\]\['content'\] must be a string"):
        ChatRequest([{"role": "user", "content": None}])
    with pytest.raises(ValueError, match=r"params may not set \['n'\].*sample_index=0..n-1"):
        ChatRequest([{"role": "user", "content": "a"}], params={"n": 5})
    with pytest.raises(ValueError, match="http_backend must be 'aiohttp' or 'httpx', got 'curl'"):
        OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", http_backend="curl")


def test_rate_limit_honours_retry_after_and_is_counted(backend):
    with ChatCompletionsServer(shout) as server:
        server.add_faults(Fault("rate_limit", retry_after=0.3), Fault("rate_limit", retry_after=0.2))
        client = make_client(server, max_concurrency=1, http_backend=backend)
        [result] = client.generate([ask("hello")])
    assert result.text == "HELLO" and result.ok
    assert [r["status"] for r in server.requests] == [429, 429, 200]
    assert client.usage.retries == 2 and client.usage.requests == 1 and client.usage.failures == 0
    gaps = [b["received"] - a["received"] for a, b in zip(server.requests, server.requests[1:])]
    assert gaps[0] >= 0.3 and gaps[1] >= 0.2  # waited as long as the server asked


@pytest.mark.parametrize("kind", ["server_error", "garbled", "empty"])
def test_transient_faults_are_retried(kind, backend):
    with ChatCompletionsServer(shout) as server:
        server.add_faults(Fault(kind), Fault(kind))
        client = make_client(server, max_concurrency=1, http_backend=backend)
        results = client.generate([ask("one"), ask("two")])
    assert [r.text for r in results] == ["ONE", "TWO"]
    assert client.usage.retries == 2 and client.usage.failures == 0
    assert len(server.requests) == 4


def test_timeouts_are_retried(backend):
    with ChatCompletionsServer(shout) as server:
        # the time-out leaves room for a loaded machine to answer the retry; the slow answer is far past it
        server.add_faults(Fault("slow", delay=4.0))
        client = make_client(server, timeout=1.0, http_backend=backend)
        [result] = client.generate([ask("patience")])
    assert result.text == "PATIENCE"
    assert client.usage.retries == 1 and client.usage.requests == 1


def test_persistent_failures_are_counted_and_the_rest_completes():
    def responder(body):
        return Fault("server_error", status=503) if "cursed" in body["messages"][-1]["content"] else shout(body)

    with ChatCompletionsServer(responder) as server:
        client = make_client(server, max_retries=2)
        results = client.generate([ask("fine"), ask("cursed gold"), ask("also fine")])
    assert [r.text for r in results] == ["FINE", None, "ALSO FINE"]
    assert results[1].error.startswith("gave up after 3 tries; last: HTTP 503")
    assert client.usage.failures == 1 and client.usage.retries == 2 and client.usage.requests == 2


def test_client_errors_fail_one_request_without_retry_and_bad_credentials_stop_the_run(backend):
    def responder(body):
        content = body["messages"][-1]["content"]
        if content == "too long":
            return Fault("server_error", status=400, message="This model's maximum context length is 8 tokens")
        if content == "unprocessable":
            return Fault("server_error", status=422)
        return Fault("server_error", status=401, message="Incorrect API key") if content == "bad key" else shout(body)

    with ChatCompletionsServer(responder) as server:
        client = make_client(server, http_backend=backend)
        results = client.generate([ask("too long"), ask("ok"), ask("unprocessable")])
        assert results[0].error.startswith("HTTP 400: ") and "maximum context length" in results[0].error
        assert results[1].text == "OK" and results[2].error.startswith("HTTP 422")
        assert client.usage.retries == 0 and client.usage.failures == 2
        with pytest.raises(EndpointError, match="HTTP 401 .*Incorrect API key"):
            client.generate([ask("bad key")])


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_a_request_the_endpoint_refuses_for_every_row_stops_the_run_with_its_message(tmp_path, status):
    def responder(body):
        if body["model"] == "no-such-model":
            return Fault("server_error", status=status, message="The model `no-such-model` does not exist")
        return shout(body)

    with ChatCompletionsServer(responder) as server:
        client = OpenAIChatClient("no-such-model", base_url=server.base_url, max_concurrency=2, progress=False)
        with pytest.raises(EndpointError, match=f"HTTP {status} The model `no-such-model` does not exist"):
            client.generate([ask(f"q{i}") for i in range(20)])
        assert len(server.requests) <= 2  # stopped on the first answers: the other rows were never sent


def test_a_dead_endpoint_is_named_as_unreachable_after_bounded_retries(backend):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIChatClient(
        "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=2, initial_backoff=0.01, progress=False,
        http_backend=backend,
    )  # fmt: skip
    with pytest.raises(
        EndpointError, match=rf"cannot reach http://127.0.0.1:{port}/v1: connection refused \(3 tries\)"
    ):
        client.generate([ask(f"q{i}") for i in range(5)])
    assert client.usage.retries <= 2 * 5


def test_truncated_answer_is_rejected_by_parse_and_asked_again():
    def parse(text):
        if not text.endswith("!"):
            raise ValueError(f"incomplete answer {text!r}")
        return text.rstrip("!")

    with ChatCompletionsServer(lambda body: body["messages"][1]["content"] + "!") as server:  # the question
        server.add_faults(Fault("truncated"))
        client = make_client(server, max_concurrency=1)
        [result] = client.generate([ask("yo ho ho and a bottle of rum")], parse=parse)
    assert server.requests[0]["fault"].kind == "truncated"
    assert result.parsed == "yo ho ho and a bottle of rum" and result.attempts == 2
    assert client.usage.reasks == 1 and client.usage.failures == 0


def test_unparseable_answers_become_a_counted_failure_with_the_last_text(tmp_path):
    healthy, attempts = {"on": False}, []

    def responder(body):
        attempts.append(1)
        return '{"ok": true}' if healthy["on"] else f"not json, try {len(attempts)}"

    with ChatCompletionsServer(responder) as server:
        client = make_client(server, tmp_path, max_parse_attempts=3)
        [result] = client.generate([ask("give me JSON")], parse=json.loads)
        assert result.text == "not json, try 3" and result.parsed is None
        assert result.error.startswith("unparseable answer after 3 attempts")
        assert (client.usage.requests, client.usage.reasks, client.usage.failures) == (3, 2, 1)
        # a failed parse is never final in the cache: a re-run against a healthy endpoint asks again
        healthy["on"] = True
        again = make_client(server, tmp_path)
        [retried] = again.generate([ask("give me JSON")], parse=json.loads)
    assert len(server.requests) == 4
    assert retried.ok and retried.parsed == {"ok": True} and not retried.cached
    assert (again.usage.requests, again.usage.cached) == (1, 0)


def test_a_reask_is_a_different_request_naming_what_was_wrong(tmp_path):
    with ChatCompletionsServer(lambda body: "not json") as server:
        client = make_client(server, tmp_path, max_parse_attempts=3)
        [result] = client.generate([ask("give me JSON", params={"seed": 7})], parse=json.loads, remind=True)
        bodies = [entry["body"] for entry in server.requests]
    assert not result.ok and len(bodies) == 3
    assert [body["seed"] for body in bodies] == [7, 7 + REASK_SEED_STRIDE, 7 + 2 * REASK_SEED_STRIDE]
    assert [len(body["messages"]) for body in bodies] == [2, 4, 6]
    assert bodies[1]["messages"][2] == {"role": "assistant", "content": "not json"}
    reminder = bodies[1]["messages"][3]
    assert reminder["role"] == "user" and "Expecting value" in reminder["content"]
    assert bodies[2]["messages"][:4] == bodies[1]["messages"]


def test_cache_makes_a_rerun_send_nothing(tmp_path):
    requests = [ask(f"q{i}", sample_index=s) for i in range(5) for s in range(2)]
    with ChatCompletionsServer(lambda body: f"{body['messages'][-1]['content']} #{len(server.requests)}") as server:
        first = make_client(server, tmp_path).generate(requests)
        assert len(server.requests) == 10  # two samples of one prompt are two requests
        second_client = make_client(server, tmp_path)
        second = second_client.generate(requests)
        assert len(server.requests) == 10
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second) and second_client.usage.cached == 10 and second_client.usage.requests == 0
    estimate = second_client.estimate(requests + [ask("new one", params={"max_tokens": 50})])
    assert (estimate.requests, estimate.cached, estimate.completion_tokens) == (11, 10, 50)
    assert "11 requests (10 already cached, 1 to send)" in str(estimate)


def test_api_key_never_reaches_cache_logs_or_repr(tmp_path, caplog):
    with ChatCompletionsServer(shout) as server:
        server.add_faults(Fault("server_error"), Fault("rate_limit"))
        client = make_client(server, tmp_path)
        with caplog.at_level(logging.DEBUG):
            client.generate([ask("secret?"), ask("another")], parse=lambda text: text)
    assert server.requests[-1]["headers"]["authorization"] == f"Bearer {SECRET}"  # it was really sent
    assert SECRET not in caplog.text and "retrying" in caplog.text
    for path in tmp_path.iterdir():  # the database and its WAL files
        assert SECRET.encode() not in path.read_bytes()
    assert SECRET not in repr(client) and SECRET not in str(client.usage)


def test_api_key_comes_from_the_environment_or_a_clear_error(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="set the OPENAI_API_KEY environment variable"):
        OpenAIChatClient("gpt-4")
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with ChatCompletionsServer(shout) as server:
        make_client(server).generate([ask("x")])
        OpenAIChatClient("m", base_url=server.base_url, progress=False).generate([ask("env")])
        monkeypatch.delenv("OPENAI_API_KEY")
        OpenAIChatClient("m", base_url=server.base_url, progress=False).generate([ask("local")])
    assert [r["headers"]["authorization"] for r in server.requests] == [
        f"Bearer {SECRET}",
        f"Bearer {SECRET}",
        "Bearer EMPTY",
    ]


def test_generate_works_inside_a_running_event_loop():
    async def notebook_cell(client):
        sync_results = client.generate([ask("from a notebook")])
        async_results = await client.agenerate([ask("awaited")])
        return sync_results + async_results

    with ChatCompletionsServer(shout) as server:
        results = asyncio.run(notebook_cell(make_client(server)))
    assert [r.text for r in results] == ["FROM A NOTEBOOK", "AWAITED"]


def test_concurrency_limit_bounds_requests_in_flight():
    in_flight, peak, lock = [0], [0], threading.Lock()

    def responder(body):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.2)
        with lock:
            in_flight[0] -= 1
        return "ok"

    with ChatCompletionsServer(responder) as server:
        make_client(server, max_concurrency=3).generate([ask(str(i)) for i in range(12)])
    assert peak[0] == 3


def test_rate_limiter_spaces_requests_by_window():
    async def run():
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(requests_per_minute=2, window=0.5)
        starts = []
        for _ in range(5):
            await limiter.acquire()
            starts.append(loop.time())
        return starts

    starts = asyncio.run(run())
    # a wait of a window shows as 0.5 s give or take the moment between the limiter's stamp and `starts` (see below)
    assert starts[2] - starts[0] > 0.4 and starts[4] - starts[2] > 0.4


def test_token_limiter_waits_when_the_window_is_full_but_lets_a_large_request_go_alone():
    async def run():
        loop = asyncio.get_running_loop()
        limiter = RateLimiter(tokens_per_minute=100, window=0.5)
        starts = []
        for tokens in (60, 30, 20, 500):
            await limiter.acquire(tokens)
            starts.append(loop.time())
        return starts

    starts = asyncio.run(run())
    # the limiter stamps a request a moment before `acquire` returns to the loop that records `starts`: a wait of a
    # window shows as 0.5 s give or take that moment, no wait as a few milliseconds
    assert starts[1] - starts[0] < 0.1 and starts[2] - starts[0] > 0.4  # 60 + 30 fit, + 20 would not
    assert starts[3] - starts[2] > 0.4  # 500 > limit: waits for an empty window, then goes


def test_estimate_counts_prompt_and_completion_tokens_before_sending():
    with ChatCompletionsServer(shout) as server:
        client = make_client(server)
        estimate = client.estimate([ask("Arr, matey!"), ask("俺老孙来也", params={"max_tokens": 7})])
    # "You are Jack Sparrow." = 6 estimated tokens, "Arr, matey!" = 3, "俺老孙来也" = 5, + 4 per message
    assert (estimate.requests, estimate.cached, estimate.prompt_tokens, estimate.completion_tokens) == (
        2,
        0,
        (6 + 4) * 2 + (3 + 4) + (5 + 4),
        512 + 7,
    )
    assert server.requests == [] and client.generate([]) == []


@pytest.mark.slow
def test_example_script_runs_offline():
    stdout = run_example("chat_clients.py")
    assert "requests received by the server: 9 (3 faults retried)" in stdout
    assert "re-run: 6 answers from the cache, 0 sent" in stdout
    assert "local usage: requests=6, cached=0" in stdout


def test_a_storm_of_mixed_faults_under_concurrency_loses_nothing(tmp_path, backend):
    kinds = ["rate_limit", "server_error", "garbled", "empty"]
    with ChatCompletionsServer(shout) as server:
        server.add_faults(*(Fault(kind, retry_after=0.01) for kind in kinds * 5))
        client = make_client(server, tmp_path, max_concurrency=8, max_retries=20, http_backend=backend)
        results = client.generate([ask(f"question {i}") for i in range(30)])
        assert [r.text for r in results] == [f"QUESTION {i}" for i in range(30)]
        assert (client.usage.requests, client.usage.retries, client.usage.failures) == (30, 20, 0)
        assert len(server.requests) == 50 and set(server.answered_counts().values()) == {1}
    assert len(client.cache) == 30


def test_each_run_reports_its_own_totals_and_usage_keeps_running(caplog):
    with ChatCompletionsServer(shout) as server:
        server.add_faults(Fault("server_error", status=422))
        client = make_client(server)
        with caplog.at_level(logging.INFO, logger="rolellm.clients"):
            client.generate([ask("a"), ask("b")], desc="first")
            client.generate([ask("c")], desc="second")
    assert "first: requests=1, cached=0, retries=0, reasks=0, failures=1," in caplog.text
    assert "first: 1 requests failed" in caplog.text
    assert "second: requests=1, cached=0, retries=0, reasks=0, failures=0," in caplog.text
    assert "second: 1 requests failed" not in caplog.text
    assert (client.usage.requests, client.usage.failures) == (2, 1)


def test_a_client_with_rate_limits_answers_everything_within_them():
    with ChatCompletionsServer(shout) as server:
        client = make_client(server, max_concurrency=4, requests_per_minute=10, tokens_per_minute=10_000)
        results = client.generate([ask(f"q{i}", params={"max_tokens": 100}) for i in range(10)])
    assert [r.text for r in results] == [f"Q{i}" for i in range(10)] and len(server.requests) == 10


def test_a_cache_file_is_made_by_the_first_answer_not_by_reading(tmp_path):
    from rolellm.clients.cache import ChatCache

    cache = ChatCache(tmp_path / "runs" / "cache.sqlite")
    assert cache.get("k") is None and "k" not in cache and len(cache) == 0
    cache.delete(["k"])
    assert not (tmp_path / "runs").exists()
    cache.put("k", "m", "Arr", {"prompt_tokens": 1})
    assert ChatCache(tmp_path / "runs" / "cache.sqlite").get("k") == ("Arr", {"prompt_tokens": 1})
    (tmp_path / "broken.sqlite").write_text("not a database")
    with pytest.raises(ValueError, match="broken.sqlite' is not a usable SQLite cache"):
        ChatCache(tmp_path / "broken.sqlite")
