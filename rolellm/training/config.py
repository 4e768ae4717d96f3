"""The configurations of the training stages: `RoCITConfig` (`trl.SFTConfig` plus the role-conditioned instruction
tuning fields), and `RolePromptArguments`, the role fields every stage shares (where the profiles come from, the
language and template of the system text, think blocks, what a checkpoint keeps of a card), with the precision and
checkpointing defaults that let a CPU train without flags."""

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from trl import SFTConfig

from rolellm.clients.config import flag_field
from rolellm.roles.prompts import read_system_template
from rolellm.roles.resolve import as_sources, profiles_field


def check_at_least(config, minimums: dict) -> None:
    """Each field of `config` named in `minimums` at least its minimum, else a `ValueError` naming the field and the
    value (a negative learning rate or `beta`, a batch of 0: transformers and TRL take some of these unchecked and
    fail on others only once the model is loaded and training has started); and a run of some steps."""
    for name, low in minimums.items():
        value = getattr(config, name)
        if value is not None and not value >= low:  # None: the library's own default, worked out later; NaN fails
            raise ValueError(f"{name}={value} must be at least {low}")
    if config.max_steps <= 0 and not config.num_train_epochs > 0:  # 0 steps, then a model saved as if trained
        raise ValueError(
            f"num_train_epochs={config.num_train_epochs} without max_steps trains nothing: give a positive "
            "num_train_epochs or max_steps"
        )


def pin_memory_where_it_helps(args) -> None:
    """Turn `dataloader_pin_memory` off where there is no accelerator to copy to (a CPU run, `use_cpu`): torch would
    warn on every data loader that pinned memory cannot be used, a line a user can do nothing about."""
    import torch

    if args.dataloader_pin_memory and (args.use_cpu or not torch.accelerator.is_available()):
        args.dataloader_pin_memory = False


def resolve_bf16(args) -> None:
    """`bf16` when the user left it unset: `True` only on hardware with bf16 (a recent GPU, a TPU), so a CPU trains in
    float32. `bf16=True` on a CPU that only emulates bfloat16 is kept, with a warning that float32 is faster there."""
    import torch

    if args.bf16 is None and not args.fp16:
        from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

        args.bf16 = not args.use_cpu and (is_torch_bf16_gpu_available() or is_torch_xla_available())
    elif args.bf16 and (args.use_cpu or not torch.accelerator.is_available()):
        from rolellm.clients.loading import warn_if_bfloat16_is_emulated

        warn_if_bfloat16_is_emulated("--bf16 true")


@contextlib.contextmanager
def quiet_checkpointing_aliases():
    """Keep off a run's output the FutureWarnings that TRL's `disable_gradient_checkpointing` (around every reference
    and no-grad forward of DPO, KTO and GRPO) raises by calling transformers' deprecated `is_gradient_checkpointing`,
    `gradient_checkpointing_disable` and `gradient_checkpointing_enable`: nothing a user can change. Only inside the
    calls that do it; any other use of those names still warns."""
    with warnings.catch_warnings():
        for name in ("is_gradient_checkpointing", "gradient_checkpointing_disable", "gradient_checkpointing_enable"):
            warnings.filterwarnings("ignore", f"`{name}` is deprecated", FutureWarning)
        yield


