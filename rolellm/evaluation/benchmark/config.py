"""`BenchmarkConfig`: what `run_benchmark` and `rolellm evaluate` evaluate, how, and where they write.

>>> config = BenchmarkConfig(output_dir="runs/rolegpt-zh", client=ClientConfig("rolegpt"), dataset_name="zh")
>>> config.is_rolegpt_baseline, config.model_label, config.client.cache_path
(True, 'RoleGPT', 'runs/rolegpt-zh/cache.sqlite')
"""

import os
from dataclasses import dataclass, field, replace
from typing import Literal

from rolellm.clients.config import ClientConfig, check_minimums
from rolellm.clients.inference_settings import resolve_keep_think
from rolellm.evaluation.base import EvaluationConfig, deprecated_names
from rolellm.roles.prompts import prompting_mode, prompting_mode_field, system_template_text
from rolellm.roles.resolve import as_sources, profiles_field


ROLEGPT = "rolegpt"
NO_BASELINE = "none"  # `baseline="none"`: no win rate (the judge scores the rubric only)
# what decides the generations, as `run_config.json` records it: a resumed run must agree on all of them (the model,
# its endpoint and decoding settings are `config.client`'s, under the names older runs recorded)
GENERATION_FIELDS = (
    "model_name_or_path", "base_url", "dataset_name", "split", "mode", "num_examples", "roles", "max_samples_per_role",
    "max_new_tokens", "temperature", "system_template", "chat_template", "keep_think",
)  # fmt: skip


