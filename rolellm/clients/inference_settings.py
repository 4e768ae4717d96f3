"""What a checkpoint records for inference, and how a `ClientConfig` meets it.

`rolellm train` writes `rolellm_inference.json` (`keep_think`, `chat_template_family`, `card_extras`) and, for a
custom system text, `system_template.jinja` into every checkpoint (`rolellm.training.checkpoint`). The backends that
run a checkpoint's own weights read them here, so a model trained on a prompt gets that prompt at inference unless
the user says otherwise (and an override is logged).
"""

import logging
from pathlib import Path


logger = logging.getLogger(__name__)

# the settings a checkpoint records for inference (`rolellm.training.checkpoint`), read by the local backends
INFERENCE_FILE = "rolellm_inference.json"
# a checkpoint's custom system text template, when it was trained with one (`recorded_system_template`)
SYSTEM_TEMPLATE_FILE = "system_template.jinja"
ROLE_TEMPLATE_FAMILY = "rolellm-chatml"  # `chat_template="chatml"`, the role template `rolellm train` installs


def read_inference_settings(model: str) -> dict:
    """The inference settings a checkpoint folder recorded (`rolellm_inference.json`: `keep_think`,
    `chat_template_family`); `{}` for a Hub id or a folder without the file."""
    from rolellm.roles.profile import DataFormatError, read_json_object

    path = Path(model) / INFERENCE_FILE
    if not path.exists() and not path.is_symlink():
        return {}
    settings = read_json_object(
        path,
        "settings",
        "; write it again or delete it",
        f"{INFERENCE_FILE} (the settings a checkpoint was trained with)",
    )
    for key in ("keep_think", "card_extras"):
        if settings.get(key) is not None and not isinstance(settings[key], bool):
            raise DataFormatError(f"{path}: field {key!r} must be true or false, got {settings[key]!r}")
    family = settings.get("chat_template_family")
    if family is not None and not isinstance(family, str):
        raise DataFormatError(f"{path}: field 'chat_template_family' must be a string, got {family!r}")
    return settings


def resolve_keep_think(config, log: bool = True) -> bool:
    """`config.keep_think`, else what the local checkpoint recorded, else `False`. With `log`, what overrides the way
    the checkpoint was trained is logged, one line each: a `keep_think` other than the recorded one, and a
    `chat_template` of another family than its own (every backend that runs the weights resolves this once)."""
    trained = read_inference_settings(config.model) if config.runs_weights else {}
    family = trained.get("chat_template_family")
    if log and config.chat_template is not None and family is not None:
        chosen = ROLE_TEMPLATE_FAMILY if config.chat_template == "chatml" else "custom"
        if chosen != family:
            logger.warning(
                "chat_template=%s overrides the %s template %s was trained with", chosen, family, config.model
            )
    recorded = trained.get("keep_think")
    if config.keep_think is None:
        return bool(recorded)
    if log and recorded is not None and recorded != config.keep_think:
        logger.warning(
            "keep_think=%s overrides the keep_think=%s %s was trained with", config.keep_think, recorded, config.model
        )
    return config.keep_think


def recorded_system_template(config) -> str | None:
    """The custom system text template a local checkpoint was trained with (`system_template.jinja`), or `None`."""
    path = Path(config.model) / SYSTEM_TEMPLATE_FILE
    return path.read_text(encoding="utf-8") if config.runs_weights and path.is_file() else None


def resolve_card_extras(config, log: bool = True) -> bool:
    """`config.card_extras`, else `False` for a local checkpoint `rolellm train` wrote (its `rolellm_inference.json`
    says how its samples were built: the role's system text and the turns, nothing around them), else `True`; with
    `log`, a setting that differs from how the checkpoint was trained is logged in one line."""
    trained = read_inference_settings(config.model) if config.runs_weights else {}
    recorded = trained.get("card_extras", False if trained else None)
    if config.card_extras is None:
        return True if recorded is None else recorded
    if log and recorded is not None and recorded != config.card_extras:
        logger.warning(
            "card_extras=%s: %s was trained %s a card's example dialogue, greeting and post-history text",
            config.card_extras, config.model, "with" if recorded else "without",
        )  # fmt: skip
    return config.card_extras