@dataclass
class RolePromptArguments:
    r"""The role fields of every training stage's configuration (`RoCITConfig`, `RoleDPOConfig`, `RoleKTOConfig`):
    listed first among the bases, so its defaults and `__post_init__` come before the TRL configuration's.

    Parameters:
        profiles (`list[str]`, *optional*):
            Where the role profiles come from when the trainer is not given `profiles=` (`--profiles`, repeatable):
            any sources `rolellm.load_profiles` reads, e.g. a RoleBench release folder, a `desc.json`, a
            screenplay folder, Character Cards (JSON, PNG or a folder of them).
        system_lang (`str`, *optional*):
            Language of the system instruction (`"en"` or `"zh"`). `None` uses each row's `lang`.
        system_template_path (`str`, *optional*):
            A Jinja file replacing the paper's system instruction (see `rolellm.build_system_instruction`).
        keep_think (`bool`, *optional*, defaults to `False`):
            Keep a thinking template's think blocks (Qwen3's empty `<think></think>` before answers, DeepSeek-R1's
            prefilled `<think>`). By default answers are trained, and generated, without them
            (see `rolellm.encode_chat`). The checkpoint records it (`rolellm_inference.json`), so `rolellm chat`,
            `evaluate` and `dialogue` generate the same way unless `--keep_think` says otherwise.
        keep_card_metadata (`bool`, *optional*, defaults to `False`):
            Write the whole profiles into the checkpoint's `role_profiles.jsonl`. By default a Character Card keeps
            only the fields that reach a prompt, and a PNG card's local path is left out, since a checkpoint may be
            pushed (`rolellm.roles.card_prompts.prompt_only`).

    Defaults it changes in the TRL configuration it is mixed into:

    - `activation_checkpointing`: `True` (TRL's default) when neither it nor the deprecated alias
      `gradient_checkpointing` is given, without the deprecation warning TRL's `gradient_checkpointing=True` raises.
    - `bf16`: when not given, `True` only on hardware with bf16 (a recent GPU, a TPU), so a CPU trains in float32
      without `--use_cpu`; TRL turns it on wherever `use_cpu` is not set, and `transformers` then refuses a CPU.
      `bf16=True` on a CPU without bfloat16 units (AMX, AVX512-BF16) warns: PyTorch emulates it there, slower than
      float32.
    - `dataloader_pin_memory`: `False` without an accelerator (or with `use_cpu`), where it does nothing but warn.
    """

    # TRL sets the deprecated alias `gradient_checkpointing=True` by default, which transformers warns about even when
    # the user gave neither name: unset here, and `activation_checkpointing` defaults to True in `__post_init__`.
    gradient_checkpointing: bool | None = flag_field(
        "Deprecated alias of `activation_checkpointing`, will be removed in transformers v6."
    )
    # numbers transformers and TRL take unchecked, or check only once training has started (`check_at_least`)
    _minimums: ClassVar[dict] = {
        "per_device_train_batch_size": 1, "per_device_eval_batch_size": 1, "gradient_accumulation_steps": 1,
        "learning_rate": 0, "weight_decay": 0,
    }  # fmt: skip
    profiles: list[str] | None = profiles_field(
        help="Role profiles read when the trainer is not given profiles= (repeatable): a release folder, a "
        "desc.json, a screenplay folder, Character Cards (.json, .png) or a folder of cards."
    )
    system_lang: Literal["en", "zh"] | None = field(
        default=None,
        metadata={"help": "Language of the system instruction; None uses each row's lang."},
    )
    system_template_path: str | None = field(
        default=None,
        metadata={"help": "Jinja file replacing the paper's system instruction."},
    )
    keep_think: bool = field(
        default=False,
        metadata={"help": "Keep a thinking template's empty think blocks (default: train answers without them)."},
    )
    keep_card_metadata: bool = field(
        default=False,
        metadata={
            "help": "Write Character Card metadata (creator notes, tags, ...) and local card paths into the "
            "checkpoint's role_profiles.jsonl (default: only what reaches a prompt)."
        },
    )

    def __post_init__(self):
        if self.activation_checkpointing is None and self.gradient_checkpointing is None:
            self.activation_checkpointing = True
        resolve_bf16(self)
        check_at_least(self, self._minimums)
        pin_memory_where_it_helps(self)
        if self.system_template_path is not None:  # read and checked now, not once the model is loaded
            read_system_template(self.system_template_path)
        super().__post_init__()
        self.profiles = as_sources(self.profiles) or None


