"""The flaw-deduction judge: one call per scene and dimension, its JSON list of flaws read robustly.

The judge's system text holds the scene, the profiles, the reference conversation and what to look for
(`CoserPrompts.judge`); the user message is the simulated conversation, thoughts removed (the Environment's messages
as they are). An answer is read by `parse_flaws`: the last JSON object that holds the dimension (or a bare
`{"flaws": [...]}`), in a code fence or among other text, with trailing commas and raw line breaks in strings
forgiven. An answer that still does not fit is asked again with a reminder (`client.generate(..., remind=True)`)
and, after the client's `max_parse_attempts`, is a counted failure: the scene gets no score, never a made-up one.

>>> parse_flaws('```json\\n{"Anthropomorphism": {"flaws": [{"instance": "x", "type": "t"},]}}\\n```', "Anthropomorphism")
{'flaws': [{'instance': 'x', 'type': 't', 'severity': 1}]}
"""

import json
import re
from collections.abc import Mapping, Sequence
from functools import partial

from rolellm.clients.base import ChatRequest
from rolellm.evaluation.coser.prompts import DIMENSIONS, CoserPrompts
from rolellm.evaluation.coser.testset import ENVIRONMENT, CoserCase
from rolellm.evaluation.coser.thoughts import add_speaker_name, remove_inner_thoughts


_DECODER = json.JSONDecoder()
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def _objects(text: str):
    for start in (i for i, char in enumerate(text) if char == "{"):
        try:
            yield _DECODER.raw_decode(text, start)[0]
        except json.JSONDecodeError:
            continue


def _repair(text: str) -> str:
    """Trailing commas dropped and raw line breaks inside strings escaped: the two slips judges make most."""
    text = _STRING.sub(lambda m: m.group().replace("\n", "\\n").replace("\r", ""), text)
    return _TRAILING_COMMA.sub(r"\1", text)


def parse_flaws(text: str, dimension: str) -> dict:
    """Read a judge's answer for `dimension` into `{"flaws": [...]}`; a flaw without a severity gets 1. Raises
    `ValueError` naming what is wrong (the client then asks again).

    >>> parse_flaws('{"Storyline Quality": {"flaws": []}}', "Storyline Quality")
    {'flaws': []}
    >>> parse_flaws("No flaws at all!", "Storyline Quality")
    Traceback (most recent call last):
    ...
    ValueError: no JSON object {"Storyline Quality": {"flaws": [...]}} in the answer
    """
    found = None
    for candidate_text in (text, _repair(text)):
        for candidate in _objects(candidate_text):
            if isinstance(candidate, dict) and isinstance(candidate.get(dimension), dict):
                found = candidate[dimension]
            elif isinstance(candidate, dict) and "flaws" in candidate and found is None:
                found = candidate
        if found is not None:
            break
    if found is None:
        raise ValueError(f'no JSON object {{"{dimension}": {{"flaws": [...]}}}} in the answer')
    flaws = found.get("flaws")
    if not isinstance(flaws, list) or not all(isinstance(flaw, dict) for flaw in flaws):
        raise ValueError(f'"{dimension}": "flaws" must be a list of objects with "instance", "type", "severity"')
    return {"flaws": [{**flaw, "severity": 1} if flaw.get("severity") is None else flaw for flaw in flaws]}


def judged_simulation(simulation: Sequence[Mapping]) -> list[dict]:
    """The simulation as judged: next-speaker predictions left out, thoughts removed from every character's message."""
    return [
        dict(m) if m["role"] == ENVIRONMENT else {**m, "content": remove_inner_thoughts(m["content"])}
        for m in simulation
        if m["role"] != "NSP"
    ]


def simulation_text(simulation: Sequence[Mapping], name_speakers: bool) -> str:
    """The judged simulation as one text: the messages (labelled `Name: ...` with `name_speakers`), blank-line apart."""
    texts = [add_speaker_name(m["content"], m["role"]) if name_speakers else m["content"] for m in simulation]
    return "\n\n".join(text.strip("\n") for text in texts)


def judge_scenes(
    items: Sequence[tuple[CoserCase, str]],
    judge,
    prompts: CoserPrompts,
    continue_from: int = 0,
    max_tokens: int = 4096,
    seed: int = 0,
    dimensions: Sequence[str] = DIMENSIONS,
) -> list[dict]:
    """Ask the judge about every (case, judged simulation text) on `dimensions` (CoSER's four by default), in one
    batch per dimension.

    Returns:
        `list[dict]`: one per item, `{dimension: {"flaws": [...]}}` for every dimension that was read, plus
        `"errors"`: `{dimension: why}` for those that failed.
    """
    params = {"temperature": 0.0, "max_tokens": max_tokens, "seed": seed}  # greedy decoding
    verdicts = [{"errors": {}} for _ in items]
    for dimension in dimensions:
        requests = [
            ChatRequest(
                [
                    {"role": "system", "content": prompts.judge(case, dimension, continue_from)},
                    {"role": "user", "content": text},
                ],
                params=dict(params),
                metadata={"case": case.id, "dimension": dimension, "index": index},
            )
            for index, (case, text) in enumerate(items)
        ]
        parse = partial(parse_flaws, dimension=dimension)
        for result in judge.generate(requests, parse=parse, desc=f"Judge: {dimension}", remind=True):
            verdict = verdicts[result.request.metadata["index"]]
            if result.ok:
                verdict[dimension] = result.parsed
            else:
                verdict["errors"][dimension] = result.error
    return verdicts
