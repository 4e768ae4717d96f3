"""`RoleDPOTrainer` and `RoleKTOTrainer`: `trl.DPOTrainer` and `trl.KTOTrainer` on role preference rows.

They train after RoCIT, from its checkpoint or adapter, on the rows `rolellm generate preferences` writes (or any
rows of the same columns): `role`, `question`, and `chosen` + `rejected` (DPO) or `completion` + `label` (KTO, a
desirable or undesirable answer). What they add to TRL's trainers, each at one override point:

- `_prepare_dataset`: every row becomes the role's conversation, `[system, user]`, with the system text RoCIT trains
  with (`rolellm.to_role_messages`), and is tokenized with the injection-safe encoder (`rolellm.encode_chat`): the
  prompt ids are those of the prompt alone at inference, and chosen and rejected share them exactly; a completion
  is the answer and the template's end of turn, every token of it trained (`encode_preference`). Rows whose role has
  no profile are an error naming the roles; an empty answer, a pair whose chosen equals its rejected, and a prompt
  that fills `max_length` are dropped with a warning that counts them (`RolePreferenceStats`), and a split left
  empty is an error, so a loss is never computed on nothing.
- the model: an adapter checkpoint (`rolellm train` with LoRA) is loaded trainable on its base, and TRL keeps a
  frozen copy of the adapter as the reference; a full model gets a copy of itself as the reference.
- `_save`: the files that make a checkpoint work on its own (`rolellm.training.checkpoint`), and a model card that
  states the stage, its loss and the pairs trained on.
"""

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import datasets
from accelerate.utils import is_peft_model
from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer

from rolellm.clients.gguf import resolve_model_name_or_path
from rolellm.clients.loading import is_adapter_checkpoint, load_model_and_tokenizer
from rolellm.encoding.encode import encode_chat
from rolellm.roles.lookup import Profiles
from rolellm.roles.prompts import read_system_template, to_role_messages
from rolellm.roles.resolve import profiles_for
from rolellm.training.attention import choose_attention_backend
from rolellm.training.card import build_model_card, describe_base_model, describe_chat_template
from rolellm.training.checkpoint import save_stage_checkpoint, trained_profiles
from rolellm.training.config import RolePromptArguments, quiet_checkpointing_aliases
from rolellm.training.grouped import prompts_computed_once


logger = logging.getLogger(__name__)

PAIRED_COLUMNS = ("role", "question", "chosen", "rejected")
UNPAIRED_COLUMNS = ("role", "question", "completion", "label")


@dataclass
class RoleDPOConfig(RolePromptArguments, DPOConfig):
    r"""Configuration of the [`RoleDPOTrainer`]: everything of `trl.DPOConfig` (`loss_type`, `beta`, `ld_alpha`,
    `max_length`, ...) and the role fields of `RolePromptArguments`, whose defaults for `bf16` and
    `activation_checkpointing` it takes (a CPU trains without flags).

    Parameters:
        prefix_sharing (`bool`, *optional*, defaults to `True`):
            Compute each prompt once for its chosen and rejected answers: a pair's two completions share one copy of
            the prompt in a packed row, each attending to the prompt and itself (`rolellm.training.grouped`), with the
            log-probs and loss of TRL's padded rows, for the policy and the reference model. `False` runs TRL's
            forward. Batches it cannot pack exactly (images, router logits, a model whose attention takes no custom
            mask) run TRL's forward.

    >>> config = RoleDPOConfig("out", use_cpu=True, loss_type=["sigmoid"], ld_alpha=0.5)
    >>> config.bf16, config.loss_type, config.ld_alpha, config.prefix_sharing
    (False, ['sigmoid'], 0.5, True)
    """

    _minimums: ClassVar[dict] = {**RolePromptArguments._minimums, "beta": 0}

    prefix_sharing: bool = field(
        default=True,
        metadata={
            "help": "Compute each pair's prompt once for chosen and rejected (prefix-shared rows); False: TRL's."
        },
    )


