"""Rubric judges: one or more judge models score conversations (or single answers) on documented dimensions.

Each judge reads a transcript with the role's profile (`rolellm/prompts/rubric_{lang}.jinja`) and gives, for each
dimension, an integer from 1 to 5 and a one-sentence rationale, as a JSON object. The answer is checked against the
schema (`parse_rubric`); an answer that does not fit is asked again with a reminder naming the problem and another
seed (`client.generate(..., remind=True)`), and after `max_parse_attempts` it is a counted failure with its reason,
never cached as final. Several judges are averaged per item and dimension, and their agreement is reported
(Krippendorff's alpha, interval metric, and the mean pairwise Spearman correlation). The length of the role's answers
is reported next to every score, with the correlation of length and score (judges are known to favour longer answers).

| dimension | what the judge checks |
|---|---|
| `character_consistency` | personality, values, relationships and motives match the profile |
| `knowledge` | knows the role's world; no invented, contradictory or anachronistic facts |
| `speaking_style` | tone, vocabulary, rhythm; catchphrases used naturally |
| `memory` | remembers and stays consistent with what was said earlier (multi-turn only) |
| `engagement` | reacts, brings in detail, feeling or story, moves the scene forward |
| `in_character` | no assistant voice, chatbot offers, disclaimers or "as an AI" |

>>> from rolellm.clients.openai_compatible import OpenAIChatClient
>>> from rolellm.roles.profile import RoleProfile
>>> from rolellm.testing.server import ChatCompletionsServer
>>> answer = json.dumps({d: {"score": 4, "rationale": "Fine."} for d in SINGLE_TURN_DIMENSIONS})
>>> rows = [{"role": "Jack Sparrow", "question": "Where is the rum?"}]
>>> with ChatCompletionsServer(lambda body: answer) as server:
...     judge = OpenAIChatClient("judge", base_url=server.base_url, progress=False)
...     result = judge_answers(rows, ["Gone, savvy?"], {"Jack Sparrow": RoleProfile("Jack Sparrow", "en")}, [judge])
>>> result["summary"]["overall"], result["items"][0]["length"]["words"], result["failures"]["count"]
(4.0, 2, 0)
"""

import json
import logging
from collections.abc import Mapping, Sequence

import numpy as np

from rolellm.clients.base import ChatRequest
from rolellm.evaluation.multiturn.agreement import krippendorff_alpha, mean_pairwise_spearman, spearman
from rolellm.evaluation.multiturn.dialogue import answer_length
from rolellm.roles.card_prompts import role_description
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import load_prompt


logger = logging.getLogger(__name__)

DIMENSIONS = ("character_consistency", "knowledge", "speaking_style", "memory", "engagement", "in_character")
SINGLE_TURN_DIMENSIONS = tuple(d for d in DIMENSIONS if d != "memory")  # one answer has nothing to remember
SCALE = (1, 5)
_DECODER = json.JSONDecoder()


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(float(np.mean(values)), 4) if values else None


