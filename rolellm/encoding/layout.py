"""Where a chat template puts each part of a conversation: the prompt, each answer and its end of turn.

The template is rendered with a placeholder (a private-use sentinel) in place of every message's content, so the
layout is found on the template's own text and never on the content: a content is inserted later as plain text.
Rules, applied the same way for training and for inference (`add_generation_prompt=True`):

- **System text**: a template that raises on a system message (Gemma-2), or drops it from a prompt, gets the
  system text folded into the first user turn (`"{system}\\n\\n{user}"`, as Gemma-3 does itself). A template that
  moves it (Mistral v0.3/Nemo put it into the last user turn) keeps its own placement.
- **Answer turns**: the prompt of an answer is the template's rendering of the conversation before it with the
  generation prompt; the answer is the content plus what the template writes after it (its end of turn). A
  template that writes nothing after an answer (GLM, ChatGLM3) ends the turn with the first token of the next
  turn (`<|user|>`), which is appended after the last answer. Several answers share one sequence when each
  answer's prompt + answer is a prefix of the last one's; otherwise (the template re-renders the history, as
  Mistral v0.3/Nemo do with the system text) every answer is its own sequence.
- **Thinking**: by default empty think blocks (`<think>\\n\\n</think>`) are removed from the template's text and a
  generation prompt that opens a think block (DeepSeek-R1's `<think>\\n`) is cut before it, so role answers are
  trained and generated without one. `keep_think=True` keeps the template's text.
- **Trimmed contents**: a template that strips contents (`|trim`, `.strip()`) gets them stripped before rendering.
"""

import os
import re
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from jinja2.exceptions import TemplateError

from rolellm.encoding.chat_template import has_generation_markers


SENTINEL = "\ue000{}\ue001"
SENTINEL_RE = re.compile("\ue000(\\d+)\ue001")
_EMPTY_THINK_RE = re.compile(r"<think>\s*</think>\s*")
_OPEN_THINK_RE = re.compile(r"<think>\s*$")
_PAD_LEFT, _PAD_RIGHT = "\n \t", "\t \n"  # around a content: what the template strips of it is missing


@dataclass
class Sequence:
    """One token sequence: `text` holds sentinels for contents; `spans` are trained, `cuts` split the tokenization."""

    text: str
    spans: list[tuple[int, int]]
    cuts: list[int]


@dataclass
class Layout:
    """The sequences of a conversation, the (possibly stripped) content of each message, and what was changed."""

    sequences: list[Sequence]
    contents: list[str]
    changes: list[str] = field(default_factory=list)


@dataclass
class _Turn:
    prompt: str  # the inference prompt of this answer
    head: str  # prompt + what the template opens the answer with + the content's sentinel
    end: str  # what the template writes after the content, up to the next turn
    trained: int  # how much of `end` is trained (all of it, or up to the end of a {% generation %} block)


def render(tokenizer, messages, chat_template, add_generation_prompt=False, generation_spans=False):
    """The template's rendering (and, with `generation_spans`, the character spans of its generation blocks)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(
        conversations=[messages],
        chat_template=chat_template,
        add_generation_prompt=add_generation_prompt,
        return_assistant_tokens_mask=generation_spans,
        **tokenizer.special_tokens_map,
    )
    return (rendered[0], spans[0]) if generation_spans else rendered[0]


def _template_error(error: Exception) -> ValueError:
    return ValueError(
        f"the chat template cannot render a role conversation (system, user, assistant turns): it raises {error}; "
        "use a chat template that accepts these roles (pass chat_template=...)"
    )


class TemplateRenderer:
    """Renders placeholder conversations with the think rules applied to the template's text."""

    def __init__(self, tokenizer, chat_template, keep_think):
        self.tokenizer, self.chat_template, self.keep_think = tokenizer, chat_template, keep_think
        self.markers = has_generation_markers(chat_template)
        self.changes: set[str] = set()

    def __call__(self, messages, add_generation_prompt=False) -> str:
        text = render(self.tokenizer, messages, self.chat_template, add_generation_prompt)
        if self.keep_think:
            return text
        cleaned = _EMPTY_THINK_RE.sub("", text)
        if add_generation_prompt:
            cleaned = _OPEN_THINK_RE.sub("", cleaned)
        if cleaned != text:
            self.changes.add("think block removed")
        return cleaned


def placeholder_messages(messages, fold_system: bool) -> list[dict]:
    placeholders = [{**message, "content": SENTINEL.format(i)} for i, message in enumerate(messages)]
    if fold_system and placeholders and placeholders[0]["role"] == "system":
        system, rest = placeholders[0], placeholders[1:]
        first_user = next((i for i, m in enumerate(rest) if m["role"] == "user"), None)
        if first_user is None:
            raise ValueError("the chat template has no system role and the conversation has no user turn to hold it")
        rest[first_user] = {**rest[first_user], "content": system["content"] + "\n\n" + rest[first_user]["content"]}
        placeholders = rest
    return placeholders


