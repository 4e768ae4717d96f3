"""How a role is prompted: the paper's system instruction and RoleBench rows as chat messages.

- `build_system_instruction` renders the RoleGPT/RoCIT system instruction of the paper (English or Chinese, verbatim)
  from a `RoleProfile`; a user-supplied Jinja template can replace it.
- `build_role_messages` puts a question to a model playing a role, in every prompting mode: the one builder of
  RoleGPT's requests and of the benchmark runner's.
- `to_role_messages` turns one RoleBench row into `messages` (system, user, assistant) samples.
- `build_chat_messages` and `role_greeting` assemble a multi-turn chat with a role (`rolellm chat`, the multi-turn
  evaluation).
- `load_prompt` compiles a packaged prompt file of `rolellm/prompts/`.

>>> from rolellm import RoleProfile
>>> profile = RoleProfile(name="Jack Sparrow", lang="en", description="A witty pirate captain")
>>> build_system_instruction(profile)[:90]
'You are Jack Sparrow, your description is: A witty pirate captain. Now please answer some '
"""

import random
from functools import cache
from pathlib import Path
from typing import Literal, get_args

import jinja2

from rolellm.roles.card_prompts import card_data, card_examples_text, card_field, card_system_text, post_history_text
from rolellm.roles.lookup import same_role
from rolellm.roles.profile import RoleProfile, Utterance


PROMPTS_DIR = Path(__file__).parent.parent / "prompts"

# the environment of every rolellm prompt, packaged or user-supplied: a missing variable is an error
JINJA_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)

# How a question is put to a model playing a role; see `build_role_messages`.
PromptingMode = Literal["system", "zero-shot", "few-shot", "few-shot-prompt", "few-shot-dialogue", "retrieval"]
PROMPTING_MODES = get_args(PromptingMode)
EXAMPLE_MODES = ("few-shot", "few-shot-prompt", "few-shot-dialogue", "retrieval")  # the modes that show script lines


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
    context: list[str] | None = None,
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
        context (`list[str]`, *optional*): the recent turns of the conversation (oldest first), scanned for the
            keys of a Character Card's lorebook.

    A profile read from a Character Card gets SillyTavern's assembly around this instruction
    (`rolellm.roles.card_prompts.card_system_text`): the card's `system_prompt` replaces it (`{{original}}` stands
    for it), then the lorebook entries `context` triggers, `personality` and `scenario`; the retrieved dialogue
    comes last. Every other profile gets the instruction alone.

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
    variables = {
        "role": profile.name,
        "desc": profile.description_with_catchphrases(),
        "description": profile.description,
        "catchphrases": list(profile.catchphrases),
        "lang": lang,
        "user_name": user_name,
        "retrieved_dialogue": retrieved_dialogue or [],
    }
    try:
        instruction = compiled.render(**variables)
        if card_data(profile) is None:
            return instruction
        # a card: the instruction without the retrieved dialogue is the main prompt; the dialogue goes last
        main = compiled.render(**{**variables, "retrieved_dialogue": []}) if retrieved_dialogue else instruction
    except jinja2.UndefinedError as error:
        raise ValueError(
            f"template= uses an unknown variable ({error.message}); available: role, desc, description, "
            "catchphrases, lang, user_name, retrieved_dialogue"
        ) from error
    text = card_system_text(profile, main, lang, context=context, user_name=user_name)
    return text + instruction[len(main) :] if instruction.startswith(main) else text


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
    if not same_role(row["role"], profile):
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
    question = row["question"].strip()
    system = build_system_instruction(profile, lang=lang, template=template, user_name=user_name, context=[question])
    return [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
            {"role": "assistant", "content": answer.strip()},
        ]
        for answer in references
    ]


