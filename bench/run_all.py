"""`make bench`: run every `bench/bench_*.py` in turn; each prints its figures as ratios against a baseline."""

import subprocess
import sys
from pathlib import Path


def main():
    scripts = sorted(Path(__file__).parent.glob("bench_*.py"))
    if not scripts:
        print("no benchmarks yet")
        return 0
    failed = []
    for script in scripts:
        print(f"\n===== {script.name} =====", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
