"""Character Cards prompted the way their users expect: SillyTavern's assembly of a card's prompt.

A profile read from a Character Card V2/V3 keeps the whole card in `profile.extra["character_card"]`; the prompt
builders of `rolellm.roles.prompts` hand such a profile to this module, and every other profile is prompted exactly
as before. The card's fields go where SillyTavern puts them (`docs/character-cards.md` has the full table):

| card field | where it goes |
|---|---|
| `system_prompt` | replaces the main prompt (the paper's instruction); `{{original}}` in it stands for that instruction |
| `description` (+ catchphrases) | the paper's instruction (`{desc}`), or its own paragraph when `system_prompt` drops `{{original}}` |
| `personality`, `scenario` | paragraphs after the main prompt: `{{char}}'s personality: ...`, `Scenario: ...` |
| `character_book` | entries whose keys occur in the recent turns: `before_char` after the main prompt, `after_char` last |
| `mes_example` | example dialogue: the few-shot modes retrieve from it, a chat shows it after the role's text |
| `first_mes` | the first assistant turn of a chat (`role_greeting`) |
| `post_history_instructions` | after the chat history: appended to the last user turn |

`{{char}}` (`<BOT>`) becomes the role's name (a V3 card's `nickname` when it has one) and `{{user}}` (`<USER>`) the
user's name ("User", "你" in Chinese, unless one is given), in every field. `creator_notes`, `tags`, `creator`,
`character_version` and the other metadata never reach a prompt; `alternate_greetings` are the swipes of a chat's
first message (`role_greetings`).

Lorebook entries (`character_book.entries`) are scanned against the last `scan_depth` turns (the book's, default 2):
an entry is inserted when it is `enabled` and `constant`, or one of its `keys` occurs there (whole words for keys
that start and end with a letter or digit, anywhere for the others; `case_sensitive` as the entry says, default
no; V3 `use_regex` keys are regular expressions) and, when it is `selective` with `secondary_keys`, one of those
occurs too. When the book has a `token_budget`, entries are taken constant first, then by descending `priority`
(else `insertion_order`) while their estimated tokens fit: one token per CJK character plus one per four other
characters. The inserted entries appear in ascending `insertion_order`.

>>> from rolellm.roles.character_card import profile_from_card
>>> book = {"entries": [{"keys": ["rum"], "content": "The rum is hidden in the hold.", "enabled": True,
...                      "insertion_order": 0, "extensions": {}}], "extensions": {}}
>>> card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Jack", "description": "A pirate.",
...         "personality": "sly", "character_book": book, "creator_notes": "not for prompts"}}
>>> profile = profile_from_card(card)
>>> lorebook_entries(profile, ["Where is the rum?"])
{'before_char': ['The rum is hidden in the hold.'], 'after_char': []}
>>> print(card_system_text(profile, "You are Jack.", "en", context=["Where is the rum?"]))
You are Jack.
<BLANKLINE>
The rum is hidden in the hold.
<BLANKLINE>
Jack's personality: sly
"""

import re
from dataclasses import replace

from rolellm.roles.profile import RoleProfile


USER_NAMES = {"en": "User", "zh": "你"}
DEFAULT_SCAN_DEPTH = 2
LABELS = {
    "en": {"personality": "{char}'s personality: ", "scenario": "Scenario: ", "examples": "Example dialogue:"},
    "zh": {"personality": "{char}的性格：", "scenario": "场景：", "examples": "示例对话："},
}
_MACRO = re.compile(r"\{\{(char|user)\}\}|<(BOT|USER)>", re.I)
_START = re.compile(r"^[ \t]*<START>[ \t]*$", re.I | re.M)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def card_data(profile: RoleProfile) -> dict | None:
    """The `data` of the Character Card a profile was read from, or `None` for a profile of any other source."""
    card = profile.extra.get("character_card")
    data = card.get("data") if isinstance(card, dict) else None
    return data if isinstance(data, dict) else None


def char_name(profile: RoleProfile) -> str:
    """What `{{char}}` stands for: a V3 card's `nickname` when set, else the role's name."""
    nickname = (card_data(profile) or {}).get("nickname")
    return nickname if isinstance(nickname, str) and nickname.strip() else profile.name


def substitute(text: str, char: str, user: str) -> str:
    """Replace `{{char}}`/`<BOT>` and `{{user}}`/`<USER>` (any case), as SillyTavern does.

    >>> substitute("{{char}} waves at {{User}}. <BOT> smiles.", "Po", "Tigress")
    'Po waves at Tigress. Po smiles.'
    """
    return _MACRO.sub(lambda m: char if (m[1] or m[2]).lower() in ("char", "bot") else user, text)


# the fields of a card's `data` that reach a prompt (the table above); the rest is metadata (creator notes, tags, ...)
PROMPT_FIELDS = ("name", "nickname", "description", "personality", "scenario", "system_prompt", "character_book",
                 "mes_example", "first_mes", "post_history_instructions")  # fmt: skip