@dataclass
class RoleKTOConfig(RolePromptArguments, KTOConfig):
    r"""Configuration of the [`RoleKTOTrainer`]: everything of `trl.KTOConfig` (`beta`, `desirable_weight`,
    `undesirable_weight`, `max_length`, ...) and the role fields of `RolePromptArguments`.

    >>> RoleKTOConfig("out", use_cpu=True, desirable_weight=1.5).desirable_weight
    1.5
    """

    _minimums: ClassVar[dict] = {
        **RolePromptArguments._minimums,
        "beta": 0,
        "desirable_weight": 0,
        "undesirable_weight": 0,
    }


def encode_preference(tokenizer, prompt: list[dict], completions: list[str], keep_think: bool = False):
    """Token ids of a prompt and of each completion after it, with exact masks.

    The prompt ids are `encode_chat(prompt, add_generation_prompt=True)`, what the model is given at inference; each
    completion's ids are the tokens that follow them in `encode_chat(prompt + [answer])`, up to the template's end of
    turn, every one of them trained (the assistant mask of that encoding). Completions of one prompt therefore share
    its ids exactly.

    Returns:
        `tuple[list[int], list[list[int]]]`: the prompt ids and one list of ids per completion.

    Raises:
        `ValueError`: the template renders the prompt differently once an answer follows, so no completion would
            be trained on the prompt it is given at inference.

    >>> from rolellm.testing.models import train_tiny_tokenizer
    >>> from rolellm.encoding.chat_template import set_role_chat_template
    >>> tokenizer = train_tiny_tokenizer()
    >>> _ = set_role_chat_template(tokenizer)
    >>> prompt = [{"role": "system", "content": "Be Po."}, {"role": "user", "content": "Hi <|im_end|>"}]
    >>> prompt_ids, (chosen, rejected) = encode_preference(tokenizer, prompt, ["Skadoosh!", "Hello."])
    >>> tokenizer.decode(chosen), tokenizer.decode(rejected)
    ('Skadoosh!<|im_end|>', 'Hello.<|im_end|>')
    """
    prompt_ids = encode_chat(tokenizer, prompt, add_generation_prompt=True, keep_think=keep_think)["input_ids"]
    encoded = []
    for completion in completions:
        full = encode_chat(tokenizer, [*prompt, {"role": "assistant", "content": completion}], keep_think=keep_think)
        ids, masks = full["input_ids"], full["assistant_masks"]
        end = len(masks) - masks[::-1].index(1) if 1 in masks else len(prompt_ids)
        if (
            ids[: len(prompt_ids)] != prompt_ids
            or any(masks[: len(prompt_ids)])
            or not all(masks[len(prompt_ids) : end])
        ):
            raise ValueError(
                "the chat template renders the prompt differently once an answer follows it, so the answer would be "
                f"trained on a prompt it never gets at inference: {tokenizer.decode(prompt_ids[-8:])!r} vs "
                f"{tokenizer.decode(ids[len(prompt_ids) - 8 : len(prompt_ids)])!r}"
            )
        encoded.append(ids[len(prompt_ids) : end])
    return prompt_ids, encoded


@dataclass
class RolePreferenceStats:
    """What became of the rows of one split: kept, and dropped for each reason (each dropped row is counted)."""

    rows: int = 0
    kept: int = 0
    identical: int = 0
    empty: int = 0
    too_long: int = 0
    roles: list[str] = field(default_factory=list)

    def dropped(self) -> str:
        reasons = {
            "chosen equal to rejected": self.identical,
            "an empty answer": self.empty,
            "a prompt that fills max_length": self.too_long,
        }
        return ", ".join(f"{count} with {reason}" for reason, count in reasons.items() if count)


