"""RoleGPT: speaking-style imitation by role prompting, the paper's stage 3, producing RoleBench `general` rows.

For every (role, general instruction) pair RoleGPT asks a chat model for `num_samples` answers (the paper: 6) with
the role's system instruction and few-shot dialogues retrieved from the role's script. The first answers, once they
pass the cleaning checks of `rolellm.generation.filters`, become the row's references (`generated`); the last one is
the RoleGPT baseline the paper's tables score. Each (role, question) lands in train or test by a hash of itself
(`stable_split`), so re-runs never move a row between splits.

>>> from rolellm.roles.profile import RoleProfile
>>> profile = RoleProfile(name="李白", lang="zh", description="为人爽朗大方，爱好饮酒作诗。")
>>> rolegpt = RoleGPT(RoleGPTConfig(prompt_mode="zero_shot", include_reference=True))
>>> rolegpt.prompt(profile, "你最喜欢哪首诗？", reference="《静夜思》。")[-1]
{'role': 'user', 'content': '问题：<李白，你最喜欢哪首诗？>。参考回答：<《静夜思》。>。李白，请你回答这个问题。'}
"""

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from rolellm.clients.config import check_minimums
from rolellm.clients.openai_compatible import ChatRequest
from rolellm.data.layout import subset_dir
from rolellm.generation.filters import clean_answer
from rolellm.generation.job import (
    DropCounter,
    GenerationJob,
    GenerationResult,
    as_profiles,
    check_test_fraction,
    failure_reason,
    merge_jsonl,
    render_prompt,
    rows_to_dataset,
    sampling_params,
    save_profiles,
    stable_split,
)
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import (
    EXAMPLE_MODES,
    build_role_messages,
    prompting_mode,
    prompting_mode_field,
    system_template_text,
)
from rolellm.roles.retrieval import DialogueRetriever


# the most answers a (role, instruction) pair may ask for: beyond it a run is a typing slip, not a plan
MAX_SAMPLES = 10_000


