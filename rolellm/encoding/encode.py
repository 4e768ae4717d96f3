"""Injection-safe tokenization of a conversation with any chat template, with its assistant mask.

`encode_chat` is the one path from messages to token ids: training (assistant-only loss), the local chat client and
inference all use it, so text inside a message that looks like a control token (`<|im_start|>`, `<|eot_id|>`) is
encoded as plain text everywhere.
"""

import re

from rolellm.encoding.chat_template import has_generation_markers


_SENTINEL = "\ue000{}\ue001"
_SENTINEL_RE = re.compile("\ue000(\\d+)\ue001")


def _render(tokenizer, messages, chat_template, add_generation_prompt=False, with_generation_spans=False):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(
        conversations=[messages],
        chat_template=chat_template,
        return_assistant_tokens_mask=with_generation_spans,
        add_generation_prompt=add_generation_prompt,
        **tokenizer.special_tokens_map,
    )
    return (rendered[0], spans[0]) if with_generation_spans else rendered[0]


def _control_token_pattern(tokenizer) -> re.Pattern | None:
    tokens = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.special}, key=len, reverse=True)
    return re.compile("|".join(re.escape(token) for token in tokens)) if tokens else None


def encode_chat(tokenizer, messages: list[dict], add_generation_prompt: bool = False, chat_template=None) -> dict:
    """Tokenize a conversation with a chat template and mark the tokens of the assistant turns.

    The assistant spans come from the template's `{% generation %}` markers when it has them; otherwise they are
    found by rendering the conversation prefix by prefix: an assistant turn is what rendering up to and including it
    adds to the rendering of the conversation before it with `add_generation_prompt=True` (so the prompt the model
    sees at inference is exactly the one it was trained on). The tokens are those of `tokenizer.apply_chat_template`,
    except that a special token's text inside a message (`<|im_start|>system` in a question, say) is encoded as
    plain text instead of as the control token.

    Args:
        tokenizer (`PreTrainedTokenizerFast`): the tokenizer (a fast one: the mask needs character offsets).
        messages (`list[dict]`): the conversation, `{"role", "content"}` dicts with string contents.
        add_generation_prompt (`bool`, *optional*, defaults to `False`): end with the assistant header (inference).
        chat_template (`str`, *optional*, defaults to `tokenizer.chat_template`): the template to render.

    Returns:
        `dict` with `input_ids` (`list[int]`) and `assistant_masks` (`list[int]`, 1 on assistant tokens).

    >>> from rolellm.testing import train_tiny_tokenizer
    >>> tokenizer = train_tiny_tokenizer()
    >>> from rolellm.encoding.chat_template import set_role_chat_template
    >>> _ = set_role_chat_template(tokenizer)
    >>> messages = [{"role": "user", "content": "Say <|im_end|>"}, {"role": "assistant", "content": "Arr"}]
    >>> encoded = encode_chat(tokenizer, messages)
    >>> encoded["input_ids"].count(tokenizer.convert_tokens_to_ids("<|im_end|>"))  # the user's one is plain text
    2
    >>> tokenizer.decode([i for i, m in zip(encoded["input_ids"], encoded["assistant_masks"]) if m])
    'Arr<|im_end|>'
    """
    chat_template = chat_template if chat_template is not None else tokenizer.chat_template
    if chat_template is None:
        raise ValueError("the tokenizer has no chat template: call set_role_chat_template(tokenizer) or pass one")
    if not tokenizer.is_fast:
        raise ValueError(f"{type(tokenizer).__name__} is a slow tokenizer: assistant masks need a fast tokenizer")
    markers = has_generation_markers(chat_template)
    # Render once with a sentinel in place of each content, to know where every message's text lands.
    placeholders = [{**message, "content": _SENTINEL.format(i)} for i, message in enumerate(messages)]
    rendered = _render(tokenizer, placeholders, chat_template, add_generation_prompt, with_generation_spans=markers)
    rendered, generation_spans = rendered if markers else (rendered, [])
    text, content_spans, shifts, last = "", [], [], 0
    for match in _SENTINEL_RE.finditer(rendered):
        content = messages[int(match.group(1))]["content"]
        text += rendered[last : match.start()]
        content_spans.append((len(text), len(text) + len(content)))
        shifts.append((match.end(), len(content) - len(match.group(0))))
        text += content
        last = match.end()
    text += rendered[last:]
    expected = _render(tokenizer, messages, chat_template, add_generation_prompt)
    if text != expected:
        raise ValueError(
            "the chat template changes the message contents (it strips or edits them), so assistant spans cannot "
            "be located; strip the contents before rendering, or use a template that inserts them as they are"
        )

    def to_text_offset(position):  # position in the sentinel rendering -> position in `text`
        return position + sum(shift for end, shift in shifts if end <= position)

    if markers:
        assistant_spans = [(to_text_offset(start), to_text_offset(end)) for start, end in generation_spans]
    else:
        assistant_spans = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt = _render(tokenizer, messages[:i], chat_template, add_generation_prompt=True)
            turn = _render(tokenizer, messages[: i + 1], chat_template)
            if not (turn.startswith(prompt) and text.startswith(turn)):
                raise ValueError(
                    f"the chat template is not prefix-preserving at message {i}: rendering the conversation up to it "
                    "is not a prefix of rendering all of it, so the assistant turn cannot be located; add "
                    "{% generation %} markers to the template"
                )
            assistant_spans.append((len(prompt), len(turn)))

    # Split the text where a control token's text appears inside a message; those pieces are encoded as plain text.
    pieces, start, pattern = [], 0, _control_token_pattern(tokenizer)
    for content_start, content_end in content_spans if pattern else []:
        for match in pattern.finditer(text, content_start, content_end):
            pieces += [(start, match.start(), False), (match.start(), match.end(), True)]
            start = match.end()
    pieces.append((start, len(text), False))
    input_ids, starts = [], []
    for piece_start, piece_end, plain in pieces:
        if piece_start == piece_end:
            continue
        encoded = tokenizer(
            text[piece_start:piece_end],
            add_special_tokens=False,
            return_offsets_mapping=True,
            split_special_tokens=plain,
        )
        input_ids += encoded["input_ids"]
        starts += [piece_start + offset[0] for offset in encoded["offset_mapping"]]
    masks = [int(any(s <= pos < e for s, e in assistant_spans)) for pos in starts]
    return {"input_ids": input_ids, "assistant_masks": masks}
