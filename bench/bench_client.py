"""Requests per second through `OpenAIChatClient` against a chat-completions server with 100 ms per answer.

What it compares, in one run, on the same local server (`rolellm.testing.ChatCompletionsServer`, run in its own
process as a remote server would be, every answer delayed by 100 ms):

- a plain loop over the synchronous `openai.OpenAI` client (what a script would otherwise do);
- `OpenAIChatClient` at `max_concurrency=1` and `max_concurrency=64` (the limit of the speed-up is 64x; the target
  is at least 40x); at 64 also with the on-disk cache (one SQLite commit per answer) and on the `openai` client's
  httpx transport instead of its aiohttp one;
- a bare `asyncio.gather` over `openai.AsyncOpenAI` behind a 64-slot semaphore (no cache, retries or progress bar),
  to show the client's own overhead.

The setups run in turns, three runs each; printed are the minimum and the median seconds, and rates and ratios from
the medians. Run: `python bench/bench_client.py` (about a minute).
"""

import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LATENCY = 0.1
SEQUENTIAL_REQUESTS = 20
CONCURRENT_REQUESTS = 640  # ten waves of 64
REPEATS = 3


def serve(connection):
    from rolellm.testing.server import ChatCompletionsServer

    with ChatCompletionsServer(latency=LATENCY) as server:
        connection.send(server.base_url)
        connection.recv()  # until the benchmark is done


def messages(i: int) -> list[dict]:
    return [{"role": "system", "content": "You are Jack Sparrow."}, {"role": "user", "content": f"Question {i}?"}]


def openai_loop(base_url: str, n: int) -> float:
    import openai

    client = openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0)
    with Timer() as timer:
        for i in range(n):
            client.chat.completions.create(model="bench", messages=messages(i))
    return timer.times


def openai_gather(base_url: str, n: int, concurrency: int) -> float:
    import openai

    async def run():
        semaphore = asyncio.Semaphore(concurrency)
        async with openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0) as client:

            async def one(i):
                async with semaphore:
                    return await client.chat.completions.create(model="bench", messages=messages(i))

            await asyncio.gather(*(one(i) for i in range(n)))

    with Timer() as timer:
        asyncio.run(run())
    return timer.times


def rolellm_client(base_url: str, n: int, concurrency: int, cache: bool, offset: int, backend=None) -> float:
    from rolellm.clients.base import ChatRequest
    from rolellm.clients.openai_compatible import OpenAIChatClient

    with tempfile.TemporaryDirectory() as folder:
        client = OpenAIChatClient(
            "bench",
            base_url=base_url,
            api_key="bench",
            max_concurrency=concurrency,
            cache_path=Path(folder) / "cache.sqlite" if cache else None,
            progress=False,
            http_backend=backend,
        )
        requests = [ChatRequest(messages(offset + i)) for i in range(n)]
        with Timer() as timer:
            results = client.generate(requests)
    assert all(r.ok for r in results) and client.usage.requests == n, client.usage
    return timer.times


class Timer:
    """Wall-clock seconds and this process's CPU seconds of a block, as `timer.times`."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.times = (time.perf_counter() - self.wall, time.process_time() - self.cpu)


def main():
    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(child,), daemon=True)
    server.start()
    base_url = parent.recv()
    setups = [("openai.OpenAI, sequential loop", SEQUENTIAL_REQUESTS, None)]
    clients = [
        ("rolellm OpenAIChatClient, concurrency 1", SEQUENTIAL_REQUESTS, 1, False, None),
        ("rolellm OpenAIChatClient, concurrency 64", CONCURRENT_REQUESTS, 64, False, None),
        ("rolellm OpenAIChatClient, concurrency 64, SQLite cache", CONCURRENT_REQUESTS, 64, True, None),
        ("rolellm OpenAIChatClient, concurrency 64, httpx transport", CONCURRENT_REQUESTS, 64, False, "httpx"),
    ]
    for index, (label, n, concurrency, cache, backend) in enumerate(clients, start=1):
        offset = index * 100_000  # fresh contents: every request is really sent

        def run(r, n=n, concurrency=concurrency, cache=cache, offset=offset, backend=backend):
            return rolellm_client(base_url, n, concurrency, cache, offset + r * 10_000, backend)

        setups.append((label, n, run))
    setups.append(("bare AsyncOpenAI + gather, concurrency 64", CONCURRENT_REQUESTS, None))
    runners = {
        setups[0][0]: lambda r: openai_loop(base_url, SEQUENTIAL_REQUESTS),
        **{label: run for label, _, run in setups[1:-1]},
        setups[-1][0]: lambda r: openai_gather(base_url, CONCURRENT_REQUESTS, 64),
    }
    times = {label: [] for label, _, _ in setups}
    try:
        openai_gather(base_url, 64, 64)  # warm-up: imports and connections
        for r in range(REPEATS):  # in turns: every setup sees the same machine load
            for label, _, _ in setups:
                times[label].append(runners[label](r))
    finally:
        parent.send("stop")
        server.join(timeout=5)

    sizes = {label: n for label, n, _ in setups}
    median = {label: statistics.median(wall for wall, _ in runs) for label, runs in times.items()}
    rate = {label: sizes[label] / median[label] for label in times}
    base = rate["rolellm OpenAIChatClient, concurrency 1"]
    print(
        f"server latency {LATENCY * 1000:.0f} ms per answer; {REPEATS} runs of each setup in turns; min / median "
        "seconds, rates from the medians; limit at concurrency 64 = 64x\n"
    )
    print(
        f"{'setup':<58} {'requests':>8} {'min / median s':>15} {'req/s':>8} {'vs rolellm c=1':>15} {'CPU ms/req':>11}"
    )
    for label, runs in times.items():
        n = sizes[label]
        cpu = statistics.median(c for _, c in runs)
        cell = f"{min(w for w, _ in runs):.2f} / {median[label]:.2f}"
        print(
            f"{label:<58} {n:>8} {cell:>15} {rate[label]:>8.1f} {rate[label] / base:>14.1f}x {cpu / n * 1000:>11.2f}"
        )
    speedup = rate["rolellm OpenAIChatClient, concurrency 64"] / base
    cached = rate["rolellm OpenAIChatClient, concurrency 64, SQLite cache"] / base
    overhead = rate["rolellm OpenAIChatClient, concurrency 64"] / rate["bare AsyncOpenAI + gather, concurrency 64"]
    print(f"\nspeed-up at concurrency 64: {speedup:.1f}x without cache, {cached:.1f}x with cache (target >= 40x)")
    print(f"rolellm client / bare AsyncOpenAI gather at concurrency 64: {overhead:.2f}x the requests per second")
    print("CPU ms/req: the client process's CPU time per request, median (the server runs in another process)")


if __name__ == "__main__":
    main()
