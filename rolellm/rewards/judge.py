"""`RubricJudgeReward`: a judge model scores each answer on the rubric of `rolellm.evaluation.multiturn.rubric`.

The judge reads the role's profile, the question and the answer (or a multi-turn rollout's whole transcript) with
the rubric prompt of `rolellm dialogue` and `rolellm evaluate --rubric` (`build_rubric_messages`), answers with a
1-5 score per dimension, and the reward is the mean score mapped to [0, 1] (`(mean - 1) / 4`). The judge is any
client `make_client` builds (an OpenAI-compatible endpoint, or a local model or checkpoint run in-process), asked
with greedy decoding through its own answer cache (`ClientConfig.cache_path`), so a resumed run asks nothing twice.
The reward is an `async` function: TRL runs it next to the other rewards, and the client sends its requests
concurrently (`max_concurrency`).

An answer the judge never gives in the rubric's form (after the client's re-asks), or a request that fails, is a
failed verdict: its reward is `None` (TRL leaves it out for that completion) and it is counted (`failures`,
`asked`, and the logged metric `rubric_judge/failed_share`). When more than `max_failure_share` of one batch's
verdicts, or of all verdicts so far, fail, the run stops with `JudgeFailureError`, naming the share and a reason:
a policy trained on the few verdicts a dying judge still gives learns from noise.

>>> import asyncio, json
>>> from rolellm.clients.openai_compatible import OpenAIChatClient
>>> from rolellm.roles.profile import RoleProfile
>>> from rolellm.testing.server import ChatCompletionsServer
>>> answer = json.dumps({d: {"score": 4, "rationale": "Fine."} for d in ("speaking_style", "in_character")})
>>> profiles = {"Jack Sparrow": RoleProfile("Jack Sparrow", "en", "A witty pirate.")}
>>> prompt = [{"role": "system", "content": "Be Jack."}, {"role": "user", "content": "Where is the rum?"}]
>>> with ChatCompletionsServer(lambda body: answer) as server:
...     judge = OpenAIChatClient("judge", base_url=server.base_url, progress=False)
...     reward = RubricJudgeReward(judge, profiles, dimensions=["speaking_style", "in_character"])
...     asyncio.run(reward([prompt], ["Gone, savvy?"], role=["Jack Sparrow"]))
[0.75]
"""

import logging
from collections.abc import Mapping, Sequence

from rolellm.clients.base import ChatClient, ChatRequest, EndpointError
from rolellm.clients.config import ClientConfig, make_client
from rolellm.evaluation.multiturn.rubric import (
    DIMENSIONS,
    SCALE,
    SINGLE_TURN_DIMENSIONS,
    build_rubric_messages,
    parse_rubric,
)
from rolellm.rewards.text import completion_text, profiles_of
from rolellm.roles.profile import RoleProfile


logger = logging.getLogger(__name__)


class JudgeFailureError(EndpointError):
    """More of a judge's verdicts failed than the reward allows (`max_failure_share`): the run stops."""


def question_of(prompt) -> str:
    """The last user message of a conversational prompt, or a plain prompt itself: what the answer answers."""
    if isinstance(prompt, str):
        return prompt
    return next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), "")


