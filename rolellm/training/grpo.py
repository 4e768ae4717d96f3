"""`RoleGRPOTrainer`: `trl.GRPOTrainer` on RoleBench rows, with RoCIT's role prompts and checkpoints.

What it adds to `GRPOTrainer`, each at one override point:

- the prompts (before `GRPOTrainer.__init__`): RoleBench rows + profiles -> `prompt` rows holding exactly the system
  text and question a RoCIT sample holds (`rolellm.to_role_messages`, the checkpoint's custom system template when it
  was trained with one), with `role`, `lang` and `references` (the row's `generated`) for the reward functions. Every
  prompt is encoded once up front: a prompt longer than `max_prompt_length` is an error naming the row, never
  truncated (cutting it would cut the role's system text);
- `_tokenize_prompts`: prompts encoded with `rolellm.encode_chat` (the injection-safe encoder: text in a question
  that looks like a control token stays plain text), as RoCIT trained and as `rolellm chat` asks;
- `_calculate_rewards`: a batch for which no reward function gave any completion a reward stops the run with
  `UnscorableBatchError` (TRL would train on all-zero advantages, silently); completions with no reward at all
  are counted (the logged `rewards/unscored`);
- `_generate_single_turn`: with `prefix_sharing` (the default), `generate` computes each prompt of the batch once
  and starts its group's completions from that cache (`rolellm.training.grouped.prompts_prefilled_once`);
- `_get_per_token_logps_and_entropies`: with `prefix_sharing`, the completions of a group share one copy of their
  prompt in a packed row (`rolellm.training.grouped`), with TRL's log-probs (tested to 1e-5);
- `_save`: every checkpoint holds the role files of a RoCIT checkpoint (`rolellm.training.checkpoint`) and a model
  card stating the GRPO run: the starting checkpoint, rewards and weights, the GRPO settings, the roles and data.

The model is a RoCIT checkpoint folder (a full model, or a LoRA adapter, trained on as an adapter), a Hub id, or a
`PreTrainedModel`. Reward functions are arguments (the trainer imports no reward): `rolellm.rewards` has them.
"""

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import datasets
import torch
from accelerate.utils import is_peft_model
from huggingface_hub import ModelCard, ModelCardData
from transformers import AutoConfig, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from rolellm import __version__
from rolellm.clients.config import flag_field
from rolellm.clients.gguf import read_gguf_source, resolve_model_name_or_path
from rolellm.clients.inference_settings import SYSTEM_TEMPLATE_FILE, read_inference_settings
from rolellm.clients.loading import contiguous_lm_head_input, is_adapter_checkpoint, load_model_and_tokenizer
from rolellm.data.release import CITATION
from rolellm.encoding.chat_template import set_role_chat_template
from rolellm.encoding.encode import encode_chat
from rolellm.roles.lookup import Profiles
from rolellm.roles.prompts import read_system_template, to_role_messages
from rolellm.roles.resolve import as_sources, profiles_field, profiles_for
from rolellm.training.attention import choose_attention_backend
from rolellm.training.card import adapter_settings, describe_chat_template
from rolellm.training.checkpoint import save_stage_checkpoint, trained_profiles
from rolellm.training.config import (
    RolePromptArguments,
    check_at_least,
    pin_memory_where_it_helps,
    quiet_checkpointing_aliases,
    resolve_bf16,
)
from rolellm.training.grouped import grouped_fused_forward, prompts_prefilled_once


logger = logging.getLogger(__name__)
CARD_TEMPLATE = Path(__file__).parent.parent / "prompts" / "model_card_grpo.md"


def encode_prompt(tokenizer, prompt: list[dict], keep_think: bool = False) -> list[int]:
    """The token ids of a conversational prompt, ready for the answer: `encode_chat` with the generation prompt, the
    tokens a RoCIT sample of the same conversation has before its answer (text that looks like a control token stays
    plain text)."""
    return encode_chat(tokenizer, prompt, add_generation_prompt=True, keep_think=keep_think)["input_ids"]


