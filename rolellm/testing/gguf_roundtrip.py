"""How closely a GGUF file in llama.cpp follows the checkpoint it was exported from, in transformers: the round trip of
`rolellm export --gguf`, measured by tests/test_gguf_export.py (the `f16` file) and bench/bench_gguf_export.py (every
type, the table of docs/sillytavern.md).

`transformers_reference(checkpoint, chats)` runs the merged checkpoint (float32) once on role chats (system, question,
reference answer); `compare_in_llama_cpp(gguf_file, reference)` runs the file in llama.cpp (llama-cpp-python) on the
same token ids and gives the figures: teacher-forced, how often both pick the same next token at the answer
positions, the largest log-probability gap among transformers' ten likeliest tokens and over the whole vocabulary, and
the mean KL divergence (transformers to llama.cpp); greedy, how many of `--backend llamacpp`'s answers equal the local
backend's.
"""

import json
from pathlib import Path


ROLE = "李白"  # the role whose Chinese role-specific test questions the round trip asks


def one_step_training_argv(model, data_dir, output_dir) -> list[str]:
    """`rolellm train`'s arguments for the checkpoint the round trip exports: one LoRA step (q and v projections,
    rank 8) from `model` on the `zh-role_specific` rows of the RoleBench folder `data_dir`, on the CPU."""
    return [
        "train", "--model_name_or_path", str(model), "--data_dir", str(data_dir), "--dataset_configs",
        "zh-role_specific", "--output_dir", str(output_dir), "--use_peft", "--lora_r", "8", "--lora_target_modules",
        "q_proj", "v_proj", "--max_steps", "1", "--use_cpu", "--bf16", "false", "--report_to", "none",
        "--activation_checkpointing", "false", "--per_device_train_batch_size", "1", "--max_length", "512",
        "--save_strategy", "no", "--disable_tqdm", "true", "--learning_rate", "0.001",
    ]  # fmt: skip


def role_rows(data_dir, count: int) -> list[dict]:
    """The first `count` of `ROLE`'s rows in the `zh-role_specific` test file of the RoleBench folder `data_dir`."""
    lines = (Path(data_dir) / "rolebench-zh" / "role_specific" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    return [row for row in map(json.loads, lines) if row["role"] == ROLE][:count]


def role_chats(checkpoint, rows: list[dict]) -> list[list[dict]]:
    """Each row as the chat `checkpoint` was trained on (its saved profile's system text, the question, the
    reference answer)."""
    from rolellm.roles.prompts import to_role_messages
    from rolellm.roles.resolve import load_profiles

    profile = load_profiles(Path(checkpoint) / "role_profiles.jsonl")[ROLE]
    return [to_role_messages(row, profile)[0] for row in rows]


def transformers_reference(checkpoint, chats: list[list[dict]], max_new_tokens: int) -> dict:
    """The merged `checkpoint` in transformers on `chats`: each chat's prompt ids, answer positions (those that predict
    an answer token) and their log-probabilities, and the local backend's greedy answers to `[system, question]`."""
    import torch

    from rolellm.clients.loading import load_model_and_tokenizer
    from rolellm.clients.local import LocalChatClient
    from rolellm.encoding.encode import encode_chat

    model, tokenizer = load_model_and_tokenizer(checkpoint)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model.eval()
    forced = []
    for chat in chats:
        encoded = encode_chat(tokenizer, chat)
        ids, mask = encoded["input_ids"], encoded["assistant_masks"]
        answer = [k - 1 for k in range(1, len(ids)) if mask[k]]
        with torch.no_grad():  # the vocabulary's log-probabilities at the answer positions only
            logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0, answer].float(), -1)
        forced.append({"ids": ids, "answer": answer, "logprobs": logprobs})
    local = LocalChatClient(model=model, tokenizer=tokenizer, max_new_tokens=max_new_tokens, progress=False)
    prompts = [chat[:2] for chat in chats]
    return {"forced": forced, "prompts": prompts, "prompt_ids": [local.encode_prompt(p) for p in prompts],
            "greedy": [result.text for result in local.generate(prompts)], "max_new_tokens": max_new_tokens}  # fmt: skip


def compare_in_llama_cpp(gguf_file: Path, reference: dict, greedy: bool = True) -> dict:
    """llama.cpp on `gguf_file` against `reference` (`transformers_reference`): the figures of the module's
    docstring. The greedy answers are checked to come from the same prompt ids first."""
    import numpy as np
    import torch
    from llama_cpp import Llama

    from rolellm.clients.llamacpp_backend import LlamaCppChatClient

    same = positions = 0
    top10_gap = full_gap = kl = 0.0
    llama = Llama(str(gguf_file), n_ctx=1024, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False)
    before: list[int] = []
    try:
        for chat in reference["forced"]:
            ids, answer, ours = chat["ids"], chat["answer"], chat["logprobs"]
            # the prefix shared with the chat before (the role's system text) stays in llama.cpp's cache and its
            # logits in `scores`: only the rest is computed
            llama.n_tokens = min(Llama.longest_token_prefix(ids, before), len(ids) - 1)
            llama.eval(ids[llama.n_tokens :])
            before = ids
            logits = torch.tensor(np.array(llama.scores[: len(ids)])[answer], dtype=torch.float32)
            theirs = torch.log_softmax(logits, -1)
            same += int((ours.argmax(-1) == theirs.argmax(-1)).sum())
            positions += len(answer)
            top = ours.topk(10, -1).indices
            top10_gap = max(top10_gap, float((ours.gather(-1, top) - theirs.gather(-1, top)).abs().max()))
            full_gap = max(full_gap, float((ours - theirs).abs().max()))
            kl += float((ours.exp() * (ours - theirs)).sum())
    finally:
        llama.close()
    figures = {"same": same, "positions": positions, "top10_gap": top10_gap, "full_gap": full_gap,
               "mean_kl": kl / positions}  # fmt: skip
    if greedy:
        client = LlamaCppChatClient(gguf_file, max_new_tokens=reference["max_new_tokens"], progress=False)
        try:
            if [client.encode_prompt(p) for p in reference["prompts"]] != reference["prompt_ids"]:
                raise AssertionError(f"llama.cpp was given other prompt ids than transformers for {gguf_file}")
            answers = [result.text for result in client.generate(reference["prompts"])]
        finally:
            client.close()
        figures.update(greedy=sum(a == b for a, b in zip(answers, reference["greedy"])), prompts=len(answers))
    return figures


def format_figures(gguf_type: str, figures: dict) -> str:
    """One line of `compare_in_llama_cpp`'s figures."""
    greedy = f", same greedy answer {figures['greedy']}/{figures['prompts']}" if "greedy" in figures else ""
    return (f"{gguf_type}: same next token {figures['same']}/{figures['positions']}, top-10 gap "
            f"{figures['top10_gap']:.4f}, vocabulary gap {figures['full_gap']:.4f}, mean KL {figures['mean_kl']:.5f}"
            f"{greedy}")  # fmt: skip