def prompt_only(profile: RoleProfile) -> RoleProfile:
    """A copy of `profile` without what never reaches a prompt: a card's metadata (`creator_notes`, `tags`,
    `creator`, ..., extensions other than rolellm's) and the local path of a PNG card. A checkpoint that may be
    pushed stores this (`RoCITConfig.keep_card_metadata` keeps everything); prompts are unchanged.

    >>> from rolellm.roles.character_card import profile_from_card
    >>> card = {"spec": "chara_card_v2", "data": {"name": "Po", "description": "A panda.", "creator_notes": "private",
    ...         "tags": ["kung fu"], "extensions": {"rolellm": {"catchphrases": ["Skadoosh!"]}, "other": {"x": 1}}}}
    >>> kept = prompt_only(profile_from_card(card, "en"))
    >>> sorted(kept.extra["character_card"]["data"]), kept.extra["character_card"]["data"]["extensions"]
    (['description', 'extensions', 'name'], {'rolellm': {'catchphrases': ['Skadoosh!']}})
    """
    card = profile.extra.get("character_card")
    extra = {key: value for key, value in profile.extra.items() if key != "character_card_png"}
    if isinstance(card, dict) and isinstance(card.get("data"), dict):
        data = {key: value for key, value in card["data"].items() if key in PROMPT_FIELDS}
        extensions = card["data"].get("extensions")
        if isinstance(extensions, dict) and "rolellm" in extensions:
            data["extensions"] = {"rolellm": extensions["rolellm"]}
        extra["character_card"] = {**{k: v for k, v in card.items() if k in ("spec", "spec_version")}, "data": data}
    return replace(profile, extra=extra)


def card_field(profile: RoleProfile, key: str, user_name: str | None = None) -> str:
    """A text field of the profile's card with `{{char}}`/`{{user}}` replaced and stripped; `""` when absent."""
    value = (card_data(profile) or {}).get(key)
    if not isinstance(value, str):
        return ""
    return substitute(value, char_name(profile), user_name or USER_NAMES.get(profile.lang, "User")).strip()


