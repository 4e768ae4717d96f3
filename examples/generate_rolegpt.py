"""RoleGPT on the Chinese screenplay profiles: 华妃 answers general instructions in her own voice.

Offline by default (a tiny random local model, so the answers are noise and most are rejected by the cleaning
checks; the prompts, retrieval, cleaning and outputs are the real ones). Point it at a real model with
`--model <folder or Hub id>` (local) or `--base_url http://localhost:8000/v1 --model <served model>` (endpoint).

    python examples/generate_rolegpt.py --output_dir runs/example-rolegpt
"""

import argparse
import tempfile
from pathlib import Path

from rolellm import LocalChatClient, OpenAIChatClient, RoleGPT, RoleGPTConfig, read_screenplay_folder
from rolellm.testing.data import find_rolebench_data
from rolellm.testing.models import build_tiny_llama


def make_client(args, cache_path):
    if args.base_url:
        return OpenAIChatClient(args.model, base_url=args.base_url, cache_path=cache_path)
    model = args.model or build_tiny_llama(tempfile.mkdtemp())
    return LocalChatClient(model, chat_template=None if args.model else "chatml", cache_path=cache_path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="local model folder / Hub id, or the endpoint's model name")
    parser.add_argument("--base_url", help="an OpenAI-compatible endpoint; the key comes from OPENAI_API_KEY")
    parser.add_argument("--output_dir", default="runs/example-rolegpt")
    args = parser.parse_args()

    data = find_rolebench_data()
    if data is None:
        raise SystemExit("The screenplay profiles were not found: set ROLEBENCH_DATA_DIR (see the data README).")
    profiles = read_screenplay_folder(data / "roleglm-screenplay" / "profile_zhenhuan")
    instructions = [
        {"question": "写一首关于春天的短诗。", "target": "春风拂面百花开，燕子归来绕楼台。"},
        {"question": "请用三句话介绍一下长城。", "target": "长城是中国古代的军事防御工程。"},
    ]
    rolegpt = RoleGPT(RoleGPTConfig(num_samples=3, include_reference=True, max_tokens=64))
    # the exact messages of the first request: system instruction, three retrieved exchanges, the question
    first = instructions[0]
    for message in rolegpt.prompt(profiles["华妃"], first["question"], reference=first["target"]):
        print(f"[{message['role']}] {message['content'][:80]}")

    client = make_client(args, Path(args.output_dir) / "cache.sqlite")
    result = rolegpt.generate(client, [profiles["华妃"]], instructions, output_dir=args.output_dir)
    print(result.dataset)
    print(result.stats)


if __name__ == "__main__":
    main()
