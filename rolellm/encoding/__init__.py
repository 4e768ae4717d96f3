"""Role conversations as tokens. Modules:

- `chat_template`: the role chat template and `set_role_chat_template`;
- `encode`: the injection-safe encoder with assistant masks (`encode_chat`, `encode_chat_turns`);
- `check`: the check of a model's own chat template (`check_chat_template`, `TemplateReport`);
- `layout`: where a chat template puts the system text and the turns.
"""