def build_role_messages(
    profile: RoleProfile,
    question: str,
    mode: PromptingMode = "system",
    examples: list[list[Utterance]] | None = None,
    lang: str | None = None,
    system_template: str | None = None,
) -> list[dict]:
    """The chat messages that put `question` to a model playing `profile`, in one of the prompting modes.

    | mode | messages |
    |---|---|
    | `system` | the role's system instruction as a system turn, then the question (how RoCIT trains) |
    | `zero-shot` | one user turn: the instruction, a blank line, the question (for templates without a system role) |
    | `few-shot` | the system turn, then one user turn: the `examples` pasted as script lines before the question (the
      paper's *few-shot prompt engineering*, `rolegpt_few_shot_{lang}.jinja`) |
    | `few-shot-prompt` | as `few-shot`, with the instruction at the top of the one user turn instead of a system turn |
    | `few-shot-dialogue` | the system turn, the `examples` as real user/assistant turns, the question (the paper's
      *dialogue engineering*) |
    | `retrieval` | the paper's "-script" baseline: the `examples` inside the system instruction, then the question |

    Args:
        profile (`RoleProfile`): the role; its description fills the system instruction.
        question (`str`): the final user turn, as it is to be sent.
        mode (`str`, *optional*, defaults to `"system"`): one of `PROMPTING_MODES` (the table above).
        examples (`list[list[Utterance]]`, *optional*): script dialogue groups, e.g.
            `DialogueRetriever(profile).retrieve(question, k=3)`; required by the `EXAMPLE_MODES`.
        lang (`str`, *optional*, defaults to `profile.lang`): the language of the instruction and the example header.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction (see
            `build_system_instruction`).

    Returns:
        `list[dict]`: `{"role", "content"}` messages ending with the user's question.

    >>> profile = RoleProfile(name="李白", lang="zh", description="为人爽朗大方，爱好饮酒作诗。")
    >>> [m["role"] for m in build_role_messages(profile, "你最爱喝什么酒？")]
    ['system', 'user']
    >>> build_role_messages(profile, "你最爱喝什么酒？", mode="zero-shot")[0]["content"][-10:]
    '\\n\\n你最爱喝什么酒？'
    """
    if mode not in PROMPTING_MODES:
        raise ValueError(f"mode={mode!r} is not a prompting mode; choose one of {', '.join(PROMPTING_MODES)}")
    if mode in EXAMPLE_MODES and examples is None:
        raise ValueError(
            f"mode={mode!r} shows script dialogue: pass examples=DialogueRetriever(profile).retrieve(...)"
        )
    lang = lang if lang is not None else profile.lang
    retrieved = examples if mode == "retrieval" else None
    instruction = build_system_instruction(
        profile, lang=lang, template=system_template, retrieved_dialogue=retrieved, context=[question]
    )
    if mode in ("system", "retrieval"):
        return [{"role": "system", "content": instruction}, {"role": "user", "content": question}]
    if mode == "zero-shot":
        return [{"role": "user", "content": f"{instruction}\n\n{question}"}]
    if mode == "few-shot-dialogue":
        from rolellm.roles.retrieval import dialogue_to_messages  # numpy, for BM25: loaded when dialogue is shown

        return [
            {"role": "system", "content": instruction},
            *dialogue_to_messages(examples, profile.name),
            {"role": "user", "content": question},
        ]
    pasted = load_prompt(f"rolegpt_few_shot_{'zh' if lang == 'zh' else 'en'}.jinja").render(
        examples=examples, question=question
    )
    if mode == "few-shot":
        return [{"role": "system", "content": instruction}, {"role": "user", "content": pasted}]
    return [{"role": "user", "content": f"{instruction}\n\n{pasted}"}]


def role_greeting(profile: RoleProfile) -> str | None:
    """The role's opening line of a chat: a Character Card's `first_mes`, or `None` when the source has none.

    `{{char}}` and `{{user}}` are replaced by the role's name and "User" ("你" in Chinese).

    >>> card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Po", "first_mes": "Hi {{user}}!"}}
    >>> from rolellm.roles.character_card import profile_from_card
    >>> role_greeting(profile_from_card(card))
    'Hi User!'
    >>> role_greeting(RoleProfile("Po", "en")) is None
    True
    """
    return card_field(profile, "first_mes") or None


def build_chat_messages(
    profile: RoleProfile, history: list[dict], lang: str | None = None, system_template: str | None = None
) -> list[dict]:
    """The messages sent to a model playing `profile` in a multi-turn chat: the role's system text, then `history`.

    For a profile read from a Character Card the system text is SillyTavern's (see `build_system_instruction`) with
    the lorebook scanning `history` and the card's `mes_example` blocks shown after it, and the card's
    `post_history_instructions` follow `history`: appended, after a blank line, to the last user turn (where
    SillyTavern puts them, and what every chat template accepts).

    Args:
        profile (`RoleProfile`): the role.
        history (`list[dict]`): the conversation so far, `{"role": "user" | "assistant", "content"}` turns ending
            with the user's turn (an opening assistant turn, e.g. `role_greeting(profile)`, is allowed).
        lang (`str`, *optional*, defaults to `profile.lang`): the language of the system text.
        system_template (`str`, *optional*): Jinja source replacing the paper's system instruction (see
            `build_system_instruction`).

    Returns:
        `list[dict]`: the messages, ready for a chat client or `encode_chat(..., add_generation_prompt=True)`.

    >>> profile = RoleProfile(name="Po", lang="en", description="A kung fu panda.")
    >>> [m["role"] for m in build_chat_messages(profile, [{"role": "user", "content": "Hi!"}])]
    ['system', 'user']
    """
    context = [turn["content"] for turn in history]
    system = build_system_instruction(profile, lang=lang, template=system_template, context=context)
    if card_data(profile) is None:
        return [{"role": "system", "content": system}, *history]
    examples = card_examples_text(profile, lang or profile.lang)
    post = post_history_text(profile)
    if post and history and history[-1]["role"] == "user":
        # after the history, before the answer; inside the last user turn, since many chat templates (Gemma,
        # Mistral) accept a system message only at the start
        history = [*history[:-1], {**history[-1], "content": f"{history[-1]['content']}\n\n{post}"}]
    return [{"role": "system", "content": f"{system}\n\n{examples}" if examples else system}, *history]