@dataclass
class BenchmarkConfig(EvaluationConfig):
    """Configuration of `run_benchmark` and `rolellm evaluate` (an `EvaluationConfig`).

    The clients are values (`ClientConfig`): `rolellm evaluate` builds `client` from its `ClientConfig` flags
    (`--model`, `--base_url`, `--max_new_tokens`, ...) and derives `judge` and `baseline_client` from the
    `--judge_*` and `--baseline_*` flags (`rolellm.clients.config.derive_client`).

    > Parameters that control the model

    Args:
        output_dir (`str`): where `generations.jsonl`, `run_config.json`, `results.json`, `results.md` and the plots
            go.
        client (`ClientConfig`): the evaluated model: a local folder or Hub id loaded with transformers, or the model
            an endpoint serves (`base_url`); the model `"rolegpt"` scores the release's RoleGPT baseline answers (no
            generation). Its `max_new_tokens` is every answer's budget; its answers are cached in
            `<output_dir>/cache.sqlite` unless it sets `cache_path`.
        model_label (`str`, *optional*): the model's name in tables and plots; defaults to the last part of the
            model (`"RoleGPT"` for the baseline).

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
        raw_targets_file (`str`, *optional*): `instructions-general.jsonl` with the raw answers (RAW); defaults to
            `instructions-{eng,zh}/instructions-general.jsonl` in `data_dir` when that exists.

    > Parameters that control generation

        mode (`str`, *optional*, defaults to `"system"`): the prompting mode (`rolellm.roles.prompts.build_role_messages`),
            or the paper's name of one (`zero_shot`, `few_shot`, `dialogue`).
        num_examples (`int`, *optional*, defaults to 3): dialogue groups retrieved by the few-shot modes.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction, or a file
            holding it (`system_template_text`).
        temperature (`float`, *optional*, defaults to 0.0): 0 is greedy decoding.
        save_every (`int`, *optional*, defaults to 256): generations are written to disk after every this many.

    > Parameters that control the output

        compare_with (`list[str]`, *optional*): `results.json` files of other runs to put in the same table and plot.
        model_card (`str`, *optional*): a model card (`README.md`) whose `model-index` receives the scores.

    > Parameters that control the judge: the GPT-judge win rate and the rubric

        judge (`ClientConfig`, *optional*): also judge the answers against a baseline's with this model, the paper's
            win rate (`rolellm.evaluation.judge.pairwise`) with its length-controlled variant, and, with `rubric`,
            score each answer on the rubric; not set: no win rate, no rubric. Its answers are cached in
            `<output_dir>/judge_cache.sqlite` unless it sets `cache_path`, so a re-run asks nothing twice.
        rubric (`str`, *optional*): `"rubric"`: the judge also scores every answer from 1 to 5 on the single-turn
            dimensions of the rubric of `rolellm dialogue` (`rolellm.evaluation.multiturn.rubric.judge_answers`:
            character consistency, knowledge, speaking style, engagement, in character), reported per dimension
            and overall, for all rows and per subset (the CUS and the SPE rows), with the failed verdicts counted.
        baseline (`str`, *optional*, defaults to `"rolegpt"`): what the judge compares against: `"rolegpt"` (the
            release's `rolegpt_baseline` answers, as in the paper), the `output_dir` of another `rolellm evaluate`
            run (its `generations.jsonl`, matched on role, subset and question), or `"none"` (no win rate: the judge
            scores the `rubric` only).
        baseline_client (`ClientConfig`, *optional*): instead, a model that answers the same rows as the baseline
            (`--baseline_model`). Its answers are generated with the same prompting and decoding as the evaluated
            model's, into `<output_dir>/baseline/` (resumable).
        baseline_label (`str`, *optional*): the baseline's name in tables and plots (defaults to `"RoleGPT"`, the
            folder's model, or the last part of the baseline model).
        overwrite_output_dir (`bool`, *optional*, defaults to `False`): discard the generations of a different run
            in `output_dir` instead of stopping.
        allow_partial (`bool`, *optional*, defaults to `False`): accept a run where some generations or judge verdicts
            failed: `rolellm evaluate` exits 0 and the model card receives the scores. Without it such a run still
            writes `results.json` (with the failures counted), exits 1 and leaves the model card alone.
    """

    output_dir: str = field(metadata={"help": "Folder for generations, results and plots."})
    client: ClientConfig = field(metadata={"help": "The evaluated model (from the ClientConfig flags)."})
    model_label: str | None = field(default=None, metadata={"help": "Name of the model in tables and plots."})
    dataset_name: str = field(default="zh", metadata={"help": "RoleBench config: zh, en-instruction, en-role, ..."})
    data_dir: str | None = field(default=None, metadata={"help": "Local copy of the RoleBench release."})
    split: str = field(default="test", metadata={"help": "Split to answer."})
    roles: list[str] | None = field(default=None, metadata={"help": "Only these roles."})
    max_samples_per_role: int | None = field(default=None, metadata={"help": "First N rows per role and subset."})
    profiles: list[str] | None = profiles_field()
    raw_targets_file: str | None = field(default=None, metadata={"help": "instructions-general.jsonl (RAW)."})
    mode: str = prompting_mode_field("system", "Prompting mode (or the paper's name of one).")
    num_examples: int = field(default=3, metadata={"help": "Dialogue groups retrieved by the few-shot modes."})
    system_template: str | None = field(
        default=None, metadata={"help": "Jinja source, or a Jinja file, replacing the instruction."}
    )
    temperature: float = field(default=0.0, metadata={"help": "Sampling temperature; 0 is greedy."})
    save_every: int = field(default=256, metadata={"help": "Write generations to disk after every N."})
    compare_with: list[str] | None = field(default=None, metadata={"help": "results.json files of other runs."})
    model_card: str | None = field(default=None, metadata={"help": "Model card whose model-index gets the scores."})
    judge: ClientConfig | None = field(
        default=None, metadata={"help": "Judge of the win rate and the rubric (--judge_* flags)."}
    )
    rubric: Literal["rubric"] | None = field(
        default=None, metadata={"help": "'rubric': the judge also scores every answer on the rubric (1-5)."}
    )
    baseline: str = field(
        default=ROLEGPT,
        metadata={"help": "'rolegpt', the output_dir of another rolellm evaluate run, or 'none' (no win rate)."},
    )
    baseline_client: ClientConfig | None = field(
        default=None, metadata={"help": "Model answering as the baseline (--baseline_* flags)."}
    )
    baseline_label: str | None = field(default=None, metadata={"help": "Name of the baseline in tables and plots."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Discard another run's generations."})
    allow_partial: bool = field(
        default=False, metadata={"help": "Accept a run where some generations or verdicts failed (exit 0)."}
    )
    # each client keeps its answers in its own file of output_dir (the model's in cache.sqlite), the names earlier
    # runs used
    CACHE_FILES = {"judge": "judge_cache.sqlite", "baseline_client": os.path.join("baseline", "cache.sqlite")}

    def __post_init__(self):
        self.mode = prompting_mode(self.mode)
        self.system_template = system_template_text(self.system_template)
        check_minimums(self, temperature=0, save_every=1, num_examples=1)
        self.profiles = as_sources(self.profiles) or None
        if not isinstance(self.client, ClientConfig):
            raise ValueError(f"client must be a ClientConfig, got {self.client!r}")
        if self.is_rolegpt_baseline and self.client.base_url is not None:
            raise ValueError("the model 'rolegpt' scores the release's answers: drop base_url")
        compares_rolegpt = self.baseline.lower() == ROLEGPT and self.baseline_client is None
        if self.is_rolegpt_baseline and self.judges_win_rate and compares_rolegpt:
            raise ValueError("model 'rolegpt' against baseline 'rolegpt': pass another baseline or drop judge_model")
        if self.baseline_client is not None and self.baseline.lower() != ROLEGPT:
            raise ValueError(
                f"pass either baseline={self.baseline!r} (a predictions folder, or none) or baseline_model, not both"
            )
        if self.judge is None and not compares_rolegpt:
            raise ValueError("the baseline is what the judge compares against: set judge_model too")
        if self.rubric is not None and self.judge is None:
            raise ValueError(f"rubric={self.rubric!r} is scored by the judge: set judge_model too")
        if self.judge is not None and not self.judges_win_rate and self.rubric is None:
            raise ValueError("baseline='none' leaves the judge nothing to do: set rubric, or drop judge_model")
        if self.max_samples_per_role is not None and self.max_samples_per_role < 1:
            raise ValueError(f"max_samples_per_role={self.max_samples_per_role} must be at least 1")
        self.set_default_caches()
        if self.model_label is None:
            name = self.client.model.rstrip("/").split("/")[-1]
            self.model_label = "RoleGPT" if self.is_rolegpt_baseline else name
        if self.baseline_label is None and self.baseline_client is not None:
            self.baseline_label = self.baseline_client.model.rstrip("/").split("/")[-1]
        elif self.baseline_label is None and compares_rolegpt:
            self.baseline_label = "RoleGPT"

    @property
    def judges_win_rate(self) -> bool:
        """Whether the judge compares the answers with a baseline's (the win rate): a judge and a baseline."""
        return self.judge is not None and self.baseline.lower() != NO_BASELINE

    def generation_settings(self) -> dict:
        """What decides the generations (`GENERATION_FIELDS`), as `run_config.json` records it; `keep_think` as it
        will be used (set, else the checkpoint's, else `False`)."""
        client = self.client
        own = {
            "model_name_or_path": client.model, "base_url": client.base_url, "max_new_tokens": client.max_new_tokens,
            "chat_template": client.chat_template, "keep_think": resolve_keep_think(client, log=False),
        }  # fmt: skip
        return {name: own[name] if name in own else getattr(self, name) for name in GENERATION_FIELDS}

    def baseline_config(self) -> "BenchmarkConfig":
        """The run generating the baseline's answers (`baseline_client`): this run's data, prompting and decoding, the
        baseline model, written to `<output_dir>/baseline/`."""
        return replace(
            self, client=self.baseline_client, model_label=None, output_dir=os.path.join(self.output_dir, "baseline"),
            judge=None, rubric=None, baseline_client=None, baseline_label=None, compare_with=None, model_card=None,
        )  # fmt: skip

    @property
    def is_rolegpt_baseline(self) -> bool:
        return self.client.model.lower() == ROLEGPT


__getattr__ = deprecated_names(globals(), {"EvaluateConfig": "BenchmarkConfig"})
