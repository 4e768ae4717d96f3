"""Injection-safe tokenization of a conversation with any chat template, with its assistant masks.

`encode_chat` is the one path from messages to token ids: training (assistant-only loss), `LocalChatClient`,
evaluation and `rolellm chat` all use it, so text inside a message that looks like a registered token
(`<|im_start|>`, `<|eot_id|>`, `<think>`, `<tool_call>`) is encoded as plain text everywhere. The layout rules (system
text, answers, end of turn, think blocks, trimmed contents) are those of `rolellm.encoding.layout`.
"""

from rolellm.encoding.layout import SENTINEL_RE, Sequence, added_token_ids, backend_of, chat_layout


_PLAIN_PIPELINES: dict[int, tuple] = {}


def _plain_pipelines(backend) -> tuple:
    """`(scheme, with_prefix, without_prefix)`: (normalizer, pre-tokenizer) pairs for a plain run of text.

    A SentencePiece-style tokenizer puts a prefix space (`▁`) at the start of the text (`prepend_scheme="first"`) or
    of every run between added tokens (`"always"`, or a `Prepend` normalizer); a run that starts at a cut inside
    the text must not get one, so it is encoded without.
    """
    from tokenizers import normalizers, pre_tokenizers

    cached = _PLAIN_PIPELINES.get(id(backend))
    if cached is not None and cached[0] is backend:
        return cached[1]
    normalizer, pre_tokenizer, scheme = backend.normalizer, backend.pre_tokenizer, "never"
    bare_normalizer, bare_pre_tokenizer = normalizer, pre_tokenizer
    if isinstance(pre_tokenizer, pre_tokenizers.Metaspace) and pre_tokenizer.prepend_scheme != "never":
        scheme = pre_tokenizer.prepend_scheme
        bare_pre_tokenizer = pre_tokenizers.Metaspace(
            replacement=pre_tokenizer.replacement, prepend_scheme="never", split=pre_tokenizer.split
        )
    if isinstance(normalizer, normalizers.Prepend):
        scheme, bare_normalizer = "always", None
    elif isinstance(normalizer, normalizers.Sequence):
        steps = [normalizer[i] for i in range(len(normalizer))]
        if any(isinstance(step, normalizers.Prepend) for step in steps):
            scheme = "always"
            bare_normalizer = normalizers.Sequence([s for s in steps if not isinstance(s, normalizers.Prepend)])
    pipelines = (scheme, (normalizer, pre_tokenizer), (bare_normalizer, bare_pre_tokenizer))
    _PLAIN_PIPELINES[id(backend)] = (backend, pipelines)
    return pipelines


def _encode_plain(tokenizer, text: str, at_start: bool = True, after_control: bool = False) -> list[int]:
    """`text` as ordinary text: the backend's pipeline without its added tokens, special or not."""
    backend = tokenizer.backend_tokenizer
    scheme, with_prefix, without_prefix = _plain_pipelines(backend)
    prefixed = scheme == "never" or at_start or (scheme == "always" and after_control)
    normalizer, pre_tokenizer = with_prefix if prefixed else without_prefix
    if normalizer is not None:
        text = normalizer.normalize_str(text)
    splits = [split for split, _ in pre_tokenizer.pre_tokenize_str(text)] if pre_tokenizer else [text]
    return [token.id for split in splits for token in backend.model.tokenize(split)]


def _encode_sequence(tokenizer, sequence: Sequence, contents: list[str]) -> dict:
    """Token ids and masks of one sequence.

    The template's text is tokenized piece by piece between contents and cuts, to find its control (added) tokens;
    everything else, contents included, is encoded as plain text in runs that end at control tokens and cuts. On a
    conversation without injected text this gives the ids of tokenizing the whole rendering.
    """
    text, template_ranges, shifts, position = "", [], [], 0
    for match in SENTINEL_RE.finditer(sequence.text):
        template_ranges.append((len(text), len(text) + match.start() - position))
        text += sequence.text[position : match.start()]
        content = contents[int(match.group(1))]
        shifts.append((match.end(), len(content) - len(match.group(0))))
        text += content
        position = match.end()
    template_ranges.append((len(text), len(text) + len(sequence.text) - position))
    text += sequence.text[position:]

    def moved(point):  # a position in `sequence.text` -> in `text`
        return point + sum(shift for end, shift in shifts if end <= point)

    cuts = sorted({moved(c) for c in sequence.cuts})
    spans = [(moved(a), moved(b)) for a, b in sequence.spans]
    pieces = []
    for a, b in template_ranges:
        bounds = [a, *(c for c in cuts if a < c < b), b]
        pieces += [(x, y) for x, y in zip(bounds, bounds[1:]) if x < y]
    backend, added = backend_of(tokenizer), added_token_ids(tokenizer)
    encodings = backend.encode_batch([text[x:y] for x, y in pieces], add_special_tokens=False)
    controls = {}  # start -> (end, id) of each control token of the template's text
    for (x, _), encoding in zip(pieces, encodings):
        for token_id, (start, end) in zip(encoding.ids, encoding.offsets):
            if token_id in added:
                controls[x + start] = (x + end, token_id)
    control_ends = {end for end, _ in controls.values()}
    points = sorted({0, len(text), *cuts, *controls, *control_ends})
    input_ids, masks = [], []
    for x, y in zip(points, points[1:]):
        if x == y:
            continue
        if controls.get(x, (None,))[0] == y:
            ids = [controls[x][1]]
        else:
            ids = _encode_plain(tokenizer, text[x:y], at_start=x == 0, after_control=x in control_ends)
        trained = any(a <= x and y <= b for a, b in spans)
        input_ids += ids
        masks += [int(trained)] * len(ids)
    return {"input_ids": input_ids, "assistant_masks": masks}


