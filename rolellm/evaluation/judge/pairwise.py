"""The GPT-judge win rate of the RoleLLM paper: a judge LLM ranks a model's answer against RoleGPT's.

Each sample (role, question, the model's answer, the baseline's answer) is judged with the paper's prompt
(`rolellm/prompts/judge_en.jinja`, `judge_zh.jinja`), the two answers named only by their position (`model_a`,
`model_b`). Both orders are judged; when the two verdicts disagree the sample is a tie, which removes the judge's
position bias. The win rate counts ties as half, with a bootstrap confidence interval, and the average rank of the
model (1 = best) is reported too, beside a length-controlled win rate (`rolellm.evaluation.judge.length_control`: the
preference at equal answer lengths, since judges favour longer answers) and the mean answer lengths. Requests go
through a chat client (`OpenAIChatClient` for any OpenAI-compatible endpoint): cached on disk, retried, run
concurrently. An answer that is not a ranking is asked
again, then counted as failed and reported, never dropped.

>>> from rolellm.clients.openai_compatible import OpenAIChatClient
>>> from rolellm.testing.server import ChatCompletionsServer
>>> def judge(body):  # prefers the answer that says "Arr", wherever it is shown
...     answers = json.loads(body["messages"][1]["content"].split("this question are:\\n")[1].split("\\nNow,")[0])
...     best = next(a["model"] for a in answers if "Arr" in a["answer"])
...     return str([{"model": a["model"], "reason": "", "rank": 1 if a["model"] == best else 2} for a in answers])
>>> rows = [{"role": "Jack Sparrow", "question": "Where is the rum?"}] * 2
>>> with ChatCompletionsServer(judge) as server:
...     client = OpenAIChatClient("judge", base_url=server.base_url, progress=False)
...     result = judge_win_rate(rows, ["Arr, gone!", "Gone."], ["Gone.", "Arr, gone!"],
...                             {"Jack Sparrow": "A pirate."}, client, verbose=False)
>>> result.outcomes, result.win_rate, result.average_rank
(['win', 'loss'], 0.5, 1.5)
"""

import ast
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from rolellm.clients.openai_compatible import ChatRequest
from rolellm.evaluation.judge.length_control import length_controlled_win_rate
from rolellm.roles.profile import detect_language
from rolellm.roles.prompts import load_prompt


logger = logging.getLogger(__name__)

NAMES = ("model_a", "model_b")  # the answers' names, by position: the judge never sees which model wrote what
Outcome = Literal["win", "tie", "loss", "failed"]

_FENCE = re.compile(r"```[A-Za-z]*\s*(.*?)```", re.DOTALL)
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "＂": '"', "＇": "'"})
_BLOCK = re.compile(r"\{[^{}]*\}")
_QUOTE = "[\"'“”‘’]"
_MODEL_FIELD = re.compile(rf"{_QUOTE}model{_QUOTE}\s*[:：]\s*{_QUOTE}?\s*([\w\- ]+?)\s*{_QUOTE}?\s*[,，}}]")
_RANK_FIELD = re.compile(rf"{_QUOTE}rank{_QUOTE}\s*[:：]\s*{_QUOTE}?\s*(\d+)")


def build_judge_messages(
    role: str, description: str, question: str, answers: Sequence[str], lang: Literal["en", "zh"] = "en"
) -> list[dict[str, str]]:
    """The paper's judge prompt for one question and the answers in the order shown (named `model_a`, `model_b`).

    >>> messages = build_judge_messages("Jack Sparrow", "A pirate.", "Rum?", ["Arr!", "No."])
    >>> print(messages[1]["content"].splitlines()[4])
    {"question": "Rum?"}
    >>> print(messages[1]["content"].splitlines()[6])
    [{"model": "model_a", "answer": "Arr!"}, {"model": "model_b", "answer": "No."}]
    """
    if len(answers) > len(NAMES):
        raise ValueError(f"The judge compares at most {len(NAMES)} answers, got {len(answers)}.")
    template = load_prompt(f"judge_{lang}.jinja").module  # the macros `system()` and `user(...)`
    question_dict = json.dumps({"question": question}, ensure_ascii=False)
    answer_list = [{"model": name, "answer": answer} for name, answer in zip(NAMES, answers)]
    user = template.user(role, description, question_dict, json.dumps(answer_list, ensure_ascii=False))
    return [{"role": "system", "content": str(template.system())}, {"role": "user", "content": str(user)}]


def _literal(text: str):
    for candidate in (text, text.translate(_QUOTES)):
        for load in (ast.literal_eval, json.loads):
            try:
                return load(candidate)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
    return None


def _whole_number(rank) -> int:
    """A rank as an `int`: `2`, `"2"` and `2.0` are 2; `1.5`, `True` and `"first"` are not ranks."""
    if isinstance(rank, bool):
        raise TypeError(rank)
    value = float(rank)
    if value != int(value):
        raise ValueError(rank)
    return int(value)


