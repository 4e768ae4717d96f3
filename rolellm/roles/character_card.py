"""SillyTavern / Character Card V2 and V3 (JSON files or PNG images) to `RoleProfile` and back, losslessly.

A card is `{"spec": "chara_card_v2" | "chara_card_v3", "spec_version": ..., "data": {"name", "description",
"personality", "scenario", "first_mes", "mes_example", "system_prompt", "post_history_instructions",
"character_book", "extensions", ...}}`. Import maps `name`, `description` (a catchphrase sentence in it is split
off when rejoining it gives the text back) and `mes_example` (`<START>` blocks of `{{user}}:` / `{{char}}:` lines,
as dialogue groups) onto the profile and keeps the whole card, unknown fields included, in
`profile.extra["character_card"]`. Export writes the kept card back with the profile's current values, in the same key
order and JSON layout, so an unchanged profile gives the input file byte for byte.

>>> card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Po", "description": "A panda.",
...         "mes_example": "<START>\\n{{user}}: Who are you?\\n{{char}}: The Dragon Warrior!", "extensions": {}}}
>>> profile = profile_from_card(card)
>>> [(u.speaker, u.content) for u in profile.dialogue]
[('user', 'Who are you?'), ('Po', 'The Dragon Warrior!')]
>>> card_from_profile(profile) == card
True
"""

import base64
import binascii
import copy
import json
import re
import struct
import zlib
from pathlib import Path
from typing import Literal

from rolellm.roles.card_prompts import split_mes_example, substitute
from rolellm.roles.profile import (
    DataFormatError,
    RoleProfile,
    Utterance,
    decode_text,
    detect_language,
    join_catchphrases,
    parse_json_text,
    split_catchphrases,
)


SPECS = {"chara_card_v2": "2.0", "chara_card_v3": "3.0"}
CARD_KEYWORDS = ("ccv3", "chara")  # the text-chunk keywords of a card, the V3 one first
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_TEXT_CHUNKS = (b"tEXt", b"zTXt", b"iTXt")
USER = "user"
_V2_FIELDS = ["name", "description", "personality", "scenario", "first_mes", "mes_example", "creator_notes",
              "system_prompt", "post_history_instructions", "alternate_greetings", "tags", "creator",
              "character_version", "extensions"]  # fmt: skip


def parse_mes_example(
    text: str, name: str, user_name: str | None = None, char: str | None = None, speakers: list[str] | None = None
) -> list[Utterance]:
    """`<START>`-separated example chats as utterances; each block is one dialogue group (`act_id` = `diag_id`).

    A message starts with `{{user}}:`, `{{char}}:`, `<USER>:`, `<BOT>:`, the role's name, the user's name or one of
    `speakers` (the other speakers of a card rolellm wrote, `extensions.rolellm.speakers`) and a colon; any other
    line belongs to the message before it, so prose like `Brass: a metal.` is never a speaker. The
    text before the first `<START>` is a block of its own; lines of a block before its first message are narration.
    `{{char}}` and `{{user}}` inside messages become `char` (default `name`) and `user_name` (default "User").

    >>> [(u.speaker, u.content) for u in parse_mes_example(
    ...     "<START>\\n{{user}}: What is brass?\\n{{char}}: Hm.\\nBrass: copper and zinc, {{user}}.", "Ada")]
    [('user', 'What is brass?'), ('Ada', 'Hm.\\nBrass: copper and zinc, User.')]
    """
    char, user = char or name, user_name or "User"
    others = {speaker.casefold(): speaker for speaker in speakers or []}
    speakers = {**others, "{{char}}": name, "<bot>": name, "{{user}}": USER, "<user>": USER, name.casefold(): name}
    speakers.setdefault(user.casefold(), USER)
    if char.casefold() not in speakers:
        speakers[char.casefold()] = name
    utterances = []
    for block, lines in enumerate(split_mes_example(text)):
        for line in lines.splitlines():
            head, colon, rest = line.partition(":")
            speaker = speakers.get(head.strip().casefold()) if colon else None
            if speaker is not None:
                utterances.append(Utterance(block, block, speaker, substitute(rest.removeprefix(" "), char, user)))
            elif utterances and utterances[-1].act_id == block:
                utterances[-1].content += "\n" + substitute(line, char, user)  # a message that spans lines
            elif line.strip():
                utterances.append(Utterance(block, block, "narration", substitute(line.strip(), char, user)))
    return utterances