# TRL's ways of weighing several rewards (`GRPOConfig.multi_objective_aggregation`)
AGGREGATIONS = ("sum_then_normalize", "normalize_then_sum")


class UnscorableBatchError(ValueError):
    """No reward function gave any completion of a batch a reward (every one returned `None`)."""


@dataclass
class RoleGRPOConfig(GRPOConfig):
    r"""Configuration of the [`RoleGRPOTrainer`]: everything of `trl.GRPOConfig` (`num_generations`, `beta`,
    `loss_type`, `reward_weights`, `multi_objective_aggregation`, `max_completion_length`, ...), plus where the role
    profiles come from and how RoleBench rows become prompts.

    Parameters:
        > Parameters that control the role prompts

        profiles (`list[str]`, *optional*):
            Where the role profiles come from when the trainer is not given `profiles=`: any sources
            `rolellm.load_profiles` reads; without them, the starting checkpoint's `role_profiles.jsonl`.
        system_lang (`str`, *optional*):
            Language of the system instruction (`"en"` or `"zh"`). `None` uses each row's `lang`.
        system_template_path (`str`, *optional*):
            A Jinja file replacing the paper's system instruction; defaults to the starting checkpoint's
            `system_template.jinja` when it was trained with one, so the prompts are the ones RoCIT trained on.
        keep_think (`bool`, *optional*):
            Keep a thinking template's think blocks in the prompts; defaults to what the starting checkpoint
            recorded (`rolellm_inference.json`), else `False`.
        keep_card_metadata (`bool`, *optional*, defaults to `False`):
            Write the whole profiles into the checkpoint's `role_profiles.jsonl` (see `RoCITConfig`).
        prefix_sharing (`bool`, *optional*, defaults to `True`):
            Compute each prompt once for all its completions, in generation and in the loss
            (`rolellm.training.grouped`): `generate` starts every completion of a group from one computed copy of
            the prompt, and a group's completions share one copy of the prompt in a packed row, each attending to the
            prompt and itself, with the log-probs and loss of TRL's padded rows. `False` runs TRL's generation and
            forward. Batches it cannot pack exactly (images, a model whose attention takes no custom mask) run
            TRL's forward; vLLM and continuous batching generate as TRL has them.
        max_prompt_length (`int`, *optional*):
            The longest prompt, in tokens, the run accepts; a longer one is an error naming the row (never cut: the
            cut would remove the role's system text). `None` accepts prompts that leave `max_completion_length`
            tokens of the model's `max_position_embeddings`.

    > [!NOTE]
    > These parameters have default values different from `trl.GRPOConfig`:
    > - `bf16`: when not given, `True` only on hardware with bf16 (as `RoCITConfig`), so a CPU trains in float32.
    > - `activation_checkpointing`: defaults to `True` (TRL's default) without the deprecation warning of
    >   `gradient_checkpointing=True`.

    >>> config = RoleGRPOConfig(output_dir="out", use_cpu=True, num_generations=4, per_device_train_batch_size=4)
    >>> config.bf16, config.num_generations, config.max_prompt_length
    (False, 4, None)
    """

    gradient_checkpointing: bool | None = flag_field("Deprecated alias of `activation_checkpointing`.")
    profiles: list[str] | None = profiles_field(
        help="Role profiles read when the trainer is not given profiles= (repeatable); default: the starting "
        "checkpoint's role_profiles.jsonl."
    )
    system_lang: Literal["en", "zh"] | None = field(
        default=None, metadata={"help": "Language of the system instruction; None uses each row's lang."}
    )
    system_template_path: str | None = field(
        default=None,
        metadata={"help": "Jinja file replacing the paper's system instruction (default: the checkpoint's own)."},
    )
    keep_think: bool | None = flag_field("Keep the template's think blocks (default: what the checkpoint recorded).")
    keep_card_metadata: bool = field(
        default=False, metadata={"help": "Write Character Card metadata into role_profiles.jsonl."}
    )
    prefix_sharing: bool = field(
        default=True,
        metadata={
            "help": "Compute each prompt once for all its completions, in generation and in the loss; False: TRL's "
            "path."
        },
    )
    max_prompt_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest prompt in tokens; a longer one is an error (default: what the model's window "
            "leaves after max_completion_length)."
        },  # fmt: skip
    )

    def __post_init__(self):
        if self.activation_checkpointing is None and self.gradient_checkpointing is None:
            self.activation_checkpointing = True
        resolve_bf16(self)
        # TRL divides by num_generations here, and checks the others only once the model is loaded and training began
        check_at_least(
            self, {**RolePromptArguments._minimums, "num_generations": 2, "beta": 0, "max_completion_length": 1}
        )
        pin_memory_where_it_helps(self)
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature} must be above 0: GRPO samples the group's completions")
        if self.system_template_path is not None:  # read and checked now, not once the model is loaded
            read_system_template(self.system_template_path)
        if self.multi_objective_aggregation not in AGGREGATIONS:
            raise ValueError(
                f"multi_objective_aggregation={self.multi_objective_aggregation!r} is not one of {list(AGGREGATIONS)}"
            )
        super().__post_init__()
        self.profiles = as_sources(self.profiles) or None
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise ValueError(f"max_prompt_length={self.max_prompt_length} must be at least 1")


