"""ChatCompletionsServer speaks the chat-completions protocol and injects each fault as documented (raw HTTP)."""

import json
import urllib.error
import urllib.request

import pytest

from rolellm.testing.server import ChatCompletionsServer, Fault, content_key


BODY = {"model": "m", "messages": [{"role": "user", "content": "one two three four"}], "temperature": 0.5}


def post(server, body=BODY, path="/chat/completions"):
    request = urllib.request.Request(
        server.base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_answer_depends_on_the_request_and_has_the_protocol_shape():
    with ChatCompletionsServer(lambda body: body["messages"][-1]["content"].replace(" ", "-")) as server:
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
        status, _, raw = post(server)
    payload = json.loads(raw)
    assert status == 200
    assert payload["object"] == "chat.completion" and payload["model"] == "m"
    assert payload["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "one-two-three-four"}, "finish_reason": "stop"}
    ]
    assert payload["usage"] == {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5}
    assert [r["body"] for r in server.requests] == [BODY] and server.answered_counts() == {content_key(BODY): 1}


def test_dict_answers_are_sent_as_they_are_and_unknown_paths_are_404():
    custom = {"id": "x", "object": "chat.completion", "choices": [], "created": 0, "model": "m"}
    with ChatCompletionsServer(lambda body: custom) as server:
        assert json.loads(post(server)[2]) == custom
        status, _, raw = post(server, path="/completions")
    assert status == 404 and "no route /v1/completions" in json.loads(raw)["error"]["message"]


def test_queued_faults_apply_in_order_then_answers_resume():
    with ChatCompletionsServer() as server:
        server.add_faults(
            Fault("rate_limit", retry_after=1.5), Fault("server_error", status=502), Fault("garbled"), Fault("empty")
        )
        rate_limited, bad_gateway, garbled, empty, normal = (post(server) for _ in range(5))
    assert rate_limited[0] == 429 and rate_limited[1]["Retry-After"] == "1.5"
    assert bad_gateway[0] == 502
    assert garbled[0] == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(garbled[2])
    assert empty[0] == 200 and json.loads(empty[2])["choices"] == []
    assert json.loads(normal[2])["choices"][0]["message"]["content"] == "one two three four"
    assert [r["status"] for r in server.requests] == [429, 502, 200, 200, 200]
    assert [r["fault"].kind if r["fault"] else None for r in server.requests] == [
        "rate_limit",
        "server_error",
        "garbled",
        "empty",
        None,
    ]
    assert server.answered_counts() == {content_key(BODY): 1}  # faults are not answers


def test_truncated_and_slow_answers_are_answers():
    with ChatCompletionsServer(lambda body: "abcdefgh") as server:
        server.add_faults(Fault("truncated"), Fault("slow", delay=0.05))
        truncated, slow = json.loads(post(server)[2]), json.loads(post(server)[2])
        assert truncated["choices"][0]["message"]["content"] == "abcd"
        assert truncated["choices"][0]["finish_reason"] == "length"
        assert slow["choices"][0]["message"]["content"] == "abcdefgh"
        assert server.answered_counts() == {content_key(BODY): 2}


def test_responder_can_fail_chosen_requests():
    def responder(body):
        return Fault("rate_limit") if "cursed" in body["messages"][-1]["content"] else "fine"

    with ChatCompletionsServer(responder) as server:
        cursed = {**BODY, "messages": [{"role": "user", "content": "cursed gold"}]}
        assert post(server, cursed)[0] == 429
        assert post(server)[0] == 200
    assert server.answered_counts() == {content_key(BODY): 1}


def test_responder_faults_that_still_answer_carry_their_text():
    def responder(body):
        return Fault("truncated", answer="abcdefgh")

    with ChatCompletionsServer(responder) as server:
        payload = json.loads(post(server)[2])
    assert payload["choices"][0]["message"]["content"] == "abcd"
    with pytest.raises(ValueError, match="Fault kind must be one of"):
        Fault("teapot")


def test_stream_requests_get_server_sent_events_like_a_real_server():
    with ChatCompletionsServer(lambda body: "Arr, matey.\nSail on!") as server:
        server.add_faults(Fault("truncated"))
        streams = []
        for _ in range(2):
            status, headers, raw = post(server, {**BODY, "stream": True, "stream_options": {"include_usage": True}})
            assert status == 200 and headers["Content-Type"] == "text/event-stream"
            assert headers["Transfer-Encoding"] == "chunked"  # sent as it is made, not as one body
            streams.append([line[len("data: ") :] for line in raw.decode().split("\n\n") if line])
        assert server.answered_counts() == {content_key(BODY): 2}
    for events, text, finish in [(streams[0], "Arr, matey", "length"), (streams[1], "Arr, matey.\nSail on!", "stop")]:
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(chunk["choices"][0]["delta"].get("content", "") for chunk in chunks[:-1]) == text
        assert [chunk["choices"][0]["finish_reason"] for chunk in chunks[:-1]] == [None] * (len(chunks) - 2) + [finish]
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(text.split())
    assert len(streams[1]) == 1 + 4 + 1 + 1 + 1  # role, one delta per word, finish, usage, [DONE]


def test_the_openai_client_streams_from_it():
    import openai

    with ChatCompletionsServer(lambda body: "one two three") as server:
        client = openai.OpenAI(api_key="test-key", base_url=server.base_url, max_retries=0)
        stream = client.chat.completions.create(model="m", messages=BODY["messages"], stream=True)
        pieces = [chunk.choices[0].delta.content for chunk in stream if chunk.choices[0].delta.content]
    assert pieces == ["one ", "two ", "three"]