class RubricJudgeReward:
    """A rubric judge as a TRL reward function (async): the mean 1-5 rubric score of each answer, mapped to [0, 1].

    Args:
        judge (`ClientConfig` or `ChatClient`): the judge; a `ClientConfig` is built with `make_client` (set its
            `cache_path` to keep the verdicts across runs).
        profiles (`Mapping[str, RoleProfile]`): role -> profile; the judge reads the role's description.
        dimensions (`Sequence[str]`, *optional*): the rubric dimensions to score; defaults to the single-turn ones,
            or every dimension (`memory` too) for a multi-turn rollout's transcripts.
        max_failure_share (`float`, *optional*, defaults to 0.2): the share of failed verdicts, in one batch or over
            the run, above which the run stops.
        max_tokens (`int`, *optional*, defaults to 1024), seed (`int`, *optional*, defaults to 0): the judge's budget
            and seed (greedy decoding).
    """

    __name__ = "rubric_judge"

    def __init__(
        self,
        judge: ClientConfig | ChatClient,
        profiles: Mapping[str, RoleProfile],
        dimensions: Sequence[str] | None = None,
        max_failure_share: float = 0.2,
        max_tokens: int = 1024,
        seed: int = 0,
    ):
        if not 0.0 <= max_failure_share < 1.0:
            raise ValueError(f"max_failure_share={max_failure_share} must be in [0, 1)")
        unknown = sorted(set(dimensions or ()) - set(DIMENSIONS))
        if unknown:
            raise ValueError(f"unknown rubric dimensions {unknown}; choose from {list(DIMENSIONS)}")
        self.judge = make_client(judge) if isinstance(judge, ClientConfig) else judge
        self.profiles = profiles
        self.dimensions = list(dimensions) if dimensions else None
        self.max_failure_share = max_failure_share
        self.params = {"temperature": 0.0, "max_tokens": max_tokens, "seed": seed}
        self.asked = 0
        self.failures = 0

    def transcripts(self, prompts, completions, roles, transcript=None) -> list[dict]:
        """The conversations to judge: a one-turn transcript per answer, or the rollout's own transcripts."""
        if transcript is not None:
            return [dict(t, role=role) for t, role in zip(transcript, roles, strict=True)]
        return [
            {"role": role, "turns": [{"user": question_of(p).strip(), "assistant": completion_text(c).strip()}]}
            for p, c, role in zip(prompts, completions, roles, strict=True)
        ]

    async def __call__(self, prompts, completions, role=None, lang=None, transcript=None, **kwargs):
        profiles = profiles_of(self.profiles, role, self.__name__)
        dimensions = self.dimensions or list(DIMENSIONS if transcript is not None else SINGLE_TURN_DIMENSIONS)
        items = self.transcripts(prompts, completions, [p.name for p in profiles], transcript)
        judged = [i for i, item in enumerate(items) if item["turns"]]
        requests = [
            ChatRequest(
                build_rubric_messages(
                    items[i], profiles[i], dimensions, (lang[i] if lang else None) or profiles[i].lang
                ),
                params=dict(self.params),
            )
            for i in judged
        ]
        rewards: list[float | None] = [None] * len(items)
        reasons = [f"item {i}: no turns to judge" for i, item in enumerate(items) if not item["turns"]]
        try:
            results = await self.judge.agenerate(
                requests, parse=lambda text: parse_rubric(text, dimensions), desc="Rubric reward", remind=True
            )
        except EndpointError as error:  # the endpoint stopped answering: every verdict of the batch failed
            results, reasons = [], [*reasons, str(error)]
        for i, result in zip(judged, results):
            if result.ok:
                mean = sum(v["score"] for v in result.parsed.values()) / len(result.parsed)
                rewards[i] = (mean - SCALE[0]) / (SCALE[1] - SCALE[0])
            else:
                reasons.append(f"item {i}: {result.error}")
        failed = rewards.count(None)
        self.asked += len(items)
        self.failures += failed
        if "log_metric" in kwargs:
            kwargs["log_metric"]("rubric_judge/failed_share", failed / max(len(items), 1))
        if failed:
            logger.warning("rubric_judge: %d of %d verdicts failed (%d of %d in the run), e.g. %s",
                           failed, len(items), self.failures, self.asked, reasons[0])  # fmt: skip
        share, run_share = failed / max(len(items), 1), self.failures / max(self.asked, 1)
        if share > self.max_failure_share or run_share > self.max_failure_share:
            raise JudgeFailureError(
                f"rubric judge {self.judge.model_name}: {failed} of {len(items)} verdicts of this batch failed "
                f"({self.failures} of {self.asked} in the run), more than max_failure_share="
                f"{self.max_failure_share}; e.g. {reasons[0]}"
            )
        return rewards