def render_mes_example(dialogue: list[Utterance], name: str) -> str:
    """The inverse of `parse_mes_example`: one `<START>` block per dialogue group."""
    lines, group = [], None
    for utterance in dialogue:
        if (utterance.act_id, utterance.diag_id) != group:
            group = (utterance.act_id, utterance.diag_id)
            lines.append("<START>")
        speaker = {name: "{{char}}", USER: "{{user}}"}.get(utterance.speaker, utterance.speaker)
        lines.append(utterance.content if utterance.narration else f"{speaker}: {utterance.content}")
    return "\n".join(lines)


def profile_from_card(card: dict, lang: str | None = None, where: str = "card") -> RoleProfile:
    """Import a Character Card V2/V3 dict; `where` names the source in error messages."""
    if not isinstance(card, dict):
        raise DataFormatError(f"{where}: a character card must be a JSON object, got {type(card).__name__}")
    spec = card.get("spec")
    if spec not in SPECS:
        raise DataFormatError(f"{where}: field 'spec' is {spec!r}; expected one of {sorted(SPECS)} (V1 cards: wrap "
                              'the fields as {"spec": "chara_card_v2", "spec_version": "2.0", "data": {...}})')  # fmt: skip
    data = card.get("data")
    if not isinstance(data, dict):
        raise DataFormatError(f"{where}: field 'data' must be an object, got {type(data).__name__}")
    _check_card_fields(data, where)
    if not (data.get("name") or "").strip():
        raise DataFormatError(f"{where}: field 'data.name' is missing or empty")
    name, text = data["name"], data.get("description") or ""
    lang = lang or detect_language(name + " " + text)
    extra = {"character_card": copy.deepcopy(card)}
    phrases = _rolellm_extension(data, where, "catchphrases")
    if phrases is not None:  # the card says them: the description stays as written
        description, catchphrases = text, phrases
        extra["character_card_catchphrases"] = "extensions.rolellm.catchphrases"
    else:
        description, catchphrases = split_catchphrases(text, lang)
        if join_catchphrases(description, catchphrases, lang) != text:  # keep the text as written when it would change
            description, catchphrases = text, []
    nickname = data.get("nickname") if isinstance(data.get("nickname"), str) and data["nickname"].strip() else None
    user = "你" if lang == "zh" else "User"
    speakers = _rolellm_extension(data, where, "speakers")
    dialogue = parse_mes_example(data.get("mes_example") or "", name, user_name=user, char=nickname, speakers=speakers)
    extra["character_card_dialogue"] = [vars(u).copy() for u in dialogue]
    return RoleProfile(name, lang, description, catchphrases, dialogue=dialogue, extra=extra)


# the type of each field of the V2 and V3 specs; a field the card leaves out, or sets to null, is absent
_STRING_FIELDS = ("name", "description", "personality", "scenario", "first_mes", "mes_example", "creator_notes",
                  "system_prompt", "post_history_instructions", "creator", "character_version", "nickname")  # fmt: skip
_STRING_LIST_FIELDS = ("alternate_greetings", "tags", "group_only_greetings", "source")
_OBJECT_FIELDS = ("extensions", "character_book", "creator_notes_multilingual")


def _check_card_fields(data: dict, where) -> None:
    """Each field of the card's `data` of the type the V2/V3 specs give it, and each lorebook entry an object with a
    string `content` and a list of string `keys`: a wrong one is a `DataFormatError` naming the field (it would
    otherwise be left out of every prompt without a word)."""

    def wrong(key, expected, value):
        return DataFormatError(
            f"{where}: field 'data.{key}' must be {expected}, got {type(value).__name__}: {value!r}"
        )

    for key in _STRING_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise wrong(key, "a string", data[key])
    for key in _STRING_LIST_FIELDS:
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise wrong(key, "a list of strings", value)
    for key in _OBJECT_FIELDS:
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise wrong(key, "an object", data[key])
    entries = (data.get("character_book") or {}).get("entries")
    if entries is not None and not isinstance(entries, list):
        raise wrong("character_book.entries", "a list of entries", entries)
    for index, entry in enumerate(entries or []):
        field_name = f"character_book.entries[{index}]"
        if not isinstance(entry, dict):
            raise wrong(field_name, "an object", entry)
        if not isinstance(entry.get("content"), str):
            raise wrong(f"{field_name}.content", "a string", entry.get("content"))
        for key in ("keys", "secondary_keys"):
            value = entry.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise wrong(f"{field_name}.{key}", "a list of strings", value)


