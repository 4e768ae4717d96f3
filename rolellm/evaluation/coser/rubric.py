"""The flaw-deduction judge as a rubric of `rolellm dialogue` (`--rubric coser_flaws`).

A `rolellm dialogue` conversation is a scene with two speakers, the role and the simulated user, and no reference
conversation: the judge lists the role's flaws on CoSER's three dimensions that need no reference (Anthropomorphism,
Character Fidelity, Storyline Quality), with the same prompt, parsing and arithmetic as a `rolellm coser run`, and
each dimension scores `max(0, min(100, 100 - 5 * (sum of severities - 0.3 * the role's lines)))`.
`judge_transcripts_by_flaws` takes and returns what `rolellm.evaluation.multiturn.rubric.judge_transcripts` does
(scale 0 to 100), so the dialogue report, the judges' agreement and `rolellm judge agreement` read it as they are.
"""

from collections.abc import Mapping, Sequence

from rolellm.evaluation.coser.judge import judge_scenes, simulation_text
from rolellm.evaluation.coser.prompts import DIMENSIONS, builtin_prompts
from rolellm.evaluation.coser.scoring import dimension_score
from rolellm.evaluation.coser.testset import ENVIRONMENT, CoserCase
from rolellm.evaluation.coser.thoughts import remove_inner_thoughts
from rolellm.evaluation.multiturn.rubric import judge_names, rubric_result
from rolellm.roles.card_prompts import role_description
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile


DIALOGUE_DIMENSIONS = DIMENSIONS[1:]  # Storyline Consistency compares with a reference a dialogue does not have
SCALE = (0, 100)
USER = "User"


def transcript_case(transcript: Mapping, profile: RoleProfile) -> tuple[CoserCase, list[dict]]:
    """A dialogue transcript as a CoSER scene (the role and the user, the scenario's situation, no reference) and its
    messages (`{"role": "User" | role, "content"}`, thoughts removed)."""
    scenario = transcript.get("scenario") or {}
    situation = scenario.get("situation", "")
    persona = scenario.get("user_persona", "")
    role = profile.name
    case = CoserCase(
        str(transcript["id"]), profile.source, situation or f"A conversation with {role}.", "",
        [role, USER, ENVIRONMENT], [role], {role: role_description(profile), **({USER: persona} if persona else {})},
    )  # fmt: skip
    messages = [{"role": role, "content": transcript["greeting"]}] if transcript.get("greeting") else []
    for turn in transcript["turns"]:
        messages += [{"role": USER, "content": turn["user"]}, {"role": role, "content": turn["assistant"]}]
    return case, [{**m, "content": remove_inner_thoughts(m["content"])} for m in messages]


def judge_transcripts_by_flaws(
    transcripts: Sequence[Mapping],
    profiles: Mapping[str, RoleProfile],
    judges: Sequence,
    seed: int = 0,
    max_tokens: int = 4096,
) -> dict:
    """Score dialogue transcripts with every judge by CoSER's flaw deduction on `DIALOGUE_DIMENSIONS`.

    Returns:
        `dict`: the shape of `judge_transcripts` (`dimensions`, `scale` `[0, 100]`, `judges`, `items`, `summary`,
        `failures`, `agreement` with two judges or more), plus `rubric: "coser_flaws"`; each judge's `rationales`
        name the flaws it found.
    """
    if not judges:
        raise ValueError("judge_transcripts_by_flaws needs at least one judge client")
    profiles = Profiles(profiles).require(
        [t["role"] for t in transcripts], "the transcripts", "the judge needs each role's description"
    )
    prompts = builtin_prompts()
    judgeable = [i for i, t in enumerate(transcripts) if t["turns"]]
    scenes = {i: transcript_case(transcripts[i], profiles[transcripts[i]["role"]]) for i in judgeable}
    items_to_judge = [(scenes[i][0], simulation_text(scenes[i][1], name_speakers=True)) for i in judgeable]
    names = judge_names(judges)
    verdicts = {}
    for name, judge in zip(names, judges):
        found = judge_scenes(
            items_to_judge, judge, prompts, max_tokens=max_tokens, seed=seed, dimensions=DIALOGUE_DIMENSIONS
        )
        verdicts[name] = dict(zip(judgeable, found))

    def entry(i: int, name: str) -> dict | None:
        verdict = verdicts[name].get(i)
        if verdict is None:
            return None
        if verdict["errors"]:
            return {"error": "; ".join(f"{d}: {e}" for d, e in verdict["errors"].items())}
        rounds = sum(m["role"] != USER for m in scenes[i][1])  # the role's lines
        return {
            "scores": {d: dimension_score(verdict[d]["flaws"], rounds) for d in DIALOGUE_DIMENSIONS},
            "rationales": {
                d: "; ".join(
                    f"{f.get('type', '')} ({f.get('severity')}): {f.get('instance', '')}" for f in verdict[d]["flaws"]
                )
                or "no flaw"
                for d in DIALOGUE_DIMENSIONS
            },
        }

    result = rubric_result(transcripts, names, entry, DIALOGUE_DIMENSIONS, SCALE, judges_name="flaw judges")
    return {"rubric": "coser_flaws", **result}