def parse_rubric(text: str, dimensions: Sequence[str] = DIMENSIONS, scale: tuple[int, int] = SCALE) -> dict:
    """Read a judge's JSON answer into `{dimension: {"score": int, "rationale": str}}`; raise `ValueError` naming
    what is wrong when it does not fit (a missing dimension, a score that is not an integer of the scale).

    The object may sit in a code fence or among other text; keys other than `dimensions` are ignored.

    >>> parse_rubric('Here: {"memory": {"score": 4, "rationale": "Recalls the map."}}', ["memory"])
    {'memory': {'score': 4, 'rationale': 'Recalls the map.'}}
    >>> parse_rubric('{"memory": {"score": 9, "rationale": "?"}}', ["memory"])
    Traceback (most recent call last):
    ...
    ValueError: "memory": score 9 is not an integer from 1 to 5
    """
    found = None
    for start in (i for i, char in enumerate(text) if char == "{"):
        try:
            candidate, _ = _DECODER.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(candidate, dict) and any(d in candidate for d in dimensions):
            found = candidate  # the last object that names a dimension (after any thinking aloud)
    if found is None:
        raise ValueError(f"no JSON object with the keys {list(dimensions)} in the answer")
    low, high = scale
    parsed = {}
    for dimension in dimensions:
        entry = found.get(dimension)
        if not isinstance(entry, dict):
            raise ValueError(f'"{dimension}" is missing: give {{"score": <integer>, "rationale": "<one sentence>"}}')
        score = entry.get("score")
        if isinstance(score, str) and score.strip().isdigit():
            score = int(score.strip())
        if isinstance(score, float) and score.is_integer():
            score = int(score)
        if isinstance(score, bool) or not isinstance(score, int) or not low <= score <= high:
            raise ValueError(f'"{dimension}": score {score!r} is not an integer from {low} to {high}')
        rationale = entry.get("rationale", "")
        if not isinstance(rationale, str):
            raise ValueError(f'"{dimension}": rationale must be a string')
        parsed[dimension] = {"score": score, "rationale": rationale.strip()}
    return parsed


def render_transcript(transcript: Mapping, role: str, lang: str = "en") -> str:
    """The conversation as `User: ...` / `{role}: ...` lines (the greeting, if any, first).

    >>> print(render_transcript({"turns": [{"user": "Rum?", "assistant": "Gone."}]}, "Jack"))
    User: Rum?
    Jack: Gone.
    """
    user, colon = ("用户", "：") if lang == "zh" else ("User", ": ")
    lines = [f"{role}{colon}{transcript['greeting']}"] if transcript.get("greeting") else []
    for turn in transcript["turns"]:
        lines += [f"{user}{colon}{turn['user']}", f"{role}{colon}{turn['assistant']}"]
    return "\n".join(lines)


def build_rubric_messages(transcript: Mapping, profile: RoleProfile, dimensions: Sequence[str], lang: str) -> list:
    """The rubric judge's system and user messages for one transcript."""
    template = load_prompt(f"rubric_{'zh' if lang == 'zh' else 'en'}.jinja").module
    situation = (transcript.get("scenario") or {}).get("situation", "")
    user = template.user(
        profile.name,
        role_description(profile),
        situation,
        render_transcript(transcript, profile.name, lang),
        list(dimensions),
        SCALE[1],
    )
    return [{"role": "system", "content": str(template.system()).strip()}, {"role": "user", "content": str(user)}]


def judge_names(judges) -> list[str]:
    """The judges' model names, a repeated one numbered (`gpt-4o`, `gpt-4o#2`)."""
    names, seen = [], {}
    for judge in judges:
        seen[judge.model_name] = seen.get(judge.model_name, 0) + 1
        names.append(
            judge.model_name if seen[judge.model_name] == 1 else f"{judge.model_name}#{seen[judge.model_name]}"
        )
    return names