def _rolellm_extension(data: dict, where, key: str) -> list[str] | None:
    """The `extensions.rolellm.{key}` list of strings of a card (`catchphrases`, `speakers`), `None` when absent."""
    extensions = data.get("extensions")
    rolellm = extensions.get("rolellm") if isinstance(extensions, dict) else None
    values = rolellm.get(key) if isinstance(rolellm, dict) else None
    if values is None:
        return None
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise DataFormatError(
            f"{where}: field 'data.extensions.rolellm.{key}' must be a list of strings, got {values!r}"
        )
    return [value.strip() for value in values if value.strip()]


def card_from_profile(profile: RoleProfile, spec: Literal["chara_card_v2", "chara_card_v3"] | None = None) -> dict:
    """Export a profile as a card dict: the imported card with the profile's current values, or a new card.

    Args:
        profile (`RoleProfile`): the profile.
        spec (`str`, *optional*): `"chara_card_v2"` or `"chara_card_v3"`; defaults to the imported card's spec, or V2
            for a profile that did not come from a card.
    """
    kept = profile.extra.get("character_card")
    card = copy.deepcopy(kept) if kept else {"spec": "chara_card_v2", "spec_version": "2.0", "data": {}}
    if spec is not None and spec != card["spec"]:
        if spec not in SPECS:
            raise ValueError(f"spec must be one of {sorted(SPECS)}, got {spec!r}")
        card["spec"], card["spec_version"] = spec, SPECS[spec]
    data = card["data"]
    if not kept:
        data.update(dict.fromkeys(_V2_FIELDS, ""))
        data.update(
            alternate_greetings=[], tags=[], extensions={"rolellm": {"source": profile.source, "lang": profile.lang}}
        )
        if card["spec"] == "chara_card_v3":
            data.update(group_only_greetings=[])
    data["name"] = profile.name
    if kept and profile.extra.get("character_card_catchphrases"):
        data["description"] = profile.description
        data["extensions"]["rolellm"]["catchphrases"] = list(profile.catchphrases)
    else:
        data["description"] = profile.description_with_catchphrases()
    unchanged = kept and profile.extra.get("character_card_dialogue") == [vars(u) for u in profile.dialogue]
    if not unchanged:
        data["mes_example"] = render_mes_example(profile.dialogue, profile.name)
        others = sorted({u.speaker for u in profile.dialogue if not u.narration} - {profile.name, USER})
        if others:  # read back as speakers (any other `Word:` line is prose)
            data.setdefault("extensions", {}).setdefault("rolellm", {})["speakers"] = others
    return card


def _json_layout(text: str) -> dict:
    """How a JSON text was written (indent, separators, ASCII escapes, final newline), to write it back alike."""
    body = text.strip()
    second = body.split("\n", 2)[1] if "\n" in body else None
    indent = None if second is None else ("\t" if second.startswith("\t") else len(second) - len(second.lstrip(" ")))
    compact = indent is None and not re.search(r'"\s*:\s+', body) and '", "' not in body
    return {
        "indent": indent,
        "separators": (",", ":") if compact else (",", ": ") if indent is not None else (", ", ": "),
        "ensure_ascii": bool(re.search(r"\\u[0-9a-fA-F]{4}", body)) and body.isascii(),
        "newline": text.endswith("\n"),
        "crlf": "\r\n" in text,
    }


