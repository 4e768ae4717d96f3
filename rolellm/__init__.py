"""rolellm: RoleLLM (arXiv 2310.00746) on the Hugging Face stack.

The public API is listed in `__all__`. Names are imported on first use, so `import rolellm` stays fast and
does not pull in torch, transformers or trl until a name that needs them is touched.

>>> import rolellm
>>> rolellm.__version__
'0.1.0'
>>> rolellm.RoleProfile(name="Sun Wukong", lang="en").name
'Sun Wukong'
"""

import importlib
from typing import TYPE_CHECKING


__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "RoleProfile": "rolellm.roles.profile",
    "Utterance": "rolellm.roles.profile",
    "split_catchphrases": "rolellm.roles.profile",
    "read_release_profiles": "rolellm.roles.release",
    "read_profile_jsonl": "rolellm.roles.release",
    "read_screenplay_folder": "rolellm.roles.release",
    "write_release_profiles": "rolellm.roles.release",
    "write_screenplay_folder": "rolellm.roles.release",
    "load_profiles": "rolellm.roles.resolve",
    "profiles_for": "rolellm.roles.resolve",
    "Profiles": "rolellm.roles.lookup",
    "select_roles": "rolellm.roles.resolve",
    "ProfileSourceError": "rolellm.roles.resolve",
    "read_rolebench_jsonl": "rolellm.data.readers",
    "RoleBench": "rolellm.data.builder",
    "load_rolebench": "rolellm.data.builder",
    "load_rolebench_profiles": "rolellm.data.builder",
    "split_role_questions": "rolellm.data.heldout",
    "write_split_release": "rolellm.data.heldout",
    "export_rolebench": "rolellm.data.hub",
    "push_rolebench": "rolellm.data.hub",
    "parse_screenplay": "rolellm.roles.screenplay",
    "read_screenplay": "rolellm.roles.screenplay",
    "write_screenplay": "rolellm.roles.screenplay",
    "read_character_card": "rolellm.roles.character_card",
    "write_character_card": "rolellm.roles.character_card",
    "profile_from_card": "rolellm.roles.character_card",
    "card_from_profile": "rolellm.roles.character_card",
    "ChatRequest": "rolellm.clients.base",
    "ChatResult": "rolellm.clients.base",
    "OpenAIChatClient": "rolellm.clients.openai_compatible",
    "EndpointError": "rolellm.clients.base",
    "ClientConfig": "rolellm.clients.config",
    "make_client": "rolellm.clients.config",
    "LocalChatClient": "rolellm.clients.local",
    "embedded_model": "rolellm.clients.gguf",
    "embedded_model_file": "rolellm.clients.gguf",
    "VLLMChatClient": "rolellm.clients.vllm_backend",
    "RayChatClient": "rolellm.clients.ray_backend",
    "LlamaCppChatClient": "rolellm.clients.llamacpp_backend",
    "ChatSession": "rolellm.clients.chat_session",
    "stream_answer": "rolellm.clients.chat_answer",
    "DialogueRetriever": "rolellm.roles.retrieval",
    "dialogue_to_messages": "rolellm.roles.retrieval",
    "RoleGPT": "rolellm.generation.rolegpt",
    "RoleGPTConfig": "rolellm.generation.rolegpt",
    "ContextInstruct": "rolellm.generation.context_instruct",
    "ContextInstructConfig": "rolellm.generation.context_instruct",
    "ProfileDescriber": "rolellm.generation.profile_description",
    "ProfileDescriptionConfig": "rolellm.generation.profile_description",
    "clean_answer": "rolellm.generation.filters",
    "build_system_instruction": "rolellm.roles.prompts",
    "to_role_messages": "rolellm.roles.prompts",
    "build_role_messages": "rolellm.roles.prompts",
    "build_chat_messages": "rolellm.roles.prompts",
    "role_greeting": "rolellm.roles.prompts",
    "encode_chat": "rolellm.encoding.encode",
    "encode_chat_turns": "rolellm.encoding.encode",
    "check_chat_template": "rolellm.encoding.check",
    "TemplateReport": "rolellm.encoding.check",
    "set_role_chat_template": "rolellm.encoding.chat_template",
    "RoCITConfig": "rolellm.training.config",
    "RoCITTrainer": "rolellm.training.trainer",
    "RoleGRPOConfig": "rolellm.training.grpo",
    "RoleGRPOTrainer": "rolellm.training.grpo",
    "RolePromptArguments": "rolellm.training.config",
    "RoleDPOConfig": "rolellm.training.preference",
    "RoleDPOTrainer": "rolellm.training.preference",
    "RoleKTOConfig": "rolellm.training.preference",
    "RoleKTOTrainer": "rolellm.training.preference",
    "encode_preference": "rolellm.training.preference",
    "read_preference_rows": "rolellm.data.preference",
    "write_preference_rows": "rolellm.data.preference",
    "read_sillytavern_chat": "rolellm.data.preference",
    "PreferenceConfig": "rolellm.evaluation.preference",
    "PreferenceGenerator": "rolellm.evaluation.preference",
    "rouge_l": "rolellm.rouge.score",
    "rouge_l_scores": "rolellm.rouge.score",
    "judge_win_rate": "rolellm.evaluation.judge.pairwise",
    "WinRateResult": "rolellm.evaluation.judge.pairwise",
    "length_controlled_win_rate": "rolellm.evaluation.judge.length_control",
    "EvaluationConfig": "rolellm.evaluation.base",
    "EvaluationResult": "rolellm.evaluation.base",
    "run_evaluation": "rolellm.evaluation.base",
    "BenchmarkConfig": "rolellm.evaluation.benchmark.config",
    "BenchmarkResult": "rolellm.evaluation.benchmark.runner",
    "run_benchmark": "rolellm.evaluation.benchmark.runner",
    "DialogueConfig": "rolellm.evaluation.multiturn.run",
    "DialogueResult": "rolellm.evaluation.multiturn.run",
    "run_dialogue": "rolellm.evaluation.multiturn.run",
    "score_predictions": "rolellm.evaluation.benchmark.scoring",
    "write_report": "rolellm.evaluation.benchmark.report",
    "write_benchmark_report": "rolellm.evaluation.benchmark.report",
    "update_model_card": "rolellm.evaluation.benchmark.report",
    "write_dialogue_report": "rolellm.evaluation.multiturn.report",
    "Scenario": "rolellm.evaluation.multiturn.dialogue",
    "read_scenarios": "rolellm.evaluation.multiturn.dialogue",
    "scenarios_from_card": "rolellm.evaluation.multiturn.dialogue",
    "generate_scenarios": "rolellm.evaluation.multiturn.dialogue",
    "run_dialogues": "rolellm.evaluation.multiturn.dialogue",
    "read_transcripts": "rolellm.evaluation.multiturn.dialogue",
    "judge_transcripts": "rolellm.evaluation.multiturn.rubric",
    "judge_answers": "rolellm.evaluation.multiturn.rubric",
    "parse_rubric": "rolellm.evaluation.multiturn.rubric",
    "read_human_labels": "rolellm.evaluation.multiturn.agreement",
    "compare_with_humans": "rolellm.evaluation.multiturn.agreement",
    "CoserConfig": "rolellm.evaluation.coser.run",
    "CoserResult": "rolellm.evaluation.coser.run",
    "run_coser": "rolellm.evaluation.coser.run",
    "read_coser_test_set": "rolellm.evaluation.coser.testset",
    "rescore_coser_results": "rolellm.evaluation.coser.scoring",
    "write_coser_report": "rolellm.evaluation.coser.report",
    "make_coser_flaw_reward": "rolellm.rewards.flaws",
    "lm_eval_tasks_dir": "rolellm.lm_eval_tasks.folder",
    "reference_rouge_l": "rolellm.rewards.reference",
    "RubricJudgeReward": "rolellm.rewards.judge",
    "CatchphraseReward": "rolellm.rewards.style",
    "LanguageReward": "rolellm.rewards.style",
    "LengthPenalty": "rolellm.rewards.style",
    "per_role_normalized": "rolellm.rewards.combine",
    "reward_settings": "rolellm.rewards.combine",
    "SimulatedUserRollout": "rolellm.rewards.rollout",
}