def parse_ranking(text: str, names: Sequence[str] = NAMES) -> dict[str, int]:
    """Read the judge's Python-list answer into `{model name: rank}`; raise `ValueError` when it is not one.

    Accepts what judges actually write: code fences, single or curly quotes, text around the list, a dict with
    the list inside, ranks as strings; as a last resort the `"model"` and `"rank"` fields are read one `{...}` at a
    time. Every name in `names` must get exactly one rank.

    >>> parse_ranking("```python\\n[{'model': 'model_b', 'reason': 'more “pirate”', 'rank': 1}, "
    ...               "{'model': 'model_a', 'reason': 'plain', 'rank': '2'}]\\n```")
    {'model_a': 2, 'model_b': 1}
    """
    fenced = _FENCE.search(text)
    body = fenced.group(1) if fenced else text
    start, end = body.find("["), body.rfind("]")
    items = _literal(body[start : end + 1]) if 0 <= start < end else _literal(body)
    if isinstance(items, dict):
        items = next((value for value in items.values() if isinstance(value, list)), None)
    pairs = []
    if isinstance(items, (list, tuple)) and all(isinstance(item, dict) for item in items):
        pairs = [(str(item.get("model", "")).strip(), item.get("rank")) for item in items]
    else:  # not a literal: read the fields of each {...} block
        for block in _BLOCK.findall(body):
            model, rank = _MODEL_FIELD.search(block), _RANK_FIELD.search(block)
            if model and rank:
                pairs.append((model.group(1).strip(), rank.group(1)))
    ranks = {}
    for model, rank in pairs:
        try:
            ranks[model.lower()] = _whole_number(rank)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"rank {rank!r} of {model!r} is not a number in {text[:200]!r}") from None
    missing = [name for name in names if name.lower() not in ranks]
    if missing or len(pairs) != len(names):
        raise ValueError(f"expected one rank for each of {list(names)}, got {pairs} from {text[:200]!r}")
    outside = {model: rank for model, rank in ranks.items() if not 1 <= rank <= len(names)}
    if outside:
        raise ValueError(f"ranks {outside} are outside 1..{len(names)} in {text[:200]!r}")
    return {name: ranks[name.lower()] for name in names}


@dataclass
class WinRateResult:
    """The outcome of a judged comparison of a model against a baseline.

    Args:
        win_rate (`float`): the share of judged samples the model won, ties counted as half; NaN when no sample
            was judged (`None` in `to_dict()`).
        ci_low, ci_high (`float`): the bootstrap confidence interval of `win_rate`.
        average_rank (`float`): the model's mean rank (1 = best) over every judged order of every judged sample.
        lc_win_rate, lc_ci_low, lc_ci_high (`float`): the length-controlled win rate and its bootstrap interval.
        length_coefficient (`float`): how much the judge rewards a longer answer (0: not at all).
        model_length, baseline_length (`float`): the mean length in characters of the judged answers of each side.
        wins, ties, losses, failed (`int`): samples by outcome; `failed` samples (a request that failed or an
            answer that never parsed) are left out of the rates and listed in `errors`.
        outcomes (`list[str]`): `"win"`, `"tie"`, `"loss"` or `"failed"` for each sample, in input order.
        errors (`dict[int, str]`): why each failed sample failed.
        requests, cached (`int`): requests of the run and how many were answered from the cache.
    """

    win_rate: float
    ci_low: float
    ci_high: float
    average_rank: float
    lc_win_rate: float
    lc_ci_low: float
    lc_ci_high: float
    length_coefficient: float
    model_length: float
    baseline_length: float
    wins: int
    ties: int
    losses: int
    failed: int
    outcomes: list[str] = field(default_factory=list)
    errors: dict[int, str] = field(default_factory=dict)
    requests: int = 0
    cached: int = 0

    @property
    def judged(self) -> int:
        """Samples with a verdict (`wins + ties + losses`)."""
        return self.wins + self.ties + self.losses

    def to_dict(self) -> dict:
        """The result as JSON-safe values: a rate that has no value (nothing was judged) is `None`, never NaN."""
        values = {
            key: None if isinstance(value, float) and value != value else value for key, value in asdict(self).items()
        }
        return {**values, "judged": self.judged}


def _verdict(ranks: dict[str, int], model_position: int) -> tuple[Outcome, int]:
    mine, theirs = ranks[NAMES[model_position]], ranks[NAMES[1 - model_position]]
    return ("win" if mine < theirs else "loss" if mine > theirs else "tie"), mine


