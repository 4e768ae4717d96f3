"""Stage 1, who a role is and how it is prompted: `RoleProfile`, the readers and writers of its sources (release
profile files, screenplays, Character Cards), BM25 retrieval over its dialogue, and the paper's role prompts.

This package imports nothing else of rolellm; every later stage reads roles through it. `DialogueRetriever` loads
numpy on first use.
"""

import importlib

from rolellm.roles.character_card import (
    card_from_profile,
    profile_from_card,
    read_character_card,
    write_character_card,
)
from rolellm.roles.profile import (
    DataFormatError,
    ProfileFileWarning,
    RoleProfile,
    Utterance,
    role_key,
    split_catchphrases,
)
from rolellm.roles.prompts import build_chat_messages, build_system_instruction, role_greeting, to_role_messages
from rolellm.roles.release import (
    read_profile_jsonl,
    read_release_profiles,
    read_screenplay_folder,
    write_release_profiles,
    write_screenplay_folder,
)
from rolellm.roles.resolve import ProfileSourceError, load_profiles, select_roles
from rolellm.roles.screenplay import parse_screenplay, read_screenplay, write_screenplay


_LAZY = {"DialogueRetriever": "rolellm.roles.retrieval", "dialogue_to_messages": "rolellm.roles.retrieval"}

__all__ = [
    "DataFormatError",
    "DialogueRetriever",
    "ProfileFileWarning",
    "ProfileSourceError",
    "RoleProfile",
    "Utterance",
    "build_chat_messages",
    "build_system_instruction",
    "card_from_profile",
    "dialogue_to_messages",
    "load_profiles",
    "parse_screenplay",
    "profile_from_card",
    "read_character_card",
    "read_profile_jsonl",
    "read_release_profiles",
    "read_screenplay",
    "read_screenplay_folder",
    "role_greeting",
    "role_key",
    "select_roles",
    "split_catchphrases",
    "to_role_messages",
    "write_character_card",
    "write_release_profiles",
    "write_screenplay",
    "write_screenplay_folder",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rolellm.roles' has no attribute {name!r}")
