"""Context-Instruct: role-specific questions and answers extracted from a profile, the paper's stage 2.

The profile's script is cut into segments (whole acts, within a token budget); for every segment a chat model
writes several items — question, type (`script_based` / `script_agnostic`), completeness judgement, confidence,
answer — as JSON. Items are validated against `ITEM_SCHEMA`; low-confidence, incomplete and near-duplicate
questions are dropped and counted; a share of the items is held out for test, each item by a hash of its role and
question (`stable_split`), so a re-run never moves an item between splits. The result is RoleBench `role_specific`
rows plus the release's `instructions-*` files.

>>> parse_items('```json\\n[{"question": "孙悟空，你的师父是谁？", "type": "script_agnostic",'
...             ' "completeness": "High", "confidence": 0.9, "answer": "唐僧。"}]\\n```')["items"][0]["type"]
'script_agnostic'
"""

import contextlib
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from jsonschema import Draft202012Validator
from rapidfuzz import fuzz, process

from rolellm.clients.config import check_minimums
from rolellm.clients.openai_compatible import ChatRequest, estimate_tokens
from rolellm.data.layout import subset_dir
from rolellm.data.schema import TYPES
from rolellm.generation.job import (
    DropCounter,
    GenerationJob,
    GenerationResult,
    as_profiles,
    check_prompt_source,
    check_test_fraction,
    extract_json,
    failure_reason,
    merge_jsonl,
    rows_to_dataset,
    sampling_params,
    save_profiles,
    stable_split,
    user_prompt,
    write_jsonl,
)
from rolellm.roles.card_prompts import role_description
from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.release import RELEASE_LANG_DIRS


COMPLETENESS = ("High", "Medium", "Low")
ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "question": {"type": "string", "minLength": 1},
        "type": {"enum": list(TYPES)},
        "completeness": {"enum": list(COMPLETENESS)},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "answer": {"type": "string", "minLength": 1},
    },
    "required": ["question", "type", "completeness", "confidence", "answer"],
}
_VALIDATOR = Draft202012Validator(ITEM_SCHEMA)


