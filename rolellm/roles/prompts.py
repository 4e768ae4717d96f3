"""How a role is prompted: the paper's system instruction and RoleBench rows as chat messages.

- `build_system_instruction` renders the RoleGPT/RoCIT system instruction of the paper (English or Chinese, verbatim)
  from a `RoleProfile`; a user-supplied Jinja template can replace it.
- `PROMPTING_MODE_TABLE` is the one registry of prompting modes (where the instruction and the script examples go,
  the paper's names as aliases, read by `prompting_mode`); `build_role_messages` puts a question to a model playing
  a role in each of them: the one builder of RoleGPT's requests, the benchmark runner's and the lm-eval tasks'.
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
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal, get_args

import jinja2

from rolellm.roles.card_prompts import (
    USER_NAMES,
    card_data,
    card_examples_text,
    card_field,
    card_system_text,
    char_name,
    post_history_text,
    substitute,
)
from rolellm.roles.lookup import same_role
from rolellm.roles.profile import DataFormatError, RoleProfile, Utterance, read_text


PROMPTS_DIR = Path(__file__).parent.parent / "prompts"

# the environment of every rolellm prompt, packaged or user-supplied: a missing variable is an error
JINJA_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@dataclass(frozen=True)
class PromptingModeInfo:
    """One way of putting a question to a model playing a role: where the role's instruction goes and where the
    script dialogue shown as examples goes (`None`: no examples). A row of `PROMPTING_MODE_TABLE`."""

    name: str
    instruction: Literal["system", "user"]  # a system turn, or the top of the one user turn
    examples: Literal["user", "turns", "system"] | None  # pasted before the question, real turns, in the instruction
    paper_name: str | None  # the RoleLLM paper's (and RoleGPT's `prompt_mode`) name of it, accepted as an alias
    description: str


# The one registry of prompting modes, read by RoleGPT (`prompt_mode`), `rolellm evaluate` (`mode`), the multi-turn
# evaluation and `rolellm chat` (`system`, through `build_chat_messages`) and the lm-eval tasks (`system`).
PROMPTING_MODE_TABLE = {
    mode.name: mode
    for mode in (
        PromptingModeInfo("system", "system", None, "zero_shot",
                          "the role's system instruction as a system turn, then the question (how RoCIT trains)"),
        PromptingModeInfo("no-system", "user", None, None,
                          "one user turn: the instruction, a blank line, the question (templates without a system "
                          "role)"),
        PromptingModeInfo("few-shot", "system", "user", "few_shot",
                          "the system turn, then one user turn: the examples pasted as script lines before the "
                          "question (the paper's few-shot prompt engineering)"),
        PromptingModeInfo("few-shot-prompt", "user", "user", None,
                          "as few-shot, with the instruction at the top of the one user turn instead of a system "
                          "turn"),
        PromptingModeInfo("few-shot-dialogue", "system", "turns", "dialogue",
                          "the system turn, the examples as real user/assistant turns, the question (the paper's "
                          "dialogue engineering)"),
        PromptingModeInfo("retrieval", "system", "system", None,
                          "the paper's -script baseline: the examples inside the system instruction, then the "
                          "question"),
    )
}  # fmt: skip
PromptingMode = Literal["system", "no-system", "few-shot", "few-shot-prompt", "few-shot-dialogue", "retrieval"]
PROMPTING_MODES = get_args(PromptingMode)
EXAMPLE_MODES = tuple(name for name, mode in PROMPTING_MODE_TABLE.items() if mode.examples)  # modes showing script
PAPER_MODE_NAMES = {mode.paper_name: name for name, mode in PROMPTING_MODE_TABLE.items() if mode.paper_name}


def _spelling(name: str) -> str:
    return name.strip().lower().replace("_", "-")


_BY_SPELLING = {_spelling(name): name for name in (*PROMPTING_MODES, *PAPER_MODE_NAMES)}
_BY_SPELLING.update({_spelling(paper): name for paper, name in PAPER_MODE_NAMES.items()})


class _ModeNames(tuple):
    """The names a flag or recipe takes: iterating gives the modes and the paper's names (what `--help` and errors
    list), `in` accepts every spelling `prompting_mode` reads (what argparse and the recipe check ask)."""

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and _spelling(name) in _BY_SPELLING


PROMPTING_MODE_NAMES = _ModeNames((*PROMPTING_MODES, *PAPER_MODE_NAMES))


def prompting_mode(name: str, argument: str = "mode") -> PromptingMode:
    """The prompting mode called `name`: a mode of `PROMPTING_MODE_TABLE` or the paper's name of one, spelled with
    dashes or underscores, in any case. Configs normalise their mode fields with it.

    Raises:
        `ValueError`: `name` is no mode; the message names `argument` and lists the modes.

    >>> prompting_mode("zero_shot"), prompting_mode("dialogue"), prompting_mode("Few_Shot"), prompting_mode("no_system")
    ('system', 'few-shot-dialogue', 'few-shot', 'no-system')
    >>> prompting_mode("two_shot", "prompt_mode")
    Traceback (most recent call last):
    ...
    ValueError: prompt_mode='two_shot' is not a prompting mode; choose one of system, no-system, few-shot, ...
    """
    if isinstance(name, str) and _spelling(name) in _BY_SPELLING:
        return _BY_SPELLING[_spelling(name)]
    papers = ", ".join(f"{paper} ({mode})" for paper, mode in PAPER_MODE_NAMES.items())
    raise ValueError(
        f"{argument}={name!r} is not a prompting mode; choose one of {', '.join(PROMPTING_MODES)}, or the paper's "
        f"names {papers}"
    )


def prompting_mode_field(default: PromptingMode, help: str):
    """The prompting-mode field of a config (`RoleGPTConfig.prompt_mode`, `BenchmarkConfig.mode`): a `str` whose
    flag and recipe key take the modes and the paper's names in any spelling (argparse lists them in `--help` and
    rejects anything else). The config normalises the value with `prompting_mode` in its `__post_init__`.

    >>> from dataclasses import dataclass
    >>> from transformers import HfArgumentParser
    >>> @dataclass
    ... class Arguments:
    ...     mode: str = prompting_mode_field("system", "How a question is put.")
    >>> HfArgumentParser(Arguments).parse_args(["--mode", "zero_shot"]).mode
    'zero_shot'
    """
    return field(default=default, metadata={"help": help, "choices": PROMPTING_MODE_NAMES})


@cache
def load_prompt(name: str) -> jinja2.Template:
    """The package prompt file `rolellm/prompts/{name}`, compiled once."""
    return JINJA_ENV.from_string((PROMPTS_DIR / name).read_text(encoding="utf-8"))


def has_role_text(profile: RoleProfile) -> bool:
    """Whether a profile says anything about its role for a system text: a description, or a card's system prompt,
    personality or scenario."""
    card = card_data(profile) or {}
    fields = [profile.description, *(card.get(key) for key in ("system_prompt", "personality", "scenario"))]
    return any(isinstance(value, str) and value.strip() for value in fields)


def read_system_template(path: str | Path) -> str:
    """The Jinja source of a system template file (`--system_template`, `system_template_path`), checked where it is
    read: an empty file, text that is not UTF-8, or Jinja that does not parse is a `DataFormatError` naming the file
    (and the line); a missing file is a `FileNotFoundError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such system template file (a Jinja file replacing the system text)")
    text = read_text(path)
    try:
        JINJA_ENV.parse(text)
    except jinja2.TemplateSyntaxError as error:
        raise DataFormatError(f"{path}:{error.lineno}: not valid Jinja ({error.message})") from None
    return text


def looks_like_a_file_name(value: str) -> bool:
    """Whether a system template value names a file rather than holding Jinja text: one line, no `{`, and a
    `.jinja`/`.j2` suffix or an existing file."""
    text = value.strip()
    return "{" not in text and "\n" not in text and (text.endswith((".jinja", ".j2")) or Path(text).is_file())


def system_template_text(value: str | None) -> str | None:
    """The Jinja source a `--system_template` value stands for: the value itself, or the content of the file it
    names (read and checked by `read_system_template`). Every command's `--system_template` goes through this.

    >>> system_template_text("You are {{ role }}.")
    'You are {{ role }}.'
    >>> system_template_text("absent.jinja")
    Traceback (most recent call last):
    ...
    FileNotFoundError: absent.jinja: no such system template file (a Jinja file replacing the system text)
    """
    if value is None or not looks_like_a_file_name(value):
        return value
    return read_system_template(value.strip())


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
    if template is None and not has_role_text(profile):
        raise ValueError(
            f"role {profile.name!r} has no description, so its system text would say nothing about the role: give "
            "one (desc.json, a Character Card's description) or write one with `rolellm generate describe`"
        )
    if template is None:
        if lang not in ("en", "zh"):
            raise ValueError(f"lang={lang!r} has no default system instruction: use 'en' or 'zh', or pass template=")
        compiled = load_prompt(f"system_{lang}.jinja")
    else:
        if looks_like_a_file_name(template):
            raise ValueError(
                f"template={template!r} is the name of a file, not a template's text: pass the file's content "
                "(rolellm.roles.prompts.read_system_template reads and checks one)"
            )
        try:
            compiled = JINJA_ENV.from_string(template)
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(f"template= is not valid Jinja (line {error.lineno}): {error.message}") from error
    desc = profile.description_with_catchphrases()
    if template is None and lang == "en" and card_data(profile) is not None and desc.endswith("."):
        # the English instruction puts its own full stop after `{desc}`; a card's description usually ends with
        # one too ("..."). The release's profiles keep the paper's text as it is.
        desc = desc[:-1]
    variables = {
        "role": profile.name,
        "desc": desc,
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

    | mode | paper's name | messages |
    |---|---|---|
    | `system` | `zero_shot` | the role's system instruction as a system turn, then the question (how RoCIT trains) |
    | `no-system` | | one user turn: the instruction, a blank line, the question (for templates without a system role) |
    | `few-shot` | `few_shot` | the system turn, then one user turn: the `examples` pasted as script lines before the
      question (the paper's *few-shot prompt engineering*, `rolegpt_few_shot_{lang}.jinja`) |
    | `few-shot-prompt` | | as `few-shot`, with the instruction at the top of the one user turn instead of a system turn |
    | `few-shot-dialogue` | `dialogue` | the system turn, the `examples` as real user/assistant turns, the question (the
      paper's *dialogue engineering*) |
    | `retrieval` | | the paper's "-script" baseline: the `examples` inside the system instruction, then the question |

    Args:
        profile (`RoleProfile`): the role; its description fills the system instruction.
        question (`str`): the final user turn, as it is to be sent.
        mode (`str`, *optional*, defaults to `"system"`): one of `PROMPTING_MODES` (the table above); a config reads
            the paper's names and other spellings into these with `prompting_mode`.
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
    >>> build_role_messages(profile, "你最爱喝什么酒？", mode="no-system")[0]["content"][-10:]
    '\\n\\n你最爱喝什么酒？'
    """
    if mode not in PROMPTING_MODE_TABLE:
        raise ValueError(
            f"mode={mode!r} is not a prompting mode; choose one of {', '.join(PROMPTING_MODES)} (prompting_mode() "
            "reads the paper's names)"
        )
    layout = PROMPTING_MODE_TABLE[mode]
    if layout.examples and examples is None:
        raise ValueError(
            f"mode={mode!r} shows script dialogue: pass examples=DialogueRetriever(profile).retrieve(...)"
        )
    lang = lang if lang is not None else profile.lang
    instruction = build_system_instruction(
        profile,
        lang=lang,
        template=system_template,
        retrieved_dialogue=examples if layout.examples == "system" else None,
        context=[question],
    )
    turns = []
    if layout.examples == "turns":
        from rolellm.roles.retrieval import dialogue_to_messages  # numpy, for BM25: loaded when dialogue is shown

        turns = dialogue_to_messages(examples, profile.name)
    if layout.examples == "user":
        question = load_prompt(f"rolegpt_few_shot_{'zh' if lang == 'zh' else 'en'}.jinja").render(
            examples=examples, question=question
        )
    if layout.instruction == "user":
        return [{"role": "user", "content": f"{instruction}\n\n{question}"}]
    return [{"role": "system", "content": instruction}, *turns, {"role": "user", "content": question}]


def role_greeting(profile: RoleProfile, user_name: str | None = None) -> str | None:
    """The role's opening line of a chat: a Character Card's `first_mes`, or `None` when the source has none.

    `{{char}}` and `{{user}}` are replaced by the role's name and `user_name` (default "User", "你" in Chinese).

    >>> card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Po", "first_mes": "Hi {{user}}!"}}
    >>> from rolellm.roles.character_card import profile_from_card
    >>> role_greeting(profile_from_card(card))
    'Hi User!'
    >>> role_greeting(RoleProfile("Po", "en")) is None
    True
    """
    return card_field(profile, "first_mes", user_name) or None


def role_greetings(profile: RoleProfile, user_name: str | None = None) -> list[str]:
    """Every opening line of the role: the card's `first_mes`, then its `alternate_greetings` (a chat shows them as
    the swipes of the first message); `[]` when the source has none.

    >>> card = {"spec": "chara_card_v2", "spec_version": "2.0",
    ...         "data": {"name": "Po", "first_mes": "Hi {{user}}!", "alternate_greetings": ["Skadoosh!", " "]}}
    >>> from rolellm.roles.character_card import profile_from_card
    >>> role_greetings(profile_from_card(card), user_name="Tigress")
    ['Hi Tigress!', 'Skadoosh!']
    """
    first = role_greeting(profile, user_name)
    alternates = (card_data(profile) or {}).get("alternate_greetings") or []
    user = user_name or USER_NAMES.get(profile.lang, "User")
    others = [substitute(text, char_name(profile), user).strip() for text in alternates if isinstance(text, str)]
    return [text for text in [first, *others] if text]


def build_chat_messages(
    profile: RoleProfile,
    history: list[dict],
    lang: str | None = None,
    system_template: str | None = None,
    card_extras: bool = True,
    user_name: str | None = None,
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
        card_extras (`bool`, *optional*, defaults to `True`): add a card's `mes_example` blocks and
            `post_history_instructions`. `False` gives what `to_role_messages` trains on (the system text, then the
            turns), the conversation a model `rolellm train` wrote was trained with.
        user_name (`str`, *optional*): the user's name: what `{{user}}` in a card stands for, and one sentence of
            the default system instruction ("You are talking with ..."); by default none, the trained text.

    Returns:
        `list[dict]`: the messages, ready for a chat client or `encode_chat(..., add_generation_prompt=True)`.

    >>> profile = RoleProfile(name="Po", lang="en", description="A kung fu panda.")
    >>> [m["role"] for m in build_chat_messages(profile, [{"role": "user", "content": "Hi!"}])]
    ['system', 'user']
    """
    context = [turn["content"] for turn in history]
    system = build_system_instruction(
        profile, lang=lang, template=system_template, context=context, user_name=user_name
    )
    if card_data(profile) is None or not card_extras:
        return [{"role": "system", "content": system}, *history]
    examples = card_examples_text(profile, lang or profile.lang, user_name)
    post = post_history_text(profile, user_name)
    if post and history and history[-1]["role"] == "user":
        # after the history, before the answer; inside the last user turn, since many chat templates (Gemma,
        # Mistral) accept a system message only at the start
        history = [*history[:-1], {**history[-1], "content": f"{history[-1]['content']}\n\n{post}"}]
    return [{"role": "system", "content": f"{system}\n\n{examples}" if examples else system}, *history]
