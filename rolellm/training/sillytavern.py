"""The SillyTavern hand-off of an exported model: one Character Card V3 PNG per trained role, whose system prompt is
exactly the system text the model was trained on, and nothing else that reaches a prompt.

SillyTavern builds a chat-completion prompt from a card: the card's `system_prompt` replaces the main prompt (with
"Prefer Char. Prompt", its default), and a non-empty `description`, `personality`, `scenario`, `mes_example`,
`first_mes` or `post_history_instructions` adds text of its own around it. A model rolellm trained saw the role's
system text, the question and the answer, nothing more, so the card carries the system text and leaves every other
field empty (docs/sillytavern.md says which SillyTavern settings keep it so).

>>> from rolellm import RoleProfile
>>> card = role_card(RoleProfile("Po", "en", "A kung fu panda."), "You are Po.", "po.Q8_0.gguf")
>>> card["spec"], card["data"]["system_prompt"], card["data"]["description"], card["data"]["first_mes"]
('chara_card_v3', 'You are Po.', '', '')
"""

import json
import re
import struct
import zlib
from pathlib import Path

from rolellm.clients.inference_settings import SYSTEM_TEMPLATE_FILE
from rolellm.roles.character_card import PNG_SIGNATURE, embed_card
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import build_system_instruction
from rolellm.roles.resolve import PROFILES_FILE, load_profiles


CARD_SUFFIX = ".card.png"
# every text field of a V3 card that SillyTavern puts into a prompt, or shows as the first message
PROMPT_FIELDS = ("description", "personality", "scenario", "first_mes", "mes_example", "post_history_instructions")


def trained_system_text(checkpoint: str | Path, profile: RoleProfile) -> str:
    """The system text `rolellm train` put before every sample of `profile` in `checkpoint`: the paper's instruction,
    or the checkpoint's own `system_template.jinja`, rendered for the role."""
    template = Path(checkpoint) / SYSTEM_TEMPLATE_FILE
    return build_system_instruction(
        profile, template=template.read_text(encoding="utf-8") if template.is_file() else None
    )


def role_card(profile: RoleProfile, system_text: str, model_file: str) -> dict:
    """A Character Card V3 of `profile` for SillyTavern whose `system_prompt` is `system_text` and whose other prompt
    fields (`PROMPT_FIELDS`) are empty; `extensions.rolellm` names the model file it belongs to (extensions never
    reach a prompt)."""
    data = {
        "name": profile.name,
        **dict.fromkeys(PROMPT_FIELDS, ""),
        "creator_notes": f"The role {profile.name} of {model_file}: its system prompt is the text the model was "
        "trained on. Keep SillyTavern's 'Prefer Char. Prompt' on and its other prompts empty (docs/sillytavern.md).",
        "system_prompt": system_text,
        "alternate_greetings": [],
        "group_only_greetings": [],
        "tags": [],
        "creator": "rolellm",
        "character_version": "",
        "extensions": {"rolellm": {"model_file": model_file, "lang": profile.lang}},
    }
    return {"spec": "chara_card_v3", "spec_version": "3.0", "data": data}


def card_file_name(name: str) -> str:
    """A file name for a role's card: its name with what file systems refuse replaced (`"Dr. Frank-N-Furter"` ->
    `"Dr. Frank-N-Furter.card.png"`)."""
    return re.sub(r'[\\/:*?"<>|\x00-\x1f]+', "_", name).strip(" .") + CARD_SUFFIX


def plain_png(width: int = 64, height: int = 64, rgb: tuple[int, int, int] = (96, 96, 128)) -> bytes:
    """A one-colour PNG image to carry a card."""
    row = b"\x00" + bytes(rgb) * width  # filter byte 0, then the pixels
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(row * height)) + chunk(b"IEND", b"")


def write_role_cards(checkpoint: str | Path, folder: str | Path, model_file: str) -> list[Path]:
    """One card PNG per role of `checkpoint`'s `role_profiles.jsonl` in `folder` (none without the file): the V3 card
    in a `ccv3` text chunk and its V2 reading in `chara`, as SillyTavern writes them."""
    checkpoint, folder = Path(checkpoint), Path(folder)
    if not (checkpoint / PROFILES_FILE).is_file():
        return []
    written = []
    for profile in load_profiles(checkpoint / PROFILES_FILE).values():
        card = role_card(profile, trained_system_text(checkpoint, profile), model_file)
        v2 = {**card, "spec": "chara_card_v2", "spec_version": "2.0"}
        payloads = {"ccv3": json.dumps(card, ensure_ascii=False), "chara": json.dumps(v2, ensure_ascii=False)}
        path = folder / card_file_name(profile.name)
        path.write_bytes(embed_card(plain_png(), payloads, path))
        written.append(path)
    return written
