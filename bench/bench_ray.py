"""`rolellm generate` through Ray (`--backend ray` with `--base_url`) against the built-in client, same settings.

What it compares, on the same local chat-completions server (`rolellm.testing.ChatCompletionsServer`, in its own
process as a remote server would be, every answer delayed by 100 ms):

- `rolellm generate rolegpt` with the built-in asyncio client (`OpenAIChatClient`), `--max_concurrency 16`;
- the same command with `--backend ray` (`RayChatClient`: one Ray task of 16 requests in flight, the built-in client
  inside it, each answer streamed back) on a local Ray cluster: the first job after `ray.init` (a fresh cluster: its
  worker processes start cold) and a later job on the running cluster (a driver joining a running `ray start`
  cluster).

Each run sends 360 requests (RoleGPT: 2 roles x 30 instructions x 6 samples) into a fresh folder and cache. The
setups run in turns (built-in, `ray.init`, first Ray job, later Ray job, `ray.shutdown`), `REPEATS` times; printed
are the minimum and the median of each figure over the repeats, and ratios of the medians. Per run, from the
server's arrival times and the cache's write times (`created`, written as each answer reaches the driver):

- start-up: seconds from the command's start to its first request at the server (for Ray: planning the job and
  starting its workers), and to its first answer in the cache;
- throughput including start-up: requests / the command's seconds;
- throughput excluding start-up: requests / seconds from the first request at the server to the last answer in the
  cache;
- peak in flight: the most requests the server held at once (100 ms windows): both sides run 16;
- CPU seconds: of this process and every process it started but the server (for Ray: the cluster's, its workers'
  and its actors', sampled every 0.1 s, so a process that ends between two samples misses its last 0.1 s).

Run: `python bench/bench_ray.py [REPEATS]` (about a minute and a half for the default 3); it needs `rolellm[ray]` and
the RoleBench data.
"""

import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rolellm.testing.data import find_test_data  # noqa: E402


LATENCY = 0.1
CONCURRENCY = 16
INSTRUCTIONS = 30  # per role; x 2 roles x 6 samples = 360 requests
REQUESTS = 2 * INSTRUCTIONS * 6
REPEATS = 3
RECIPE = Path(__file__).resolve().parents[1] / "examples" / "recipes" / "generate_rolegpt.yaml"


def serve(connection):
    """The server process: answers with 100 ms latency; on "arrivals" sends the `time.monotonic()` of every request
    received since the last call (the clock is the machine's, the same in every process)."""
    from rolellm.testing.server import ChatCompletionsServer

    with ChatCompletionsServer(lambda body: f"answer {body['seed']}", latency=LATENCY) as server:
        connection.send(server.base_url)
        seen = 0
        while connection.recv() == "arrivals":
            received = [r["received"] for r in server.requests[seen:]]
            seen += len(received)
            connection.send(received)


class CPUMeter:
    """CPU seconds of this process and its descendants but `skip` (the server), from samples every 0.1 s."""

    def __init__(self, skip: int):
        import psutil

        self.root, self.skip, self.seen = psutil.Process(), skip, {}

    def sample(self) -> None:
        for process in [self.root, *self.root.children(recursive=True)]:
            if process.pid != self.skip:
                try:
                    times = process.cpu_times()
                except Exception:  # it ended meanwhile
                    continue
                self.seen[(process.pid, process.create_time())] = times.user + times.system

    def __enter__(self):
        self.sample()
        self.before, self.done = dict(self.seen), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while not self.done.wait(0.1):
            self.sample()

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.sample()
        self.seconds = sum(cpu - self.before.get(key, 0.0) for key, cpu in self.seen.items())


