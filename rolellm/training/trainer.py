"""`RoCITTrainer`: `trl.SFTTrainer` that trains on RoleBench rows with the role system instruction (RoCIT).

What it adds to `SFTTrainer`, each at one override point:

- `build_role_dataset` (called before `SFTTrainer.__init__`): RoleBench rows + profiles -> `messages` samples, with
  the reference choice and the general/role-specific mix of `RoCITConfig`.
- `_prepare_dataset`: tokenizes with `rolellm.encode_chat_turns` (exact assistant masks for any chat template, the
  text of registered tokens inside messages encoded as plain text, one row per turn for templates that re-render the
  history, a per-token `subset_ids` column), lets TRL build the labels, and packs
  with `_pack_dataset`.
- the data collator: TRL's, carrying `subset_ids` along (`DataCollatorForRoleLM`).
- `compute_loss`: refuses batches whose packed samples could attend to each other and logs the loss of `general`
  and `role_specific` samples separately.
- `create_model_card`: a card stating the roles, the data, the chat template, the packing, quantization and adapter.
- `_save` (every checkpoint, intermediate and final): beside the weights and the tokenizer, the files that make the
  folder work on its own (`rolellm.training.checkpoint`): `chat_template.jinja`, `rolellm_inference.json` (the
  `keep_think` and template family trained with), `role_profiles.jsonl` (read by `rolellm.load_profiles`), a custom `system_template.jinja`, an adapter's `generation_config.json`, the model card.

With `prefix_sharing=True` (the default) the same override points pack samples of one role into rows sharing one
copy of the role's system prompt (`rolellm.training.packing`), collate them with `DataCollatorForPrefixSharing`, and
compute the loss with the rows' own attention mask and a compact output layer (`rolellm.training.attention`).
"""

import copy
import dataclasses
import logging
import warnings
from collections import Counter
from pathlib import Path

import datasets
import torch
from accelerate.utils import is_peft_model
from transformers import AutoTokenizer
from trl import SFTTrainer, pack_dataset
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling
from trl.trainer.utils import FusedCausalLMOutput, create_model_from_path, pad

from rolellm.clients.gguf import resolve_model_name_or_path
from rolellm.encoding.chat_template import has_generation_markers, set_role_chat_template
from rolellm.encoding.encode import encode_chat_turns
from rolellm.roles.prompts import read_system_template
from rolellm.roles.resolve import profiles_for
from rolellm.training.attention import compute_prefix_shared_loss, log_subset_losses, resolve_prefix_sharing
from rolellm.training.card import build_model_card, describe_base_model, describe_chat_template
from rolellm.training.checkpoint import save_stage_checkpoint, trained_profiles
from rolellm.training.config import RoCITConfig
from rolellm.training.data import SUBSET_IDS, mix_subsets, rolebench_to_conversations
from rolellm.training.packing import (
    PACKED_COLUMNS,
    PREFIX_GROUP_COLUMN,
    DataCollatorForPrefixSharing,
    prefix_groups,
    prepare_prefix_shared_dataset,
)


logger = logging.getLogger(__name__)


@dataclasses.dataclass
class DataCollatorForRoleLM(DataCollatorForLanguageModeling):
    """TRL's language-modeling collator, also padding (or, padding-free, concatenating) the per-token `subset_ids`."""

    def torch_call(self, examples):
        output = super().torch_call(examples)
        if "subset_ids" in examples[0]:
            subset_ids = [torch.tensor(example["subset_ids"]) for example in examples]
            if self.padding_free:
                subset_ids = [torch.cat(subset_ids)]
            output["subset_ids"] = pad(subset_ids, padding_value=-1, pad_to_multiple_of=self.pad_to_multiple_of)
        return output


