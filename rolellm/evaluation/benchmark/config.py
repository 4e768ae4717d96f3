"""`EvaluateConfig`: what `run_benchmark` and `rolellm evaluate` evaluate, how, and where they write.

>>> config = EvaluateConfig(model_name_or_path="rolegpt", dataset_name="zh", output_dir="runs/rolegpt-zh")
>>> config.is_rolegpt_baseline, config.model_label
(True, 'RoleGPT')
"""

import os
from dataclasses import dataclass, field, replace

from rolellm.clients.config import ClientConfig
from rolellm.roles.prompts import prompting_mode, prompting_mode_field
from rolellm.roles.resolve import merge_deprecated_sources, profiles_field


ROLEGPT = "rolegpt"
# the fields of EvaluateConfig that decide what is generated: a resumed run must agree on all of them
GENERATION_FIELDS = (
    "model_name_or_path", "base_url", "dataset_name", "split", "mode", "num_examples", "roles", "max_samples_per_role",
    "max_new_tokens", "temperature", "system_template", "chat_template", "keep_think",
)  # fmt: skip


@dataclass
class EvaluateConfig:
    """Configuration of `run_benchmark` and `rolellm evaluate`.

    > Parameters that control the model

    Args:
        model_name_or_path (`str`): a local folder or Hub id loaded with transformers; with `base_url`, the model
            name the endpoint serves; `"rolegpt"` scores the release's RoleGPT baseline answers (no generation).
        base_url (`str`, *optional*): an OpenAI-compatible endpoint (`http://localhost:8000/v1` for vLLM). The API key
            is read from `OPENAI_API_KEY`, never from the config.
        model_label (`str`, *optional*): the model's name in tables and plots; defaults to the last part of
            `model_name_or_path` (`"RoleGPT"` for the baseline).

    > Parameters that control the data

        dataset_name (`str`, *optional*, defaults to `"zh"`): the RoleBench config (`zh`, `en-instruction`, `en-role`,
            or one subset: `zh-general`, `en-instruction-role_specific`, ...).
        data_dir (`str`, *optional*): a local copy of the release (the `ZenMoore/RoleBench` layout).
        split (`str`, *optional*, defaults to `"test"`): the split to answer.
        roles (`list[str]`, *optional*): only these roles.
        max_samples_per_role (`int`, *optional*): only the first rows of each role and subset (quick runs).
        profiles (`list[str]`, *optional*): profile sources (`--profiles`, repeatable; any source
            `rolellm.load_profiles` reads: a release or screenplay folder, a `desc.json`, a screenplay file with
            `roles`, Character Cards) read after the release's profiles in `data_dir`: they add roles, and script
            dialogue for the few-shot modes.
        profiles_dir (`list[str]`, *optional*): deprecated alias of `profiles`.
        raw_targets_file (`str`, *optional*): `instructions-general.jsonl` with the raw answers (RAW); defaults to
            `instructions-{eng,zh}/instructions-general.jsonl` in `data_dir` when that exists.

    > Parameters that control generation

        mode (`str`, *optional*, defaults to `"system"`): the prompting mode (`rolellm.roles.prompts.build_role_messages`),
            or the paper's name of one (`zero_shot`, `few_shot`, `dialogue`).
        num_examples (`int`, *optional*, defaults to 3): dialogue groups retrieved by the few-shot modes.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction.
        max_new_tokens (`int`, *optional*, defaults to 256): the longest answer.
        temperature (`float`, *optional*, defaults to 0.0): 0 is greedy decoding.
        batch_size (`int`, *optional*, defaults to 8): local models: prompts per forward pass.
        chat_template (`str`, *optional*): local models: a Jinja chat template, or `"chatml"`, for a tokenizer
            without one (defaults to the tokenizer's own).
        keep_think (`bool`, *optional*, defaults to `False`): local models: keep a thinking template's think blocks
            and prefill, as a model trained with `RoCITConfig(keep_think=True)` saw them.
        dtype (`str`, *optional*): local models: the `dtype` to load the weights in (`"bfloat16"`, ...).
        device (`str`, *optional*): local models: where to run (`"cuda"`, `"cuda:1"`, `"cpu"`); defaults to the first
            GPU when there is one, else the CPU.
        max_concurrency (`int`, *optional*, defaults to 8): endpoints: requests in flight.
        max_retries (`int`, *optional*, defaults to 6): endpoints (the model's and the judge's): retries of a request
            before it counts as failed.
        save_every (`int`, *optional*, defaults to 256): generations are written to disk after every this many.

    > Parameters that control the output

        output_dir (`str`): where `generations.jsonl`, `run_config.json`, `results.json`, `results.md` and the plots
            go.
        compare_with (`list[str]`, *optional*): `results.json` files of other runs to put in the same table and plot.
        model_card (`str`, *optional*): a model card (`README.md`) whose `model-index` receives the scores.

    > Parameters that control the GPT-judge win rate

        judge_model (`str`, *optional*): also judge the answers against a baseline's with this model, the paper's win
            rate (`rolellm.evaluation.judge.pairwise`) with its length-controlled variant; not set: no win rate.
        baseline (`str`, *optional*, defaults to `"rolegpt"`): what the judge compares against: `"rolegpt"` (the
            release's `rolegpt_baseline` answers, as in the paper) or the `output_dir` of another `rolellm evaluate`
            run (its `generations.jsonl`, matched on role, subset and question).
        baseline_model (`str`, *optional*): instead, a model that answers the same rows as the baseline: a local
            folder or Hub id, or with `baseline_base_url` the model an endpoint serves. Its answers are generated with
            the same prompting and decoding as the evaluated model's, into `<output_dir>/baseline/` (resumable).
        baseline_base_url (`str`, *optional*): the baseline model's OpenAI-compatible endpoint.
        baseline_label (`str`, *optional*): the baseline's name in tables and plots (defaults to `"RoleGPT"`, the
            folder's model, or the last part of `baseline_model`).
        judge_base_url (`str`, *optional*): the judge's OpenAI-compatible endpoint (defaults to `$OPENAI_BASE_URL`,
            else OpenAI; the key is read from `OPENAI_API_KEY`).
        judge_max_concurrency (`int`, *optional*, defaults to 8): judge requests in flight.
        overwrite_output_dir (`bool`, *optional*, defaults to `False`): discard the generations of a different run
            in `output_dir` instead of stopping.
        allow_partial (`bool`, *optional*, defaults to `False`): accept a run where some generations or judge verdicts
            failed: `rolellm evaluate` exits 0 and the model card receives the scores. Without it such a run still
            writes `results.json` (with the failures counted), exits 1 and leaves the model card alone.
    """

    model_name_or_path: str = field(metadata={"help": "Local folder, Hub id, served model name, or 'rolegpt'."})
    output_dir: str = field(metadata={"help": "Folder for generations, results and plots."})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint (key: OPENAI_API_KEY)."})
    model_label: str | None = field(default=None, metadata={"help": "Name of the model in tables and plots."})
    dataset_name: str = field(default="zh", metadata={"help": "RoleBench config: zh, en-instruction, en-role, ..."})
    data_dir: str | None = field(default=None, metadata={"help": "Local copy of the RoleBench release."})
    split: str = field(default="test", metadata={"help": "Split to answer."})
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles."})
    max_samples_per_role: int | None = field(default=None, metadata={"help": "First N rows per role and subset."})
    profiles: list[str] | None = profiles_field()
    profiles_dir: list[str] | None = field(default=None, metadata={"help": "Deprecated: use --profiles."})
    raw_targets_file: str | None = field(default=None, metadata={"help": "instructions-general.jsonl (RAW)."})
    mode: str = prompting_mode_field("system", "Prompting mode (or the paper's name of one).")
    num_examples: int = field(default=3, metadata={"help": "Dialogue groups retrieved by the few-shot modes."})
    system_template: str | None = field(default=None, metadata={"help": "Jinja source replacing the instruction."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest answer, in tokens."})
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature; 0 is greedy."})
    batch_size: int = field(default=8, metadata={"help": "Local models: prompts per forward pass."})
    chat_template: str | None = field(
        default=None, metadata={"help": "Local models: Jinja chat template or 'chatml' (default: the tokenizer's)."}
    )
    keep_think: bool = field(default=False, metadata={"help": "Local models: keep the template's think blocks."})
    dtype: str | None = field(default=None, metadata={"help": "Local models: dtype to load in (bfloat16, ...)."})
    device: str | None = field(default=None, metadata={"help": "Local models: cuda, cpu, ... (default: cuda if any)."})
    max_concurrency: int = field(default=8, metadata={"help": "Endpoints: requests in flight."})
    max_retries: int = field(default=6, metadata={"help": "Endpoints: retries before a request counts as failed."})
    save_every: int = field(default=256, metadata={"help": "Write generations to disk after every N."})
    compare_with: list[str] | None = field(default=None, metadata={"help": "results.json files of other runs."})
    model_card: str | None = field(default=None, metadata={"help": "Model card whose model-index gets the scores."})
    judge_model: str | None = field(default=None, metadata={"help": "Judge model for the win rate vs the baseline."})
    baseline: str = field(
        default=ROLEGPT, metadata={"help": "'rolegpt' or the output_dir of another rolellm evaluate run."}
    )
    baseline_model: str | None = field(
        default=None, metadata={"help": "Model answering as the baseline (local folder, Hub id, or served name)."}
    )
    baseline_base_url: str | None = field(
        default=None, metadata={"help": "Baseline model's OpenAI-compatible endpoint."}
    )
    baseline_label: str | None = field(default=None, metadata={"help": "Name of the baseline in tables and plots."})
    judge_base_url: str | None = field(default=None, metadata={"help": "Judge's OpenAI-compatible endpoint."})
    judge_max_concurrency: int = field(default=8, metadata={"help": "Judge requests in flight."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Discard another run's generations."})
    allow_partial: bool = field(
        default=False, metadata={"help": "Accept a run where some generations or verdicts failed (exit 0)."}
    )

    def __post_init__(self):
        self.mode = prompting_mode(self.mode)
        self.profiles = merge_deprecated_sources(self.profiles, profiles_dir=self.profiles_dir)
        self.profiles_dir = None
        if self.is_rolegpt_baseline and self.base_url is not None:
            raise ValueError("model_name_or_path='rolegpt' scores the release's answers: drop base_url")
        compares_rolegpt = self.baseline.lower() == ROLEGPT and self.baseline_model is None
        if self.is_rolegpt_baseline and self.judge_model is not None and compares_rolegpt:
            raise ValueError("model 'rolegpt' against baseline 'rolegpt': pass another baseline or drop judge_model")
        if self.baseline_model is not None and self.baseline.lower() != ROLEGPT:
            raise ValueError(
                f"pass either baseline={self.baseline!r} (a predictions folder) or baseline_model, not both"
            )
        if self.baseline_base_url is not None and self.baseline_model is None:
            raise ValueError("baseline_base_url needs baseline_model, the model name that endpoint serves")
        if self.judge_model is None and not compares_rolegpt:
            raise ValueError("the baseline is what the judge compares against: set judge_model too")
        if self.max_samples_per_role is not None and self.max_samples_per_role < 1:
            raise ValueError(f"max_samples_per_role={self.max_samples_per_role} must be at least 1")
        if self.model_label is None:
            name = self.model_name_or_path.rstrip("/").split("/")[-1]
            self.model_label = "RoleGPT" if self.is_rolegpt_baseline else name
        if self.baseline_label is None and self.baseline_model is not None:
            self.baseline_label = self.baseline_model.rstrip("/").split("/")[-1]
        elif self.baseline_label is None and compares_rolegpt:
            self.baseline_label = "RoleGPT"

    def client_config(self) -> ClientConfig:
        """The client answering for the evaluated model; answers are cached in `<output_dir>/cache.sqlite`."""
        return ClientConfig(
            self.model_name_or_path, base_url=self.base_url, max_concurrency=self.max_concurrency,
            max_retries=self.max_retries,
            batch_size=self.batch_size, max_new_tokens=self.max_new_tokens, chat_template=self.chat_template,
            keep_think=self.keep_think, dtype=self.dtype, device=self.device,
            cache_path=os.path.join(self.output_dir, "cache.sqlite"),
        )  # fmt: skip

    def judge_client_config(self) -> ClientConfig:
        """The judge's client (an endpoint); its answers are cached in `<output_dir>/judge_cache.sqlite`."""
        return ClientConfig(
            self.judge_model, backend="openai", base_url=self.judge_base_url, max_concurrency=self.judge_max_concurrency,
            max_retries=self.max_retries,
            cache_path=os.path.join(self.output_dir, "judge_cache.sqlite"),
        )  # fmt: skip

    def baseline_config(self) -> "EvaluateConfig":
        """The run generating the baseline's answers (`baseline_model`): this run's data, prompting and decoding, the
        baseline model, written to `<output_dir>/baseline/`."""
        return replace(
            self, model_name_or_path=self.baseline_model, base_url=self.baseline_base_url, model_label=None,
            output_dir=os.path.join(self.output_dir, "baseline"), judge_model=None, baseline_model=None,
            baseline_base_url=None, baseline_label=None, compare_with=None, model_card=None,
        )  # fmt: skip

    @property
    def is_rolegpt_baseline(self) -> bool:
        return self.model_name_or_path.lower() == ROLEGPT