def judge_transcripts(
    transcripts: Sequence[Mapping],
    profiles: Mapping[str, RoleProfile],
    judges: Sequence,
    dimensions: Sequence[str] = DIMENSIONS,
    max_tokens: int = 1024,
    seed: int = 0,
) -> dict:
    """Score transcripts with every judge on `dimensions` and average the judges.

    Args:
        transcripts (`Sequence[Mapping]`): conversations as `run_dialogues` returns them (`id`, `role`, `turns`, and
            optionally `lang`, `greeting`, `scenario`).
        profiles (`Mapping[str, RoleProfile]`): role name -> profile (the judge sees the description).
        judges (`Sequence[ChatClient]`): the judge clients; greedy decoding, answers cached by each client.
        dimensions (`Sequence[str]`, *optional*, defaults to `DIMENSIONS`): what to score (see the table above).
        max_tokens (`int`, *optional*, defaults to 1024), seed (`int`, *optional*, defaults to 0): the judges' budget
            and seed.

    Returns:
        `dict` (JSON-safe, `None` where there is no value): `dimensions`, `scale`, `judges` (names); `items`, one per
        transcript: `id`, `role`, `complete`, `scores` (`{dimension: mean over the judges that answered}`), `judges`
        (`{judge: {"scores", "rationales"} or {"error"}}`), `length` (`answer_length` of the role's lines, plus
        `chars_per_answer`); `summary`: `per_dimension` (`{dimension: {"mean", "n", "length_spearman"}}`),
        `overall`, `per_judge`, `per_role` (with the mean length), `length`; `agreement` (two judges or more:
        `{dimension: {"krippendorff_alpha", "mean_spearman", "n"}}`); `failures`: `count` (judge answers that never
        fit the schema or failed), `unscored` (items no judge scored), `reasons` (`[{"id", "judge", "error"}]`).
    """
    unknown = sorted(set(dimensions) - set(DIMENSIONS))
    if unknown:
        raise ValueError(f"unknown rubric dimensions {unknown}; choose from {list(DIMENSIONS)}")
    if not judges:
        raise ValueError("judge_transcripts needs at least one judge client")
    profiles = Profiles(profiles).require(
        [t["role"] for t in transcripts], "the transcripts", "the judge needs each role's description"
    )
    names = judge_names(judges)
    judgeable = [i for i, t in enumerate(transcripts) if t["turns"]]
    requests = []
    for i in judgeable:
        transcript = transcripts[i]
        profile = profiles[transcript["role"]]
        messages = build_rubric_messages(transcript, profile, dimensions, transcript.get("lang") or profile.lang)
        requests.append(ChatRequest(messages, params={"temperature": 0.0, "max_tokens": max_tokens, "seed": seed}))
    verdicts: dict[str, dict[int, dict]] = {}
    for name, judge in zip(names, judges):
        results = judge.generate(
            requests, parse=lambda text: parse_rubric(text, dimensions), desc=f"Rubric ({name})", remind=True
        )
        verdicts[name] = dict(zip(judgeable, results))

    def entry(i: int, name: str) -> dict | None:
        result = verdicts[name].get(i)
        if result is None:
            return None
        if not result.ok:
            return {"error": result.error}
        return {
            "scores": {d: v["score"] for d, v in result.parsed.items()},
            "rationales": {d: v["rationale"] for d, v in result.parsed.items()},
            "attempts": result.attempts,
        }

    return rubric_result(transcripts, names, entry, dimensions, SCALE, judges_name="rubric judges")


def rubric_result(
    transcripts: Sequence[Mapping],
    names: Sequence[str],
    entry,
    dimensions: Sequence[str],
    scale: Sequence[float],
    judges_name: str,
) -> dict:
    """What `judge_transcripts` returns, from each judge's verdict on each transcript: `entry(i, name)` gives
    `{"scores", "rationales", ...}`, `{"error"}`, or None when the transcript was not sent (no turns). Every rubric
    of `rolellm dialogue` returns this shape, so one report, one agreement and one failure count read them all."""
    items, reasons = [], []
    for i, transcript in enumerate(transcripts):
        answers = ([transcript["greeting"]] if transcript.get("greeting") else []) + [
            turn["assistant"] for turn in transcript["turns"]
        ]
        length = answer_length(answers)
        length["chars_per_answer"] = round(length["chars"] / length["answers"], 2) if answers else None
        per_judge = {}
        for name in names:
            found = entry(i, name)
            if found is None:
                error = "no turns to judge" + (f" ({transcript['error']})" if transcript.get("error") else "")
                found = {"error": error}
            per_judge[name] = found
            if "error" in found:
                reasons.append({"id": transcript["id"], "judge": name, "error": found["error"]})
        scores = {d: _mean(v.get("scores", {}).get(d) for v in per_judge.values()) for d in dimensions}
        items.append(
            {
                "id": transcript["id"],
                "role": transcript["role"],
                "complete": transcript.get("complete", True),
                "scores": scores,
                "judges": per_judge,
                "length": length,
            }
        )
    result = {
        "dimensions": list(dimensions),
        "scale": list(scale),
        "judges": list(names),
        "items": items,
        "summary": summarize(items, dimensions, names),
        "failures": {
            "count": len(reasons),
            "unscored": sum(all(v is None for v in item["scores"].values()) for item in items),
            "reasons": reasons,
        },
    }
    if len(names) > 1:
        result["agreement"] = judge_agreement(items, dimensions, names)
    if reasons:
        logger.warning("%s: %d verdicts failed, e.g. %s", judges_name, len(reasons), reasons[0])
    return result