if TYPE_CHECKING:  # the same names, imported for type checkers and IDEs (tests/test_package.py keeps both in step)
    from rolellm.clients.base import ChatRequest, ChatResult, EndpointError
    from rolellm.clients.chat_answer import stream_answer
    from rolellm.clients.chat_session import ChatSession
    from rolellm.clients.config import ClientConfig, make_client
    from rolellm.clients.gguf import embedded_model, embedded_model_file
    from rolellm.clients.llamacpp_backend import LlamaCppChatClient
    from rolellm.clients.local import LocalChatClient
    from rolellm.clients.openai_compatible import OpenAIChatClient
    from rolellm.clients.ray_backend import RayChatClient
    from rolellm.clients.vllm_backend import VLLMChatClient
    from rolellm.data.builder import RoleBench, load_rolebench, load_rolebench_profiles
    from rolellm.data.heldout import split_role_questions, write_split_release
    from rolellm.data.hub import export_rolebench, push_rolebench
    from rolellm.data.preference import read_preference_rows, read_sillytavern_chat, write_preference_rows
    from rolellm.data.readers import read_rolebench_jsonl
    from rolellm.encoding.chat_template import set_role_chat_template
    from rolellm.encoding.check import TemplateReport, check_chat_template
    from rolellm.encoding.encode import encode_chat, encode_chat_turns
    from rolellm.evaluation.base import EvaluationConfig, EvaluationResult, run_evaluation
    from rolellm.evaluation.benchmark.config import BenchmarkConfig
    from rolellm.evaluation.benchmark.report import update_model_card, write_benchmark_report, write_report
    from rolellm.evaluation.benchmark.runner import BenchmarkResult, run_benchmark
    from rolellm.evaluation.benchmark.scoring import score_predictions
    from rolellm.evaluation.coser.report import write_coser_report
    from rolellm.evaluation.coser.run import CoserConfig, CoserResult, run_coser
    from rolellm.evaluation.coser.scoring import rescore_coser_results
    from rolellm.evaluation.coser.testset import read_coser_test_set
    from rolellm.evaluation.judge.length_control import length_controlled_win_rate
    from rolellm.evaluation.judge.pairwise import WinRateResult, judge_win_rate
    from rolellm.evaluation.multiturn.agreement import compare_with_humans, read_human_labels
    from rolellm.evaluation.multiturn.dialogue import (
        Scenario,
        generate_scenarios,
        read_scenarios,
        read_transcripts,
        run_dialogues,
        scenarios_from_card,
    )
    from rolellm.evaluation.multiturn.report import write_dialogue_report
    from rolellm.evaluation.multiturn.rubric import judge_answers, judge_transcripts, parse_rubric
    from rolellm.evaluation.multiturn.run import DialogueConfig, DialogueResult, run_dialogue
    from rolellm.evaluation.preference import PreferenceConfig, PreferenceGenerator
    from rolellm.generation.context_instruct import ContextInstruct, ContextInstructConfig
    from rolellm.generation.filters import clean_answer
    from rolellm.generation.profile_description import ProfileDescriber, ProfileDescriptionConfig
    from rolellm.generation.rolegpt import RoleGPT, RoleGPTConfig
    from rolellm.lm_eval_tasks.folder import lm_eval_tasks_dir
    from rolellm.rewards.combine import per_role_normalized, reward_settings
    from rolellm.rewards.flaws import make_coser_flaw_reward
    from rolellm.rewards.judge import RubricJudgeReward
    from rolellm.rewards.reference import reference_rouge_l
    from rolellm.rewards.rollout import SimulatedUserRollout
    from rolellm.rewards.style import CatchphraseReward, LanguageReward, LengthPenalty
    from rolellm.roles.character_card import (
        card_from_profile,
        profile_from_card,
        read_character_card,
        write_character_card,
    )
    from rolellm.roles.lookup import Profiles
    from rolellm.roles.profile import RoleProfile, Utterance, split_catchphrases
    from rolellm.roles.prompts import (
        build_chat_messages,
        build_role_messages,
        build_system_instruction,
        role_greeting,
        to_role_messages,
    )
    from rolellm.roles.release import (
        read_profile_jsonl,
        read_release_profiles,
        read_screenplay_folder,
        write_release_profiles,
        write_screenplay_folder,
    )
    from rolellm.roles.resolve import ProfileSourceError, load_profiles, profiles_for, select_roles
    from rolellm.roles.retrieval import DialogueRetriever, dialogue_to_messages
    from rolellm.roles.screenplay import parse_screenplay, read_screenplay, write_screenplay
    from rolellm.rouge.score import rouge_l, rouge_l_scores
    from rolellm.training.config import RoCITConfig, RolePromptArguments
    from rolellm.training.grpo import RoleGRPOConfig, RoleGRPOTrainer
    from rolellm.training.preference import (
        RoleDPOConfig,
        RoleDPOTrainer,
        RoleKTOConfig,
        RoleKTOTrainer,
        encode_preference,
    )
    from rolellm.training.trainer import RoCITTrainer

__all__ = ["__version__", *_EXPORTS]

# names of the previous release -> their new names: they still work, with a DeprecationWarning, until the next one
_RENAMED = {"EvaluateConfig": "BenchmarkConfig", "run_dialogue_eval": "run_dialogue"}


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later look-ups skip __getattr__
        return value
    if name in _RENAMED:
        import warnings

        new = _RENAMED[name]
        warnings.warn(f"{name} is renamed {new}; the old name goes in the next release", DeprecationWarning, 2)
        return __getattr__(new)
    raise AttributeError(f"module 'rolellm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
