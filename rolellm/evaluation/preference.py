"""Preference pairs for DPO and KTO: answers of the model being improved, ranked by a judge.

For each (role, question) of a RoleBench config, `PreferenceGenerator` asks the model for `num_samples` answers with
the prompt it trains with (the role's system text and the question, `rolellm.to_role_messages`), optionally adds the
row's reference answers as candidates, ranks the candidates and keeps the best as `chosen` and the worst as
`rejected`. The ranking is one of the evaluation's judges, so a pair means what a score of `rolellm evaluate` means:

- `pairwise`: the paper's GPT judge (`rolellm.evaluation.judge.pairwise`) on every two candidates, both orders, a
  disagreement a tie; a candidate scores its wins plus half its ties;
- `rubric`: the rubric judge (`rolellm.evaluation.multiturn.rubric.judge_answers`), the mean over its dimensions;
- `rouge_l`: the paper's ROUGE-L recall against the row's references (`rolellm.rouge.score`).

It lives in `evaluation/`, after the judges it uses: `generation/` sits before `evaluation/` in the package's order
and may not import them. It is a `GenerationJob` all the same: requests go through cached clients (a run stopped,
even killed, and started again asks nothing twice), failures go to `generation/preferences/failures.jsonl`, and the
rows to the preference configs of the release folder (`rolellm.data.preference`). Nothing is dropped silently: a
question with an empty answer, too few judged candidates, candidates that all score the same, or a best answer
equal to the worst is counted in the stats by reason.
"""

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import datasets

from rolellm.clients.openai_compatible import ChatRequest
from rolellm.data.layout import get_spec, preference_config
from rolellm.data.preference import PREFERENCE_FEATURES, read_preference_rows, write_preference_rows
from rolellm.evaluation.judge.pairwise import judge_win_rate
from rolellm.evaluation.multiturn.rubric import SINGLE_TURN_DIMENSIONS, judge_answers
from rolellm.generation.job import (
    DropCounter,
    GenerationJob,
    GenerationResult,
    NothingGenerated,
    check_test_fraction,
    stable_split,
)
from rolellm.roles.lookup import Profiles
from rolellm.roles.prompts import to_role_messages
from rolellm.rouge.score import rouge_l_scores


JUDGES = ("pairwise", "rubric", "rouge_l")