def _check(tokenizer, chat_template):
    chat_template = chat_template if chat_template is not None else tokenizer.chat_template
    if chat_template is None:
        raise ValueError("the tokenizer has no chat template: call set_role_chat_template(tokenizer) or pass one")
    if not tokenizer.is_fast:
        raise ValueError(f"{type(tokenizer).__name__} is a slow tokenizer: encode_chat needs a fast tokenizer")
    return chat_template


def encode_chat_turns(
    tokenizer, messages: list[dict], add_generation_prompt: bool = False, chat_template=None, keep_think: bool = False
) -> list[dict]:
    """Tokenize a conversation into the sequences that train each assistant turn exactly.

    Most templates give one sequence with every assistant turn marked. A template that renders the history
    differently from the prompt each answer was given (Mistral v0.3/Nemo move the system text into the last user
    turn) gives one sequence per assistant turn, each marking only its own answer, so no turn is trained on a
    prompt the model would never see and the system text is never dropped. Arguments are those of `encode_chat`.

    Returns:
        `list[dict]`: one `{"input_ids", "assistant_masks"}` dict per sequence.

    >>> from rolellm.testing.models import train_tiny_tokenizer
    >>> tokenizer = train_tiny_tokenizer()
    >>> tokenizer.chat_template = (
    ...     "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] "
    ...     "{% if loop.last and messages[0].role == 'system' %}{{ messages[0].content }} {% endif %}{{ m.content }}"
    ...     " [/INST]{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"
    ... )  # the system text only in the last user turn, as Mistral v0.3 does
    >>> chat = [{"role": "system", "content": "Be Jack."}, {"role": "user", "content": "Hi"},
    ...         {"role": "assistant", "content": "Ahoy"}, {"role": "user", "content": "Who?"},
    ...         {"role": "assistant", "content": "Jack"}]
    >>> [tokenizer.decode(s["input_ids"]) for s in encode_chat_turns(tokenizer, chat)]  # doctest: +NORMALIZE_WHITESPACE
    ['<|endoftext|>[INST] Be Jack. Hi [/INST]Ahoy<|endoftext|>',
     '<|endoftext|>[INST] Hi [/INST]Ahoy<|endoftext|>[INST] Be Jack. Who? [/INST]Jack<|endoftext|>']
    """
    chat_template = _check(tokenizer, chat_template)
    layout = chat_layout(tokenizer, messages, chat_template, add_generation_prompt, keep_think)
    return [_encode_sequence(tokenizer, sequence, layout.contents) for sequence in layout.sequences]


def encode_chat(
    tokenizer, messages: list[dict], add_generation_prompt: bool = False, chat_template=None, keep_think: bool = False
) -> dict:
    """Tokenize a conversation with a chat template and mark the tokens of the assistant turns.

    The rendering is the template's own, found with a placeholder in place of each content; contents are then
    encoded as plain text, so a registered token's text inside a message (`<|im_start|>system` in a question,
    `<think>` in an answer) is never the control token. The prompt of each assistant turn is exactly what
    `encode_chat(messages[:turn], add_generation_prompt=True)` gives at inference, and the trained tokens are the
    answer and the template's end of turn; the text is cut into pieces at these boundaries, so no token spans
    them. What the encoder changes, the same way at training and at inference, is listed in
    `rolellm.encoding.layout` and docs/chat-templates.md: system text folded into the first user turn for
    templates without a system role, empty think blocks left out (unless `keep_think`), contents stripped for
    templates that strip them, an end-of-turn token appended for templates that write none.

    Args:
        tokenizer (`PreTrainedTokenizerFast`): the tokenizer (a fast one).
        messages (`list[dict]`): the conversation, `{"role", "content"}` dicts with string contents.
        add_generation_prompt (`bool`, *optional*, defaults to `False`): end with the assistant header (inference).
        chat_template (`str`, *optional*, defaults to `tokenizer.chat_template`): the template to render.
        keep_think (`bool`, *optional*, defaults to `False`): keep the template's think blocks (an empty
            `<think></think>` before answers, a prefilled `<think>` in the generation prompt).

    Returns:
        `dict` with `input_ids` (`list[int]`) and `assistant_masks` (`list[int]`, 1 on trained tokens).

    Raises:
        `ValueError`: the template cannot render a role conversation, or its assistant turns cannot share one
            sequence (use `encode_chat_turns`, as the `RoCITTrainer` does).

    >>> from rolellm.testing.models import train_tiny_tokenizer
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
    sequences = encode_chat_turns(tokenizer, messages, add_generation_prompt, chat_template, keep_think)
    if len(sequences) > 1:
        raise ValueError(
            "the chat template renders earlier turns differently from the prompt each answer was given (it moves "
            "the system text or re-renders answers), so the assistant turns cannot share one sequence: use "
            "rolellm.encode_chat_turns, which gives one sequence per turn (the RoCITTrainer does)"
        )
    return sequences[0]