@dataclass
class ContextInstructConfig:
    """Settings of a Context-Instruct run.

    > Parameters that control segmentation and the prompt

    Args:
        max_segment_tokens (`int`, *optional*, defaults to 2000): the token budget of a segment (estimated: one
            token per CJK character, one per four other characters); acts are kept whole unless one exceeds it.
        num_questions (`int`, *optional*, defaults to 5): items asked for per segment.
        prompt_template (`str`, *optional*): Jinja source replacing `rolellm/prompts/context_instruct_{lang}.jinja`;
            it sees `role`, `desc`, `source`, `segment` and `num_questions`.

    > Parameters that control sampling

    Args:
        temperature (`float`, *optional*, defaults to 0.7): sampling temperature.
        max_tokens (`int`, *optional*, defaults to 2048): the answer's token budget.
        seed (`int`, *optional*, defaults to 0): the request seed (a re-run asks the same requests).

    > Parameters that control filtering and the split

    Args:
        min_confidence (`float`, *optional*, defaults to 0.8): items with a lower confidence are dropped.
        drop_low_completeness (`bool`, *optional*, defaults to `True`): drop items judged `Low` in completeness.
        dedup_threshold (`float`, *optional*, defaults to 90.0): a question whose `rapidfuzz` ratio (0-100) with
            an earlier question of the same role reaches this is a near-duplicate and dropped; 100 drops only exact
            duplicates.
        test_fraction (`float`, *optional*, defaults to 0.15): the share of items held out for test (the release
            holds out 239 of its 1,774 Chinese role-specific rows), decided for each item by a hash of its role and
            question.
        split_seed (`int`, *optional*, defaults to 0): salts that hash (another seed, another split).
    """

    max_segment_tokens: int = field(default=2000, metadata={"help": "Token budget of a profile segment."})
    num_questions: int = field(default=5, metadata={"help": "Items asked for per segment."})
    prompt_template: str | None = field(default=None, metadata={"help": "Jinja source replacing the prompt."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    max_tokens: int = field(default=2048, metadata={"help": "The answer's token budget."})
    seed: int = field(default=0, metadata={"help": "The request seed."})
    min_confidence: float = field(default=0.8, metadata={"help": "Items with a lower confidence are dropped."})
    drop_low_completeness: bool = field(default=True, metadata={"help": "Drop items judged Low in completeness."})
    dedup_threshold: float = field(
        default=90.0, metadata={"help": "rapidfuzz ratio at which questions are duplicates."}
    )
    test_fraction: float = field(default=0.15, metadata={"help": "Share of items held out for test."})
    split_seed: int = field(default=0, metadata={"help": "Salt of the hash that splits items into train and test."})

    def __post_init__(self):
        check_minimums(self, temperature=0, max_tokens=1)
        check_test_fraction(self.test_fraction)
        if not 0 <= self.min_confidence <= 1:
            raise ValueError(f"min_confidence={self.min_confidence} must be between 0 and 1")
        if self.max_segment_tokens < 1 or self.num_questions < 1:
            raise ValueError("max_segment_tokens and num_questions must be at least 1")
        if not 0 <= self.dedup_threshold <= 100:
            raise ValueError(f"dedup_threshold={self.dedup_threshold} must be between 0 and 100 (a rapidfuzz ratio)")
        check_prompt_source(self.prompt_template)


def format_line(utterance: Utterance) -> str:
    return f"{utterance.speaker}: {utterance.content.strip()}"


def segment_profile(profile: RoleProfile, max_segment_tokens: int = 2000) -> list[str]:
    """Cut `profile`'s dialogue into segments of whole acts (`speaker: line` per line) within the token budget.

    Consecutive acts share a segment while they fit; an act longer than the budget is cut between its dialogue
    groups (and a single group longer than the budget between its lines).

    >>> from rolellm.roles.profile import Utterance
    >>> lines = [Utterance(act_id=a, diag_id=a, speaker="唐僧", content="悟空" * 10) for a in range(3)]
    >>> [len(s) for s in segment_profile(RoleProfile("孙悟空", "zh", dialogue=lines), max_segment_tokens=50)]
    [49, 24]
    """
    pieces = []  # the smallest units kept whole, with the act they belong to
    for group in profile.dialogue_groups():
        text = "\n".join(format_line(u) for u in group)
        if estimate_tokens(text) <= max_segment_tokens:
            pieces.append((group[0].act_id, text))
        else:
            pieces.extend((u.act_id, format_line(u)) for u in group)
    acts: list[list[str]] = []
    for i, (act, text) in enumerate(pieces):
        if i == 0 or act != pieces[i - 1][0]:
            acts.append([])
        acts[-1].append(text)
    segments, current = [], []
    for act in acts:
        act_text = "\n".join(act)
        if current and estimate_tokens("\n".join([*current, act_text])) <= max_segment_tokens:
            current.append(act_text)
            continue
        if current:
            segments.append("\n".join(current))
        current = []
        if estimate_tokens(act_text) <= max_segment_tokens:
            current = [act_text]
            continue
        for piece in act:  # an act over the budget: pack its groups
            if current and estimate_tokens("\n".join([*current, piece])) > max_segment_tokens:
                segments.append("\n".join(current))
                current = []
            current.append(piece)
    if current:
        segments.append("\n".join(current))
    return segments


def _normalise(item: dict) -> dict:
    item = dict(item)
    if isinstance(item.get("type"), str):
        item["type"] = item["type"].strip().lower().replace("-", "_").replace(" ", "_")
    if isinstance(item.get("completeness"), str):
        item["completeness"] = item["completeness"].strip().capitalize()
    if isinstance(item.get("confidence"), str):
        with contextlib.suppress(ValueError):  # a non-number stays a string and fails the schema
            item["confidence"] = float(item["confidence"].strip())
    if isinstance(item.get("confidence"), float) and not math.isfinite(item["confidence"]):
        item["confidence"] = str(item["confidence"])  # NaN passes every comparison: fail the schema instead
    for key in ("question", "answer"):
        if isinstance(item.get(key), str):
            item[key] = item[key].strip()
    return item


def parse_items(text: str) -> dict:
    """Read the items of one answer: `{"items": [valid items], "invalid": Counter of reasons}`.

    Items that break `ITEM_SCHEMA` are dropped and counted as `invalid_<field>`.

    Raises:
        `ValueError`: the answer is not JSON, or holds no valid item (the client then asks again).
    """
    value = extract_json(text)
    if isinstance(value, dict):
        value = value.get("items", value.get("questions", [value]))
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON array of items, got {type(value).__name__}")
    items, invalid = [], Counter()
    for raw in value:
        if not isinstance(raw, dict):
            invalid["invalid_item"] += 1
            continue
        item = _normalise(raw)
        error = next(iter(sorted(_VALIDATOR.iter_errors(item), key=lambda e: list(e.path))), None)
        if error is None:
            items.append({key: item[key] for key in ITEM_SCHEMA["properties"]})
        else:
            if error.validator == "required":
                where = next(key for key in ITEM_SCHEMA["required"] if key not in item)
            else:
                where = error.path[0] if error.path else "item"
            invalid[f"invalid_{where}"] += 1
    if not items:
        raise ValueError(f"no valid item in the answer ({dict(invalid) or 'empty array'})")
    return {"items": items, "invalid": invalid}


class ContextInstruct(GenerationJob):
    """The Context-Instruct generator: `prompt()` builds a segment's request, `parse()` reads its items.
    Takes a config (`config_class`; its defaults when none is given)."""

    config_class = ContextInstructConfig
    name = "context-instruct"
    desc = "Context-Instruct"
    answer_schema = {"type": "array", "items": ITEM_SCHEMA, "minItems": 1}  # the prompt asks for a JSON array

    def prompt(self, profile: RoleProfile, segment: str) -> list[dict]:
        """The chat messages asking for `num_questions` items about `profile` from one `segment`.

        The description is `role_description(profile)`: for a Character Card, with its personality and scenario;
        the segments of a card are its `mes_example` blocks (the profile's dialogue).
        """
        variables = {
            "role": profile.name,
            "desc": role_description(profile),
            "source": profile.source,
            "segment": segment,
            "num_questions": self.config.num_questions,
        }
        return user_prompt(self.config.prompt_template, f"context_instruct_{profile.lang}.jinja", **variables)

    def parse(self, text: str) -> dict:
        """`parse_items(text)`: the valid items and the counts of invalid ones; `ValueError` asks again."""
        return parse_items(text)

    def requests(self, profiles: list[RoleProfile]) -> list[ChatRequest]:
        """One request per segment of every profile (`metadata`: role, lang, segment index)."""
        config = self.config
        requests = []
        for profile in profiles:
            if not profile.dialogue:
                raise ValueError(
                    f"Profile {profile.name!r} has no dialogue to segment: Context-Instruct needs its script"
                )
            for index, segment in enumerate(segment_profile(profile, config.max_segment_tokens)):
                metadata = {"role": profile.name, "lang": profile.lang, "segment": index}
                requests.append(
                    ChatRequest(self.prompt(profile, segment), params=sampling_params(config), metadata=metadata)
                )
        return requests

    def generate(self, client, profiles, output_dir=None) -> GenerationResult:
        """Extract, filter, deduplicate and split role-specific items for every profile.

        Args:
            client (`ChatClient`): `OpenAIChatClient` or `LocalChatClient` (give it a `cache_path` so that a re-run
                sends nothing twice).
            profiles (`list[RoleProfile]`, `dict` or `datasets.Dataset`): the roles, with their script dialogue.
            output_dir (`str` or `Path`, *optional*): a release folder to add the rows, the `instructions-{lang}/`
                files and the profiles to (see `write`), with `generation/context-instruct/generation_config.json`
                and `generation_stats.json` (see `save`).

        Returns:
            `GenerationResult`: `dataset` is a `datasets.DatasetDict` with `train` and `test` rows in `ROW_FEATURES`
            (`subset="role_specific"`, one answer and its type per row); `stats` holds the counts, drops by reason
            included; `details["items"]` the kept items per role with their metrics and split,
            `details["lang"]` each role's language and `details["profiles"]` the profiles.
        """
        config = self.config
        profiles = as_profiles(profiles)
        requests = self.requests(profiles)
        segments_per_role = {profile.name: 0 for profile in profiles}
        for request in requests:
            segments_per_role[request.metadata["role"]] += 1
        results, usage = self.ask(client, requests, self.parse)
        dropped, failed = DropCounter(), DropCounter()
        items_per_role: dict[str, list[dict]] = {profile.name: [] for profile in profiles}
        for result in results:
            if not result.ok:
                failed[failure_reason(result)] += 1
                continue
            dropped.update(result.parsed["invalid"])
            for item in result.parsed["items"]:
                if item["confidence"] < config.min_confidence:
                    dropped["low_confidence"] += 1
                elif config.drop_low_completeness and item["completeness"] == "Low":
                    dropped["low_completeness"] += 1
                else:
                    items_per_role[result.request.metadata["role"]].append(item)
        lang = {profile.name: profile.lang for profile in profiles}
        split = {"train": [], "test": []}
        kept_items: dict[str, list[dict]] = {}
        for role, items in items_per_role.items():
            kept = self._deduplicate(items, dropped)
            kept_items[role] = kept
            for item in kept:
                item["split"] = stable_split(role, item["question"], config.test_fraction, config.split_seed)
                row = {
                    "role": role,
                    "question": item["question"],
                    "generated": [item["answer"]],
                    "type": [item["type"]],
                }
                split[item["split"]].append({**row, "subset": "role_specific", "lang": lang[role]})
        stats = {
            "segments": segments_per_role,
            "requests": len(requests),
            "items": {role: len(items) for role, items in kept_items.items()},
            "train": len(split["train"]),
            "test": len(split["test"]),
            "dropped": dropped.as_dict(),
            "failed": failed.as_dict(),
            "usage": usage,
        }
        dataset = datasets.DatasetDict({name: rows_to_dataset(rows) for name, rows in split.items()})
        details = {"items": kept_items, "lang": lang, "profiles": profiles}
        result = GenerationResult(dataset, stats, details=details, failures=self.failures(results))
        if output_dir is not None:
            self.save(output_dir, result, client)
        return result

    def _deduplicate(self, items: list[dict], dropped: DropCounter) -> list[dict]:
        kept, questions = [], []
        for item in items:
            key = item["question"].casefold()
            match = process.extractOne(key, questions, scorer=fuzz.ratio, score_cutoff=self.config.dedup_threshold)
            if match is not None:
                dropped["duplicate"] += 1
                continue
            kept.append(item)
            questions.append(key)
        return kept

    def write(self, output_dir: Path, result: GenerationResult) -> None:
        """`rolebench-{lang}/.../role_specific/{train,test}.jsonl`, `instructions-{lang}/` and the profiles in
        `profiles-{lang}/`, in the release's layout, added to what `output_dir` holds.

        The items of a role this run kept items for replace that role's earlier rows and files; other roles' rows
        are kept, so runs over other roles add up.
        """
        items, lang = result.details["items"], result.details["lang"]
        made = {role for role, kept in items.items() if kept}
        langs = sorted({lang[role] for role in made})
        save_profiles(output_dir, result.details["profiles"])
        files = {}
        for lang_code in langs:
            for split in ("train", "test"):
                # the release writes `type` as a string in train and as a list parallel to `generated` in test
                records = [
                    {"role": r["role"], "question": r["question"], "generated": r["generated"],
                     "type": r["type"][0] if split == "train" else r["type"]}
                    for r in result.dataset[split] if r["lang"] == lang_code
                ]  # fmt: skip
                path = output_dir / subset_dir(lang_code, "role_specific") / f"{split}.jsonl"
                files[path] = (records, lambda record: record["role"] in made)
            nums = [
                {"role": role, "num": len(items[role])} for role in items if role in made and lang[role] == lang_code
            ]
            files[output_dir / f"instructions-{RELEASE_LANG_DIRS[lang_code]}" / "nums.jsonl"] = (
                nums, lambda record: record["role"] in made
            )  # fmt: skip
        merge_jsonl(files)
        for lang_code in langs:
            folder = output_dir / f"instructions-{RELEASE_LANG_DIRS[lang_code]}"
            roles = [role for role in items if role in made and lang[role] == lang_code]
            for role in roles:
                records = (
                    {"id": i, "instruction": item["question"], "answer": item["answer"], "type": item["type"],
                     "metrics": f"Completeness: {item['completeness']}, Confidence: {item['confidence']:g}",
                     "split": item["split"]}
                    for i, item in enumerate(items[role])
                )  # fmt: skip
                write_jsonl(folder / f"role-specific-{role}.jsonl", records)
            info = folder / "split_info.txt"
            lines = info.read_text(encoding="utf-8").splitlines() if info.is_file() else []
            lines = [line for line in lines if line.partition("\t")[0] not in made]
            lines += [f"{role}\t{result.stats['segments'][role]}" for role in roles]
            info.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
