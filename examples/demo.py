"""`make demo`: run the rolellm pipeline on embedded defaults, offline, in a few minutes on a CPU."""

import tempfile

from rolellm import testing


def main():
    with tempfile.TemporaryDirectory() as folder:
        print("Building a tiny local model (byte-level BPE tokenizer + 2-layer Llama)...")
        path = testing.build_tiny_llama(folder)
        print(f"Saved to {path}: " + ", ".join(sorted(p.name for p in path.iterdir())))


if __name__ == "__main__":
    main()
