"""The LLM client layer, offline: an OpenAI-compatible endpoint (a local test server) and a local transformers model.

Shows the cache (a re-run sends nothing), retries on injected faults, `parse` re-asks, the pre-run estimate and the
usage totals. Against a real endpoint, drop the server and pass `base_url="http://localhost:8000/v1"` (vLLM) or
set `OPENAI_API_KEY` for OpenAI.

Run: `python examples/chat_clients.py` (a few seconds).
"""

import json
import tempfile
from pathlib import Path

from rolellm.clients.base import ChatRequest
from rolellm.clients.local import LocalChatClient
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.testing.models import build_tiny_llama
from rolellm.testing.server import ChatCompletionsServer, Fault


def answer(body: dict) -> str:
    """The test server's answers depend on the question: a JSON verdict naming the role."""
    question = body["messages"][-1]["content"]
    return json.dumps({"role": "Jack Sparrow", "answer": f"Savvy? {question}"})


def parse(text: str) -> dict:
    item = json.loads(text)  # a JSONDecodeError is a ValueError: the request is asked again
    if "answer" not in item:
        raise ValueError(f"no 'answer' in {item}")
    return item


def main():
    folder = Path(tempfile.mkdtemp())
    requests = [
        ChatRequest(
            [{"role": "system", "content": "You are Jack Sparrow."}, {"role": "user", "content": question}],
            params={"temperature": 0.7, "max_tokens": 16},
            sample_index=sample,
            metadata={"question_id": i},
        )
        for i, question in enumerate(["Where is the rum?", "What is your ship called?", "Who is Davy Jones?"])
        for sample in range(2)
    ]

    with ChatCompletionsServer(answer) as server:
        server.add_faults(Fault("rate_limit", retry_after=0.2), Fault("server_error"), Fault("garbled"))
        client = OpenAIChatClient("gpt-4", base_url=server.base_url, cache_path=folder / "cache.sqlite")
        print(client.estimate(requests))
        results = client.generate(requests, parse=parse, desc="endpoint")
        print(results[0].parsed, results[0].request.metadata)
        print(f"requests received by the server: {len(server.requests)} (3 faults retried)")

        again = OpenAIChatClient("gpt-4", base_url=server.base_url, cache_path=folder / "cache.sqlite")
        again.generate(requests, parse=parse, desc="re-run")
        print(f"re-run: {again.usage.cached} answers from the cache, {again.usage.requests} sent")

    model_path = build_tiny_llama(folder / "tiny-llama")
    local = LocalChatClient(model_path, chat_template="chatml", batch_size=4, max_new_tokens=16)
    local_results = local.generate(requests, desc="local model")
    print("local (random tiny model, so the text is noise):", repr(local_results[0].text))
    print("local usage:", local.usage)


if __name__ == "__main__":
    main()