def _strip_rules(renderer, placeholders, count, add_generation_prompt) -> list[tuple]:
    """What the template strips of each of the `count` contents: `(left, right)`, each `False` (nothing), `None`
    (all whitespace) or the characters it strips (`.lstrip('\\n')`).

    Each content is padded with whitespace in turn; what is missing of the padding in the rendering is what the
    template strips.
    """
    baseline = render(renderer.tokenizer, placeholders, renderer.chat_template, add_generation_prompt)
    rules = []
    for i in range(count):
        sentinel, left_rule, right_rule = SENTINEL.format(i), False, False
        position = baseline.find(sentinel)
        if position >= 0:
            padded = [{**m, "content": m["content"].replace(sentinel, _PAD_LEFT + sentinel + _PAD_RIGHT)}
                      for m in placeholders]  # fmt: skip
            rendered = render(renderer.tokenizer, padded, renderer.chat_template, add_generation_prompt)
            at = rendered.find(sentinel)
            left = rendered[position:at]
            right = rendered[at + len(sentinel) : len(rendered) - len(baseline) + position + len(sentinel)]
            if left != _PAD_LEFT and _PAD_LEFT.endswith(left):  # stripped: all whitespace or the removed characters
                left_rule = _PAD_LEFT[: len(_PAD_LEFT) - len(left)] if left else None
            if right != _PAD_RIGHT and _PAD_RIGHT.startswith(right):
                right_rule = _PAD_RIGHT[len(right) :] if right else None
        rules.append((left_rule, right_rule))
    return rules


def _apply_strip(content: str, rule: tuple) -> str:
    left, right = rule
    content = content if left is False else content.lstrip(left)
    return content if right is False else content.rstrip(right)


def _after_last_sentinel(text: str) -> str:
    matches = list(SENTINEL_RE.finditer(text))
    return text[matches[-1].end() :] if matches else text


def backend_of(tokenizer):
    """The tokenizer's `tokenizers` backend, set to read control tokens as tokens.

    transformers leaves the backend's `encode_special_tokens` as the last `split_special_tokens` call set it.
    """
    backend = tokenizer.backend_tokenizer
    backend.encode_special_tokens = False
    return backend


_ADDED_IDS: dict[int, tuple[int, frozenset]] = {}


def added_token_ids(tokenizer) -> frozenset:
    """The ids of the tokenizer's added tokens, special or not (cached per backend and vocabulary size)."""
    backend = tokenizer.backend_tokenizer
    size = backend.get_vocab_size(with_added_tokens=True)
    cached = _ADDED_IDS.get(id(backend))
    if cached is None or cached[0] != size:
        cached = _ADDED_IDS[id(backend)] = (size, frozenset(backend.get_added_tokens_decoder()))
    return cached[1]


def _first_token_text(tokenizer, text: str) -> str:
    """The first token of `text` when it is an added (control) token, else `""`."""
    encoding = backend_of(tokenizer).encode(text, add_special_tokens=False)
    if not encoding.ids or encoding.ids[0] not in added_token_ids(tokenizer):
        return ""
    return text[: encoding.offsets[0][1]]


def _turn(renderer, messages, index) -> _Turn:
    """The layout of the answer at `messages[index]`, in placeholders."""
    prompt = renderer(messages[:index], add_generation_prompt=True)
    rendered = renderer(messages[: index + 1])
    sentinel = messages[index]["content"]
    start = rendered.find(sentinel)
    if start < 0:
        raise ValueError(f"the chat template does not render the content of assistant message {index}")
    before, end = _after_last_sentinel(rendered[:start]), rendered[start + len(sentinel) :]
    opening = _after_last_sentinel(prompt)
    if before.startswith(opening):
        extra = before[len(opening) :]  # what the template writes between its generation prompt and the answer
    elif opening.startswith(before):
        extra = ""  # the generation prompt already opens more of the answer (a prefilled think block)
    else:
        raise ValueError(
            f"the chat template's generation prompt ends with {opening!r} but it renders an answer after "
            f"{before!r}: the prompt a model is given is not the one it would be trained on; fix the template's "
            "add_generation_prompt branch"
        )
    if renderer.markers:  # the template marks what is trained: its generation block ends the answer
        raw, blocks = render(renderer.tokenizer, messages[: index + 1], renderer.chat_template, generation_spans=True)
        content_end = raw.find(sentinel) + len(sentinel)
        block_end = next((b for a, b in blocks if a <= content_end <= b), content_end)
        trained = len(raw[content_end:block_end]) if end.startswith(raw[content_end:block_end]) else len(end)
    else:
        trained = len(end)
    if not end:  # no end of turn: the next turn's first (control) token ends the answer
        following = renderer([*messages[: index + 1], {"role": "user", "content": SENTINEL.format(len(messages))}])
        after = following[following.find(sentinel) + len(sentinel) :]
        end = _first_token_text(renderer.tokenizer, after[: after.find(SENTINEL.format(len(messages)))])
        trained = len(end)
        if end:
            renderer.changes.add("end of turn appended")
    return _Turn(prompt=prompt, head=prompt + extra + sentinel, end=end, trained=trained)


