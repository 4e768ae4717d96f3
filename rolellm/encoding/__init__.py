"""Role conversations as tokens: the role chat template and the injection-safe encoder with assistant masks."""

from rolellm.encoding.chat_template import ROLE_CHAT_TEMPLATE, has_generation_markers, set_role_chat_template
from rolellm.encoding.encode import encode_chat


__all__ = ["ROLE_CHAT_TEMPLATE", "encode_chat", "has_generation_markers", "set_role_chat_template"]
