"""A GGUF file answering role prompts in llama.cpp, several at a time: `--backend llamacpp` in Python.

    pip install "rolellm[llamacpp]"
    python examples/llamacpp_batches.py [--model FILE.gguf] [--batch_size 4] [--max_new_tokens 24]

Without `--model`, the embedded SmolLM2-135M-Instruct (the shipped Q4_1 file); a file or folder from
`rolellm export CKPT --gguf q4_0 --output_dir DIR` works the same way, with the chat template it was trained with.
Two roles ask two questions each: their four prompts are answered in one batch, each role's system text decoded
once, then a second turn of one conversation decodes only its new tokens.
"""

import argparse

from rolellm.clients.chat_answer import prompt_ids
from rolellm.clients.gguf import embedded_model_file
from rolellm.clients.llamacpp_backend import LlamaCppChatClient


ROLES = {
    "Jack Sparrow": "You are Jack Sparrow, captain of the Black Pearl. Answer as Jack would, in his words.",
    "Sherlock Holmes": "You are Sherlock Holmes, the consulting detective. Answer as Holmes would, in his words.",
}
QUESTIONS = ["Who are you?", "What do you fear most?"]


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="a .gguf file or an export folder (default: the embedded one)")
    parser.add_argument("--batch_size", type=int, default=4, help="prompts answered together")
    parser.add_argument("--max_new_tokens", type=int, default=24, help="answer budget")
    return parser


def main(args):
    model = args.model or embedded_model_file()
    chats = [[{"role": "system", "content": s}, {"role": "user", "content": q}] for s in ROLES.values()
             for q in QUESTIONS]  # fmt: skip
    client = LlamaCppChatClient(model, batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, progress=False)
    try:
        results = client.generate(chats)  # greedy: every request's sampling settings are its own
        for role, result in zip([r for r in ROLES for _ in QUESTIONS], results):
            print(f"{role}: {result.text.strip()!r}")
        written = sum(r.usage["prompt_tokens"] for r in results)
        print(f"prompt tokens: {written}, decoded: {client.engine.prompt_tokens_decoded} (shared system text once)")

        # the next turn of the first conversation: only what follows the cached prompt is decoded
        following = [*chats[0], {"role": "assistant", "content": results[0].text}, {"role": "user", "content": "Why?"}]
        prompt, before = prompt_ids(client, following), client.engine.prompt_tokens_decoded
        answer = "".join(client.stream(prompt, args.max_new_tokens, 0.0, 1.0, 0, {}))
        new = client.engine.prompt_tokens_decoded - before
        print(f"Jack Sparrow, second turn: {answer.strip()!r}")
        print(f"second turn: {len(prompt)} prompt tokens, {new} decoded")
    finally:
        client.close()


if __name__ == "__main__":
    main(make_parser().parse_args())