def _merge(tokenizer, turns: list[_Turn], text: str) -> list[tuple[int, int]] | None:
    """The spans of `turns` inside `text` when each one's prompt + answer is a prefix of it, else `None`."""
    spans = []
    for turn in turns:
        if not text.startswith(turn.head):
            return None
        common = len(os.path.commonprefix([turn.end, text[len(turn.head) :]]))
        if turn.end:  # keep whole tokens of the end of turn
            offsets = backend_of(tokenizer).encode(turn.end, add_special_tokens=False).offsets
            common = max([end for _, end in offsets if end <= common], default=0)
            if not common:
                return None
        spans.append((len(turn.prompt), len(turn.head) + min(common, turn.trained)))
    return spans


_LAYOUTS: OrderedDict = OrderedDict()  # recent layouts: a layout depends on the roles, never on the contents
_LAYOUT_CACHE_SIZE = 1024


def chat_layout(tokenizer, messages, chat_template, add_generation_prompt=False, keep_think=False) -> Layout:
    """The token sequences to encode for `messages`; see the module docstring for the rules.

    The template only ever sees placeholders, so the layout of a conversation depends on its roles (and any other
    message fields), not on its contents: it is computed once per shape and reused.
    """
    for i, message in enumerate(messages):
        if not isinstance(message.get("content"), str):
            kind = type(message.get("content")).__name__
            raise ValueError(f"message {i} ({message.get('role')!r}) has a {kind} content: give text")
    shape = tuple(tuple(sorted((k, repr(v)) for k, v in m.items() if k != "content")) for m in messages)
    key = (id(tokenizer), len(tokenizer), repr(tokenizer.special_tokens_map), chat_template, shape,
           add_generation_prompt, keep_think)  # fmt: skip
    cached = _LAYOUTS.get(key)
    if cached is None or cached[0]() is not tokenizer:  # (a weak reference: the cache never keeps a tokenizer alive)
        layout = _shape_layout(tokenizer, messages, chat_template, add_generation_prompt, keep_think)
        cached = _LAYOUTS[key] = (weakref.ref(tokenizer), layout)
        if len(_LAYOUTS) > _LAYOUT_CACHE_SIZE:
            _LAYOUTS.popitem(last=False)
    else:
        _LAYOUTS.move_to_end(key)
    sequences, rules, changes = cached[1]
    contents = [_apply_strip(m["content"], rule) for m, rule in zip(messages, rules)]
    if contents != [m["content"] for m in messages]:
        changes = sorted({*changes, "contents stripped"})
    return Layout(sequences=sequences, contents=contents, changes=changes)


def _shape_layout(tokenizer, messages, chat_template, add_generation_prompt, keep_think) -> tuple:
    """`(sequences, strip rules, changes)` of a conversation of this shape."""
    renderer = TemplateRenderer(tokenizer, chat_template, keep_think)
    has_system = bool(messages) and messages[0]["role"] == "system"
    fold = False
    while True:
        placeholders = placeholder_messages(messages, fold)
        try:
            rules = _strip_rules(renderer, placeholders, len(messages), add_generation_prompt)
            sequences = _layout(renderer, placeholders, add_generation_prompt)
        except TemplateError as error:
            if has_system and not fold:
                fold = True
                continue
            raise _template_error(error) from None
        if not has_system or all(SENTINEL.format(0) in sequence.text for sequence in sequences):
            break
        if fold:
            raise ValueError("the chat template drops the system text even when it is folded into the first user turn")
        fold = True
    changes = sorted(renderer.changes | ({"system folded into the first user turn"} if fold else set()))
    return sequences, rules, changes


def _layout(renderer, messages, add_generation_prompt) -> list[Sequence]:
    answers = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    if not add_generation_prompt and answers and answers[-1] == len(messages) - 1:
        turns = [_turn(renderer, messages, i) for i in answers]
        last = turns[-1]
        text = last.head + last.end
        history = _merge(renderer.tokenizer, turns[:-1], text)
        if history is not None:
            spans = [*history, (len(last.prompt), len(last.head) + last.trained)]
            return [Sequence(text, spans, [p for span in spans for p in span])]
        sequences = []  # one sequence per answer, its history cut the way inference cuts it
        for k, turn in enumerate(turns):
            text = turn.head + turn.end
            cuts = [p for span in _merge(renderer.tokenizer, turns[:k], text) or [] for p in span]
            span = (len(turn.prompt), len(turn.head) + turn.trained)
            sequences.append(Sequence(text, [span], [*cuts, *span]))
        return sequences
    text = renderer(messages, add_generation_prompt)
    turns = [_turn(renderer, messages, i) for i in answers]
    spans = _merge(renderer.tokenizer, turns, text) or []
    return [Sequence(text, spans, [p for span in spans for p in span])]
