"""`rolellm train --stage grpo`: GRPO from a RoCIT checkpoint or adapter, with the rewards of `rolellm.rewards`.

```bash
rolellm train --stage grpo --config examples/recipes/grpo-tiny-cpu.yaml --model_name_or_path outputs/tiny-rocit
# a rubric judge among the rewards, weighted, each reward normalised per group before the sum
rolellm train --stage grpo --model_name_or_path runs/rolellama --data_dir RoleBench --dataset_configs en-role \\
    --rewards reference_rouge_l rubric_judge length_penalty --reward_weights 1 1 0.5 \\
    --multi_objective_aggregation normalize_then_sum --judge_model gpt-4o --output_dir runs/rolellama-grpo
# whole conversations with the simulated user of `rolellm dialogue`
rolellm train --stage grpo --model_name_or_path runs/rolellama --scenarios scenarios.yaml --user_model gpt-4o-mini \\
    --rewards rubric_judge --judge_model gpt-4o --max_completion_length 512 --output_dir runs/rolellama-grpo
```

The rows, profiles and flags of the data are those of every stage of `rolellm train` (`rolellm.data.selection`); every
field of
`trl.GRPOConfig` is a flag (`--num_generations`, `--beta`, `--loss_type`, `--reward_weights`, ...). The judge and the
user simulator are endpoints derived as `rolellm dialogue` derives them (`--judge_model`, `--judge_base_url`, ...; a
model that is a folder runs locally), each with its answer cache in `output_dir`.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rolellm.clients.config import ClientConfig, check_endpoints, derive_client, endpoint_options, make_client
from rolellm.data.selection import RoleBenchArguments, default_configs, load_profiles_for, load_rows
from rolellm.scripts.recipe import dataclasses_from, make_command_parser


JudgeOptions = endpoint_options("judge", model_help="Rubric judge model (reward 'rubric_judge'): a folder or an "
                                "endpoint model name.")  # fmt: skip
UserOptions = endpoint_options("user", model_help="User simulator of --scenarios: a folder or an endpoint model name.")


@dataclass
class GRPOScriptArguments:
    """The rewards, and the conversations of a multi-turn run.

    Args:
        stage (`str`, *optional*, defaults to `"grpo"`): the training stage (`rolellm train --stage grpo`).
        rewards (`list[str]`, *optional*, defaults to `["reference_rouge_l"]`): the reward functions, in the order of
            `--reward_weights`: `reference_rouge_l`, `rubric_judge` (needs `--judge_model`), `catchphrase`,
            `language`, `length_penalty` (`rolellm.rewards.registry`), or a dotted path to a reward function in
            TRL's form (`package.module.function`).
        per_role_normalize (`bool`, *optional*, defaults to `False`): z-score every reward per role
            (`rolellm.rewards.combine.per_role_normalized`).
        max_answer_words (`int`, *optional*, defaults to 120): the words `length_penalty` allows.
        judge_max_failure_share (`float`, *optional*, defaults to 0.2): the share of failed verdicts that stops the run.
        scenarios (`str`, *optional*): a scenarios file (`rolellm.read_scenarios`): train on whole conversations with
            the simulated user (`--user_model`) instead of RoleBench rows.
        max_turn_tokens (`int`, *optional*): the longest answer of a conversation's turn.
    """

    stage: Literal["grpo"] = field(default="grpo", metadata={"help": "The training stage."})
    rewards: list[str] = field(
        default_factory=lambda: ["reference_rouge_l"],
        metadata={
            "help": "Reward functions, in the order of --reward_weights: reference_rouge_l, rubric_judge, "
            "catchphrase, language, length_penalty, or package.module.function."
        },
    )
    per_role_normalize: bool = field(default=False, metadata={"help": "Z-score every reward per role."})
    max_answer_words: int = field(default=120, metadata={"help": "Words length_penalty allows."})
    judge_max_failure_share: float = field(
        default=0.2, metadata={"help": "Share of failed judge verdicts that stops the run."}
    )
    scenarios: str | None = field(
        default=None, metadata={"help": "Scenarios file: train on conversations with the simulated user."}
    )
    max_turn_tokens: int | None = field(default=None, metadata={"help": "Longest answer of a conversation's turn."})


def build_rewards(script_args, judge, profiles, training_args) -> list:
    """The reward functions `--rewards` names (`rolellm.rewards.registry`), per-role normalised when asked; `judge`
    is the judge's client."""
    from rolellm.rewards.combine import per_role_normalized
    from rolellm.rewards.registry import REWARDS, RewardContext, build_reward

    if not script_args.rewards:
        raise ValueError(f"--rewards is empty: name at least one of {sorted(REWARDS)}")
    if training_args.reward_weights is not None and len(training_args.reward_weights) != len(script_args.rewards):
        raise ValueError(
            f"--reward_weights has {len(training_args.reward_weights)} values for {len(script_args.rewards)} "
            f"--rewards {script_args.rewards}: give one weight per reward"
        )
    context = RewardContext(profiles, judge, script_args.max_answer_words, script_args.judge_max_failure_share)
    try:
        rewards = [build_reward(name, context) for name in script_args.rewards]
    except ValueError as error:
        raise ValueError(f"--rewards: {error}") from None
    return [per_role_normalized(r) for r in rewards] if script_args.per_role_normalize else rewards