@dataclass
class PreferenceConfig:
    """How `rolellm generate preferences` samples and ranks answers.

    Args:
        num_samples (`int`, *optional*, defaults to 4): answers asked of the model per question.
        temperature (`float`, *optional*, defaults to 1.0), max_tokens (`int`, *optional*, defaults to 256),
            seed (`int`, *optional*, defaults to 0): the model's sampling; sample `k` uses seed `seed + k`.
        judge (`str`, *optional*, defaults to `"pairwise"`): how candidates are ranked, one of `JUDGES`.
        add_references (`bool`, *optional*, defaults to `False`): add the row's reference answers (the release's,
            RoleGPT's) to the candidates (not with `rouge_l`, which scores against them).
        test_fraction (`float`, *optional*, defaults to 0.1): the share of questions written to the `test` split
            (by a stable hash of role and question).
    """

    num_samples: int = field(default=4, metadata={"help": "Answers asked of the model per question."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the model's answers."})
    max_tokens: int = field(default=256, metadata={"help": "Token budget of each answer."})
    seed: int = field(default=0, metadata={"help": "Seed of the first sample (sample k uses seed + k)."})
    judge: Literal["pairwise", "rubric", "rouge_l"] = field(
        default="pairwise", metadata={"help": "Ranking: pairwise (the paper's judge, both orders), rubric, rouge_l."}
    )
    add_references: bool = field(default=False, metadata={"help": "Add the rows' references to the candidates."})
    test_fraction: float = field(default=0.1, metadata={"help": "Share of questions in the test split."})

    def __post_init__(self):
        if self.num_samples < 1 or self.max_tokens < 1:
            raise ValueError(
                f"num_samples and max_tokens must be at least 1, got {self.num_samples}, {self.max_tokens}"
            )
        if self.temperature < 0:
            raise ValueError(f"temperature must be at least 0, got {self.temperature}")
        if self.num_samples < 2 and not self.add_references:  # every question would end with one candidate
            raise ValueError(
                f"num_samples={self.num_samples}: a pair needs two answers to a question; ask for 2 or more, or add "
                "the rows' references to the candidates (add_references)"
            )
        if self.judge == "rouge_l" and self.add_references:
            raise ValueError("judge='rouge_l' scores against the references: they cannot also be candidates")
        check_test_fraction(self.test_fraction)


class PreferenceGenerator(GenerationJob):
    """Sample, rank, pair (see the module docstring). `generate(client, rows, profiles, judge_client)` returns a
    `GenerationResult` whose dataset is `{"preference": ..., "unpaired": ...}` rows with a `split` column."""

    config_class = PreferenceConfig
    name = "preferences"
    desc = "Preference answers"

    def prompt(self, row: dict, profile) -> list[dict]:
        """The role's system text and the question, as the preference trainers encode them."""
        sample = {"role": row["role"], "question": row["question"], "generated": ["-"], "lang": row.get("lang")}
        return to_role_messages(sample, profile)[0][:2]

    def requests(self, rows, profiles) -> list[ChatRequest]:
        profiles, config = Profiles(profiles), self.config
        requests = []
        for index, row in enumerate(rows):
            for sample in range(config.num_samples):
                params = {
                    "temperature": config.temperature,
                    "max_tokens": config.max_tokens,
                    "seed": config.seed + sample,
                }
                requests.append(ChatRequest(self.prompt(row, profiles[row["role"]]), params=params,
                                            sample_index=sample, metadata={"index": index, "role": row["role"],
                                                                           "question": row["question"]}))  # fmt: skip
        return requests

    def generate(self, client, rows, profiles, judge_client=None, output_dir=None) -> GenerationResult:
        """Sample the answers with `client`, rank them with `judge_client` (not needed for `rouge_l`), pair them; with
        `output_dir`, save the rows and the run files (`GenerationJob.save`)."""
        rows, config = list(rows), self.config
        profiles = Profiles(profiles).require([row["role"] for row in rows], "the rows", "pass --profiles")
        if config.judge != "rouge_l" and judge_client is None:
            raise ValueError(f"judge={config.judge!r} needs a judge endpoint (--judge_model, --judge_base_url)")
        results, usage = self.ask(client, self.requests(rows, profiles), parse=None)
        failures, drops = self.failures(results), DropCounter()
        candidates = [[] for _ in rows]
        for result in results:
            if result.ok and (result.text or "").strip():
                candidates[result.request.metadata["index"]].append(result.text.strip())
            elif result.ok:
                drops["empty_answer"] += 1
        if config.add_references:
            for index, row in enumerate(rows):
                candidates[index] += [ref.strip() for ref in row.get("generated") or [] if ref.strip()]
        for index in range(len(rows)):
            candidates[index] = list(dict.fromkeys(candidates[index]))  # the same text twice is one candidate
        scores, judge_failures = self.rank(rows, candidates, profiles, judge_client)
        failures += judge_failures
        pairs, unpaired = [], []
        for index, row in enumerate(rows):
            scored = [(s, text) for s, text in zip(scores[index], candidates[index]) if s is not None]
            if len(scored) < 2:
                drops["fewer_than_two_judged"] += 1
                continue
            best, worst = max(scored, key=lambda x: x[0]), min(scored, key=lambda x: x[0])
            if best[0] == worst[0]:
                drops["all_equal_scores"] += 1
                continue
            if best[1] == worst[1]:
                drops["chosen_equals_rejected"] += 1
                continue
            base = {"role": row["role"], "question": row["question"].strip(), "lang": row.get("lang") or "",
                    "source": f"judge:{config.judge}",
                    "split": stable_split(row["role"], row["question"], config.test_fraction, config.seed)}  # fmt: skip
            pairs.append({**base, "chosen": best[1], "rejected": worst[1]})
            unpaired += [
                {**base, "completion": best[1], "label": True},
                {**base, "completion": worst[1], "label": False},
            ]
        stats = {"questions": len(rows), "requests": len(results), "pairs": len(pairs), "failed": len(failures),
                 "dropped": drops.as_dict(), "usage": usage}  # fmt: skip
        made = {"preference": pairs, "unpaired": unpaired}
        dataset = datasets.DatasetDict(
            {
                kind: datasets.Dataset.from_dict(
                    {name: [row[name] for row in found] for name in _with_split(kind)}, features=_with_split(kind)
                )
                for kind, found in made.items()
            }
        )
        result = GenerationResult(dataset, stats, details={"rows": made}, failures=failures)
        if output_dir is not None:
            self.save(output_dir, result, client)
        if rows and not pairs and not failures:
            raise NothingGenerated(f"no pair made from {len(rows)} questions: {drops.as_dict()} (nothing written)")
        return result

    def rank(self, rows, candidates, profiles, judge_client) -> tuple[list[list[float | None]], list[dict]]:
        """One score per candidate (`None` where the judge failed on it), and the judge's failures."""
        judge = self.config.judge
        if judge == "rouge_l":
            scores = []
            for row, texts in zip(rows, candidates):
                references = [ref for ref in row.get("generated") or [] if ref.strip()]
                if not references or not texts:
                    scores.append([None] * len(texts))
                    continue
                scores.append(rouge_l_scores(texts, [references] * len(texts), lang=row.get("lang") or None))
            return scores, []
        flat = [(index, k) for index, texts in enumerate(candidates) for k in range(len(texts))]
        if judge == "rubric":
            items = [
                {"role": rows[i]["role"], "question": rows[i]["question"], "lang": rows[i].get("lang")}
                for i, _ in flat
            ]
            report = judge_answers(items, [candidates[i][k] for i, k in flat], profiles, [judge_client],
                                   SINGLE_TURN_DIMENSIONS)  # fmt: skip
            scores = [[None] * len(texts) for texts in candidates]
            for (i, k), item in zip(flat, report["items"]):
                values = [v for v in item["scores"].values() if v is not None]
                scores[i][k] = sum(values) / len(values) if values else None
            failures = [{"role": rows[flat[int(r["id"])][0]]["role"], "question": rows[flat[int(r["id"])][0]]["question"],
                         "judge": r["judge"], "error": r["error"]} for r in report["failures"]["reasons"]]  # fmt: skip
            return scores, failures
        # pairwise: every two candidates, both orders; a candidate that lost a judgement to a failure is unscored
        matches = [
            (i, a, b) for i, texts in enumerate(candidates) for a, b in itertools.combinations(range(len(texts)), 2)
        ]
        descriptions = {name: profile.description_with_catchphrases() for name, profile in profiles.items()}
        result = judge_win_rate(
            [{"role": profiles[rows[i]["role"]].name, "question": rows[i]["question"]} for i, _, _ in matches],
            [candidates[i][a] for i, a, _ in matches], [candidates[i][b] for i, _, b in matches], descriptions,
            judge_client, verbose=False,
        )  # fmt: skip
        scores = [[0.0] * len(texts) for texts in candidates]
        failures = []
        for (i, a, b), outcome, match in zip(matches, result.outcomes, range(len(matches))):
            if outcome == "failed":
                scores[i][a] = scores[i][b] = None
                failures.append({"role": rows[i]["role"], "question": rows[i]["question"], "candidates": [a, b],
                                 "error": result.errors.get(match, "failed")})  # fmt: skip
                continue
            points = {"win": 1.0, "tie": 0.5, "loss": 0.0}[outcome]
            for k, value in ((a, points), (b, 1.0 - points)):
                if scores[i][k] is not None:
                    scores[i][k] += value
        return scores, failures

    def write(self, output_dir: Path, result: GenerationResult) -> None:
        """Add the rows to the preference configs of their language in `output_dir`, keeping rows of other
        questions that earlier runs wrote (a question asked again is replaced); a split with no row gets no file."""
        for kind, rows in result.details["rows"].items():
            for lang in sorted({row["lang"] or "en" for row in rows}):
                folder = Path(output_dir) / get_spec(preference_config(lang, kind)).release_dir
                for split in ("train", "test"):
                    new = [row for row in rows if (row["lang"] or "en") == lang and row["split"] == split]
                    path = folder / f"{split}.jsonl"
                    asked = {(row["role"], row["question"]) for row in new}
                    old = read_preference_rows(path, kind) if path.is_file() else []
                    kept = [row for row in old if (row["role"], row["question"]) not in asked]
                    if not kept and not new:  # no file for an empty split: `datasets` cannot build one
                        continue
                    write_preference_rows(path, kept + [{k: v for k, v in row.items() if k != "split"} for row in new],
                                          kind)  # fmt: skip


def _with_split(kind: str) -> datasets.Features:
    return datasets.Features({**PREFERENCE_FEATURES[kind], "split": datasets.Value("string")})
