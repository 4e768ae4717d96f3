"""Cleaning checks for generated role-play answers: the paper's four principles as counted rejections.

RoleGPT's outputs were cleaned on four principles: *completeness*, *hiding AI identity*, *hiding role identity*
and *responsiveness*. Each is a check below that returns `None` for a good answer or the reason it rejects one;
`clean_answer` runs them in that order and returns the first rejection, so every rejected answer is counted under
exactly one reason.

>>> clean_answer("Arr, the sea is my home, savvy?", "Jack Sparrow, where do you live?", "Jack Sparrow", "en")
>>> clean_answer("As an AI language model, I do not live anywhere.", "Jack Sparrow, where do you live?",
...              "Jack Sparrow", "en")
'exposes_ai'
>>> clean_answer("作为孙悟空，俺老孙当然住在花果山。", "孙悟空，你住在哪里？", "孙悟空", "zh")
'exposes_role'
"""

import re

from rapidfuzz import fuzz


REJECTION_REASONS = ("incomplete", "exposes_ai", "exposes_role", "unresponsive")

_AI_PATTERNS = re.compile(
    r"\b(?:as an ai|an ai (?:language )?model|ai assistant|language model|artificial intelligence|virtual assistant|"
    r"chatgpt|openai|gpt-?[34])\b|人工智能|语言模型|ai助手|智能助手|虚拟助手|作为一个ai|作为ai|我是一个ai|我是ai|"
    r"chatgpt|openai",
    re.IGNORECASE,
)
_ROLE_PLAY_PATTERNS = re.compile(
    r"\b(?:role-?play(?:ing)?|in character|playing the (?:role|part) of|my character|the character i play)\b|"
    r"角色扮演|扮演|我的角色|我所扮演",
    re.IGNORECASE,
)
_REFUSAL_PATTERNS = re.compile(
    r"^(?:i'?m sorry|sorry|i apologi[sz]e|i (?:cannot|can't|am unable to|am not able to) (?:answer|help|provide))|"
    r"^(?:抱歉|对不起|很抱歉)|我(?:无法|不能)回答|无法回答(?:这个|你的)问题",
    re.IGNORECASE,
)
# the prompt's own scaffolding echoed back instead of an answer
_PROMPT_ECHO = re.compile(r"参考回答[:：<]|问题[:：]\s*<|reference answer\s*:|question\s*:\s*<", re.IGNORECASE)
# an answer cut off mid-sentence ends on a separator, or leaves a quote or bracket open
_DANGLING_END = re.compile(r"[,，、:：;；(（“‘\-–—]$")
_PAIRS = (("“", "”"), ("（", "）"), ("(", ")"), ("《", "》"), ("「", "」"))


def check_completeness(answer: str, min_chars: int = 2) -> str | None:
    """Reject empty or truncated answers: fewer than `min_chars` characters, a dangling end, an unclosed pair.

    >>> check_completeness("天下之大，俺老孙去过的地方多了，")
    'incomplete'
    """
    text = answer.strip()
    if len(text) < min_chars or _DANGLING_END.search(text):
        return "incomplete"
    if any(text.count(left) > text.count(right) for left, right in _PAIRS):
        return "incomplete"
    return None


def check_hides_ai_identity(answer: str) -> str | None:
    """Reject answers that reveal an AI or language model behind the role."""
    return "exposes_ai" if _AI_PATTERNS.search(answer) else None


def check_hides_role_identity(answer: str, role: str, lang: str) -> str | None:
    """Reject answers that step out of the role: `As Jack Sparrow, ...`, `作为孙悟空，...`, talk of role-play."""
    as_role = rf"(?:^|[.!?。！？]\s*)作为{re.escape(role)}" if lang == "zh" else rf"\bas {re.escape(role)}\b"
    if re.search(as_role, answer, re.IGNORECASE) or _ROLE_PLAY_PATTERNS.search(answer):
        return "exposes_role"
    return None


def check_responsiveness(answer: str, question: str, max_question_similarity: float = 90.0) -> str | None:
    """Reject refusals, echoes of the prompt scaffolding and answers that only repeat the question."""
    text = answer.strip()
    if _REFUSAL_PATTERNS.search(text) or _PROMPT_ECHO.search(text):
        return "unresponsive"
    if fuzz.ratio(text, question.strip()) >= max_question_similarity:
        return "unresponsive"
    return None


def clean_answer(answer: str, question: str, role: str, lang: str, min_chars: int = 2) -> str | None:
    """Run the four checks in order; return the first rejection reason (one of `REJECTION_REASONS`) or `None`.

    Args:
        answer (`str`): the generated answer.
        question (`str`): the instruction it answers (without the role name or reference prepended).
        role (`str`): the role's name.
        lang (`str`): `"en"` or `"zh"`.
        min_chars (`int`, *optional*, defaults to 2): shorter answers are incomplete.
    """
    return (
        check_completeness(answer, min_chars)
        or check_hides_ai_identity(answer)
        or check_hides_role_identity(answer, role, lang)
        or check_responsiveness(answer, question)
    )