def train(data_args, script_args, judge_options, user_options, training_args, model_args):
    """Train with GRPO, save the model with its role files and model card, print what was trained.

    The rows and profiles of `--stage grpo` are found as for every stage (`rolellm.data.selection`)."""
    from trl import get_peft_config

    from rolellm.data.release import HUB_REPO_ID
    from rolellm.rewards.registry import needs_judge
    from rolellm.training.engine import announce_plan, prepare_start
    from rolellm.training.grpo import RoleGRPOTrainer

    prepare_start(model_args, training_args)
    model = model_args.model_name_or_path
    base = ClientConfig(model, progress=False)
    output = Path(training_args.output_dir)
    judge_config = derive_client(base, "judge", judge_options, cache_path=str(output / "judge_cache.sqlite"))
    judge = make_client(judge_config) if judge_config is not None else None
    user_config = derive_client(base, "user", user_options, cache_path=str(output / "user_cache.sqlite"))
    user = make_client(user_config) if user_config is not None else None
    needing = [name for name in script_args.rewards if needs_judge(name)]
    if needing and judge is None:
        raise ValueError(f"--rewards {needing[0]} needs --judge_model, the judge that scores the answers")
    if script_args.scenarios is not None and user is None:
        raise ValueError("--scenarios needs --user_model, the simulated user")
    check_endpoints(*(client for client in (judge, user) if client is not None))  # before any model is loaded
    rollout, row_counts, dataset_name = None, {}, None
    if script_args.scenarios is not None:
        from rolellm.evaluation.multiturn.dialogue import read_scenarios
        from rolellm.rewards.rollout import SimulatedUserRollout
        from rolellm.roles.resolve import profiles_for

        profiles = profiles_for(training_args.profiles, model_dir=model, data_dir=data_args.data_dir)
        rollout = SimulatedUserRollout(read_scenarios(script_args.scenarios), profiles, user,
                                       max_turn_tokens=script_args.max_turn_tokens)  # fmt: skip
        train_rows, dataset_name = rollout.dataset(), script_args.scenarios
    else:
        data_args.dataset_configs = default_configs(data_args)
        train_rows = load_rows(data_args, data_args.dataset_train_split, row_counts)
        profiles = load_profiles_for(data_args, training_args)
        dataset_name = data_args.dataset_name or data_args.data_dir or HUB_REPO_ID
    rewards = build_rewards(script_args, judge, profiles, training_args)
    trainer = RoleGRPOTrainer(
        model,
        rewards,
        args=training_args,
        train_dataset=train_rows,
        profiles=profiles,
        peft_config=get_peft_config(model_args),
        dataset_name=dataset_name,
        dataset_configs=row_counts,
        rollout_func=rollout,
    )
    announce_plan(trainer)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    trainer.save_model(training_args.output_dir)
    logged = [log["reward"] for log in trainer.state.log_history if "reward" in log]
    trainer.accelerator.print(
        f"GRPO on {len(train_rows)} prompts of {len(trainer.role_stats['train']['roles'])} roles in "
        f"{trainer.state.global_step} steps, rewards {', '.join(trainer.reward_func_names)}"
        + (f"; mean reward {logged[0]:.4f} at the first log, {logged[-1]:.4f} at the last" if logged else "")
        + f"; saved to {training_args.output_dir}"
    )
    if training_args.push_to_hub:
        trainer.push_to_hub(dataset_name=dataset_name)
    return trainer


def dataclass_types() -> tuple:
    from trl import ModelConfig

    from rolellm.training.grpo import RoleGRPOConfig

    return (RoleBenchArguments, GRPOScriptArguments, JudgeOptions, UserOptions, RoleGRPOConfig, ModelConfig)


def main(args):
    """The `rolellm train --stage grpo` entry point, called by `rolellm.scripts.train.main`; `args` is the namespace
    of `make_parser().parse_args()`."""
    train(*dataclasses_from(args, dataclass_types()))


def make_parser(subparsers=None):
    """The recipe parser over (`RoleBenchArguments`, `GRPOScriptArguments`, the judge's and the user simulator's
    endpoint options, `RoleGRPOConfig`, `trl.ModelConfig`)."""
    description = "Train with GRPO from a RoCIT checkpoint or adapter, with role-play rewards."
    return make_command_parser("train", dataclass_types(), description, subparsers)
