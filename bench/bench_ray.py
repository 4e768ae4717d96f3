"""`rolellm generate` through Ray Data's HTTP processor (`--backend ray`) against the built-in client, same settings.

What it compares, in one run, on the same local chat-completions server (`rolellm.testing.ChatCompletionsServer`, in
its own process as a remote server would be, every answer delayed by 100 ms):

- `rolellm generate rolegpt` with the built-in asyncio client (`OpenAIChatClient`), `--max_concurrency 16`;
- the same command with `--backend ray --batch_size 24` (`RayChatClient`: `HttpRequestProcessorConfig`, 16 requests in
  flight, 24 per Ray batch) on a local Ray cluster, twice: the first run after `ray.init` and a second one on the
  running cluster.

Both send 360 requests (RoleGPT: 2 roles x 30 instructions x 6 samples), each run into a fresh folder and cache. It
prints the seconds of each, the Ray path's throughput as a fraction of the built-in one, and Ray's fixed start-up
cost: `ray.init` itself, and what a job pays on top of its requests (the Ray run's seconds minus the built-in run's).
Run: `python bench/bench_ray.py` (about a minute); it needs `rolellm[ray]` and the RoleBench data.
"""

import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rolellm.testing.data import find_test_data  # noqa: E402


LATENCY = 0.1
CONCURRENCY = 16
INSTRUCTIONS = 30  # per role; x 2 roles x 6 samples = 360 requests
REQUESTS = 2 * INSTRUCTIONS * 6
# requests per Ray Data batch (`--batch_size`): 360 requests over 16 slots (4 workers x 4 batches) is 22.5 per slot, so
# each slot runs about one batch; every batch costs Ray a task, which on a small machine outweighs the requests
RAY_BATCH_SIZE = 24
RECIPE = Path(__file__).resolve().parents[1] / "examples" / "recipes" / "generate_rolegpt.yaml"


def serve(connection):
    from rolellm.testing.server import ChatCompletionsServer

    with ChatCompletionsServer(lambda body: f"answer {body['seed']}", latency=LATENCY) as server:
        connection.send(server.base_url)
        connection.recv()  # until the benchmark is done


def generate(base_url: str, data_dir: Path, output_dir: Path, *backend: str) -> float:
    from rolellm.scripts.cli import main

    command = [
        "generate", "rolegpt", "--config", str(RECIPE), "--output_dir", str(output_dir), "--base_url", base_url,
        "--profiles", str(data_dir / "roleglm-screenplay" / "profile_zhenhuan"),
        "--instructions", str(data_dir / "rolebench" / "rolebench-zh" / "general" / "test.jsonl"),
        "--max_instructions", str(INSTRUCTIONS), "--model", "bench", "--max_concurrency", str(CONCURRENCY),
        "--progress", "false", *backend,
    ]  # fmt: skip
    start = time.perf_counter()
    code = main(command)
    seconds = time.perf_counter() - start
    if code != 0:
        raise SystemExit(f"rolellm generate {' '.join(backend) or '(built-in client)'} exited {code}")
    return seconds


def main():
    data_dir = find_test_data()
    if data_dir is None:
        raise SystemExit("RoleBench data not found: set ROLEBENCH_DATA_DIR or place it at ../shared/data")
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    import ray

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.Process(target=serve, args=(child,), daemon=True)
    server.start()
    base_url = parent.recv()
    try:
        with tempfile.TemporaryDirectory() as folder:
            folder = Path(folder)
            builtin = generate(base_url, data_dir, folder / "builtin")
            start = time.perf_counter()
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
            init = time.perf_counter() - start
            ray_flags = ("--backend", "ray", "--batch_size", str(RAY_BATCH_SIZE))
            first = generate(base_url, data_dir, folder / "ray-1", *ray_flags)
            second = generate(base_url, data_dir, folder / "ray-2", *ray_flags)
            ray.shutdown()
    finally:
        parent.send("stop")
        server.join(timeout=5)

    print(f"\n{REQUESTS} requests, {LATENCY * 1000:.0f} ms per answer, {CONCURRENCY} in flight, {os.cpu_count()} CPUs")
    print("| run | seconds | requests/s | throughput vs built-in |")
    print("|---|---:|---:|---:|")
    for label, seconds in (
        ("built-in client (OpenAIChatClient)", builtin),
        ("--backend ray, first job after ray.init", first),
        ("--backend ray, second job", second),
    ):
        print(f"| {label} | {seconds:.2f} | {REQUESTS / seconds:.1f} | {builtin / seconds:.2f}x |")
    print(f"\nRay start-up: ray.init {init:.1f} s; per job on top of the built-in run's time: first "
          f"{first - builtin:.1f} s, second {second - builtin:.1f} s")  # fmt: skip
    print(f"target: the Ray path at 0.8x of the built-in one or better; second job: {builtin / second:.2f}x")


if __name__ == "__main__":
    main()
