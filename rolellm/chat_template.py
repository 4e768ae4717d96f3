"""The role-conditioned chat template: the paper's system instruction, RoleBench rows as chat messages, and their
tokenization with an exact assistant-only loss mask.

- `build_system_instruction` renders the RoleGPT/RoCIT system instruction of the paper (English or Chinese, verbatim)
  from a `RoleProfile`; a user-supplied Jinja template can replace it.
- `to_role_messages` turns one RoleBench row into `messages` (system, user, assistant) samples.
- `set_role_chat_template` gives a base model's tokenizer rolellm's ChatML-style role template (with
  `{% generation %}` markers); a tokenizer that has a chat template keeps it.
- `encode_chat` tokenizes a conversation with any chat template and returns the assistant mask: from the
  `{% generation %}` markers when the template has them, otherwise by rendering the conversation prefix by prefix.
  Text inside a message that looks like a control token (`<|im_start|>`, `<|eot_id|>`) is encoded as plain text.

>>> from rolellm import RoleProfile
>>> profile = RoleProfile(name="Jack Sparrow", lang="en", description="A witty pirate captain")
>>> build_system_instruction(profile)[:90]
'You are Jack Sparrow, your description is: A witty pirate captain. Now please answer some '
"""

import random
import re
from functools import cache
from pathlib import Path
from typing import Literal

import jinja2

from rolellm.profiles import RoleProfile, role_key


PROMPTS_DIR = Path(__file__).parent / "prompts"
ROLE_CHAT_TEMPLATE = (PROMPTS_DIR / "chatml_role.jinja").read_text(encoding="utf-8")
ROLE_CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")

# the environment of every rolellm prompt, packaged or user-supplied: a missing variable is an error
JINJA_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@cache
def load_prompt(name: str) -> jinja2.Template:
    """The package prompt file `rolellm/prompts/{name}`, compiled once."""
    return JINJA_ENV.from_string((PROMPTS_DIR / name).read_text(encoding="utf-8"))


def build_system_instruction(
    profile: RoleProfile,
    lang: str | None = None,
    template: str | None = None,
    user_name: str | None = None,
    retrieved_dialogue: list | None = None,
) -> str:
    """Render the system instruction that puts a model in a role (RoleGPT and RoCIT).

    By default this is the paper's instruction, verbatim: `rolellm/prompts/system_en.jinja` or `system_zh.jinja`,
    with `{role}` the role's name and `{desc}` its description followed by its catchphrase sentence
    (`RoleProfile.description_with_catchphrases()`).

    Args:
        profile (`RoleProfile`): the role.
        lang (`str`, *optional*, defaults to `profile.lang`): `"en"` or `"zh"`, the language of the instruction.
        template (`str`, *optional*): Jinja source replacing the paper's instruction. It sees the variables `role`,
            `desc` (description with catchphrases), `description`, `catchphrases`, `lang`, `user_name` and
            `retrieved_dialogue`. Read a file with `Path(...).read_text()`.
        user_name (`str`, *optional*): who the role talks to; the default templates add one sentence naming them.
        retrieved_dialogue (`list[list[Utterance]]`, *optional*): script dialogue groups to show the role (the
            paper's retrieval-augmentation ablation, e.g. `DialogueRetriever.retrieve(question)`); the default
            templates append them, one `speaker: line` per line and a blank line between groups.

    Returns:
        `str`: the system instruction.

    >>> from rolellm import RoleProfile, Utterance
    >>> profile = RoleProfile(name="李白", lang="zh", description="为人爽朗大方，乐于交友，爱好饮酒作诗。")
    >>> build_system_instruction(profile)[:38]
    '你是李白，你的性格和背景是“为人爽朗大方，乐于交友，爱好饮酒作诗。”。现在请'
    >>> build_system_instruction(profile, template="{{ role }} / {{ user_name }}", user_name="杜甫")
    '李白 / 杜甫'
    """
    lang = lang if lang is not None else profile.lang
    if template is None:
        if lang not in ("en", "zh"):
            raise ValueError(f"lang={lang!r} has no default system instruction: use 'en' or 'zh', or pass template=")
        compiled = load_prompt(f"system_{lang}.jinja")
    else:
        try:
            compiled = JINJA_ENV.from_string(template)
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(f"template= is not valid Jinja (line {error.lineno}): {error.message}") from error
    try:
        return compiled.render(
            role=profile.name,
            desc=profile.description_with_catchphrases(),
            description=profile.description,
            catchphrases=list(profile.catchphrases),
            lang=lang,
            user_name=user_name,
            retrieved_dialogue=retrieved_dialogue or [],
        )
    except jinja2.UndefinedError as error:
        raise ValueError(
            f"template= uses an unknown variable ({error.message}); available: role, desc, description, "
            "catchphrases, lang, user_name, retrieved_dialogue"
        ) from error


