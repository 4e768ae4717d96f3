"""The role-conditioned chat template: the paper's system instruction and RoleBench rows as chat messages.

`build_system_instruction` renders the RoleGPT/RoCIT system instruction of the paper (English or Chinese, verbatim)
from a `RoleProfile`; a user-supplied Jinja template can replace it.

>>> from rolellm import RoleProfile
>>> profile = RoleProfile(name="Jack Sparrow", lang="en", description="A witty pirate captain")
>>> build_system_instruction(profile)[:90]
'You are Jack Sparrow, your description is: A witty pirate captain. Now please answer some '
"""

from functools import cache
from pathlib import Path

import jinja2

from rolellm.profiles import RoleProfile


PROMPTS_DIR = Path(__file__).parent / "prompts"

_JINJA = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@cache
def _default_template(lang: str) -> jinja2.Template:
    return _JINJA.from_string((PROMPTS_DIR / f"system_{lang}.jinja").read_text(encoding="utf-8"))


def _description_with_catchphrases(profile: RoleProfile) -> str:
    # TODO: call profile.description_with_catchphrases() directly once the data layer provides it everywhere.
    if hasattr(profile, "description_with_catchphrases"):
        return profile.description_with_catchphrases()
    if not profile.catchphrases:
        return profile.description
    if profile.lang == "zh":
        return profile.description + "常用口头禅是：" + "、".join(f"“{c}”" for c in profile.catchphrases)
    return f"{profile.description} Your catchphrase is: " + ", ".join(f'"{c}"' for c in profile.catchphrases)


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
        compiled = _default_template(lang)
    else:
        try:
            compiled = _JINJA.from_string(template)
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(f"template= is not valid Jinja (line {error.lineno}): {error.message}") from error
    try:
        return compiled.render(
            role=profile.name,
            desc=_description_with_catchphrases(profile),
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
