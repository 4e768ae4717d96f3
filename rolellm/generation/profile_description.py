"""Profile descriptions: a role's description and catchphrases written by an LLM from the role's dialogue.

The paper's descriptions were written by GPT-4 from the scripts and reviewed by people. `ProfileDescriber` asks a
chat model for a description and catchphrases from a sample of the role's dialogue spread over the whole script;
catchphrases the role never says in its script are dropped and counted. The profiles come back with
`generated=True` until someone reviews them, and are written in the release's `profiles-{lang}/desc.json` layout.

>>> from rolellm.roles.profile import RoleProfile, Utterance
>>> profile = RoleProfile("孙悟空", "zh", dialogue=[Utterance(0, 0, "唐僧", "悟空！"), Utterance(0, 0, "孙悟空", "俺老孙来也！")])
>>> ProfileDescriber().parse('{"description": "齐天大圣。", "catchphrases": ["俺老孙"]}')
{'description': '齐天大圣。', 'catchphrases': ['俺老孙']}
>>> sample_dialogue(profile, max_tokens=100)
'唐僧: 悟空！\\n孙悟空: 俺老孙来也！'
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import datasets

from rolellm.clients.config import check_minimums
from rolellm.clients.openai_compatible import ChatRequest, estimate_tokens
from rolellm.generation.job import (
    DropCounter,
    GenerationJob,
    GenerationResult,
    as_profiles,
    check_prompt_source,
    extract_json,
    failure_reason,
    sampling_params,
    save_profiles,
    user_prompt,
)
from rolellm.roles.profile import RoleProfile


@dataclass
class ProfileDescriptionConfig:
    """Settings of a profile-description run.

    > Parameters that control the prompt

    Args:
        max_dialogue_tokens (`int`, *optional*, defaults to 3000): the token budget of the dialogue shown; groups
            where the role speaks are taken evenly from the whole script until it is spent.
        description_length (`int`, *optional*, defaults to 100): the description's length asked for (characters
            for Chinese, words for English).
        num_catchphrases (`int`, *optional*, defaults to 3): at most this many catchphrases.
        prompt_template (`str`, *optional*): Jinja source replacing `rolellm/prompts/profile_description_{lang}.jinja`;
            it sees `role`, `source`, `dialogue`, `description_length` and `num_catchphrases`.

    > Parameters that control sampling

    Args:
        temperature (`float`, *optional*, defaults to 0.7): sampling temperature.
        max_tokens (`int`, *optional*, defaults to 1024): the answer's token budget.
        seed (`int`, *optional*, defaults to 0): the request seed.
    """

    max_dialogue_tokens: int = field(default=3000, metadata={"help": "Token budget of the dialogue shown."})
    description_length: int = field(default=100, metadata={"help": "Description length asked for."})
    num_catchphrases: int = field(default=3, metadata={"help": "At most this many catchphrases."})
    prompt_template: str | None = field(default=None, metadata={"help": "Jinja source replacing the prompt."})
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    max_tokens: int = field(default=1024, metadata={"help": "The answer's token budget."})
    seed: int = field(default=0, metadata={"help": "The request seed."})

    def __post_init__(self):
        check_minimums(
            self, max_dialogue_tokens=1, description_length=1, num_catchphrases=0, temperature=0, max_tokens=1
        )
        check_prompt_source(self.prompt_template)


def sample_dialogue(profile: RoleProfile, max_tokens: int = 3000) -> str:
    """The dialogue groups where the role speaks, `speaker: line` per line, taken evenly over the script."""
    groups = [
        "\n".join(f"{u.speaker}: {u.content.strip()}" for u in group)
        for group in profile.dialogue_groups()
        if any(u.speaker == profile.name for u in group)
    ]
    total = sum(estimate_tokens(group) + 1 for group in groups)
    step = max(1, -(-total // max_tokens))  # every step-th group, so that the sample spans the script
    chosen, used = [], 0
    for group in groups[::step]:
        cost = estimate_tokens(group) + 1
        if chosen and used + cost > max_tokens:
            break
        chosen.append(group)
        used += cost
    return "\n\n".join(chosen)


class ProfileDescriber(GenerationJob):
    """The profile-description generator: `prompt()` builds a role's request, `parse()` reads the JSON answer.
    Takes a config (`config_class`; its defaults when none is given)."""

    config_class = ProfileDescriptionConfig
    name = "describe"
    desc = "Profile descriptions"
    answer_schema = {
        "type": "object",
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "catchphrases": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["description", "catchphrases"],
    }

    def prompt(self, profile: RoleProfile) -> list[dict]:
        """The chat messages asking for `profile`'s description and catchphrases."""
        config = self.config
        variables = {
            "role": profile.name,
            "source": profile.source,
            "dialogue": sample_dialogue(profile, config.max_dialogue_tokens),
            "description_length": config.description_length,
            "num_catchphrases": config.num_catchphrases,
        }
        return user_prompt(config.prompt_template, f"profile_description_{profile.lang}.jinja", **variables)

    def parse(self, text: str) -> dict:
        """`{"description": str, "catchphrases": list[str]}` from the answer; `ValueError` asks again."""
        value = extract_json(text)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        description, catchphrases = value.get("description"), value.get("catchphrases", [])
        if not isinstance(description, str) or not description.strip():
            raise ValueError("the answer has no non-empty `description` string")
        if not isinstance(catchphrases, list) or not all(isinstance(c, str) for c in catchphrases):
            raise ValueError("`catchphrases` must be a list of strings")
        return {"description": description.strip(), "catchphrases": [c.strip() for c in catchphrases if c.strip()]}

    def requests(self, profiles: list[RoleProfile]) -> list[ChatRequest]:
        """One request per profile (`metadata`: role); a profile without a line of its own is an error."""
        requests = []
        for profile in profiles:
            if not any(u.speaker == profile.name for u in profile.dialogue):
                raise ValueError(
                    f"Profile {profile.name!r} has no line of its own in its dialogue to describe it from"
                )
            requests.append(
                ChatRequest(self.prompt(profile), params=sampling_params(self.config), metadata={"role": profile.name})
            )
        return requests

    def generate(self, client, profiles, output_dir=None) -> GenerationResult:
        """Describe every profile and return the profiles as rows (`RoleProfile.to_dict()`), marked generated.

        Args:
            client (`ChatClient`): `OpenAIChatClient` or `LocalChatClient`.
            profiles (`list[RoleProfile]`, `dict` or `datasets.Dataset`): the roles, with their script dialogue.
            output_dir (`str` or `Path`, *optional*): where to write `profiles-{lang}/desc.json` (and the rest of
                the release's profile layout, see `write`), with `generation/describe/generation_config.json` and
                `generation_stats.json`.

        Returns:
            `GenerationResult`: `dataset` is a `datasets.Dataset` of the described profiles (a role whose request
            failed is left out), `details["profiles"]` the same as `RoleProfile`s, `stats` the counts.
        """
        config = self.config
        profiles = as_profiles(profiles)
        requests = self.requests(profiles)
        results, usage = self.ask(client, requests, self.parse)
        failed, dropped = DropCounter(), DropCounter()
        described = []
        for profile, result in zip(profiles, results):
            if not result.ok:
                failed[failure_reason(result)] += 1
                continue
            own_lines = "\n".join(u.content for u in profile.dialogue if u.speaker == profile.name)
            catchphrases = []
            for phrase in result.parsed["catchphrases"][: config.num_catchphrases]:
                if phrase in own_lines:
                    catchphrases.append(phrase)
                else:
                    dropped["catchphrase_not_in_script"] += 1
            new = dataclasses.replace(
                profile, description=result.parsed["description"], catchphrases=catchphrases, generated=True
            )
            described.append(new)
        stats = {
            "profiles": len(profiles),
            "described": [p.name for p in described],
            "dropped": dropped.as_dict(),
            "failed": failed.as_dict(),
            "usage": usage,
        }
        rows = [p.to_dict() for p in described]
        dataset = datasets.Dataset.from_list(rows) if rows else datasets.Dataset.from_dict({"name": []})
        result = GenerationResult(dataset, stats, details={"profiles": described}, failures=self.failures(results))
        if output_dir is not None:
            self.save(output_dir, result, client)
        return result

    def write(self, output_dir: Path, result: GenerationResult) -> None:
        """The described profiles in the release layout (`profiles-{lang}/desc.json`, ...), beside the profiles
        already in `output_dir` (a described role replaces its earlier profile).

        `profiles-{lang}/generated.json` lists the roles whose description was generated and not yet reviewed.
        """
        save_profiles(output_dir, result.details["profiles"], warn=False)  # new descriptions are the point
