"""The role chat template: rolellm's ChatML-style template for base models, installed on a tokenizer.

`set_role_chat_template` gives a base model's tokenizer the template (with `{% generation %}` markers); a tokenizer
that has a chat template keeps it. `rolellm.encoding.encode` tokenizes conversations with any template.
"""

import re
from pathlib import Path

from rolellm.roles.profile import DataFormatError, read_text


ROLE_CHAT_TEMPLATE = (Path(__file__).parent.parent / "prompts" / "chatml_role.jinja").read_text(encoding="utf-8")
ROLE_CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")
_GENERATION_RE = re.compile(r"\{%-?\s*generation\s*-?%\}")


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

    >>> from rolellm.testing.models import train_tiny_tokenizer
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


def read_chat_template(value: str | None) -> str | None:
    """The Jinja source a `chat_template` option names: `"chatml"` is the role template (`ROLE_CHAT_TEMPLATE`, the
    same object), text holding Jinja tags is the template itself, anything else is the path of a template file.

    >>> read_chat_template("chatml") is ROLE_CHAT_TEMPLATE, read_chat_template("{{ messages[0].content }}")
    (True, '{{ messages[0].content }}')
    >>> read_chat_template("no/such/template.jinja")
    Traceback (most recent call last):
    ...
    ValueError: chat_template='no/such/template.jinja' is not 'chatml', Jinja source or a template file
    """
    if value is None:
        return value
    if "{{" in value or "{%" in value:
        return check_template_syntax(value, "chat_template")
    if value == "chatml":
        return ROLE_CHAT_TEMPLATE
    path = Path(value)
    if path.is_dir():
        raise IsADirectoryError(f"chat_template={value!r} is a folder: give the template file (Jinja)")
    if not path.is_file():
        raise ValueError(f"chat_template={value!r} is not 'chatml', Jinja source or a template file")
    return check_template_syntax(read_text(path), path)  # UTF-8 with or without BOM; an empty file is an error


def check_template_syntax(source: str, where) -> str:
    """`source` when it compiles as a chat template (Jinja as transformers runs it, `{% generation %}` included);
    otherwise a `DataFormatError` naming `where` (the file, or the option) and the line.

    >>> check_template_syntax("{% for m in messages %}{{ m.content }", "t.jinja")
    Traceback (most recent call last):
    ...
    rolellm.roles.profile.DataFormatError: t.jinja:1: not valid Jinja: unexpected '}'
    """
    import jinja2
    from transformers.utils.chat_template_utils import _compile_jinja_template

    try:
        _compile_jinja_template(source)
    except jinja2.TemplateSyntaxError as error:
        raise DataFormatError(f"{where}:{error.lineno}: not valid Jinja: {error.message}") from None
    return source


def has_generation_markers(chat_template: str) -> bool:
    """Whether a chat template marks assistant turns with `{% generation %}` ... `{% endgeneration %}`."""
    return bool(_GENERATION_RE.search(chat_template))