def summarize(items: list[dict], dimensions: Sequence[str], judges: Sequence[str]) -> dict:
    """Means per dimension (with the Spearman correlation of answer length and score), per judge, per role."""
    per_dimension = {}
    for d in dimensions:
        scored = [(item["scores"][d], item["length"]["chars"]) for item in items if item["scores"][d] is not None]
        per_dimension[d] = {
            "mean": _mean(s for s, _ in scored),
            "n": len(scored),
            "length_spearman": spearman([c for _, c in scored], [s for s, _ in scored]) if scored else None,
        }
    per_role = {}
    for role in dict.fromkeys(item["role"] for item in items):
        mine = [item for item in items if item["role"] == role]
        per_role[role] = {d: _mean(item["scores"][d] for item in mine) for d in dimensions}
        per_role[role]["chars_per_answer"] = _mean(item["length"]["chars_per_answer"] for item in mine)
    per_judge = {
        name: {d: _mean(item["judges"][name].get("scores", {}).get(d) for item in items) for d in dimensions}
        for name in judges
    }
    length = {key: _mean(item["length"][key] for item in items) for key in ("chars", "words", "cjk_chars")}
    length["chars_per_answer"] = _mean(item["length"]["chars_per_answer"] for item in items)
    return {
        "per_dimension": per_dimension,
        "overall": _mean(v["mean"] for v in per_dimension.values()),
        "per_judge": per_judge,
        "per_role": per_role,
        "length": length,
    }


def judge_agreement(items: list[dict], dimensions: Sequence[str], judges: Sequence[str]) -> dict:
    """Per dimension: Krippendorff's alpha (interval) over the judges, their mean pairwise Spearman correlation, and
    the number of items at least two judges scored."""
    agreement = {}
    for d in dimensions:
        ratings = [[item["judges"][name].get("scores", {}).get(d) for item in items] for name in judges]
        n = sum(sum(r is not None for r in column) >= 2 for column in zip(*ratings))
        agreement[d] = {
            "krippendorff_alpha": krippendorff_alpha(ratings),
            "mean_spearman": mean_pairwise_spearman(ratings),
            "n": n,
        }
    return agreement


def judge_answers(
    rows: Sequence[Mapping],
    predictions: Sequence[str],
    profiles: Mapping[str, RoleProfile],
    judges: Sequence,
    dimensions: Sequence[str] = SINGLE_TURN_DIMENSIONS,
    **kwargs,
) -> dict:
    """Score single-turn answers (RoleBench rows: `role`, `question`) like one-turn transcripts; item ids are the
    row indices as strings, so pairwise and rubric results of one `rolellm evaluate` run share ids. Keyword arguments
    go to `judge_transcripts`."""
    if len(rows) != len(predictions):
        raise ValueError(f"Got {len(rows)} rows and {len(predictions)} predictions.")
    transcripts = [
        {
            "id": str(i),
            "role": row["role"],
            "lang": row.get("lang"),
            "turns": [{"user": row["question"].strip(), "assistant": (prediction or "").strip()}],
        }
        for i, (row, prediction) in enumerate(zip(rows, predictions))
    ]
    return judge_transcripts(transcripts, profiles, judges, dimensions, **kwargs)