def to_role_messages(
    row: dict,
    profile: RoleProfile,
    reference: Literal["first", "random", "all"] = "first",
    seed: int = 0,
    lang: str | None = None,
    template: str | None = None,
    user_name: str | None = None,
) -> list[list[dict]]:
    """Turn one RoleBench row into conversational samples: system instruction, question, reference answer.

    Args:
        row (`dict`): a row in the RoleBench schema (`role`, `question`, `generated`, ...).
        profile (`RoleProfile`): the profile of `row["role"]`.
        reference (`str`, *optional*, defaults to `"first"`): which reference answer(s) of `generated` to train on:
            `"first"`, `"random"` (one per row, drawn with `seed`, the same draw for the same row every time) or
            `"all"` (one sample per reference).
        seed (`int`, *optional*, defaults to 0): seed of the `"random"` choice.
        lang (`str`, *optional*, defaults to the row's `lang`, else the profile's): language of the system
            instruction.
        template (`str`, *optional*): Jinja template of the system instruction (see `build_system_instruction`).
        user_name (`str`, *optional*): who the role talks to (see `build_system_instruction`).

    Returns:
        `list[list[dict]]`: one `messages` list per sample. Questions and answers are stripped of surrounding
        whitespace (the English release starts every one with a space).

    >>> from rolellm import RoleProfile
    >>> profile = RoleProfile(name="张飞", lang="zh", description="猛将")
    >>> row = {"role": "张飞", "question": "你是谁？", "generated": ["燕人张翼德！", "俺是张飞！"], "lang": "zh"}
    >>> [m["content"] for m in to_role_messages(row, profile)[0][1:]]
    ['你是谁？', '燕人张翼德！']
    >>> [sample[-1]["content"] for sample in to_role_messages(row, profile, reference="all")]
    ['燕人张翼德！', '俺是张飞！']
    """
    references = list(row["generated"])
    if role_key(row["role"]) != role_key(profile.name):
        raise ValueError(f"row of role {row['role']!r} was given the profile of {profile.name!r}")
    if not references:
        raise ValueError(f"row of role {row['role']!r} has no reference answer in 'generated': {row['question']!r}")
    if reference == "first":
        references = references[:1]
    elif reference == "random":
        references = [random.Random(f"{seed}\x00{row['role']}\x00{row['question']}").choice(references)]
    elif reference != "all":
        raise ValueError(f"reference={reference!r} is not one of 'first', 'random', 'all'")
    lang = lang or row.get("lang") or profile.lang
    system = build_system_instruction(profile, lang=lang, template=template, user_name=user_name)
    question = row["question"].strip()
    return [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer.strip()},
        ]
        for answer in references
    ]


def set_role_chat_template(tokenizer, model=None) -> list[int]:
    """Give a tokenizer without a chat template (a base model's) rolellm's ChatML-style role template.

    The template (`rolellm/prompts/chatml_role.jinja`) wraps each turn in `<|im_start|>{role}\\n ... <|im_end|>` and
    marks the assistant turns with `{% generation %}`. Missing `<|im_start|>` / `<|im_end|>` tokens are added as
    special tokens; when `model` is given its embeddings are resized and `<|im_end|>` is added to the token ids that
    end generation. A tokenizer that already has a chat template is left unchanged.

    Args:
        tokenizer (`PreTrainedTokenizerBase`): the tokenizer, changed in place.
        model (`PreTrainedModel`, *optional*): the model to resize and whose generation config to update.

    Returns:
        `list[int]`: ids of the tokens that were added (empty when none were).

    >>> from rolellm.testing import train_tiny_tokenizer
    >>> tokenizer = train_tiny_tokenizer()
    >>> set_role_chat_template(tokenizer)
    []
    >>> tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    '<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'
    """
    if tokenizer.chat_template is not None:
        return []
    missing = [token for token in ROLE_CHAT_TOKENS if token not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False)
    tokenizer.chat_template = ROLE_CHAT_TEMPLATE
    added = tokenizer.convert_tokens_to_ids(missing)
    if model is not None:
        if len(tokenizer) > model.get_input_embeddings().num_embeddings:
            model.resize_token_embeddings(len(tokenizer))
        end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
        eos = model.generation_config.eos_token_id
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        if end_id not in eos:
            model.generation_config.eos_token_id = [*eos, end_id]
    return added


_SENTINEL = "\ue000{}\ue001"
_SENTINEL_RE = re.compile("\ue000(\\d+)\ue001")
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


def has_generation_markers(chat_template: str) -> bool:
    """Whether a chat template marks assistant turns with `{% generation %}` ... `{% endgeneration %}`."""
    return bool(_GENERATION_RE.search(chat_template))


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