def check_no_cross_sample_attention(inputs: dict) -> None:
    """Raise when a batch would let packed samples attend to each other.

    transformers separates the samples of a packed row by their `position_ids` only when the forward gets no 2D
    `attention_mask` and no cache; a row whose positions restart while an `attention_mask` is present would be attended
    as one sequence.
    """
    position_ids, attention_mask = inputs.get("position_ids"), inputs.get("attention_mask")
    if position_ids is None or attention_mask is None or attention_mask.dim() != 2:
        return
    restarts = (position_ids[:, 1:] <= position_ids[:, :-1]) & attention_mask[:, 1:].bool()
    if restarts.any():
        raise RuntimeError(
            "a batch holds packed samples (position_ids restart inside a row) together with a 2D attention_mask, "
            "so its samples would attend to each other; use the trainer's own collator (padding-free batches carry "
            "no attention_mask)"
        )


class RoCITTrainer(SFTTrainer):
    """Role-conditioned instruction tuning: `trl.SFTTrainer` on RoleBench rows with the paper's role system instruction.

    Args:
        model (`str` or `PreTrainedModel`): the model or its name/path, as for `SFTTrainer`, or a GGUF file (or a
            folder holding one), trained from its dequantized copy (`rolellm.clients.gguf`).
        args (`RoCITConfig`, *optional*): training configuration; defaults to `RoCITConfig("<model>-RoCIT")`.
        train_dataset (`datasets.Dataset`): RoleBench rows (`role`, `question`, `generated`, `subset`, `lang`: the
            output of `rolellm.load_rolebench` or a Hub copy) or ready `messages` samples.
        eval_dataset (`datasets.Dataset` or `dict[str, datasets.Dataset]`, *optional*): rows or samples to evaluate on
            (no mixing, same reference choice).
        processing_class (`PreTrainedTokenizerBase`, *optional*): the tokenizer; loaded from the model when omitted. A
            tokenizer without a chat template gets rolellm's ChatML-style role template (`set_role_chat_template`).
        profiles (`dict[str, RoleProfile]`, *optional*): role -> profile; read from `args.profiles` when omitted.
        peft_config (`peft.PeftConfig`, *optional*): LoRA and friends, as for `SFTTrainer`.
        quantization_config (`transformers.BitsAndBytesConfig`, *optional*): QLoRA, when `model` is a name or path.
        dataset_name (`str`, *optional*): the name, Hub id or folder of the data, for the model card.
        dataset_configs (`dict[str, int]`, *optional*): the dataset configs trained on -> their row counts, for the
            model card.
        **kwargs: the other arguments of `SFTTrainer` (`callbacks`, `optimizers`, ...).

    >>> from rolellm.testing.models import build_tiny_llama, train_tiny_tokenizer
    >>> import datasets, tempfile
    >>> from rolellm import RoleProfile
    >>> folder = tempfile.mkdtemp()
    >>> path = build_tiny_llama(folder + "/model")
    >>> rows = datasets.Dataset.from_list([{"role": "张飞", "question": "你是谁？", "generated": ["燕人张翼德！"],
    ...                                     "type": [], "subset": "general", "lang": "zh"}] * 4)
    >>> args = RoCITConfig(folder + "/out", use_cpu=True, bf16=False, activation_checkpointing=False, max_steps=2,
    ...                    per_device_train_batch_size=2, report_to="none", save_strategy="no", disable_tqdm=True)
    >>> trainer = RoCITTrainer(str(path), args=args, train_dataset=rows,
    ...                        profiles={"张飞": RoleProfile("张飞", "zh", "猛将")})
    >>> trainer.train().global_step
    {'train_runtime': ...}
    2
    """

    _tag_names = ["trl", "sft", "rolellm", "rocit"]
    _name = "RoCIT"

    def __init__(
        self,
        model,
        args: RoCITConfig | None = None,
        train_dataset: datasets.Dataset | None = None,
        eval_dataset=None,
        processing_class=None,
        profiles: dict | None = None,
        peft_config=None,
        quantization_config=None,
        dataset_name: str | None = None,
        dataset_configs: dict[str, int] | None = None,
        **kwargs,
    ):
        model = resolve_model_name_or_path(model, "model")  # a GGUF file: its dequantized folder
        model_id = model if isinstance(model, str) else model.config._name_or_path
        if args is None:
            args = RoCITConfig(f"{Path(model_id).name}-RoCIT")
        elif not isinstance(args, RoCITConfig):
            raise TypeError(f"args must be a RoCITConfig, got {type(args).__name__}: build one with RoCITConfig(...)")
        if train_dataset is None:
            raise ValueError("train_dataset is required: RoleBench rows or messages samples")
        self.args = args  # `SFTTrainer.__init__` sets it too; the role conversion below needs it first
        self.profiles = profiles
        self.dataset_name, self.dataset_configs = dataset_name, dataset_configs
        if self.profiles is None and args.profiles:
            self.profiles = profiles_for(args.profiles)
        self._system_template = None
        if args.system_template_path is not None:
            self._system_template = read_system_template(args.system_template_path)

        # A base model's tokenizer gets the role template; tokens it lacks are added and the embeddings resized.
        if processing_class is None:
            processing_class = AutoTokenizer.from_pretrained(model_id, trust_remote_code=args.trust_remote_code)
        # Prefix sharing picks its attention backend from the model, so a model given by name is loaded here.
        loaded_here = isinstance(model, str) and (processing_class.chat_template is None or args.prefix_sharing)
        if loaded_here:
            init_kwargs = dict(args.model_init_kwargs or {})
            if quantization_config is not None:
                init_kwargs["quantization_config"] = quantization_config
            if args.distributed_state.distributed_type in ("MULTI_GPU", "DEEPSPEED"):
                init_kwargs["device_map"] = None  # one full copy per process, as `SFTTrainer` loads it
            init_kwargs.setdefault("trust_remote_code", args.trust_remote_code)
            model = create_model_from_path(model, **init_kwargs)
            quantization_config = None  # applied: `SFTTrainer` would warn that it ignores it
        self._attention_backend, packing_instead = resolve_prefix_sharing(model, args)
        if processing_class.chat_template is None:
            added = set_role_chat_template(processing_class, model)
            if added and peft_config is not None:
                peft_config.trainable_token_indices = {"embed_tokens": added}
                peft_config.modules_to_save = [*(peft_config.modules_to_save or []), "lm_head"]

        self.role_stats = {}
        self.example_system: str | None = None  # the system text of one training sample, for the model card
        self.role_metrics: dict[str, dict[str, list[float]]] = {"train": {}, "eval": {}}  # see `record_metric`
        self.num_train_tokens = 0
        train_dataset = self.build_role_dataset(train_dataset, "train")
        if isinstance(eval_dataset, dict):
            eval_dataset = {key: self.build_role_dataset(ds, key) for key, ds in eval_dataset.items()}
        elif eval_dataset is not None:
            eval_dataset = self.build_role_dataset(eval_dataset, "eval")

        # `SFTTrainer` works on a copy of the configuration, so the user's `RoCITConfig` is never changed:
        # - rolellm computes the assistant spans itself (`encode_chat`): TRL would otherwise insist on patching a
        #   template that has no {% generation %} markers;
        # - a model loaded above used `model_init_kwargs`: `SFTTrainer` would warn that it ignores them;
        # - prefix sharing that cannot run falls back to TRL's packing.
        prefix_spans = args.assistant_only_loss and not has_generation_markers(processing_class.chat_template)
        self._train_on_assistant_only = args.assistant_only_loss
        trl_args = copy.copy(args)
        trl_args.assistant_only_loss = args.assistant_only_loss and not prefix_spans
        trl_args.model_init_kwargs = None if loaded_here else args.model_init_kwargs
        trl_args.packing = args.packing or packing_instead
        with warnings.catch_warnings():
            # peft's `PeftModel` reads the deprecated `is_gradient_checkpointing` of transformers 5.x; nothing a user
            # of this trainer could change.
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            super().__init__(
                model,
                args=trl_args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                peft_config=peft_config,
                quantization_config=quantization_config,
                **kwargs,
            )
        self.args.assistant_only_loss = self._train_on_assistant_only  # the trainer's copy says what is trained
        self.packing_kind = (
            "prefix_shared" if self._attention_backend is not None else "trl" if self.args.packing else "none"
        )
        if self.args.packing or self.args.padding_free:
            # With a cache in the forward, transformers stops reading sample boundaries from `position_ids`.
            self.model.config.use_cache = False
        if self._attention_backend is not None and type(self.data_collator) is DataCollatorForLanguageModeling:
            self.data_collator = DataCollatorForPrefixSharing(
                self._tokenizer.pad_token_id,
                pad_to_multiple_of=128 if self._attention_backend == "flex_attention" else args.pad_to_multiple_of,
                token_columns=("subset_ids",),
            )
        elif type(self.data_collator) is DataCollatorForLanguageModeling:
            fields = {f.name: getattr(self.data_collator, f.name) for f in dataclasses.fields(self.data_collator)}
            self.data_collator = DataCollatorForRoleLM(**fields)

    # ----------------------------------------------------------------------------------------------- data
    def build_role_dataset(self, dataset: datasets.Dataset, split: str) -> datasets.Dataset:
        """RoleBench rows -> `messages` samples (a dataset that already has `messages` is returned as is).

        The training split is mixed by `args.role_specific_fraction`; every split uses `args.reference`.
        """
        if "messages" in dataset.column_names:
            return dataset
        if "question" not in dataset.column_names or "generated" not in dataset.column_names:
            raise ValueError(
                f"the {split} dataset has columns {dataset.column_names}: pass RoleBench rows (role, question, "
                "generated, subset, lang) or conversational samples with a 'messages' column"
            )
        if self.profiles is None:
            raise ValueError(
                "RoleBench rows need role profiles: pass profiles= to the trainer or set RoCITConfig.profiles"
            )
        args = self.args
        if split == "train":
            dataset = mix_subsets(dataset, args.role_specific_fraction, seed=args.seed)
        conversations = rolebench_to_conversations(
            dataset,
            self.profiles,
            reference=args.reference,
            seed=args.seed,
            lang=args.system_lang,
            template=self._system_template,
            num_proc=args.dataset_num_proc,
        )
        if split == "train" and len(conversations):  # the card shows one sample's system text as it was trained
            self.example_system = conversations[0]["messages"][0]["content"]
        self.role_stats[split] = {
            "rows": len(dataset),
            "samples": dict(Counter(conversations["subset"])),
            "roles": sorted(set(conversations["role"])),
        }
        return conversations

    def _prepare_dataset(self, dataset, processing_class, args, packing, formatting_func, dataset_name):
        if isinstance(dataset, datasets.Dataset) and "input_ids" not in dataset.column_names:
            conversations = self.build_role_dataset(dataset, dataset_name)
            with_groups = self._attention_backend is not None
            dataset = self._tokenize_role_dataset(conversations, args, dataset_name, with_groups)
        # TRL builds the labels from `assistant_masks`, truncates and drops samples left without a trained token.
        num_samples = len(dataset) if isinstance(dataset, datasets.Dataset) else None
        dataset = super()._prepare_dataset(dataset, processing_class, args, False, formatting_func, dataset_name)
        if num_samples and not len(dataset):
            raise ValueError(
                f"all {num_samples} {dataset_name} samples were dropped: truncated to max_length={args.max_length} "
                "none keeps an answer token (the role prompt fills the window); raise max_length"
            )
        if num_samples is not None and len(dataset) < num_samples:
            logger.warning(
                "%d of %d %s samples were dropped: truncated to max_length=%s they kept no answer token; raise "
                "max_length to train on them", num_samples - len(dataset), num_samples, dataset_name, args.max_length,
            )  # fmt: skip
        if self._attention_backend is not None:
            return prepare_prefix_shared_dataset(dataset, args, dataset_name)
        return self._pack_dataset(dataset, args, dataset_name) if packing else dataset

    def _tokenize_role_dataset(self, dataset, args, dataset_name, with_groups=False):
        """`messages` -> `input_ids`, `assistant_masks` and per-token `subset_ids`, truncated to `max_length`.

        A conversation whose turns cannot share one sequence (see `rolellm.encode_chat_turns`) gives one row per
        assistant turn; `with_groups` adds each row's prefix-sharing group (its system text).
        """
        tokenizer = self._tokenizer
        assistant_only = self._train_on_assistant_only
        if args.max_length is None:
            window = slice(None)
        else:
            window = (
                slice(None, args.max_length) if args.truncation_mode == "keep_start" else slice(-args.max_length, None)
            )

        def tokenize(batch):
            out = {"input_ids": [], "subset_ids": [], **({"assistant_masks": []} if assistant_only else {})}
            if with_groups:
                out[PREFIX_GROUP_COLUMN] = []
            for i, messages in enumerate(batch["messages"]):
                subset_id = SUBSET_IDS.get(batch["subset"][i] if "subset" in batch else None, -1)
                for encoded in encode_chat_turns(tokenizer, messages, keep_think=args.keep_think):
                    input_ids = encoded["input_ids"][window]
                    out["input_ids"].append(input_ids)
                    out["subset_ids"].append([subset_id] * len(input_ids))
                    if assistant_only:
                        out["assistant_masks"].append(encoded["assistant_masks"][window])
                    if with_groups:
                        out[PREFIX_GROUP_COLUMN] += prefix_groups([messages])
            return out

        return dataset.map(
            tokenize,
            batched=True,
            remove_columns=dataset.column_names,
            num_proc=args.dataset_num_proc,
            desc=f"Tokenizing {dataset_name} chats",
        )

    def _pack_dataset(self, dataset, args, dataset_name):
        """Best-fit-decreasing packing (TRL's), keeping `subset_ids`; samples stay separate through `position_ids`."""
        if args.max_length is None:
            raise ValueError("packing=True needs max_length: the length of a packed row")
        columns = [c for c in ("input_ids", "labels", "subset_ids") if c in dataset.column_names]
        map_kwargs = {"num_proc": args.dataset_num_proc, "desc": f"Packing {dataset_name} dataset"}
        dataset = pack_dataset(dataset.select_columns(columns), args.max_length, "bfd", map_kwargs)
        return dataset.shuffle(seed=args.seed) if args.shuffle_dataset else dataset

    def _set_signature_columns_if_needed(self):
        super()._set_signature_columns_if_needed()
        extra = ["subset_ids", *(PACKED_COLUMNS if self._attention_backend is not None else ())]
        self._signature_columns = [*self._signature_columns, *(c for c in extra if c not in self._signature_columns)]

    # ----------------------------------------------------------------------------------------------- loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self._attention_backend is not None:  # prefix-shared rows: their own mask and the compact loss
            return compute_prefix_shared_loss(
                self, model, inputs, self._attention_backend, return_outputs, num_items_in_batch
            )
        check_no_cross_sample_attention(inputs)
        inputs["use_cache"] = False  # a cache hides the sample boundaries of packed rows from the attention mask
        subset_ids = inputs.pop("subset_ids", None)
        if subset_ids is None or not self.args.log_subset_losses:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        outputs = []
        hook = self.accelerator.unwrap_model(model).register_forward_hook(lambda _m, _a, out: outputs.append(out))
        try:
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            hook.remove()
        fused = [out for out in outputs if isinstance(out, FusedCausalLMOutput)]
        if fused:
            self._log_subset_losses(fused[0], subset_ids)
        return result

    def _log_subset_losses(self, outputs, subset_ids):
        mode = "train" if self.model.training else "eval"
        trained = outputs.label_mask  # (batch, seq_len - 1), like `log_probs`
        targets = subset_ids[:, 1:].to(trained.device)  # the subset of each predicted token
        log_subset_losses(self, mode, -outputs.log_probs.detach()[trained], targets[trained])

    # ----------------------------------------------------------------------------------------------- logging
    def record_metric(self, mode: str, name: str, value: float, cumulative: bool = False) -> None:
        """Keep a value of `name` for the next log of `mode` (`"train"` / `"eval"`), where the values are averaged;
        a `cumulative` metric keeps only its latest value."""
        values = self.role_metrics[mode].setdefault(name, [])
        values[:] = [*([] if cumulative else values), value]

    def count_train_tokens(self, num_tokens: int) -> None:
        """Add the real (unpadded) tokens of a training batch, summed over processes, to `num_train_tokens`."""
        self.num_train_tokens += num_tokens // self.get_tp_size()

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        prefix = "eval_" if mode == "eval" else ""
        logs.update({f"{prefix}{name}": sum(values) / len(values) for name, values in self.role_metrics[mode].items()})
        self.role_metrics[mode] = {}
        super().log(logs, start_time)

    def end(self):
        """Finish the run: release the distributed model wrapper on every process while all of them are alive, then
        destroy the process group (`Trainer.end`).

        A DDP wrapper freed after its peer has exited waits for that peer forever (gloo joins its threads), so the
        wrapper goes first, in step on every process.
        """
        self.accelerator.wait_for_everyone()
        self.model_wrapped = self.model
        self.accelerator.free_memory()
        self.accelerator.wait_for_everyone()
        super().end()

    # ----------------------------------------------------------------------------------------------- checkpoint
    def _save(self, output_dir: str | None = None, state_dict=None):
        """Save the model and tokenizer (`Trainer._save`), then what makes the folder usable on its own: the role
        profiles, a custom system template, `chat_template.jinja` and the model card. `training_args.bin` is written
        again without the Hub token (`Trainer` pickles the arguments as they are)."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            folder = output_dir if output_dir is not None else self.args.output_dir
            self.save_role_files(folder)

    def save_role_files(self, folder: str | Path) -> None:
        """Write the role files of a checkpoint into `folder` (`rolellm.training.checkpoint.save_stage_checkpoint`)."""
        save_stage_checkpoint(self, folder, self._tokenizer, self.args.keep_think)

    def create_model_card(self, model_name=None, dataset_name=None, tags=None):
        """Write `README.md` in `output_dir` (see `build_model_card`)."""
        if not self.is_world_process_zero():
            return
        Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
        card = self.build_model_card(model_name, dataset_name, tags)
        card.save(Path(self.args.output_dir) / "README.md")

    def build_model_card(self, model_name=None, dataset_name=None, tags=None):
        """The model card of this run (`rolellm.training.card.build_model_card`), from the trainer's real settings:
        the roles and profiles, the data, the template and system placement, packing, quantization and adapter."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        peft_config = unwrapped.peft_config["default"] if is_peft_model(unwrapped) else None
        quantization = getattr(unwrapped.config, "quantization_config", None)
        if quantization is not None and not isinstance(quantization, dict):
            quantization = quantization.to_dict()
        return build_model_card(
            model_name=model_name or Path(self.args.output_dir).name,
            **describe_base_model(self.accelerator.unwrap_model(self.model).config._name_or_path),
            hub_model_id=self.args.hub_model_id,
            role_stats=self.role_stats,
            dataset_name=dataset_name or self.dataset_name,
            chat_template=self._tokenizer.chat_template,
            args=self.args,
            peft_config=peft_config,
            tags=sorted({*self._tag_names, *([tags] if isinstance(tags, str) else tags or [])}),
            dataset_configs=self.dataset_configs,
            profiles=trained_profiles(self.profiles, self.role_stats),
            packing=self.packing_kind,
            quantization=quantization,
            template=describe_chat_template(self._tokenizer),
            steps=self.state.global_step,
            example_system=self.example_system,
        )
