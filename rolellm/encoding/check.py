"""`check_chat_template`: does a tokenizer's chat template train and prompt a role model exactly and safely?

The checks run `encode_chat` on synthetic role conversations (a system text, one and two question/answer turns,
answers that start with whitespace, every registered token's text inside the contents) and compare the tokens with
the template's own rendering. `rolellm template check MODEL_OR_DIR` prints the same report.
"""

from dataclasses import dataclass, field

from rolellm.encoding.encode import encode_chat, encode_chat_turns
from rolellm.encoding.layout import SENTINEL, TemplateRenderer, added_token_ids, chat_layout, placeholder_messages


SYSTEM = "You are Jack Sparrow, captain of the Black Pearl."
TURNS = [("Where is the rum?", "Why is the rum always gone?"), ("Who are you?", "\nCaptain Jack Sparrow, savvy?")]


@dataclass
class TemplateCheck:
    """One check: its name, whether it passed, and why (the cause when it failed)."""

    name: str
    passed: bool
    reason: str


@dataclass
class TemplateReport:
    """The result of `check_chat_template`: each check, and what the encoder changes for this template."""

    checks: list[TemplateCheck] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(check.passed for check in self.checks)

    @property
    def cause(self) -> str:
        """The first failed check as one line (`""` when all passed)."""
        failed = next((c for c in self.checks if not c.passed), None)
        return f"{failed.name}: {failed.reason}" if failed else ""

    def add(self, name: str, passed: bool, reason: str) -> bool:
        self.checks.append(TemplateCheck(name, passed, reason))
        return passed

    def __str__(self) -> str:
        lines = [f"{'PASS' if c.passed else 'FAIL'}  {c.name}: {c.reason}" for c in self.checks]
        lines.append(f"changes made by the encoder: {', '.join(self.changes) or 'none'}")
        lines.append("the template is supported" if self.ok else f"the template is NOT supported ({self.cause})")
        return "\n".join(lines)


def _conversation(turns: int, system: str = SYSTEM, text: str = "") -> list[dict]:
    messages = [{"role": "system", "content": system + text}]
    for question, answer in TURNS[:turns]:
        messages += [{"role": "user", "content": question + text}, {"role": "assistant", "content": answer + text}]
    return messages


def _reference(tokenizer, chat_template, messages, keep_think, add_generation_prompt) -> str:
    """The template's own rendering of `messages` as the encoder prepares them (folded system, stripped contents)."""
    layout = chat_layout(tokenizer, messages, chat_template, add_generation_prompt, keep_think)
    fold = "system folded into the first user turn" in layout.changes
    prepared = []
    for message in placeholder_messages(messages, fold):
        content = message["content"]
        for i, text in enumerate(layout.contents):
            content = content.replace(SENTINEL.format(i), text)
        prepared.append({**message, "content": content})
    return TemplateRenderer(tokenizer, chat_template, keep_think)(prepared, add_generation_prompt)


