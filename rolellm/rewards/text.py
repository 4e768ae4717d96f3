"""What a completion says, and whose profile judges it: the two questions every role-play reward asks first.

A reward function gets completions as TRL gives them: plain strings, or conversational completions (a list of
messages, `[{"role": "assistant", "content": "..."}]`). A multi-turn rollout (`rolellm.rewards.rollout`) also gives
each completion's `transcript`, whose role lines are what the role said (the simulated user's lines are not).

>>> completion_text([{"role": "assistant", "content": "Arr!"}])
'Arr!'
>>> role_texts(["ignored"], transcript=[{"turns": [{"user": "Hi", "assistant": "Ahoy"}, {"user": "?", "assistant": "Aye"}]}])
['Ahoy\\nAye']
"""

from collections.abc import Mapping, Sequence

from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import RoleProfile


def completion_text(completion: str | Sequence[Mapping]) -> str:
    """The text of one completion: the string itself, or the assistant messages' contents of a conversational one."""
    if isinstance(completion, str):
        return completion
    return "".join(
        message["content"]
        for message in completion
        if message.get("role") == "assistant" and isinstance(message.get("content"), str)
    )


def role_texts(completions: Sequence, transcript: Sequence[Mapping | None] | None = None) -> list[str]:
    """What the role said in each completion: its text, or for a multi-turn rollout the role's lines of its
    `transcript` joined by newlines (the simulated user's lines left out)."""
    if transcript is None:
        return [completion_text(c) for c in completions]
    return [
        "\n".join(turn["assistant"] for turn in t["turns"]) if t is not None else completion_text(c)
        for c, t in zip(completions, transcript, strict=True)
    ]


def profiles_of(profiles: Mapping[str, RoleProfile], roles: Sequence[str] | None, reward: str) -> list[RoleProfile]:
    """The profile of each row's role (names matched by `rolellm.roles.lookup`); a row without a `role` column, or a
    role with no profile, is a `ValueError` naming the reward and the roles, never a silent skip."""
    if roles is None:
        raise ValueError(f"{reward} needs the dataset's 'role' column: the role of each prompt")
    profiles = Profiles(profiles).require(roles, f"the rows scored by {reward}")
    return [profiles[role] for role in roles]
