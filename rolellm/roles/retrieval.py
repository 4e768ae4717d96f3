"""Few-shot dialogue retrieval for RoleGPT: BM25 over a profile's dialogue groups, rendered as chat turns.

The authors' procedure for Chinese roles: group the profile's lines by `diag_id`, drop groups longer than six lines,
score the groups against the question with BM25 over jieba tokens, keep the top three. Each group becomes *dialogue
engineering* turns: the other speakers' lines as a user turn (`{speaker}: “{content}”`), the role's line as the
assistant turn.

>>> from rolellm.roles.profile import RoleProfile, Utterance
>>> lines = [("唐僧", "悟空，前面是什么地方？"), ("孙悟空", "师父莫慌，俺老孙去看看！"),
...          ("八戒", "猴哥，斋饭在哪里？"), ("孙悟空", "呆子，就知道吃。"),
...          ("沙僧", "大师兄，妖怪来了！"), ("孙悟空", "俺老孙来也！")]
>>> profile = RoleProfile(name="孙悟空", lang="zh", dialogue=[
...     Utterance(act_id=0, diag_id=i // 2, speaker=s, content=c) for i, (s, c) in enumerate(lines)])
>>> retriever = DialogueRetriever(profile)
>>> groups = retriever.retrieve("八戒的斋饭", k=1)
>>> dialogue_to_messages(groups, "孙悟空")
[{'role': 'user', 'content': '八戒: “猴哥，斋饭在哪里？”'}, {'role': 'assistant', 'content': '呆子，就知道吃。'}]
"""

import functools
import logging
import re
import unicodedata

import numpy as np

from rolellm.roles.profile import RoleProfile, Utterance


_WORD = re.compile(r"\w+")


def tokenize_for_bm25(text: str, lang: str) -> list[str]:
    """Split `text` into BM25 terms: jieba words for Chinese, lowercased word tokens for English.

    Punctuation and whitespace never count as terms.

    >>> tokenize_for_bm25("Why is the rum always gone?", "en")
    ['why', 'is', 'the', 'rum', 'always', 'gone']
    >>> tokenize_for_bm25("猴哥，斋饭在哪里？", "zh")
    ['猴哥', '斋饭', '在', '哪里']
    """
    return list(_terms(text, lang))


@functools.lru_cache(maxsize=1 << 16)
def _terms(text: str, lang: str) -> tuple[str, ...]:
    """`tokenize_for_bm25`, kept: jieba cuts some 800 lines a second, and a profile's retriever is often built again
    (another `max_group_lines`, each prompting mode of a run)."""
    if lang == "zh":
        import jieba

        jieba.setLogLevel(logging.WARNING)  # jieba logs its dictionary loading at INFO
        return tuple(token for token in jieba.lcut(text.lower()) if _is_term(token))
    return tuple(_WORD.findall(text.lower()))


def _is_term(token: str) -> bool:
    return any(unicodedata.category(char)[0] in "LN" for char in token)


def is_role_exchange(group: list[Utterance], role_name: str) -> bool:
    """Whether `group` is a usable few-shot exchange: another speaker opens it and the role's line closes it."""
    return len(group) > 1 and group[0].speaker != role_name and group[-1].speaker == role_name


class DialogueRetriever:
    """BM25 over the dialogue groups of one profile.

    Only groups that can be rendered as an exchange are indexed: at most `max_group_lines` lines, opened by another
    speaker and closed by a line of the role (groups where the role does not speak, or speaks alone, teach nothing
    about how the role answers). `skipped` counts the groups left out, by reason.

    Args:
        profile (`RoleProfile`): the role and its script dialogue.
        max_group_lines (`int`, *optional*, defaults to 6): longer groups are dropped, as the authors did.

    Raises:
        `ValueError`: the profile has no usable dialogue group.
    """

    def __init__(self, profile: RoleProfile, max_group_lines: int = 6):
        from rank_bm25 import BM25Okapi

        self.profile = profile
        self.max_group_lines = max_group_lines
        self.groups: list[list[Utterance]] = []
        self.skipped = {"too_long": 0, "not_an_exchange": 0}
        for group in profile.dialogue_groups():
            if len(group) > max_group_lines:
                self.skipped["too_long"] += 1
            elif not is_role_exchange(group, profile.name):
                self.skipped["not_an_exchange"] += 1
            else:
                self.groups.append(group)
        if not self.groups:
            raise ValueError(
                f"Profile {profile.name!r} has no dialogue group of at most {max_group_lines} lines that another "
                f"speaker opens and {profile.name!r} closes ({len(profile.dialogue)} lines, skipped {self.skipped}); "
                "check that the speaker names in the dialogue match the profile name, or raise `max_group_lines`."
            )
        corpus = [_terms(" ".join(u.content for u in group), profile.lang) for group in self.groups]
        self.bm25 = BM25Okapi(corpus)

    def __len__(self) -> int:
        return len(self.groups)

    def scores(self, question: str) -> np.ndarray:
        """The BM25 score of every indexed group against `question`."""
        return self.bm25.get_scores(_terms(question, self.profile.lang))

    def retrieve(self, question: str, k: int = 3) -> list[list[Utterance]]:
        """The `k` best-scoring groups for `question`, best first (ties keep script order)."""
        order = np.argsort(-self.scores(question), kind="stable")
        return [self.groups[i] for i in order[:k]]


def _strip_speaker(content: str, speaker: str) -> str:
    return re.sub(rf"^\s*{re.escape(speaker)}\s*[:：]\s*", "", content).strip()


def dialogue_to_messages(groups: list[list[Utterance]], role_name: str) -> list[dict]:
    """Render dialogue groups as alternating chat turns (the paper's *dialogue engineering*).

    Consecutive lines of other speakers become one user turn, one line per speaker as `{speaker}: “{content}”`;
    the role's lines become the assistant turn, with any leading `{role_name}:` stripped.

    Args:
        groups (`list[list[Utterance]]`): dialogue groups, e.g. from `DialogueRetriever.retrieve`.
        role_name (`str`): the speaker whose lines are the assistant's.

    Raises:
        `ValueError`: a group does not open with another speaker or does not close with the role, so the turns
            would not alternate.
    """
    messages = []
    for group in groups:
        if not is_role_exchange(group, role_name):
            where = f"act {group[0].act_id}, dialogue {group[0].diag_id}" if group else "an empty group"
            raise ValueError(
                f"The dialogue group at {where} must open with another speaker and close with {role_name!r} "
                f"(speakers: {[u.speaker for u in group]}); use `DialogueRetriever`, which only returns such groups."
            )
        for utterance in group:
            turn = "assistant" if utterance.speaker == role_name else "user"
            if turn == "assistant":
                text = _strip_speaker(utterance.content, role_name)
            else:
                text = f"{utterance.speaker}: “{utterance.content.strip()}”"
            # groups open on a user turn and close on an assistant turn, so merging never crosses a group
            if messages and messages[-1]["role"] == turn:
                messages[-1]["content"] += "\n" + text
            else:
                messages.append({"role": turn, "content": text})
    return messages