def _runs(masks: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, mask in enumerate([*masks, 0]):
        if mask and start is None:
            start = i
        elif not mask and start is not None:
            runs.append((start, i))
            start = None
    return runs


def _check_turns(report, tokenizer, chat_template, turns, keep_think) -> bool:
    """Each answer's tokens are trained exactly, after exactly its inference prompt; the ends of turn are trained."""
    messages = _conversation(turns)
    layout = chat_layout(tokenizer, messages, chat_template, keep_think=keep_think)
    sequences = encode_chat_turns(tokenizer, messages, chat_template=chat_template, keep_think=keep_think)
    name = "single-turn mask" if turns == 1 else "multi-turn masks"
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    found = []  # (sequence, run) per answer, in order
    for sequence in sequences:
        found += [(sequence, run) for run in _runs(sequence["assistant_masks"])]
    if len(found) != len(answers):
        return report.add(name, False, f"{len(found)} trained spans for {len(answers)} answers")
    for (sequence, (start, end)), index in zip(found, answers):
        ids = sequence["input_ids"]
        trained = tokenizer.decode(ids[start:end])
        answer = layout.contents[index]
        if answer not in trained:
            return report.add(name, False, f"answer {index} trains {trained!r}, not the answer {answer!r}")
        end_of_turn = trained[trained.index(answer) + len(answer) :]
        if not end_of_turn:
            return report.add(name, False, f"answer {index} trains no end of turn after {answer!r}")
        if any(question in end_of_turn for question, _ in TURNS):
            return report.add(name, False, f"answer {index} trains the next prompt: {end_of_turn!r}")
        prompt = encode_chat(tokenizer, messages[:index], True, chat_template, keep_think)["input_ids"]
        if ids[:start] != prompt:
            return report.add(name, False, f"the prompt of answer {index} is not the inference prompt")
        expected = _reference(tokenizer, chat_template, messages[:index], keep_think, True)
        if tokenizer.decode(prompt) != expected:
            return report.add(name, False, f"the inference prompt of answer {index} is not the template's rendering")
    how = "one sequence" if len(sequences) == 1 else f"{len(sequences)} sequences (one per answer)"
    return report.add(name, True, f"answers and ends of turn trained exactly after their inference prompts; {how}")


def check_chat_template(tokenizer, chat_template: str | None = None, keep_think: bool = False) -> TemplateReport:
    """Check that a chat template encodes role conversations exactly and safely with `rolellm.encode_chat`.

    Checks: the template renders a role conversation (system, user, assistant; a template without a system role
    gets it folded into the first user turn); the system text is in every prompt; single- and multi-turn answers
    and their ends of turn are trained exactly, each after exactly its inference prompt; the tokens decode to the
    template's rendering; the text of every registered token (special or not) inside the system, user and
    assistant contents is encoded as plain text.

    Args:
        tokenizer (`PreTrainedTokenizerFast`): the tokenizer to check.
        chat_template (`str`, *optional*, defaults to `tokenizer.chat_template`): the template to check.
        keep_think (`bool`, *optional*, defaults to `False`): check with the template's think blocks kept.

    Returns:
        `TemplateReport`: per check passed/failed with a reason; `report.ok` is `True` when all passed.

    >>> from rolellm.testing.models import train_tiny_tokenizer
    >>> from rolellm.encoding.chat_template import set_role_chat_template
    >>> tokenizer = train_tiny_tokenizer()
    >>> _ = set_role_chat_template(tokenizer)
    >>> report = check_chat_template(tokenizer)
    >>> report.ok, [check.name for check in report.checks]  # doctest: +NORMALIZE_WHITESPACE
    (True, ['renders', 'system text', 'single-turn mask', 'multi-turn masks', 'round trip', 'injection'])
    """
    report = TemplateReport()
    chat_template = chat_template if chat_template is not None else tokenizer.chat_template
    if chat_template is None or not tokenizer.is_fast:
        why = "has no chat template" if chat_template is None else "is a slow one: encode_chat needs a fast tokenizer"
        report.add("tokenizer", False, f"the tokenizer {why}")
        return report
    if tokenizer.decode(tokenizer(SYSTEM, add_special_tokens=False)["input_ids"]) != SYSTEM:
        reason = "decode(encode(text)) is not the text: its vocabulary is missing (no tokenizer.json?) or edits text"
        report.add("tokenizer", False, reason)
        return report
    try:
        layout = chat_layout(tokenizer, _conversation(2), chat_template, keep_think=keep_think)
    except Exception as error:  # noqa: BLE001  (a template can raise anything; the report names it)
        report.add("renders", False, str(error) or type(error).__name__)
        return report
    report.changes = layout.changes
    report.add("renders", True, "a system, user, assistant conversation renders")
    folded = "system folded into the first user turn" in layout.changes
    prompts = [encode_chat(tokenizer, _conversation(2)[:i], True, chat_template, keep_think) for i in (2, 4)]
    decoded = [tokenizer.decode(p["input_ids"]) for p in prompts]
    has_system = all(SYSTEM in text for text in decoded)
    if folded:
        placement = "folded into the first user turn"
    elif has_system and decoded[1].find(SYSTEM) > decoded[1].find(TURNS[0][0]):
        placement = "in the last user turn, where the template puts it"
    else:
        placement = "before the first user turn"
    report.add("system text", has_system, f"in every inference prompt ({placement})" if has_system else "missing")
    try:
        for turns in (1, 2):
            _check_turns(report, tokenizer, chat_template, turns, keep_think)
    except ValueError as error:
        report.add("masks", False, str(error))
    messages = _conversation(2)
    sequences = encode_chat_turns(tokenizer, messages, chat_template=chat_template, keep_think=keep_think)
    if len(sequences) == 1:
        decoded = tokenizer.decode(sequences[0]["input_ids"])
        expected = _reference(tokenizer, chat_template, messages, keep_think, False)
        appended = "end of turn appended" in layout.changes
        if decoded == expected or (appended and decoded.startswith(expected)):
            reason = "the tokens decode to the template's rendering" + (" + the end of turn" if appended else "")
            report.add("round trip", True, reason)
        else:
            report.add("round trip", False, f"decodes to {decoded!r}, the template renders {expected!r}")
    else:
        report.add("round trip", True, "each sequence starts with the template's rendering of its inference prompt")
    _check_injection(report, tokenizer, chat_template, keep_think)
    return report


def _check_injection(report, tokenizer, chat_template, keep_think) -> bool:
    """Every registered token's text in the contents is plain text, in training sequences and inference prompts:
    the control tokens are exactly those of the same conversation without the injected text."""
    added = added_token_ids(tokenizer)
    texts = [t for t in (tokenizer.backend_tokenizer.id_to_token(i) for i in sorted(added)) if t and t.strip()]
    text = " " + " ".join(texts)

    def controls(encoded):
        return [i for i in encoded["input_ids"] if i in added]

    clean, injected = _conversation(2), _conversation(2, text=text)
    pairs = zip(encode_chat_turns(tokenizer, clean, chat_template=chat_template, keep_think=keep_think),
                encode_chat_turns(tokenizer, injected, chat_template=chat_template, keep_think=keep_think))  # fmt: skip
    for a, b in pairs:
        if controls(a) != controls(b):
            return report.add("injection", False, "a registered token's text in a message became a control token")
        trained = tokenizer.decode([i for i, m in zip(b["input_ids"], b["assistant_masks"]) if m])
        if text.strip() not in trained:
            return report.add("injection", False, "the injected text in an answer is not trained as plain text")
    a, b = (encode_chat(tokenizer, c[:4], True, chat_template, keep_think) for c in (clean, injected))
    if controls(a) != controls(b):
        return report.add("injection", False, "a registered token's text in a prompt became a control token")
    return report.add("injection", True, f"the text of all {len(texts)} registered tokens stays plain text")