def read_character_card(path: str | Path, lang: str | None = None) -> RoleProfile:
    """Read a card (V2 or V3) from a `.json` file or a SillyTavern `.png` (base64 JSON in a `ccv3`/`chara` text
    chunk) into a `RoleProfile`; the JSON layout and the PNG are remembered for `write_character_card`."""
    path = Path(path)
    raw = path.read_bytes()
    png = raw.startswith(PNG_SIGNATURE)
    if png:
        texts = {}
        for keyword, payload in _png_texts(_png_chunks(raw, path), path):
            if keyword in CARD_KEYWORDS and keyword in texts:  # which card is meant cannot be told
                raise DataFormatError(f"{path}: two {keyword!r} text chunks (two cards in one PNG); keep one")
            texts[keyword] = payload
        keyword = next((k for k in CARD_KEYWORDS if k in texts), None)
        if keyword is None:
            raise DataFormatError(f"{path}: a PNG without a character card (no 'ccv3' or 'chara' text chunk)")
        text = _decode_card(texts[keyword], keyword, path)
    elif path.suffix.lower() == ".png" and raw:  # a damaged image, or another file named .png: JSON text is read
        try:
            text = decode_text(raw, path)
        except DataFormatError:
            raise DataFormatError(f"{path}: not a PNG image (no PNG signature at byte 0) nor JSON text") from None
    else:
        text = decode_text(raw, path)
    if not text.strip():
        raise DataFormatError(f"{path}: the file is empty")
    card = parse_json_text(text, path)
    profile = profile_from_card(card, lang=lang, where=str(path))
    profile.extra["character_card_layout"] = _json_layout(text)
    if png:
        profile.extra["character_card_png"] = {"image": str(path.resolve()), "keywords": sorted(texts)}
    return profile


def dumps_character_card(profile: RoleProfile, spec: str | None = None) -> str:
    """The card as JSON text, laid out like the file it was read from (or indented by 2 for a new card)."""
    layout = profile.extra.get("character_card_layout") or {
        "indent": 2, "separators": (",", ": "), "ensure_ascii": False, "newline": True}  # fmt: skip
    text = json.dumps(
        card_from_profile(profile, spec),
        indent=layout["indent"],
        separators=tuple(layout["separators"]),
        ensure_ascii=layout["ensure_ascii"],
    )
    text += "\n" if layout["newline"] else ""
    return text.replace("\n", "\r\n") if layout.get("crlf") else text


def write_character_card(
    profile: RoleProfile, path: str | Path, spec: str | None = None, image: str | Path | bytes | None = None
) -> Path:
    """Write the profile as a Character Card (see `card_from_profile`): JSON, or a PNG when `path` ends in `.png`.

    Args:
        profile (`RoleProfile`): the profile.
        path (`str` or `os.PathLike`): the file to write.
        spec (`str`, *optional*): `"chara_card_v2"` or `"chara_card_v3"` (default: the imported card's, else V2).
        image (`str`, `os.PathLike` or `bytes`, *optional*): for a `.png`, the PNG to embed the card in; defaults to
            the PNG the card was read from. Its old card chunks are replaced: a V3 card is written as `ccv3` plus a
            V2-readable `chara` copy, a V2 card as `chara`.
    """
    path = Path(path)
    text = dumps_character_card(profile, spec)
    if path.suffix.lower() != ".png":
        path.write_text(text, encoding="utf-8", newline="")
        return path
    source = image if image is not None else profile.extra.get("character_card_png", {}).get("image")
    if source is None:
        raise ValueError(f"writing {path} needs a PNG to embed the card in: pass image=<path or PNG bytes>")
    base = source if isinstance(source, bytes) else Path(source).read_bytes()
    card = json.loads(text)
    payloads = {"chara": text}
    if card["spec"] == "chara_card_v3":
        v2 = {**card, "spec": "chara_card_v2", "spec_version": "2.0"}
        payloads = {"ccv3": text, "chara": json.dumps(v2, ensure_ascii=False)}
    path.write_bytes(embed_card(base, payloads, path))
    return path


