"""Role conversations as tokens: the role chat template, the injection-safe encoder with assistant masks, and the
check of a model's own chat template."""

from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE, has_generation_markers, set_role_chat_template
from rolellm.encoding.check import TemplateCheck, TemplateReport, check_chat_template
from rolellm.encoding.encode import encode_chat, encode_chat_turns


__all__ = [
    "ROLE_CHAT_TEMPLATE",
    "TemplateCheck",
    "TemplateReport",
    "check_chat_template",
    "encode_chat",
    "encode_chat_turns",
    "has_generation_markers",
    "set_role_chat_template",
]