def approx_tokens(text: str) -> int:
    """A tokenizer-free token estimate: one token per CJK character, one per four other characters (rounded up).

    >>> approx_tokens("The lamp is lit."), approx_tokens("灯亮了")
    (4, 3)
    """
    cjk = len(_CJK.findall(text))
    return cjk + -(-(len(text) - cjk) // 4)


def split_mes_example(text: str) -> list[str]:
    """The blocks of a `mes_example`: split on `<START>` lines, the text before the first one kept as a block of its
    own, each block stripped, empty blocks left out.

    >>> split_mes_example("A preamble.\\n<START>\\n{{user}}: Hi\\n{{char}}: Hello\\n<START>\\n")
    ['A preamble.', '{{user}}: Hi\\n{{char}}: Hello']
    """
    return [block.strip() for block in _START.split(text) if block.strip()]


def mes_example_blocks(profile: RoleProfile, user_name: str | None = None) -> list[str]:
    """The card's example dialogue blocks, `{{char}}`/`{{user}}` replaced (see `split_mes_example`)."""
    return split_mes_example(card_field(profile, "mes_example", user_name))


def _key_matches(key: str, text: str, entry: dict) -> bool:
    flags = 0 if entry.get("case_sensitive") else re.I
    if entry.get("use_regex"):
        try:
            return re.search(key, text, flags) is not None
        except re.error:
            return False
    key = key.strip()
    if not key:
        return False
    pattern = re.escape(key)
    if re.match(r"\w", key[0]) and not _CJK.match(key[0]):
        pattern = r"(?<!\w)" + pattern
    if re.match(r"\w", key[-1]) and not _CJK.match(key[-1]):
        pattern += r"(?!\w)"
    return re.search(pattern, text, flags) is not None


def _is_active(entry: dict, text: str) -> bool:
    if entry.get("enabled") is False or not isinstance(entry.get("content"), str):
        return False
    if entry.get("constant"):
        return True
    if not any(_key_matches(key, text, entry) for key in entry.get("keys") or [] if isinstance(key, str)):
        return False
    secondary = [key for key in entry.get("secondary_keys") or [] if isinstance(key, str) and key.strip()]
    return not (entry.get("selective") and secondary) or any(_key_matches(key, text, entry) for key in secondary)


def _number(value, default: float = 0) -> float:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def lorebook_entries(profile: RoleProfile, context: list[str], user_name: str | None = None) -> dict[str, list[str]]:
    """The card's lorebook entries triggered by the recent turns `context` (oldest first), by position.

    Args:
        profile (`RoleProfile`): a profile read from a Character Card (any other gives no entry).
        context (`list[str]`): the texts of the conversation so far; the last `scan_depth` are scanned.
        user_name (`str`, *optional*): what `{{user}}` in an entry stands for.

    Returns:
        `dict[str, list[str]]`: `{"before_char": [...], "after_char": [...]}`, the entries' contents in ascending
        `insertion_order`, within the book's `token_budget` (see the module docstring for the rules).
    """
    book = (card_data(profile) or {}).get("character_book")
    entries = book.get("entries") if isinstance(book, dict) else None
    found = {"before_char": [], "after_char": []}
    if not isinstance(entries, list):
        return found
    depth = int(_number(book.get("scan_depth"), DEFAULT_SCAN_DEPTH))
    text = "\n".join(context[-depth:]) if depth > 0 else ""
    active = [(i, e) for i, e in enumerate(entries) if isinstance(e, dict) and _is_active(e, text)]
    budget = _number(book.get("token_budget"), 0)
    if budget > 0:
        ranked = sorted(
            active,
            key=lambda item: (
                not item[1].get("constant"),
                -_number(item[1].get("priority"), _number(item[1].get("insertion_order"))),
                item[0],
            ),
        )
        kept, used = [], 0
        for index, entry in ranked:
            used += approx_tokens(entry["content"])
            if used > budget:
                break
            kept.append((index, entry))
        active = kept
    active.sort(key=lambda item: (_number(item[1].get("insertion_order")), item[0]))
    char, user = char_name(profile), user_name or USER_NAMES.get(profile.lang, "User")
    for _, entry in active:
        position = "after_char" if entry.get("position") == "after_char" else "before_char"
        found[position].append(substitute(entry["content"], char, user).strip())
    return found


def card_system_text(
    profile: RoleProfile,
    instruction: str,
    lang: str,
    context: list[str] | None = None,
    user_name: str | None = None,
) -> str:
    """The system text of a card's role: main prompt, lorebook (`before_char`), description when the main prompt
    does not hold it, personality, scenario, lorebook (`after_char`).

    Args:
        profile (`RoleProfile`): a profile read from a Character Card.
        instruction (`str`): the default main prompt (the paper's instruction, which holds the description); the
            card's `system_prompt` replaces it, with `{{original}}` standing for it.
        lang (`str`): `"en"` or `"zh"`, the language of the paragraph labels.
        context (`list[str]`, *optional*): the recent turns the lorebook scans.
        user_name (`str`, *optional*): what `{{user}}` stands for (default "User", "你" in Chinese).
    """
    labels = LABELS["zh" if lang == "zh" else "en"]
    user = user_name or USER_NAMES.get(lang, "User")
    char = char_name(profile)
    system_prompt = (card_data(profile) or {}).get("system_prompt")
    system_prompt = system_prompt.strip() if isinstance(system_prompt, str) else ""
    blocks = [system_prompt.replace("{{original}}", instruction) if system_prompt else instruction]
    lore = lorebook_entries(profile, list(context or []), user)
    blocks += lore["before_char"]
    if system_prompt and "{{original}}" not in system_prompt:
        blocks.append(profile.description_with_catchphrases())
    for key in ("personality", "scenario"):
        value = card_field(profile, key, user)
        if value:
            blocks.append(labels[key].format(char=char) + value)
    blocks += lore["after_char"]
    return substitute("\n\n".join(block.strip() for block in blocks if block.strip()), char, user)


def card_examples_text(profile: RoleProfile, lang: str, user_name: str | None = None) -> str:
    """The card's `mes_example` blocks under an `Example dialogue:` line, a blank line between blocks; `""` when the
    card has none. A chat shows them after the role's system text (the few-shot modes retrieve from them instead).
    """
    blocks = mes_example_blocks(profile, user_name or USER_NAMES.get(lang, "User"))
    return LABELS["zh" if lang == "zh" else "en"]["examples"] + "\n" + "\n\n".join(blocks) if blocks else ""


def post_history_text(profile: RoleProfile, user_name: str | None = None) -> str:
    """The card's `post_history_instructions` (`{{original}}`, the default post-history text, is empty here)."""
    return card_field(profile, "post_history_instructions", user_name).replace("{{original}}", "").strip()


def role_description(profile: RoleProfile, lang: str | None = None) -> str:
    """Who the role is, for prompts about a role rather than to it (Context-Instruct): the description with its
    catchphrase sentence, and for a card its personality and scenario paragraphs.

    >>> role_description(RoleProfile("Po", "en", "A panda.", ["Skadoosh!"]))
    'A panda. Your catchphrase is: "Skadoosh!"'
    """
    description = profile.description_with_catchphrases()
    if card_data(profile) is None:
        return description
    labels = LABELS["zh" if (lang or profile.lang) == "zh" else "en"]
    user = USER_NAMES.get(lang or profile.lang, "User")
    blocks = [substitute(description, char_name(profile), user)]
    for key in ("personality", "scenario"):
        value = card_field(profile, key, user)
        if value:
            blocks.append(labels[key].format(char=char_name(profile)) + value)
    return "\n".join(block for block in blocks if block)