class RoleGRPOTrainer(GRPOTrainer):
    """GRPO on role prompts: `trl.GRPOTrainer` with RoCIT's role system text, encoder and checkpoint files.

    Args:
        model (`str` or `PreTrainedModel`): a RoCIT checkpoint folder (full model or adapter), a Hub id, a GGUF
            file (its dequantized folder, `rolellm.clients.gguf`) or a model.
        reward_funcs (`Callable` or `list[Callable]`): TRL reward functions (`rolellm.rewards`); their weights and
            aggregation are `args.reward_weights` and `args.multi_objective_aggregation`.
        args (`RoleGRPOConfig`, *optional*): defaults to `RoleGRPOConfig("<model>-GRPO")`.
        train_dataset (`datasets.Dataset`): RoleBench rows (`role`, `question`, `generated`, ...) or ready rows with
            a conversational `prompt` (and whatever columns the rewards read, such as `role`).
        eval_dataset (`datasets.Dataset`, *optional*): rows of the same kinds.
        processing_class (`PreTrainedTokenizerBase`, *optional*): the tokenizer; loaded from the model when omitted. A
            tokenizer without a chat template gets rolellm's role template (`set_role_chat_template`).
        profiles (`dict[str, RoleProfile]`, *optional*): role -> profile; see `RoleGRPOConfig.profiles`.
        peft_config (`peft.PeftConfig`, *optional*): a new adapter on a full model (an adapter checkpoint is trained
            on as it is).
        dataset_name (`str`, *optional*), dataset_configs (`dict[str, int]`, *optional*): for the model card.
        **kwargs: the other arguments of `GRPOTrainer` (`callbacks`, `rollout_func`, ...).
    """

    _tag_names = ["trl", "grpo", "rolellm"]
    _name = "RoleGRPO"

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: RoleGRPOConfig | None = None,
        train_dataset: datasets.Dataset | None = None,
        eval_dataset=None,
        processing_class=None,
        profiles: dict | None = None,
        peft_config=None,
        dataset_name: str | None = None,
        dataset_configs: dict[str, int] | None = None,
        **kwargs,
    ):
        model = resolve_model_name_or_path(model, "model")  # a GGUF file: its dequantized folder
        model_id = str(model) if isinstance(model, (str, Path)) else model.config._name_or_path
        if args is None:
            args = RoleGRPOConfig(f"{Path(model_id).name}-GRPO")
        elif not isinstance(args, RoleGRPOConfig):
            raise TypeError(f"args must be a RoleGRPOConfig, got {type(args).__name__}: build one with RoleGRPOConfig")
        if train_dataset is None:
            raise ValueError("train_dataset is required: RoleBench rows or rows with a conversational 'prompt'")
        folder = Path(model_id) if Path(model_id).is_dir() else None
        self.start_checkpoint = model_id
        self.profiles = profiles if profiles is not None else profiles_for(args.profiles, model_dir=folder)
        template_path = args.system_template_path  # given: it must be there; else the checkpoint's, if it has one
        if template_path is None and folder is not None and (folder / SYSTEM_TEMPLATE_FILE).is_file():
            template_path = folder / SYSTEM_TEMPLATE_FILE
        self._system_template = read_system_template(template_path) if template_path is not None else None
        self.keep_think = args.keep_think
        if self.keep_think is None:
            self.keep_think = bool(read_inference_settings(model_id).get("keep_think", False)) if folder else False
        self.dataset_name, self.dataset_configs = dataset_name, dataset_configs

        if isinstance(model, Path):
            model = model_id
        if isinstance(model, str) and is_adapter_checkpoint(model_id):
            if peft_config is not None:
                raise ValueError(
                    f"{model_id} is an adapter checkpoint, trained on as it is: drop peft_config (--use_peft), which "
                    "would put a second adapter on it, or merge it first (rolellm export --merge)"
                )
            model, tokenizer = load_model_and_tokenizer(model_id, is_trainable=True)
            model.train()
            processing_class = processing_class or tokenizer
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model_id, trust_remote_code=args.trust_remote_code)
        if processing_class.chat_template is None:
            if isinstance(model, str):
                from trl.trainer.utils import create_model_from_path

                model = create_model_from_path(model_id, **(args.model_init_kwargs or {}))
            set_role_chat_template(processing_class, model)
        self._tokenizer_for_prompts = processing_class
        config = AutoConfig.from_pretrained(model_id) if isinstance(model, str) else model.config
        window = getattr(config, "max_position_embeddings", None)

        self.role_stats = {}
        self.example_system: str | None = None  # the system text of one training prompt, for the model card
        train_dataset = self.build_prompt_dataset(train_dataset, "train", args, window)
        if eval_dataset is not None:
            eval_dataset = self.build_prompt_dataset(eval_dataset, "eval", args, window)
        self.unscored = 0  # completions no reward function scored, over the run
        self._attention_backends = {}  # id of a model -> the mask its attention takes for prefix-shared rows
        trl_args = copy.copy(args)
        trl_args.model_init_kwargs = args.model_init_kwargs if isinstance(model, str) else None
        super().__init__(
            model,
            reward_funcs=reward_funcs,
            args=trl_args,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=processing_class,
            peft_config=peft_config,
            **kwargs,
        )
        contiguous_lm_head_input(self.model)  # the completions are generated with a frozen base under LoRA

    # ----------------------------------------------------------------------------------------------- prompts
    def encode_prompt(self, prompt: list[dict]) -> list[int]:
        """The token ids of a conversational prompt, ready for the answer (`encode_prompt`, injection-safe)."""
        return encode_prompt(self._tokenizer_for_prompts, prompt, self.keep_think)

    def build_prompt_dataset(self, dataset, split: str, args: RoleGRPOConfig, window: int | None = None):
        """RoleBench rows -> `prompt` rows (`prompt`, `role`, `lang`, `references`, `subset`); rows that already have
        a `prompt` are kept as they are. Every prompt is encoded once to check its length (see `max_prompt_length`)."""
        if "prompt" not in dataset.column_names:
            if "question" not in dataset.column_names or "generated" not in dataset.column_names:
                raise ValueError(
                    f"the {split} dataset has columns {dataset.column_names}: pass RoleBench rows (role, question, "
                    "generated, lang) or rows with a conversational 'prompt'"
                )
            profiles = Profiles(self.profiles).require(
                dataset.unique("role"),
                f"the {split} rows",
                "pass profiles= (or RoleGRPOConfig.profiles) that cover every role",
            )

            def to_prompt(row):
                profile = profiles[row["role"]]
                # the answer is the policy's: the row's references are only what some rewards compare with
                system, question, _ = to_role_messages(
                    {**row, "generated": [""]}, profile, "first", args.seed, args.system_lang, self._system_template
                )[0]
                return {
                    "prompt": [system, question],
                    "role": profile.name,
                    "lang": row.get("lang") or profile.lang,
                    "references": [answer.strip() for answer in row["generated"]],
                    "subset": row.get("subset") or "",
                }

            dataset = dataset.map(to_prompt, remove_columns=dataset.column_names, desc="Role prompts")
        self.check_prompt_lengths(dataset, split, args, window)
        roles = dataset.unique("role") if "role" in dataset.column_names else []
        self.role_stats[split] = {"rows": len(dataset), "roles": sorted(roles)}
        if split == "train" and len(dataset) and isinstance(dataset[0]["prompt"], list):
            self.example_system = next((m["content"] for m in dataset[0]["prompt"] if m["role"] == "system"), None)
        return dataset

    def check_prompt_lengths(self, dataset, split: str, args: RoleGRPOConfig, window: int | None) -> None:
        limit, why = args.max_prompt_length, "max_prompt_length"
        if limit is None and window is not None:
            limit = window - args.max_completion_length
            why = f"the model's {window} positions less max_completion_length={args.max_completion_length}"
        if limit is None or not len(dataset) or not isinstance(dataset[0]["prompt"], list):
            return
        lengths = [len(self.encode_prompt(prompt)) for prompt in dataset["prompt"]]
        too_long = [i for i, n in enumerate(lengths) if n > limit]
        if too_long:
            first = too_long[0]
            role = dataset[first]["role"] if "role" in dataset.column_names else "?"
            raise ValueError(
                f"{len(too_long)} of {len(lengths)} {split} prompts are longer than {limit} tokens ({why}), the "
                f"longest {max(lengths)} tokens; e.g. row {first} (role {role!r}, {lengths[first]} tokens). A prompt "
                "is never cut (the cut would remove the role's system text): raise max_prompt_length, or leave these "
                "rows out"
            )

    def _tokenize_prompts(self, prompts: list):
        if not isinstance(prompts[0], list):  # plain-text prompts: TRL's own tokenization
            return super()._tokenize_prompts(prompts)
        return [self.encode_prompt(prompt) for prompt in prompts], None, {}

    # ----------------------------------------------------------------------------------------------- log-probs
    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
        compute_aux_loss=False, **multimodal,
    ):  # fmt: skip
        """TRL's per-token log-probs and entropies, with each prompt computed once for all its completions
        (`prefix_sharing`); batches with images or an aux loss, and models whose attention takes no custom mask,
        run TRL's forward."""
        backend = None
        if self.args.prefix_sharing and not compute_aux_loss and all(v is None for v in multimodal.values()):
            backend = self._attention_backend(model)
        if backend is not None:
            completion_mask = attention_mask.clone()
            completion_mask[:, :-logits_to_keep] = 0
            with self.accelerator.autocast():
                fields = grouped_fused_forward(
                    model, backend, input_ids, attention_mask, completion_mask, self._tokenizer.pad_token_id or 0,
                    self.accelerator.unwrap_model(model).dtype, batch_size,
                )  # fmt: skip
            if fields is not None:
                entropies = fields.get("entropy") if compute_entropy else None
                if entropies is not None:
                    entropies = entropies[:, -logits_to_keep:]
                return fields["log_probs"][:, -logits_to_keep:], entropies, None
        return super()._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
            **multimodal,
        )  # fmt: skip

    def _attention_backend(self, model):
        """The mask `model` takes for prefix-shared rows (`choose_attention_backend`, asked once per model). The
        policy generates too: it keeps its attention (no switch to FlexAttention on GPU), with a dense mask."""
        base = self.accelerator.unwrap_model(model)
        if id(base) not in self._attention_backends:
            self._attention_backends[id(base)] = choose_attention_backend(base, switch_to_flex=False)
        return self._attention_backends[id(base)]

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, **kwargs):
        """TRL's generation, with `prefix_sharing` on its own path (`transformers`' `generate`): each prompt of the
        batch computed once for its group's completions (`prompts_prefilled_once`), the completions then sampled
        as TRL samples them. vLLM, continuous batching and batches with images run as TRL runs them."""
        plain = images is None or all(image is None for image in images)
        if not self.args.prefix_sharing or self.use_vllm or self.use_transformers_continuous_batching or not plain:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, **kwargs)
        with prompts_prefilled_once(self.accelerator.unwrap_model(self.model_wrapped)):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, **kwargs)

    # ----------------------------------------------------------------------------------------------- rewards
    def _generate_and_score_completions(self, *args, **kwargs):
        with quiet_checkpointing_aliases():  # TRL's no-grad log-prob forward asks for the deprecated names
            return super()._generate_and_score_completions(*args, **kwargs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        unscored = torch.isnan(rewards_per_func).all(dim=1)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["rewards/unscored"].append(unscored.float().mean().item())
        if unscored.all():
            raise UnscorableBatchError(
                f"no reward function ({', '.join(self.reward_func_names)}) gave any of the {len(unscored)} "
                "completions of this batch a reward (every one returned None): check that the rows carry the columns "
                "the rewards read (references, role) and that the roles have what the rewards need (catchphrases)"
            )
        if unscored.any():
            self.unscored += int(unscored.sum())
            logger.warning("%d of %d completions got no reward from any reward function (%d in the run so far)",
                           int(unscored.sum()), len(unscored), self.unscored)  # fmt: skip
        return rewards_per_func

    # ----------------------------------------------------------------------------------------------- checkpoint
    def _save(self, output_dir: str | None = None, state_dict=None):
        """Save the model and tokenizer (`Trainer._save`), then the role files and model card of the checkpoint."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            folder = output_dir if output_dir is not None else self.args.output_dir
            save_stage_checkpoint(self, folder, self.processing_class, self.keep_think)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """Write `README.md` in `output_dir` (see `build_model_card`)."""
        if self.is_world_process_zero():
            Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
            self.build_model_card(model_name).save(Path(self.args.output_dir) / "README.md")

    def build_model_card(self, model_name: str | None = None) -> ModelCard:
        """The model card of this run, from its real settings (`rolellm/prompts/model_card_grpo.md`)."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        peft_config = unwrapped.peft_config["default"] if is_peft_model(unwrapped) else None
        start = self.start_checkpoint
        base_model = None if not start or Path(start).exists() else start
        args = self.args
        weights = args.reward_weights or [1.0] * len(self.reward_func_names)
        card_data = ModelCardData(
            base_model=base_model,
            library_name="peft" if peft_config is not None else "transformers",
            model_name=model_name or Path(args.output_dir).name,
            tags=sorted({*self._tag_names, "role-play"}),
        )
        return ModelCard.from_template(
            card_data,
            template_path=str(CARD_TEMPLATE),
            model_name=model_name or Path(args.output_dir).name,
            start=start if base_model else Path(start).name,
            start_on_hub=base_model is not None,
            start_gguf=read_gguf_source(start) if start else None,
            roles=self.role_stats.get("train", {}).get("roles", []),
            rows=self.role_stats.get("train", {}).get("rows", 0),
            profiles=list(trained_profiles(self.profiles, self.role_stats).values()),
            dataset_name=self.dataset_name,
            dataset_configs=self.dataset_configs or {},
            custom_system_template=self._system_template is not None,
            example_system=self.example_system,
            rewards=list(zip(self.reward_func_names, weights)),
            multi_turn=self.rollout_func is not None,
            unscored=self.unscored,
            args=args,
            steps=self.state.global_step,
            adapter=adapter_settings(peft_config) if peft_config is not None else None,
            template=describe_chat_template(self.processing_class),
            chat_template=(self.processing_class.chat_template or "(none)").strip(),
            auto_class="AutoPeftModelForCausalLM" if peft_config is not None else "AutoModelForCausalLM",
            auto_module="peft" if peft_config is not None else "transformers",
            citation=CITATION.strip(),
            version=__version__,
        )
