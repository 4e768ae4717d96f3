"""The prompting modes of the benchmark runner: how a RoleBench question is put to the model under test.

| mode | messages |
|---|---|
| `system` | the role system instruction as a system turn, then the question (how RoCIT trains) |
| `zero-shot` | one user turn: the role instruction, then the question (for templates without a system role) |
| `few-shot-prompt` | one user turn: the role instruction, `k` retrieved script dialogues pasted as text, the question |
| `few-shot-dialogue` | system instruction, the retrieved dialogues as real user/assistant turns, the question |
| `retrieval` | the paper's "-script" baseline: the retrieved script dialogue inside the system instruction |

The few-shot modes rank the role's script dialogue against the question with `DialogueRetriever` (BM25), so the
profile needs dialogue; `few-shot-dialogue` is the paper's *dialogue engineering*, `few-shot-prompt` its *few-shot
prompt engineering*.

>>> from rolellm.roles.profile import RoleProfile
>>> profile = RoleProfile(name="李白", lang="zh", description="为人爽朗大方，爱好饮酒作诗。")
>>> [m["role"] for m in build_messages("你最爱喝什么酒？", profile, mode="system")]
['system', 'user']
>>> build_messages("你最爱喝什么酒？", profile, mode="zero-shot")[0]["content"][-10:]
'\\n\\n你最爱喝什么酒？'
"""

from typing import get_args

from rolellm.evaluation.config import PromptingMode
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import build_system_instruction


PROMPTING_MODES = get_args(PromptingMode)
FEW_SHOT_MODES = ("few-shot-prompt", "few-shot-dialogue", "retrieval")

# The header above the pasted examples of `few-shot-prompt` and the label before the question.
_EXAMPLES_HEADER = {"en": "Here are some of your dialogues from the script:", "zh": "以下是你在剧本中的一些对话："}
_QUESTION_LABEL = {"en": "Now answer this:", "zh": "现在请回答："}


def _render_group(group, lang: str) -> str:
    if lang == "zh":
        return "\n".join(f"{line.speaker}：“{line.content}”" for line in group)
    return "\n".join(f"{line.speaker}: {line.content}" for line in group)


def build_messages(
    question: str,
    profile: RoleProfile,
    mode: PromptingMode = "system",
    retriever=None,
    num_examples: int = 3,
    lang: str | None = None,
    system_template: str | None = None,
) -> list[dict]:
    """Build the chat messages that put `question` to a model playing `profile`.

    Args:
        question (`str`): the RoleBench question (surrounding whitespace, which the English release carries, is
            stripped).
        profile (`RoleProfile`): the role; its description fills the system instruction.
        mode (`str`, *optional*, defaults to `"system"`): one of `PROMPTING_MODES` (see the module docstring).
        retriever (`DialogueRetriever`, *optional*): ranks the role's script dialogue; required by the few-shot
            modes and `retrieval`.
        num_examples (`int`, *optional*, defaults to 3): how many dialogue groups the few-shot modes retrieve.
        lang (`str`, *optional*, defaults to `profile.lang`): the language of the instruction.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction (see
            `build_system_instruction`).

    Returns:
        `list[dict]`: `{"role", "content"}` messages ending with the user's question.
    """
    from rolellm.roles.retrieval import dialogue_to_messages

    if mode not in PROMPTING_MODES:
        raise ValueError(f"mode={mode!r} is not a prompting mode; choose one of {', '.join(PROMPTING_MODES)}")
    lang = lang if lang is not None else profile.lang
    question = question.strip()
    groups = []
    if mode in FEW_SHOT_MODES:
        if retriever is None:
            raise ValueError(f"mode={mode!r} retrieves script dialogue: pass retriever=DialogueRetriever(profile)")
        groups = retriever.retrieve(question, k=num_examples)

    if mode == "retrieval":
        system = build_system_instruction(profile, lang=lang, template=system_template, retrieved_dialogue=groups)
        return [{"role": "system", "content": system}, {"role": "user", "content": question}]
    instruction = build_system_instruction(profile, lang=lang, template=system_template)
    if mode == "system":
        return [{"role": "system", "content": instruction}, {"role": "user", "content": question}]
    if mode == "few-shot-dialogue":
        return [
            {"role": "system", "content": instruction},
            *dialogue_to_messages(groups, profile.name),
            {"role": "user", "content": question},
        ]
    parts = [instruction]
    if mode == "few-shot-prompt":
        examples = "\n\n".join(_render_group(group, lang) for group in groups)
        parts += [f"{_EXAMPLES_HEADER.get(lang, _EXAMPLES_HEADER['en'])}\n\n{examples}", _QUESTION_LABEL.get(lang, "")]
        return [{"role": "user", "content": "\n\n".join(parts) + "\n" + question}]
    return [{"role": "user", "content": f"{instruction}\n\n{question}"}]