class _RolePreferenceMixin:
    """What `RoleDPOTrainer` and `RoleKTOTrainer` share; see the module docstring."""

    _paired: bool
    _stage_name: str
    _config_class: type

    def _compute_loss(self, model, inputs, return_outputs):
        with quiet_checkpointing_aliases():  # TRL's no-grad reference forward asks for the deprecated names
            return super()._compute_loss(model, inputs, return_outputs)

    def compute_ref_log_probs(self, model, inputs):
        with quiet_checkpointing_aliases():
            return super().compute_ref_log_probs(model, inputs)

    def __init__(self, model, args=None, train_dataset=None, eval_dataset=None, processing_class=None, profiles=None,
                 ref_model=None, dataset_name=None, peft_config=None, **kwargs):  # fmt: skip
        """Check the configuration, resolve the profiles and the system template, load the model (an adapter
        trainable) and its reference, and start TRL's trainer on them."""
        model = resolve_model_name_or_path(model, "model")  # a GGUF file: its dequantized folder
        model_id = model if isinstance(model, str) else model.config._name_or_path
        args = args if args is not None else self._config_class(f"{Path(model_id).name}-{self._stage_name}")
        if not isinstance(args, self._config_class):
            raise TypeError(f"args must be a {self._config_class.__name__}, got {type(args).__name__}")
        self.dataset_name = dataset_name
        self.profiles = profiles if profiles is not None else profiles_for(args.profiles) if args.profiles else None
        self._system_template = None
        if args.system_template_path is not None:
            self._system_template = read_system_template(args.system_template_path)
        self.role_stats, self.preference_stats, self.example_system = {}, {}, None
        if isinstance(model, str) and is_adapter_checkpoint(model):
            init_kwargs = {key: value for key, value in (args.model_init_kwargs or {}).items() if value is not None}
            model, tokenizer = load_model_and_tokenizer(model, is_trainable=True, **init_kwargs)
            processing_class = processing_class or tokenizer
            args.model_init_kwargs = None  # used: TRL would warn that it ignores them
        if ref_model is None and peft_config is None and not isinstance(model, str) and not is_peft_model(model):
            ref_model = copy.deepcopy(model).eval()  # the policy as it starts, tokens added by RoCIT included
        self._attention_backends = {}  # id of a model -> the mask its attention takes for prefix-shared rows (DPO)
        super().__init__(model, ref_model=ref_model, args=args, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, processing_class=processing_class, peft_config=peft_config,
                         **kwargs)  # fmt: skip

    # ----------------------------------------------------------------------------------------------- data
    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        columns = PAIRED_COLUMNS if self._paired else UNPAIRED_COLUMNS
        if not isinstance(dataset, datasets.Dataset) or not set(columns) <= set(dataset.column_names):
            if isinstance(dataset, datasets.Dataset) and "prompt_ids" in dataset.column_names:
                return dataset
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        return self._prepare_role_rows(dataset, args, dataset_name)

    def _prepare_role_rows(self, dataset: datasets.Dataset, args, split: str) -> datasets.Dataset:
        if self.profiles is None:
            raise ValueError("role preference rows need role profiles: pass profiles= or set the config's profiles")
        profiles = Profiles(self.profiles).require(dataset.unique("role"), f"the {split} preference rows")
        tokenizer, stats = self._tokenizer, RolePreferenceStats(rows=len(dataset))
        out = {"prompt_ids": [], **({"chosen_ids": [], "rejected_ids": []} if self._paired else {})}
        if not self._paired:
            out.update(completion_ids=[], label=[])
        roles = set()
        for row in dataset:
            answers = [row["chosen"], row["rejected"]] if self._paired else [row["completion"]]
            answers = [(answer or "").strip() for answer in answers]
            if not all(answers):
                stats.empty += 1
                continue
            if self._paired and answers[0] == answers[1]:
                stats.identical += 1
                continue
            profile = profiles[row["role"]]
            sample = {"role": row["role"], "question": row["question"], "generated": ["-"], "lang": row.get("lang")}
            prompt = to_role_messages(sample, profile, lang=args.system_lang, template=self._system_template)[0][:2]
            prompt_ids, completions = encode_preference(tokenizer, prompt, answers, args.keep_think)
            if args.max_length is not None and len(prompt_ids) >= args.max_length:
                stats.too_long += 1
                continue
            if self.example_system is None and split == "train":
                self.example_system = prompt[0]["content"]
            roles.add(profile.name)
            out["prompt_ids"].append(prompt_ids)
            if self._paired:
                out["chosen_ids"].append(completions[0])
                out["rejected_ids"].append(completions[1])
            else:
                out["completion_ids"].append(completions[0])
                out["label"].append(bool(row["label"]))
        stats.kept, stats.roles = len(out["prompt_ids"]), sorted(roles)
        self.preference_stats[split] = stats
        self.role_stats[split] = {"rows": stats.rows, "samples": {}, "roles": stats.roles}
        unit = "pairs" if self._paired else "answers"
        if not stats.kept:
            raise ValueError(f"none of the {stats.rows} {split} {unit} is left to train on: {stats.dropped()}")
        if stats.kept < stats.rows:
            logger.warning(
                "%d of %d %s %s dropped: %s", stats.rows - stats.kept, stats.rows, split, unit, stats.dropped()
            )
        return self._finish_dataset(datasets.Dataset.from_dict(out), args, split)

    def _finish_dataset(self, dataset, args, split):
        return dataset

    # ----------------------------------------------------------------------------------------------- checkpoint
    def _save(self, output_dir: str | None = None, state_dict=None):
        """Save the model and tokenizer (`Trainer._save`), then the role files, `chat_template.jinja`, the inference
        settings and the model card (`rolellm.training.checkpoint.save_role_files`); no Hub token is pickled."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            folder = output_dir if output_dir is not None else self.args.output_dir
            save_stage_checkpoint(self, folder, self._tokenizer, self.args.keep_think)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """Write `README.md` in `output_dir` (see `build_model_card`)."""
        if self.is_world_process_zero():
            Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
            self.build_model_card(model_name).save(Path(self.args.output_dir) / "README.md")

    def build_model_card(self, model_name=None):
        """The model card of this run (`rolellm.training.card.build_model_card`) with the preference stage stated."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        peft_config = unwrapped.peft_config["default"] if is_peft_model(unwrapped) else None
        args = self.args
        stage = {
            "name": self._stage_name,
            "unit": "pairs" if self._paired else "labelled answers",
            "loss_type": args.loss_type,
            "beta": args.beta,
            "custom_system_template": args.system_template_path is not None,
            "settings": {
                key: getattr(args, key)
                for key in (
                    "learning_rate",
                    "max_steps",
                    "num_train_epochs",
                    "per_device_train_batch_size",
                    "gradient_accumulation_steps",
                    "max_length",
                    "seed",
                    *(("ld_alpha", "label_smoothing") if self._paired else ("desirable_weight", "undesirable_weight")),
                )
            },  # fmt: skip
            "splits": {split: vars(stats) for split, stats in self.preference_stats.items()},
        }
        return build_model_card(
            model_name=model_name or Path(args.output_dir).name,
            **describe_base_model(unwrapped.config._name_or_path),
            hub_model_id=args.hub_model_id,
            role_stats=self.role_stats,
            dataset_name=self.dataset_name,
            chat_template=self._tokenizer.chat_template,
            peft_config=peft_config,
            tags=["trl", self._stage_name.lower(), "rolellm"],
            profiles=trained_profiles(self.profiles, self.role_stats),
            template=describe_chat_template(self._tokenizer),
            steps=self.state.global_step,
            example_system=self.example_system,
            stage=stage,
        )