def embed_card(base: bytes, payloads: dict[str, str], path) -> bytes:
    """`base` with its card chunks replaced by `payloads` (keyword -> JSON text), every other byte unchanged.

    The new card chunks stand where the first old one stood (before `IEND` when there was none). When the primary
    card (`ccv3` for V3, else `chara`) is the one already embedded, the old card chunks are kept as they are, so
    reading and writing an unchanged card gives the same file.
    """
    chunks = _png_chunks(base, path)
    old = {keyword: text for keyword, text in _png_texts(chunks, path) if keyword in CARD_KEYWORDS}
    primary = "ccv3" if "ccv3" in payloads else "chara"
    if old.get(primary) is not None and _decode_card(old[primary], primary, path) == payloads[primary]:
        return base
    new = b"".join(
        _chunk_bytes(b"tEXt", keyword.encode("latin-1") + b"\0" + base64.b64encode(text.encode("utf-8")))
        for keyword, text in payloads.items()
    )
    out, placed = [base[: len(PNG_SIGNATURE)]], False
    for kind, data, start, end in chunks:
        if _is_card_chunk(kind, data):
            out.append(b"" if placed else new)
            placed = True
            continue
        if kind == b"IEND" and not placed:
            out.append(new)
        out.append(base[start:end])
    out.append(base[chunks[-1][3] :])  # anything after IEND, as it was
    return b"".join(out)


def _chunk_bytes(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_chunks(raw: bytes, path) -> list[tuple[bytes, bytes, int, int]]:
    """The PNG's chunks up to `IEND`: `(kind, data, start, end)` with the byte span of the whole chunk."""
    if not raw.startswith(PNG_SIGNATURE):
        raise DataFormatError(f"{path}: not a PNG file")
    chunks, offset = [], len(PNG_SIGNATURE)
    while offset < len(raw):
        if offset + 8 > len(raw):
            raise DataFormatError(f"{path}: truncated PNG (chunk header at byte {offset})")
        (length,), kind = struct.unpack(">I", raw[offset : offset + 4]), raw[offset + 4 : offset + 8]
        data = raw[offset + 8 : offset + 8 + length]
        if len(data) != length or offset + 12 + length > len(raw):
            raise DataFormatError(f"{path}: truncated PNG ({kind.decode('latin-1')} chunk at byte {offset})")
        (crc,) = struct.unpack(">I", raw[offset + 8 + length : offset + 12 + length])
        if kind in _TEXT_CHUNKS and crc != zlib.crc32(kind + data):  # a damaged card would be read as garbage
            raise DataFormatError(f"{path}: the {kind.decode('latin-1')} chunk at byte {offset} fails its CRC check")
        chunks.append((kind, data, offset, offset + 12 + length))
        offset += 12 + length
        if kind == b"IEND":
            break
    if not chunks or chunks[-1][0] != b"IEND":
        raise DataFormatError(f"{path}: truncated PNG (no IEND chunk)")
    return chunks


def _png_texts(chunks, path):
    """`(keyword, text)` of every text chunk: `tEXt`, `zTXt` (zlib) and `iTXt` (UTF-8, compressed or not)."""
    for kind, data, start, _ in chunks:
        if kind not in (b"tEXt", b"zTXt", b"iTXt") or b"\0" not in data:
            continue
        keyword, _, rest = data.partition(b"\0")
        try:
            if kind == b"tEXt":
                text = rest.decode("latin-1")
            elif kind == b"zTXt":
                text = zlib.decompress(rest[1:]).decode("latin-1")
            else:
                compressed, rest = rest[0], rest[2:]
                _language, _, rest = rest.partition(b"\0")
                _translated, _, rest = rest.partition(b"\0")
                text = (zlib.decompress(rest) if compressed else rest).decode("utf-8")
        except (zlib.error, UnicodeDecodeError, IndexError) as error:
            raise DataFormatError(
                f"{path}: the {kind.decode()} chunk at byte {start} cannot be read ({error})"
            ) from None
        yield keyword.decode("latin-1"), text


def _decode_card(payload: str, keyword: str, path) -> str:
    """The JSON text of a card chunk: base64 of UTF-8, as SillyTavern writes it."""
    try:
        return base64.b64decode(payload.strip()).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError) as error:
        raise DataFormatError(f"{path}: the {keyword!r} chunk is not base64 UTF-8 JSON ({error})") from None


def _is_card_chunk(kind: bytes, data: bytes) -> bool:
    return kind in (b"tEXt", b"zTXt", b"iTXt") and data.partition(b"\0")[0].decode("latin-1") in CARD_KEYWORDS
