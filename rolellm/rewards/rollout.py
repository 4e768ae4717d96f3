"""Multi-turn GRPO: the policy plays a role in whole conversations with `rolellm dialogue`'s simulated user.

`SimulatedUserRollout` is a TRL `rollout_func` (`GRPOTrainer(..., rollout_func=rollout)`, `RoleGRPOTrainer` too):
for each prompt, the policy answers the scenario's opening line, the user simulator of
`rolellm.evaluation.multiturn.dialogue` (the same prompt, `user_simulator_{lang}.jinja`, and the same
`parse_user_line`) answers back, and so on for the scenario's `num_turns` turns. The completion is the whole
conversation after the prompt, as tokens: the policy's answers as generated (trained, `env_mask` 1), and between them
the template's tokens of each user turn (`env_mask` 0: the loss never covers the user's lines). The user turns are
encoded with `rolellm.encode_chat` (injection-safe), from the conversation rendered with and without the new user
turn, so the tokens are exactly those the chat template gives.

Each completion's conversation goes to the reward functions as the `transcript` column (`id`, `role`, `lang`,
`scenario`, `turns`, `complete`, `error`, as `run_dialogues` writes them); `rolellm.rewards` score the role's lines
of it (`RubricJudgeReward` judges the whole conversation, `memory` included).

A conversation ends early, and says why in its `error`, when it reaches the completion budget
(`max_completion_length` covers the whole conversation), when the next user turn would not fit, or when the user
simulator fails (counted in a warning); its reward is that of the turns it has. `max_turn_tokens` caps each answer.

Prompts are the rows of `SimulatedUserRollout.dataset()`: one per scenario, the role's system text and the opening
line (a scenario without one asks the simulator for it first, as `run_dialogues` does).
"""

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace

import datasets

from rolellm.clients.base import ChatClient, ChatRequest
from rolellm.clients.config import ClientConfig, make_client
from rolellm.encoding.encode import encode_chat
from rolellm.evaluation.multiturn.dialogue import Scenario, _Conversation, _with_ids, parse_user_line
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile


logger = logging.getLogger(__name__)


def trainer_keep_think(trainer) -> bool:
    """The `keep_think` a `RoleGRPOTrainer` encodes its prompts with; `False` for TRL's own trainer."""
    return bool(getattr(trainer, "keep_think", False))


def _key(prompt: list[dict]) -> str:
    return json.dumps(prompt, ensure_ascii=False, sort_keys=True)