class RoleDPOTrainer(_RolePreferenceMixin, DPOTrainer):
    """Direct preference optimisation on role preference rows: `trl.DPOTrainer` with RoCIT's role system text and the
    injection-safe encoder (see the module docstring).

    Args:
        model (`str` or `PreTrainedModel`): a RoCIT checkpoint or adapter folder, a Hub id, a GGUF file (its
            dequantized folder, `rolellm.clients.gguf`), or a loaded model.
        args (`RoleDPOConfig`, *optional*): defaults to `RoleDPOConfig("<model>-DPO")`.
        train_dataset (`datasets.Dataset`): rows with `role`, `question`, `chosen`, `rejected` (and `lang`), or
            TRL's own preference formats.
        eval_dataset (`datasets.Dataset`, *optional*): the same, to evaluate on.
        processing_class (`PreTrainedTokenizerBase`, *optional*): the tokenizer, with a chat template; loaded from
            the model when omitted.
        profiles (`dict[str, RoleProfile]`, *optional*): role -> profile; read from `args.profiles` when omitted.
        ref_model (`PreTrainedModel`, *optional*): the reference; a copy of the starting policy when omitted.
        dataset_name (`str`, *optional*): the name or folder of the data, for the model card.
        **kwargs: the other arguments of `DPOTrainer` (`peft_config`, `callbacks`, ...).
    """

    _paired, _stage_name, _config_class = True, "DPO", RoleDPOConfig

    # ----------------------------------------------------------------------------------------------- log-probs
    def _compute_loss(self, model, inputs, return_outputs):
        """TRL's loss, with each pair's prompt computed once for chosen and rejected (`prefix_sharing`)."""
        with self._prompts_once():
            return super()._compute_loss(model, inputs, return_outputs)

    def compute_ref_log_probs(self, model, inputs):
        """TRL's reference log-probs (`precompute_ref_log_probs`), with each pair's prompt computed once."""
        with self._prompts_once():
            return super().compute_ref_log_probs(model, inputs)

    def _prompts_once(self):
        """`prompts_computed_once` over the policy and the reference model, each with the mask its attention takes
        (`choose_attention_backend`, asked once per model); a no-op with `prefix_sharing=False`.

        The models keep the attention they were loaded with (a dense mask for SDPA, also on CUDA): the forwards
        that are not grouped (a layout that cannot be packed exactly, TRL's own calls) then run as TRL runs them,
        where a switch to FlexAttention would send them through transformers' own FlexAttention path."""
        models = []
        if self.args.prefix_sharing:
            policy = self.accelerator.unwrap_model(self.model)
            policy = policy.get_base_model() if is_peft_model(policy) else policy
            for module in (policy, self.ref_model):
                if module is not None:
                    if id(module) not in self._attention_backends:
                        self._attention_backends[id(module)] = choose_attention_backend(module, switch_to_flex=False)
                    models.append((module, self._attention_backends[id(module)]))
        return prompts_computed_once(models, self._tokenizer.pad_token_id or 0)


class RoleKTOTrainer(_RolePreferenceMixin, KTOTrainer):
    """Kahneman-Tversky optimisation on labelled role answers: `trl.KTOTrainer` with RoCIT's role system text and the
    injection-safe encoder (see the module docstring). Rows hold `role`, `question`, `completion` and `label` (`True`
    for a desirable answer); the arguments are those of `RoleDPOTrainer`, with a `RoleKTOConfig`.
    """

    _paired, _stage_name, _config_class = False, "KTO", RoleKTOConfig

    def _finish_dataset(self, dataset, args, split):
        """The KL completions of TRL's `_prepare_dataset`: each batch's completions rotated by one, so the KL term
        is estimated from mismatched (prompt, completion) pairs."""
        if not self.calculate_KL:
            return dataset

        def add_kl_completion_ids(batch):
            batch["KL_completion_ids"] = [batch["completion_ids"][-1]] + batch["completion_ids"][:-1]
            return batch

        return dataset.map(add_kl_completion_ids, batched=True, batch_size=args.per_device_train_batch_size)