def bootstrap_interval(scores: np.ndarray, num_samples: int = 1000, level: float = 0.95, seed: int = 0):
    """Percentile bootstrap interval of the mean of `scores`.

    >>> bootstrap_interval(np.array([1.0, 1.0, 1.0]))
    (1.0, 1.0)
    """
    if len(scores) == 0:
        return float("nan"), float("nan")
    means = np.random.default_rng(seed).choice(scores, size=(num_samples, len(scores))).mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def judge_win_rate(
    rows: Sequence[Mapping],
    predictions: Sequence[str],
    baseline: Sequence[str],
    descriptions: Mapping[str, str],
    client,
    lang: Literal["en", "zh"] | None = None,
    both_orders: bool = True,
    max_tokens: int = 512,
    num_bootstrap: int = 1000,
    confidence_level: float = 0.95,
    seed: int = 0,
    verbose: bool = True,
) -> WinRateResult:
    """Judge `predictions` against `baseline` answers with the paper's prompt and return the win rate.

    Args:
        rows (`Sequence[Mapping]`): the samples, each with `"role"` and `"question"` (RoleBench rows).
        predictions (`Sequence[str]`): the judged model's answer for each row.
        baseline (`Sequence[str | None]`): the answer to compare against for each row (RoleGPT's, or another
            model's); `None` (a baseline generation that failed) makes the sample `failed`, not judged.
        descriptions (`Mapping[str, str]`): role name → the description with catchphrases (the paper's `{desc}`,
            `RoleProfile.description_with_catchphrases()`).
        client: a chat client (`OpenAIChatClient` for an OpenAI-compatible endpoint, or `LocalChatClient`).
        lang (`"en"` or `"zh"`, *optional*): the prompt's language; detected from the questions when not given.
        both_orders (`bool`, *optional*, defaults to `True`): also judge with the answers swapped; a disagreement
            between the two verdicts is a tie. With `False`, the model's answer is always shown first.
        max_tokens (`int`, *optional*, defaults to 512): the judge's answer budget (greedy decoding).
        num_bootstrap (`int`, *optional*, defaults to 1000), confidence_level (`float`, *optional*, defaults to
            0.95), seed (`int`, *optional*, defaults to 0): the bootstrap interval.
        verbose (`bool`, *optional*, defaults to `True`): print the number of requests and the token estimate first.
    """
    if not len(rows) == len(predictions) == len(baseline):
        raise ValueError(f"Got {len(rows)} rows, {len(predictions)} predictions and {len(baseline)} baseline answers.")
    missing = sorted({row["role"] for row in rows} - set(descriptions))
    if missing:
        raise ValueError(f"No description for roles {missing}: pass descriptions={{role: description, ...}}.")
    lang = lang or detect_language(" ".join(row["question"] for row in rows[:50]))
    orders = (0, 1) if both_orders else (0,)
    requests = []
    for index, (row, prediction, other) in enumerate(zip(rows, predictions, baseline)):
        if other is None:
            continue
        for position in orders:  # position of the judged model's answer
            answers = [prediction, other] if position == 0 else [other, prediction]
            question = row["question"].strip()  # as released, the English questions start with a space
            messages = build_judge_messages(row["role"], descriptions[row["role"]], question, answers, lang)
            params = {"temperature": 0.0, "max_tokens": max_tokens}
            requests.append(ChatRequest(messages, params=params, metadata={"index": index, "position": position}))
    estimate = client.estimate(requests)
    if verbose:
        print(f"GPT judge ({client.model_name}): {estimate}")
    results = client.generate(requests, parse=parse_ranking, desc="GPT judge", remind=True)
    outcomes: list[Outcome] = []
    errors: dict[int, str] = {}
    ranks = []
    by_row: dict[int, list] = {}
    for result in results:
        by_row.setdefault(result.request.metadata["index"], []).append(result)
    for index in range(len(rows)):
        judged = by_row.get(index, [])
        failures = [result.error for result in judged if not result.ok]
        if not judged:
            failures = ["no baseline answer (its generation failed)"]
        if failures:
            outcomes.append("failed")
            errors[index] = "; ".join(failures)
            continue
        verdicts = [_verdict(result.parsed, result.request.metadata["position"]) for result in judged]
        ranks.extend(rank for _, rank in verdicts)
        outcomes.append(verdicts[0][0] if len({outcome for outcome, _ in verdicts}) == 1 else "tie")
    scores = np.array([{"win": 1.0, "tie": 0.5, "loss": 0.0}[o] for o in outcomes if o != "failed"])
    if errors:
        logger.warning(f"GPT judge: {len(errors)} of {len(rows)} samples failed and are left out: {errors}")
    low, high = bootstrap_interval(scores, num_bootstrap, confidence_level, seed)
    judged_rows = [index for index, outcome in enumerate(outcomes) if outcome != "failed"]
    lengths = np.array([len(predictions[index]) for index in judged_rows], dtype=float)
    baseline_lengths = np.array([len(baseline[index]) for index in judged_rows], dtype=float)
    controlled = length_controlled_win_rate(scores, lengths, baseline_lengths, num_bootstrap, confidence_level, seed)
    return WinRateResult(
        win_rate=float(scores.mean()) if len(scores) else float("nan"),
        ci_low=low,
        ci_high=high,
        average_rank=float(np.mean(ranks)) if ranks else float("nan"),
        lc_win_rate=controlled.win_rate,
        lc_ci_low=controlled.ci_low,
        lc_ci_high=controlled.ci_high,
        length_coefficient=controlled.length_coefficient,
        model_length=float(lengths.mean()) if judged_rows else float("nan"),
        baseline_length=float(baseline_lengths.mean()) if judged_rows else float("nan"),
        wins=outcomes.count("win"),
        ties=outcomes.count("tie"),
        losses=outcomes.count("loss"),
        failed=len(errors),
        outcomes=list(outcomes),
        errors=errors,
        requests=estimate.requests,
        cached=estimate.cached,
    )