def generate(base_url: str, data_dir: Path, output_dir: Path, server, server_pid: int, *backend: str) -> dict:
    """One `rolellm generate rolegpt` run and its figures (see the module docstring)."""
    from rolellm.scripts.cli import main

    command = [
        "generate", "rolegpt", "--config", str(RECIPE), "--output_dir", str(output_dir), "--base_url", base_url,
        "--profiles", str(data_dir / "roleglm-screenplay" / "profile_zhenhuan"),
        "--instructions", str(data_dir / "rolebench" / "rolebench-zh" / "general" / "test.jsonl"),
        "--max_instructions", str(INSTRUCTIONS), "--model", "bench", "--max_concurrency", str(CONCURRENCY),
        "--progress", "false", *backend,
    ]  # fmt: skip
    wall_offset = time.time() - time.monotonic()  # the cache writes `time.time()`
    with CPUMeter(server_pid) as cpu:
        start = time.monotonic()
        code = main(command)
        seconds = time.monotonic() - start
    if code != 0:
        raise SystemExit(f"rolellm generate {' '.join(backend) or '(built-in client)'} exited {code}")
    server.send("arrivals")
    arrivals = sorted(server.recv())
    with sqlite3.connect(output_dir / "cache.sqlite") as connection:
        written = sorted(t - wall_offset for (t,) in connection.execute("SELECT created FROM completions"))
    if len(arrivals) != REQUESTS or len(written) != REQUESTS:
        raise SystemExit(f"expected {REQUESTS} requests and answers, got {len(arrivals)} and {len(written)}")
    return {
        "seconds": seconds,
        "first request": arrivals[0] - start,
        "first answer": written[0] - start,
        "work": written[-1] - arrivals[0],
        "cpu": cpu.seconds,
        "in flight": max(sum(1 for t in arrivals[i:] if t < a + LATENCY) for i, a in enumerate(arrivals)),
    }


def main():
    data_dir = find_test_data()
    if data_dir is None:
        raise SystemExit("RoleBench data not found: set ROLEBENCH_DATA_DIR or place it at ../shared/data")
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else REPEATS
    import ray

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(child,), daemon=True)
    server.start()
    base_url = parent.recv()
    ray_flags = ("--backend", "ray")
    labels = (
        "built-in client (OpenAIChatClient)",
        "--backend ray, first job after ray.init",
        "--backend ray, later job",
    )
    runs = {label: [] for label in labels}
    inits = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            for r in range(repeats):  # in turns: every setup sees the same machine load
                out = Path(folder) / str(r)
                runs[labels[0]].append(generate(base_url, data_dir, out / "builtin", parent, server.pid))
                start = time.monotonic()
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
                inits.append(time.monotonic() - start)
                runs[labels[1]].append(generate(base_url, data_dir, out / "ray-1", parent, server.pid, *ray_flags))
                runs[labels[2]].append(generate(base_url, data_dir, out / "ray-2", parent, server.pid, *ray_flags))
                ray.shutdown()
    finally:
        parent.send("stop")
        server.join(timeout=5)

    def median(label, key):
        return statistics.median(run[key] for run in runs[label])

    def cell(label, key):
        return f"{min(run[key] for run in runs[label]):.2f} / {median(label, key):.2f}"

    print(
        f"\n{REQUESTS} requests, {LATENCY * 1000:.0f} ms per answer, --max_concurrency {CONCURRENCY}, "
        f"{os.cpu_count()} CPUs; {repeats} runs of each setup in turns; seconds as min / median, rates and ratios "
        "from the medians"
    )
    print(
        "| run | seconds | to first request | to first answer | req/s incl. start-up | req/s excl. start-up | "
        "vs built-in incl. / excl. | peak in flight | CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = labels[0]
    for label in labels:
        incl, excl = REQUESTS / median(label, "seconds"), REQUESTS / median(label, "work")
        ratio = f"{median(base, 'seconds') / median(label, 'seconds'):.2f}x / {median(base, 'work') / median(label, 'work'):.2f}x"
        print(
            f"| {label} | {cell(label, 'seconds')} | {cell(label, 'first request')} | {cell(label, 'first answer')} "
            f"| {incl:.1f} | {excl:.1f} | {ratio} | {max(run['in flight'] for run in runs[label])} | {cell(label, 'cpu')} |"
        )
    print(
        f"\nray.init (a local cluster of {os.cpu_count()} CPUs): {min(inits):.2f} / {statistics.median(inits):.2f} s"
    )
    later, first = labels[2], labels[1]
    print(
        f"target: the Ray path at 0.8x of the built-in one or better; later job: "
        f"{median(base, 'seconds') / median(later, 'seconds'):.2f}x including its start-up, "
        f"{median(base, 'work') / median(later, 'work'):.2f}x excluding it; a fresh cluster: "
        f"{median(base, 'seconds') / (statistics.median(inits) + median(first, 'seconds')):.2f}x with ray.init"
    )


if __name__ == "__main__":
    main()