@dataclass
class RoleGPTConfig:
    """Settings of a RoleGPT run.

    > Parameters that control the prompt

    Args:
        prompt_mode (`str`, *optional*, defaults to `"few-shot-dialogue"`): a prompting mode of
            `rolellm.roles.prompts.PROMPTING_MODE_TABLE`, or the paper's name of one: `"few-shot-dialogue"`
            (`"dialogue"`) renders the retrieved dialogues as real user/assistant turns (the paper's *dialogue
            engineering*), `"few-shot"` (`"few_shot"`) pastes them into the one user message (*few-shot prompt
            engineering*), `"system"` (`"zero_shot"`) uses the system instruction alone.
        num_examples (`int`, *optional*, defaults to 3): dialogue groups retrieved per question (BM25 top-k).
        max_group_lines (`int`, *optional*, defaults to 6): longer dialogue groups are never retrieved.
        include_reference (`bool`, *optional*, defaults to `False`): put the instruction's raw reference answer
            (`target`) in the final user turn, with the authors' wording, as they did for general instructions.
        prepend_role_name (`bool`, *optional*, defaults to `True`): address the question to the role
            (`"孙悟空，..."`, `"Jack Sparrow, ..."`) when it does not already name the role.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction
            (see `build_system_instruction`).

    > Parameters that control sampling and cleaning

    Args:
        num_samples (`int`, *optional*, defaults to 6): answers per (role, instruction).
        num_baseline (`int`, *optional*, defaults to 1): how many of the last samples form the RoleGPT baseline
            (uncleaned, as a system's output is); the others are cleaned into references.
        temperature (`float`, *optional*, defaults to 0.7): sampling temperature.
        max_tokens (`int`, *optional*, defaults to 512): the answer's token budget.
        seed (`int`, *optional*, defaults to 0): sample `i` is requested with seed `seed + i`, so samples differ
            and a re-run asks the same requests (all answered ones come from the cache).
        clean (`bool`, *optional*, defaults to `True`): apply the four cleaning checks to references.
        min_answer_chars (`int`, *optional*, defaults to 2): shorter references are rejected as incomplete.

    > Parameters that control the split

    Args:
        test_fraction (`float`, *optional*, defaults to 0.2): the share of (role, question) pairs held out for test
            (the release holds out about a fifth of its general rows), decided for each pair by a hash of the pair.
        split_seed (`int`, *optional*, defaults to 0): salts that hash (another seed, another split).
    """

    prompt_mode: str = prompting_mode_field(
        "few-shot-dialogue", "How retrieved dialogues enter the prompt (a prompting mode or the paper's name of one)."
    )
    num_examples: int = field(default=3, metadata={"help": "Dialogue groups retrieved per question (BM25 top-k)."})
    max_group_lines: int = field(default=6, metadata={"help": "Dialogue groups longer than this are never retrieved."})
    include_reference: bool = field(
        default=False, metadata={"help": "Put the instruction's raw reference answer (`target`) in the final turn."}
    )
    prepend_role_name: bool = field(
        default=True, metadata={"help": "Address the question to the role when it does not name the role."}
    )
    system_template: str | None = field(
        default=None, metadata={"help": "Jinja source, or a Jinja file, replacing the paper's system instruction."}
    )
    num_samples: int = field(default=6, metadata={"help": "Answers per (role, instruction)."})
    num_baseline: int = field(default=1, metadata={"help": "Last samples kept, uncleaned, as the RoleGPT baseline."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    max_tokens: int = field(default=512, metadata={"help": "The answer's token budget."})
    seed: int = field(default=0, metadata={"help": "Sample i is requested with seed `seed + i`."})
    clean: bool = field(default=True, metadata={"help": "Apply the four cleaning checks to references."})
    min_answer_chars: int = field(default=2, metadata={"help": "Shorter references are rejected as incomplete."})
    test_fraction: float = field(default=0.2, metadata={"help": "Share of (role, question) pairs held out for test."})
    split_seed: int = field(default=0, metadata={"help": "Salt of the hash that splits pairs into train and test."})

    def __post_init__(self):
        check_minimums(self, temperature=0, max_tokens=1)
        self.system_template = system_template_text(self.system_template)
        self.prompt_mode = prompting_mode(self.prompt_mode, "prompt_mode")
        check_test_fraction(self.test_fraction)
        if self.num_samples > MAX_SAMPLES:
            raise ValueError(
                f"num_samples={self.num_samples} answers for each (role, instruction) pair: at most {MAX_SAMPLES} "
                "(the paper samples 6)"
            )
        if not 0 <= self.num_baseline < self.num_samples:
            raise ValueError(
                f"num_baseline={self.num_baseline} must be at least 0 and below num_samples={self.num_samples}, "
                "so that at least one sample becomes a reference"
            )
        if self.prompt_mode in EXAMPLE_MODES and self.num_examples < 1:
            raise ValueError(f"num_examples={self.num_examples}: use prompt_mode='system' for no examples")


def address_question(question: str, role: str, lang: str) -> str:
    """Prepend the role's name to `question` unless the question already contains it.

    >>> address_question("你最喜欢什么？", "孙悟空", "zh")
    '孙悟空，你最喜欢什么？'
    >>> address_question(" What is your ship called?", "Jack Sparrow", "en")
    'Jack Sparrow, What is your ship called?'
    """
    question = question.strip()
    if role in question:
        return question
    return f"{role}，{question}" if lang == "zh" else f"{role}, {question}"


class RoleGPT(GenerationJob):
    """The RoleGPT generator: `prompt()` builds a request's messages, `parse()` reads an answer, `generate()` runs.
    Takes a config (`config_class`; its defaults when none is given)."""

    config_class = RoleGPTConfig
    name = "rolegpt"
    desc = "RoleGPT"

    def __init__(self, config: RoleGPTConfig | None = None):
        super().__init__(config)
        self._retrievers: dict[str, DialogueRetriever] = {}

    def retriever(self, profile: RoleProfile) -> DialogueRetriever:
        """The (cached) BM25 retriever over `profile`'s dialogue."""
        if profile.name not in self._retrievers:
            self._retrievers[profile.name] = DialogueRetriever(profile, self.config.max_group_lines)
        return self._retrievers[profile.name]

    def prompt(self, profile: RoleProfile, question: str, reference: str | None = None) -> list[dict]:
        """The chat messages asking `profile`'s role to answer `question`.

        Args:
            profile (`RoleProfile`): the role.
            question (`str`): the instruction, as in the data (the role's name is prepended per the config).
            reference (`str`, *optional*): the instruction's raw reference answer; used with `include_reference`.
        """
        config = self.config
        asked = (
            address_question(question, profile.name, profile.lang) if config.prepend_role_name else question.strip()
        )
        final = render_prompt(
            f"rolegpt_question_{profile.lang}.jinja",
            question=asked,
            reference=reference.strip() if config.include_reference and reference is not None else None,
            role=profile.name,
        )
        examples = (
            self.retriever(profile).retrieve(question, k=config.num_examples)
            if config.prompt_mode in EXAMPLE_MODES
            else None
        )
        return build_role_messages(
            profile, final, config.prompt_mode, examples, system_template=config.system_template
        )

    def parse(self, text: str, role: str | list[str] | None = None) -> str:
        """The answer without a leading `{role}:` (for the role, or any of the roles, given) and without quotes
        around the whole of it.

        Raises:
            `ValueError`: the answer is empty (the client then asks again).

        >>> RoleGPT().parse('孙悟空：“俺老孙来也！”', "孙悟空")
        '俺老孙来也！'
        """
        roles = [role] if isinstance(role, str) else list(role or [])
        answer = text.strip()
        if roles:
            names = "|".join(re.escape(name) for name in sorted(roles, key=len, reverse=True))
            answer = re.sub(rf"^\s*(?:{names})\s*[:：]\s*", "", text).strip()
        if len(answer) >= 2 and answer[0] + answer[-1] in ("“”", '""'):
            answer = answer[1:-1].strip()
        if not answer:
            raise ValueError("empty answer")
        return answer

    def requests(self, profiles, instructions) -> list:
        """The `ChatRequest`s of a run: `num_samples` per (role, instruction) pair, in a stable order."""
        config = self.config
        requests = []
        for index, (profile, question, reference) in enumerate(self.pairs(profiles, instructions)):
            messages = self.prompt(profile, question, reference)
            for sample in range(config.num_samples):
                metadata = {"pair": index, "role": profile.name, "question": question, "lang": profile.lang}
                params = sampling_params(config, seed_offset=sample)
                requests.append(ChatRequest(messages, params=params, sample_index=sample, metadata=metadata))
        return requests

    def pairs(self, profiles, instructions) -> list[tuple[RoleProfile, str, str | None]]:
        """(profile, question, reference) for every instruction and role.

        `instructions` is a `datasets.Dataset`, a list of dicts, or a list of strings. A `question` (or
        `instruction`) column is required; `target` holds the raw reference answers (needed with
        `include_reference`); a `role` column restricts a row to that role, otherwise every profile answers it.
        """
        profiles = {profile.name: profile for profile in as_profiles(profiles)}
        pairs = []
        for i, row in enumerate(instructions):
            row = {"question": row} if isinstance(row, str) else row
            # a file mixing both columns gives each row both keys, one of them None
            question = row["question"] if row.get("question") is not None else row.get("instruction")
            if not isinstance(question, str) or not question.strip():
                raise ValueError(f"instructions[{i}] has no `question` (or `instruction`) text: {row!r}")
            reference = row.get("target")
            if self.config.include_reference and not reference:
                raise ValueError(
                    f"instructions[{i}] has no `target` but include_reference=True needs the raw reference answer; "
                    "add a `target` column or set include_reference=False"
                )
            role = row.get("role")
            if role is not None and role not in profiles:
                raise ValueError(
                    f"instructions[{i}] names role {role!r}, which has no profile; known: {sorted(profiles)}"
                )
            for profile in [profiles[role]] if role is not None else profiles.values():
                pairs.append((profile, question, reference))
        return pairs

    def generate(self, client, profiles, instructions, output_dir=None) -> GenerationResult:
        """Answer every (role, instruction) pair and return the cleaned references and the baseline.

        Args:
            client (`ChatClient`): `OpenAIChatClient` or `LocalChatClient` (give it a `cache_path` so that a re-run
                sends nothing twice).
            profiles (`list[RoleProfile]`, `dict` or `datasets.Dataset`): the roles.
            instructions (`datasets.Dataset` or `list`): the general instructions (see `pairs`).
            output_dir (`str` or `Path`, *optional*): a release folder to add the rows and the profiles to (see
                `write`), with `generation/rolegpt/generation_config.json` and `generation_stats.json` (see `save`).

        Returns:
            `GenerationResult`: `dataset` is a `datasets.DatasetDict` with `train` and `test` (one row per pair with
            at least one clean reference, split by `stable_split`) and `rolegpt_baseline` (one row per pair whose
            baseline sample was answered), all in `ROW_FEATURES`; `stats` holds the counts, rejections by reason
            included; `details["profiles"]` the profiles asked.
        """
        config = self.config
        profiles = as_profiles(profiles)
        requests = self.requests(profiles, instructions)
        roles = sorted({request.metadata["role"] for request in requests})
        # one parse per answer, in the client: it strips a `{role}:` prefix naming any role of the run
        results, usage = self.ask(client, requests, functools.partial(self.parse, role=roles))
        num_references = config.num_samples - config.num_baseline
        by_pair: dict[int, list] = {}
        for result in results:
            by_pair.setdefault(result.request.metadata["pair"], []).append(result)
        rows, baseline = {"train": [], "test": []}, []
        failed, rejected = DropCounter(), DropCounter()
        for pair_results in by_pair.values():
            meta = pair_results[0].request.metadata
            row = {
                "role": meta["role"],
                "question": meta["question"],
                "type": [],
                "subset": "general",
                "lang": meta["lang"],
            }
            references = []
            for result in sorted(pair_results, key=lambda r: r.request.sample_index):
                if not result.ok:
                    failed[failure_reason(result)] += 1
                    continue
                answer = result.parsed
                if result.request.sample_index >= num_references:
                    baseline.append({**row, "generated": [answer]})
                    continue
                reason = clean_answer(answer, meta["question"], meta["role"], meta["lang"], config.min_answer_chars)
                if config.clean and reason is not None:
                    rejected[reason] += 1
                else:
                    references.append(answer)
            if references:
                split = stable_split(meta["role"], meta["question"], config.test_fraction, config.split_seed)
                rows[split].append({**row, "generated": references})
        made = rows["train"] + rows["test"]
        stats = {
            "pairs": len(by_pair),
            "requests": len(requests),
            "rows": len(made),
            "train": len(rows["train"]),
            "test": len(rows["test"]),
            "rows_without_reference": len(by_pair) - len(made),
            "references": sum(len(row["generated"]) for row in made),
            "baseline_rows": len(baseline),
            "rejected": rejected.as_dict(),
            "failed": failed.as_dict(),
            "usage": usage,
        }
        dataset = datasets.DatasetDict(
            train=rows_to_dataset(rows["train"]),
            test=rows_to_dataset(rows["test"]),
            rolegpt_baseline=rows_to_dataset(baseline),
        )
        result = GenerationResult(dataset, stats, details={"profiles": profiles}, failures=self.failures(results))
        if output_dir is not None:
            self.save(output_dir, result, client)
        return result

    def write(self, output_dir: Path, result: GenerationResult) -> None:
        """`rolebench-{lang}/.../general/{train,test,rolegpt_baseline}.jsonl` (the release's records) and the
        profiles in `profiles-{lang}/`, added to what `output_dir` holds.

        A row of this run replaces an earlier row of the same (role, question) in whichever split file holds it;
        the other rows are kept, so runs over other roles or instructions add up and a re-run fills gaps.
        """
        save_profiles(output_dir, result.details["profiles"])
        splits, files = result.dataset, {}
        for lang in sorted({row["lang"] for split in splits.values() for row in split}):
            folder = output_dir / subset_dir(lang, "general")
            answered = {(r["role"], r["question"]) for s in ("train", "test") for r in splits[s] if r["lang"] == lang}
            for split in ("train", "test", "rolegpt_baseline"):
                records = [
                    {k: row[k] for k in ("role", "question", "generated")}
                    for row in splits[split]
                    if row["lang"] == lang
                ]
                keys = answered if split != "rolegpt_baseline" else {(r["role"], r["question"]) for r in records}
                files[folder / f"{split}.jsonl"] = (records, lambda r, keys=keys: (r["role"], r["question"]) in keys)
        merge_jsonl(files)