@dataclass
class RoCITConfig(RolePromptArguments, SFTConfig):
    r"""Configuration of the [`RoCITTrainer`]: everything of `trl.SFTConfig`, the role fields of
    `RolePromptArguments` (`profiles`, `system_lang`, `system_template_path`, `keep_think`, `keep_card_metadata`), and
    how RoleBench rows become conversational samples.

    Parameters:
        > Parameters that control the role data

        reference (`str`, *optional*, defaults to `"first"`):
            Which reference answer of a row's `generated` to train on: `"first"`, `"random"` (one per row, drawn with
            `seed`) or `"all"` (one sample per reference).
        role_specific_fraction (`float`, *optional*):
            Fraction of role-specific samples in the training mix. The larger subset is down-sampled (with `seed`) to
            reach it; `0.0` trains on general rows only, `1.0` on role-specific rows only. `None` keeps the data's own
            mix (the paper trains on both and finds that mixing helps).
        log_subset_losses (`bool`, *optional*, defaults to `True`):
            Log the train and eval loss of `general` and `role_specific` samples separately (`loss_general`,
            `loss_role_specific`, `eval_loss_general`, ...).

        > Parameters that control prefix-shared packing

        prefix_sharing (`bool`, *optional*, defaults to `True`):
            Pack samples of the same role into rows of up to `max_length` tokens that hold one copy of the role's
            system prompt, `[prefix][Q1 A1][Q2 A2]...`, with an attention mask and position ids under which every
            sample sees exactly what it sees alone (`rolellm.training.packing`). Used with SDPA and eager attention,
            and FlexAttention on GPU; takes precedence over `packing`. With any other attention backend, TRL's
            packing (`packing=True`) is used instead, with a warning.

    > [!NOTE]
    > These parameters have default values different from `trl.SFTConfig`:
    > - `assistant_only_loss`: Defaults to `True` instead of `False`: the loss covers the assistant turns only, never the
    >   system instruction or the question.
    > - `activation_checkpointing`: Defaults to `True` (TRL's default) when neither it nor the deprecated alias
    >   `gradient_checkpointing` is given, without the deprecation warning TRL's `gradient_checkpointing=True` raises.
    > - `bf16`: when not given, `True` only on hardware with bf16 (a recent GPU, a TPU), so a CPU trains in float32
    >   without `--use_cpu`; TRL turns it on wherever `use_cpu` is not set, and `transformers` then refuses a CPU.
    >   `bf16=True` on a CPU that only emulates bfloat16 warns that float32 is faster there.
    > - `packing_strategy`: only `"bfd"` is accepted. `"wrapped"` lets samples of different roles attend to each
    >   other, and `"bfd_split"` cuts a sample so that its tail trains without its role's system instruction.

    >>> config = RoCITConfig(output_dir="out", use_cpu=True, bf16=False, reference="all")
    >>> config.assistant_only_loss, config.reference, config.activation_checkpointing
    (True, 'all', True)
    """

    assistant_only_loss: bool = field(
        default=True,
        metadata={"help": "Compute the loss on the assistant turns only (RoCIT default: True)."},
    )
    reference: Literal["first", "random", "all"] = field(
        default="first",
        metadata={"help": "Reference answer(s) to train on: 'first', 'random' (seeded) or 'all' (one sample each)."},
    )
    role_specific_fraction: float | None = field(
        default=None,
        metadata={
            "help": "Fraction of role-specific samples in the training mix (the larger subset is down-sampled); "
            "None keeps the data's own mix."
        },
    )
    log_subset_losses: bool = field(
        default=True,
        metadata={"help": "Log train/eval loss of general and role_specific samples separately."},
    )
    prefix_sharing: bool = field(
        default=True,
        metadata={
            "help": "Pack samples of one role into rows sharing one copy of the role's system prompt (same loss as "
            "unpacked training, fewer tokens); takes precedence over packing. Falls back to packing=True where the "
            "attention backend takes no custom mask."
        },
    )

    def __post_init__(self):
        super().__post_init__()
        if self.role_specific_fraction is not None and not 0.0 <= self.role_specific_fraction <= 1.0:
            raise ValueError(
                f"role_specific_fraction={self.role_specific_fraction} is not a fraction: use a value in [0, 1], "
                "or None to keep the data's own mix"
            )
        if self.packing_strategy != "bfd":
            raise ValueError(
                f"packing_strategy={self.packing_strategy!r} is not supported by RoCIT: 'wrapped' lets samples of "
                "different roles attend to each other and 'bfd_split' trains the tail of a cut sample without its "
                "role's system instruction; use 'bfd'"
            )