class SimulatedUserRollout:
    """A TRL `rollout_func` in which a simulated user talks with the policy (see the module docstring).

    Args:
        scenarios (`Sequence[Scenario]`): the situations to play (`rolellm.read_scenarios`, `scenarios_from_card`).
        profiles (`Mapping[str, RoleProfile]`): role -> profile; every scenario's role needs one.
        user (`ClientConfig` or `ChatClient`): the user simulator (an endpoint, or a local model).
        num_turns (`int`, *optional*): overrides every scenario's `num_turns` (each turn costs a generation).
        max_turn_tokens (`int`, *optional*): the longest answer; an answer cut there gets the template's end of turn
            (not trained on) and the conversation goes on. By default an answer may fill the completion budget, and
            one cut by it ends the conversation.
        user_max_tokens (`int`, *optional*, defaults to 128), user_temperature (`float`, *optional*, defaults to 0.0),
            seed (`int`, *optional*, defaults to 0): the simulator's sampling (greedy: with the client's cache, a
            user line is asked once for the same conversation).
    """

    def __init__(
        self,
        scenarios: Sequence[Scenario],
        profiles: Mapping[str, RoleProfile],
        user: ClientConfig | ChatClient,
        num_turns: int | None = None,
        max_turn_tokens: int | None = None,
        user_max_tokens: int = 128,
        user_temperature: float = 0.0,
        seed: int = 0,
    ):
        self.profiles = Profiles(profiles)
        missing = sorted({s.role for s in scenarios if s.role not in self.profiles})
        if missing:
            raise ValueError(f"scenarios name roles with no profile: {missing}; profiles: {sorted(self.profiles)}")
        for name, value in (("num_turns", num_turns), ("max_turn_tokens", max_turn_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"{name}={value} must be at least 1")
        self.scenarios = _with_ids([replace(s) for s in scenarios], [f"scenarios[{i}]" for i in range(len(scenarios))])
        self.user = make_client(user) if isinstance(user, ClientConfig) else user
        self.num_turns = num_turns
        self.max_turn_tokens = max_turn_tokens
        self.user_params = {"temperature": user_temperature, "max_tokens": user_max_tokens, "seed": seed}
        self.opening: dict[str, str] = {}  # scenario id -> the user's first line
        self.by_prompt: dict[str, Scenario] = {}
        self.user_failures = 0

    def conversation(self, scenario: Scenario) -> _Conversation:
        return _Conversation(scenario, self.profiles[scenario.role])

    def ask_user(self, conversations: list[_Conversation], desc: str) -> list[str | None]:
        """The simulator's next line in each conversation (`None` where it failed, counted)."""
        requests = [ChatRequest(c.simulator_messages(), params=dict(self.user_params)) for c in conversations]
        lines = []
        for c, result in zip(conversations, self.user.generate(requests, parse=parse_user_line, desc=desc)):
            lines.append(result.parsed if result.ok else None)
            if not result.ok:
                c.error = f"user simulator: {result.error}"
        failed = lines.count(None)
        if failed:
            self.user_failures += failed
            logger.warning("user simulator: %d of %d lines failed (%d in the run), e.g. %s", failed, len(lines),
                           self.user_failures, next(c.error for c in conversations if c.error))  # fmt: skip
        return lines

    def dataset(self) -> datasets.Dataset:
        """The prompts to train on, one row per scenario: `prompt` (the role's system text and the user's first
        line), `role`, `lang`, `scenario_id`."""
        waiting = [s for s in self.scenarios if not s.opening_line and s.id not in self.opening]
        if waiting:
            for scenario, line in zip(waiting, self.ask_user([self.conversation(s) for s in waiting], "Openings")):
                if line is None:
                    raise ValueError(f"scenario {scenario.id!r}: the user simulator gave no opening line")
                self.opening[scenario.id] = line
        rows = []
        for scenario in self.scenarios:
            conversation = self.conversation(scenario)
            prompt = conversation.role_messages(scenario.opening_line or self.opening[scenario.id], card_extras=False)
            same = self.by_prompt.setdefault(_key(prompt), scenario)
            if same is not scenario:  # a rollout is given the prompt only: it must name one scenario
                raise ValueError(
                    f"scenarios {same.id!r} and {scenario.id!r} give the same prompt (the same role and first line): "
                    "give them different opening lines"
                )
            rows.append({"prompt": prompt, "role": conversation.profile.name, "lang": conversation.lang,
                         "scenario_id": scenario.id})  # fmt: skip
        return datasets.Dataset.from_list(rows)

    def __call__(self, prompts: list, trainer) -> dict:
        """Play one conversation per prompt with `trainer`'s model; returns TRL's rollout fields (`prompt_ids`,
        `completion_ids`, `logprobs`, `env_mask`) and `transcript`."""
        tokenizer, keep_think = trainer.processing_class, trainer_keep_think(trainer)
        conversations, first_lines = [], []
        for prompt in prompts:
            scenario = self.by_prompt.get(_key(prompt))
            if scenario is None:
                raise ValueError("a prompt that SimulatedUserRollout.dataset() did not make: train on its rows")
            conversations.append(self.conversation(scenario))
            first_lines.append(prompt[-1]["content"])
        prompt_ids = [encode_chat(tokenizer, p, add_generation_prompt=True, keep_think=keep_think)["input_ids"]
                      for p in prompts]  # fmt: skip
        completion_ids = [[] for _ in prompts]
        env_mask = [[] for _ in prompts]
        lines = list(first_lines)  # the user line each conversation's next answer answers
        active = list(range(len(prompts)))
        generation_config = trainer.generation_config
        full_budget = generation_config.max_new_tokens
        if self.max_turn_tokens is not None:  # each answer stops there (the trainer's config is restored below)
            generation_config.max_new_tokens = min(self.max_turn_tokens, full_budget)
        try:
            while active:
                active = self.play_turn(trainer, conversations, active, prompt_ids, completion_ids, env_mask, lines)
        finally:
            generation_config.max_new_tokens = full_budget
        transcripts = [
            {"id": c.scenario.id, "role": c.profile.name, "lang": c.lang, "scenario": asdict(c.scenario),
             "greeting": c.scenario.greeting, "turns": c.turns,
             "complete": len(c.turns) >= (self.num_turns or c.scenario.num_turns), "error": c.error}
            for c in conversations
        ]  # fmt: skip
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": None, "env_mask": env_mask,
                "transcript": transcripts}  # fmt: skip

    def play_turn(self, trainer, conversations, active, prompt_ids, completion_ids, env_mask, lines) -> list[int]:
        """One answer in each active conversation, then the user's next line where the conversation goes on;
        returns the conversations that go on."""
        tokenizer, budget, keep_think = (
            trainer.processing_class,
            trainer.max_completion_length,
            trainer_keep_think(trainer),
        )
        inputs = [prompt_ids[i] + completion_ids[i] for i in active]
        answers, _ = trainer._generate_single_turn(inputs, None, {}, num_generations=1)
        going = []
        for i, answer in zip(active, answers):
            room = budget - len(completion_ids[i])
            answer = answer[:room]
            completion_ids[i] += answer
            env_mask[i] += [1] * len(answer)
            c = conversations[i]
            c.turns.append({"user": lines[i], "assistant": tokenizer.decode(answer, skip_special_tokens=True).strip()})
            ended = bool(answer) and answer[-1] in trainer.eos_token_ids
            if not ended and len(answer) >= room:
                c.error = f"turn {len(c.turns)}: the conversation reached max_completion_length={budget}"
            elif len(c.turns) < (self.num_turns or c.scenario.num_turns):
                going.append((i, ended))
        next_active = []
        if not going:
            return next_active
        user_lines = self.ask_user([conversations[i] for i, _ in going], "User")
        for (i, ended), line in zip(going, user_lines):
            if line is None:
                continue
            end_of_turn, suffix = self.user_turn_ids(
                tokenizer, conversations[i], line, keep_think, trainer.eos_token_ids
            )
            added = (
                suffix if ended else [end_of_turn, *suffix]
            )  # an answer cut at max_turn_tokens gets its end of turn
            if len(completion_ids[i]) + len(added) >= budget:
                conversations[
                    i
                ].error = f"turn {len(conversations[i].turns) + 1}: no room left in max_completion_length={budget}"
                continue
            completion_ids[i] += added
            env_mask[i] += [0] * len(added)
            lines[i] = line
            next_active.append(i)
        return next_active

    @staticmethod
    def user_turn_ids(tokenizer, conversation: _Conversation, line: str, keep_think: bool, eos_ids) -> tuple:
        """`(end_of_turn, suffix)`: the template's end-of-turn token after an answer, and the tokens it puts after
        that: the user's `line` and the header of the next answer, from the conversation encoded with and without
        `line`."""
        asked = conversation.role_messages(line, card_extras=False)  # the turns so far, then `line`
        encoded = encode_chat(tokenizer, asked[:-1], keep_think=keep_think)
        ids, mask = encoded["input_ids"], encoded["assistant_masks"]
        start = len(mask) - mask[::-1].index(1) if 1 in mask else len(ids)  # the last answer: its trained span
        while start > 0 and mask[start - 1]:
            start -= 1
        # the answer ends at its first end-of-turn token (a template may write more after the last answer only)
        end = next((n for n in range(start, len(ids)) if mask[n] and ids[n] in eos_ids), len(ids) - 1)
        answered = ids[: end + 1]
        following = encode_chat(tokenizer, asked, add_generation_prompt=True, keep_think=keep_think)["input_ids"]
        if following[: len(answered)] != answered:
            raise ValueError(
                "the prompt of the next turn does not begin with the conversation so far (the chat template "
                "re-renders earlier turns, or a Character Card's lorebook changed the system text), so a multi-turn "
                "rollout cannot go on from the generated tokens: use a template that keeps the history as it was"
            )
        return answered[-1], following[len(answered) :]
