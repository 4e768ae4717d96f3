"""Context-Instruct and profile descriptions on a Chinese screenplay profile (华妃 of 甄嬛传).

Offline by default (a tiny random local model: it writes no JSON, so every segment is re-asked and then counted
as unparseable, and saving writes only `generation/<job>/failures.jsonl` — the segmentation, prompts, validation and
failure handling are the real ones). Point it at a real
model with `--model <folder or Hub id>` (local) or `--base_url http://localhost:8000/v1 --model <served model>`.

    python examples/generate_context_instruct.py --output_dir runs/example-context-instruct
"""

import argparse
import tempfile
from pathlib import Path

from rolellm import (
    ContextInstruct,
    ContextInstructConfig,
    LocalChatClient,
    OpenAIChatClient,
    ProfileDescriber,
    ProfileDescriptionConfig,
    read_screenplay_folder,
)
from rolellm.generation.context_instruct import segment_profile
from rolellm.generation.job import NothingGenerated
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
    parser.add_argument("--num_acts", type=int, default=3, help="use the first N acts of the script (0: all)")
    parser.add_argument("--max_tokens", type=int, default=64, help="answer budget (the defaults are 2048 and 1024)")
    parser.add_argument("--output_dir", default="runs/example-context-instruct")
    args = parser.parse_args()

    data = find_rolebench_data()
    if data is None:
        raise SystemExit("The screenplay profiles were not found: set ROLEBENCH_DATA_DIR (see the data README).")
    profile = read_screenplay_folder(data / "roleglm-screenplay" / "profile_zhenhuan")["华妃"]
    if args.num_acts:
        acts = sorted({u.act_id for u in profile.dialogue})[: args.num_acts]
        profile.dialogue = [u for u in profile.dialogue if u.act_id in acts]

    config = ContextInstructConfig(max_segment_tokens=1000, test_fraction=0.2, max_tokens=args.max_tokens)
    segments = segment_profile(profile, config.max_segment_tokens)
    print(f"{len(segments)} segments; the first prompt:")
    generator = ContextInstruct(config)
    print(generator.prompt(profile, segments[0])[0]["content"][:400])

    client = make_client(args, Path(args.output_dir) / "cache.sqlite")
    describer = ProfileDescriber(ProfileDescriptionConfig(max_dialogue_tokens=1000, max_tokens=args.max_tokens))
    for job in (generator, describer):  # both add to one release folder (rows, profiles-zh/, generation/<job>/)
        result = job.generate(client, [profile])
        print(result.dataset)
        print(result.stats)
        try:
            print(f"saved to {job.save(args.output_dir, result, client)}")
        except NothingGenerated as error:  # a run with nothing to show writes only its failures
            print(f"nothing saved: {error}")


if __name__ == "__main__":
    main()
