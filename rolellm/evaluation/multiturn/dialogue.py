"""Multi-turn evaluation with a simulated user: scenarios, and conversations between a user simulator and a role model.

A `Scenario` is a situation for one role: who the user is (`user_persona`), what is going on (`situation`), the
user's first line (`opening_line`) or the role's greeting (`greeting`, a Character Card's `first_mes`), and how many
turns to play. Scenarios come from a YAML or JSONL file (`read_scenarios`), from Character Cards
(`scenarios_from_card`) or from an LLM that writes them from a role profile (`generate_scenarios`).

`run_dialogues` lets a user-simulator client and the evaluated client talk for each scenario's `num_turns` turns:
the evaluated model sees the role's system instruction (`build_chat_messages`) and the conversation so far, the
simulator sees a prompt to play the user persona (`rolellm/prompts/user_simulator_{lang}.jinja`) and the same
conversation with the sides swapped. Every turn is one batched `client.generate` over all conversations; each
completed turn is appended to `<output_dir>/turns.jsonl` and synced to disk at once, so a run that is killed resumes
from its saved turns (and the clients' caches answer what was asked before). The finished conversations are written
to `<output_dir>/transcripts.jsonl`, one conversation per line.

>>> import tempfile
>>> from rolellm.clients.openai_compatible import OpenAIChatClient
>>> from rolellm.roles.profile import RoleProfile
>>> from rolellm.testing.server import ChatCompletionsServer
>>> profile = RoleProfile("Jack Sparrow", "en", "A witty pirate captain.")
>>> scenario = Scenario("Jack Sparrow", "A tavern in Tortuga.", "A young sailor.", "Where is the Pearl?", num_turns=2)
>>> with ChatCompletionsServer(lambda body: "Aye, " + body["messages"][-1]["content"]) as server:
...     client = OpenAIChatClient("test-model", base_url=server.base_url, progress=False)
...     [transcript] = run_dialogues([scenario], {"Jack Sparrow": profile}, client, client, tempfile.mkdtemp())
>>> [turn["user"] for turn in transcript["turns"]], transcript["turns"][0]["assistant"]
(['Where is the Pearl?', 'Aye, Aye, Where is the Pearl?'], 'Aye, Where is the Pearl?')
"""

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import yaml

from rolellm.clients.base import ChatRequest
from rolellm.evaluation.runlog import append_synced, check_run, read_log, save_run, write_records
from rolellm.roles.card_prompts import role_description
from rolellm.roles.lookup import Profiles
from rolellm.roles.profile import (
    DataFormatError,
    RoleProfile,
    parse_json_line,
    read_text,
    role_slug,
    unique_key_yaml_loader,
)
from rolellm.roles.prompts import build_chat_messages, load_prompt


logger = logging.getLogger(__name__)

TURNS_NAME = "turns.jsonl"  # the log of completed turns, appended as they are answered
TRANSCRIPTS_NAME = "transcripts.jsonl"  # the finished conversations, one per line
RUN_NAME = "dialogue_config.json"  # who talked: a resumed run must be the same run
_CJK = re.compile(r"[\u3400-\u9fff]")
_WORD = re.compile(r"[^\W_]")  # a word has a letter or digit (a lone "！" is not one)
_CARD_MACRO = re.compile(r"\{\{\s*(char|user)\s*\}\}", re.I)
_SPEAKER_PREFIX = re.compile(r"^\s*(?:user|用户)\s*[:：]\s*", re.I)


@dataclass
class Scenario:
    """A situation in which a role talks with a (simulated) user.

    Args:
        role (`str`): the role's name, as in the profiles (matched spelling-insensitively).
        situation (`str`): where and when the conversation happens, and what is going on.
        user_persona (`str`): who the user is; the simulator plays this person.
        opening_line (`str`, *optional*): the user's first line. Required unless `greeting` is given.
        num_turns (`int`, *optional*, defaults to 4): user/role exchanges to play.
        id (`str`, *optional*): a unique name; defaults to `"{role}-{n}"` when scenarios are read.
        greeting (`str`, *optional*): the role's first line, spoken before the user's (a card's `first_mes`); with it
            the simulator writes the first user line too.
        lang (`str`, *optional*): `"en"` or `"zh"`, the language of the prompts; defaults to the profile's.
        source (`str`, *optional*, defaults to `"file"`): where the scenario came from (`file`, `card`, `generated`).
    """

    role: str
    situation: str
    user_persona: str
    opening_line: str = ""
    num_turns: int = 4
    id: str = ""
    greeting: str = ""
    lang: str | None = None
    source: str = "file"

    @classmethod
    def from_dict(cls, record: Mapping, where: str) -> "Scenario":
        """A scenario from a mapping; a missing or mistyped field is a `DataFormatError` naming `where` and the field.

        >>> Scenario.from_dict({"role": "Po", "situation": "s", "user_persona": "p", "num_turns": 0}, "a.yaml:3")
        Traceback (most recent call last):
        ...
        rolellm.roles.profile.DataFormatError: a.yaml:3: field 'num_turns' must be a positive integer, got 0
        """
        if not isinstance(record, Mapping):
            raise DataFormatError(f"{where}: a scenario must be a mapping of fields, got {type(record).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(record) - known)
        if unknown:
            raise DataFormatError(f"{where}: unknown fields {unknown}; a scenario has {sorted(known)}")
        for name in ("role", "situation", "user_persona"):
            if not isinstance(record.get(name), str) or not record[name].strip():
                raise DataFormatError(f"{where}: field '{name}' must be a non-empty string, got {record.get(name)!r}")
        for name in ("opening_line", "id", "greeting", "source"):
            if name in record and not isinstance(record[name], str):
                raise DataFormatError(f"{where}: field '{name}' must be a string, got {record[name]!r}")
        turns = record.get("num_turns", 4)
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
            raise DataFormatError(f"{where}: field 'num_turns' must be a positive integer, got {turns!r}")
        if record.get("lang") not in (None, "en", "zh"):
            raise DataFormatError(f"{where}: field 'lang' must be 'en' or 'zh', got {record['lang']!r}")
        if not str(record.get("opening_line", "")).strip() and not str(record.get("greeting", "")).strip():
            raise DataFormatError(
                f"{where}: field 'opening_line' is missing: give the user's first line (or greeting)"
            )
        return cls(**{**record, **{k: record[k].strip() for k in known if isinstance(record.get(k), str)}})


def with_ids(scenarios: list[Scenario], where: list[str]) -> list[Scenario]:
    """Give scenarios without an `id` one (`{role}-{n}`); a repeated id is an error naming both places."""
    seen: dict[str, str] = {}
    counts: dict[str, int] = {}
    for scenario, place in zip(scenarios, where):
        if not scenario.id:
            counts[scenario.role] = counts.get(scenario.role, 0) + 1
            scenario.id = f"{role_slug(scenario.role)}-{counts[scenario.role]}"
        if scenario.id in seen:
            raise DataFormatError(f"{place}: field 'id' {scenario.id!r} is already used at {seen[scenario.id]}")
        seen[scenario.id] = place
    return scenarios


def read_scenarios(path: str | os.PathLike) -> list[Scenario]:
    """Read scenarios from a `.jsonl` file (one object per line) or a `.yaml`/`.yml` file (a list of mappings).

    Errors name the file, the line and the field. Format: `docs/multi-turn.md`.

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "scenarios.yaml"
    >>> _ = path.write_text("- role: Po\\n  situation: Training day.\\n  user_persona: A new student.\\n"
    ...                     "  opening_line: Teach me!\\n  num_turns: 3\\n")
    >>> [(s.id, s.num_turns) for s in read_scenarios(path)]
    [('po-1', 3)]
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such scenario file (a .yaml list or a .jsonl file of scenarios)")
    text = read_text(path)  # UTF-8 with or without BOM; anything else, or an empty file, is an error naming it
    scenarios, where = [], []
    if path.suffix == ".jsonl":
        for line_no, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                place = f"{path}:{line_no}"
                scenarios.append(Scenario.from_dict(parse_json_line(line, path, line_no), place))
                where.append(place)
    elif path.suffix in (".yaml", ".yml"):
        try:
            node = yaml.compose(text, Loader=yaml.SafeLoader)
            records = yaml.load(text, Loader=unique_key_yaml_loader())  # a field given twice in a scenario: refused
        except yaml.YAMLError as error:
            raise DataFormatError(f"{path}: not valid YAML: {error}") from None
        if node is None or not isinstance(node, yaml.SequenceNode):
            raise DataFormatError(f"{path}:1: expected a YAML list of scenarios")
        for item, record in zip(node.value, records):
            place = f"{path}:{item.start_mark.line + 1}"
            scenarios.append(Scenario.from_dict(record, place))
            where.append(place)
    else:
        raise DataFormatError(f"{path}: a scenario file ends in .yaml, .yml or .jsonl, got {path.suffix!r}")
    if not scenarios:
        raise DataFormatError(f"{path}: no scenarios")
    return with_ids(scenarios, where)


def scenarios_from_card(profile: RoleProfile, num_turns: int = 4, user_persona: str | None = None) -> list[Scenario]:
    """The scenario of a profile read from a Character Card: its `scenario` and `first_mes` (the role's greeting).

    `{{char}}` and `{{user}}` in the card are replaced by the role's name and "User" (你 in Chinese). A card without
    `scenario` and `first_mes` gives no scenario.

    >>> card = {"spec": "chara_card_v2", "data": {"name": "Po", "scenario": "{{char}} trains {{user}}.",
    ...         "first_mes": "Hi, I am {{char}}!"}}
    >>> from rolellm.roles.character_card import profile_from_card
    >>> [(s.situation, s.greeting) for s in scenarios_from_card(profile_from_card(card))]
    [('Po trains User.', 'Hi, I am Po!')]
    """
    data = profile.extra.get("character_card", {}).get("data", {})
    situation, greeting = data.get("scenario", "") or "", data.get("first_mes", "") or ""
    if not situation.strip() and not greeting.strip():
        return []
    user = "你" if profile.lang == "zh" else "User"

    def fill(text: str) -> str:
        return _CARD_MACRO.sub(lambda m: profile.name if m.group(1).lower() == "char" else user, text).strip()

    default_persona = (
        f"一个和{profile.name}聊天的人" if profile.lang == "zh" else f"Someone talking with {profile.name}"
    )
    scenario = Scenario(
        role=profile.name,
        situation=fill(situation) or fill(greeting),
        user_persona=user_persona or default_persona,
        num_turns=num_turns,
        id=f"{role_slug(profile.name)}-card",
        greeting=fill(greeting),
        lang=profile.lang,
        source="card",
    )
    scenario.opening_line = "" if scenario.greeting else scenario.situation
    return [scenario]


def parse_generated_scenarios(text: str, num_scenarios: int) -> list[dict]:
    """Read an LLM's JSON list of `num_scenarios` scenarios (`situation`, `user_persona`, `opening_line`); raise
    `ValueError` naming what is wrong otherwise (the client then asks again).

    >>> parse_generated_scenarios('```json\\n[{"situation": "s", "user_persona": "p", "opening_line": "o"}]\\n```', 1)
    [{'situation': 's', 'user_persona': 'p', 'opening_line': 'o'}]
    """
    start, end = text.find("["), text.rfind("]")
    try:
        items = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except json.JSONDecodeError as error:
        raise ValueError(f"not a JSON list: {error.msg}") from None
    if not isinstance(items, list):
        raise ValueError("expected a JSON list of scenario objects")
    if len(items) != num_scenarios:
        raise ValueError(f"expected {num_scenarios} scenarios, got {len(items)}")
    keys = ("situation", "user_persona", "opening_line")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"scenario {i + 1} is not an object")
        for key in keys:
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise ValueError(f"scenario {i + 1}: field '{key}' must be a non-empty string")
    return [{key: item[key].strip() for key in keys} for item in items]


def generate_scenarios(
    profiles: Sequence[RoleProfile],
    client,
    num_scenarios: int = 2,
    num_turns: int = 4,
    temperature: float = 0.7,
    seed: int = 0,
    max_tokens: int = 1024,
) -> tuple[list[Scenario], dict[str, str]]:
    """Ask an LLM to write `num_scenarios` scenarios for each profile (`rolellm/prompts/scenario_{lang}.jinja`).

    Reproducible: fixed `temperature` and `seed`, answers in the client's cache. An answer that is not the JSON asked
    for is asked again with a reminder (`client.generate(..., remind=True)`), then counted as failed.

    Returns:
        `tuple[list[Scenario], dict[str, str]]`: the scenarios (ids `{role}-gen-{n}`), and role -> why no scenario
        could be read for it.
    """
    requests = []
    for profile in profiles:
        content = load_prompt(f"scenario_{'zh' if profile.lang == 'zh' else 'en'}.jinja").render(
            role=profile.name, desc=role_description(profile), num_scenarios=num_scenarios
        )
        params = {"temperature": temperature, "seed": seed, "max_tokens": max_tokens}
        requests.append(ChatRequest([{"role": "user", "content": content}], params=params))
    results = client.generate(
        requests, parse=lambda text: parse_generated_scenarios(text, num_scenarios), desc="Scenarios", remind=True
    )
    scenarios, failures = [], {}
    for profile, result in zip(profiles, results):
        if not result.ok:
            failures[profile.name] = result.error
            continue
        for n, item in enumerate(result.parsed, start=1):
            scenarios.append(
                Scenario(
                    profile.name,
                    **item,
                    num_turns=num_turns,
                    id=f"{role_slug(profile.name)}-gen-{n}",
                    lang=profile.lang,
                    source="generated",
                )
            )
    if failures:
        logger.warning("no scenarios for %d roles: %s", len(failures), failures)
    return scenarios, failures


# --- conversations ---------------------------------------------------------------------------------------------------


@dataclass
class Conversation:
    scenario: Scenario
    profile: RoleProfile
    turns: list[dict] = field(default_factory=list)  # {"user": str, "assistant": str}
    error: str | None = None

    @property
    def lang(self) -> str:
        return self.scenario.lang or self.profile.lang

    @property
    def open(self) -> bool:
        return self.error is None and len(self.turns) < self.scenario.num_turns

    def role_messages(self, user_line: str, card_extras: bool = True) -> list[dict]:
        """What the evaluated model sees: the role's system instruction, the conversation, the new user line."""
        history = [{"role": "assistant", "content": self.scenario.greeting}] if self.scenario.greeting else []
        for turn in self.turns:
            history += [
                {"role": "user", "content": turn["user"]},
                {"role": "assistant", "content": turn["assistant"]},
            ]
        turns = [*history, {"role": "user", "content": user_line}]
        return build_chat_messages(self.profile, turns, lang=self.lang, card_extras=card_extras)

    def simulator_messages(self) -> list[dict]:
        """What the user simulator sees: its instructions, then the conversation with the sides swapped."""
        prompt = load_prompt(f"user_simulator_{'zh' if self.lang == 'zh' else 'en'}.jinja").render(
            role=self.profile.name, situation=self.scenario.situation, user_persona=self.scenario.user_persona
        )
        messages = [{"role": "system", "content": prompt}]
        if self.scenario.greeting:
            messages.append({"role": "user", "content": self.scenario.greeting})
        for turn in self.turns:
            messages += [
                {"role": "assistant", "content": turn["user"]},
                {"role": "user", "content": turn["assistant"]},
            ]
        return messages

    def transcript(self, model: str, user_model: str) -> dict:
        return {
            "id": self.scenario.id,
            "role": self.profile.name,
            "lang": self.lang,
            "model": model,
            "user_model": user_model,
            "scenario": asdict(self.scenario),
            "greeting": self.scenario.greeting,
            "turns": self.turns[: self.scenario.num_turns],  # a log of a longer run keeps its extra turns
            "complete": len(self.turns) >= self.scenario.num_turns,
            "error": self.error,
        }


def parse_user_line(text: str) -> str:
    """The simulator's next line: stripped of a leading "User:" label; an empty line is rejected (asked again).

    >>> parse_user_line("User: Where is the rum?")
    'Where is the rum?'
    """
    line = _SPEAKER_PREFIX.sub("", text.strip()).strip()
    if not line:
        raise ValueError("the user's line is empty")
    return line


def _read_turns(path: Path, conversations: dict[str, Conversation]) -> int:
    """Restore the turns saved by an earlier run; a line cut short by a crash is dropped (its turn is played again)."""

    def restore(record: dict, where: str) -> None:
        conversation = conversations.get(record.get("id"))
        if conversation is None:
            raise ValueError(f"{where}: scenario {record.get('id')!r} is not in this run; use a new output_dir")
        if record["turn"] != len(conversation.turns) + 1:
            raise ValueError(f"{where}: turn {record['turn']} of {record['id']!r} is out of order")
        conversation.turns.append({"user": record["user"], "assistant": record["assistant"]})

    return read_log(path, restore)


def dialogue_run(
    model: str,
    user_model: str,
    max_tokens: int,
    temperature: float,
    seed: int,
    card_extras: bool,
    scenarios: Sequence[Scenario] | None = None,
) -> dict:
    """What identifies a run of `run_dialogues`, as `dialogue_config.json` saves it: the models, the scenarios played
    (without `num_turns`: a run with more turns goes on from the saved ones) and the role's decoding. Without
    `scenarios`, the rest alone: what `check_run` can compare before the scenarios are known (generated ones)."""
    run = {"model": model, "user_model": user_model}
    if scenarios is not None:
        scenarios = with_ids([replace(s) for s in scenarios], [f"scenarios[{i}]" for i in range(len(scenarios))])
        run["scenarios"] = [{k: v for k, v in asdict(s).items() if k != "num_turns"} for s in scenarios]
    return {**run, "max_tokens": max_tokens, "temperature": temperature, "seed": seed, "card_extras": card_extras}


def check_scenario_roles(scenarios: Sequence[Scenario], profiles: Mapping[str, RoleProfile]) -> None:
    """A `ValueError` naming the roles of `scenarios` that have no profile (however a name is spelled)."""
    profiles = Profiles(profiles)
    missing = sorted({s.role for s in scenarios if s.role not in profiles})
    if missing:
        raise ValueError(f"scenarios name roles with no profile: {missing}; profiles: {sorted(profiles)}")


def run_dialogues(
    scenarios: Sequence[Scenario],
    profiles: Mapping[str, RoleProfile],
    model_client,
    user_client,
    output_dir: str | os.PathLike,
    max_tokens: int = 256,
    user_max_tokens: int = 128,
    temperature: float = 0.0,
    user_temperature: float = 0.0,
    seed: int = 0,
    card_extras: bool = True,
) -> list[dict]:
    """Play every scenario between `user_client` (the simulated user) and `model_client` (the role), resumably.

    Args:
        scenarios (`Sequence[Scenario]`): what to play; ids must be unique (a scenario without one is given
            `{role}-{n}`).
        profiles (`Mapping[str, RoleProfile]`): role name -> profile (names matched spelling-insensitively).
        model_client: the evaluated chat client (`OpenAIChatClient`, `LocalChatClient` on a model or checkpoint).
        user_client: the user simulator's chat client.
        output_dir (`str` or `os.PathLike`): where `turns.jsonl` (the log), `dialogue_config.json` and
            `transcripts.jsonl` (one conversation per line) go. A folder with turns of the same run is resumed; a
            run with more `num_turns` goes on from the saved turns.
        max_tokens, user_max_tokens (`int`, *optional*, default to 256 and 128): the answer budgets of the role and
            of the simulator.
        temperature, user_temperature (`float`, *optional*, default to 0.0), seed (`int`, *optional*, defaults to
            0): sampling of the role and of the simulator (greedy by default: a run is reproducible).
        card_extras (`bool`, *optional*, defaults to `True`): the role's messages carry a card's example dialogue
            and post-history text (`build_chat_messages`); `False` for a model trained without them (a scenario's
            greeting is its opening line either way).

    Returns:
        `list[dict]`: the transcripts, in scenario order: `id`, `role`, `lang`, `model`, `user_model`, `scenario`,
        `greeting`, `turns` (`[{"user", "assistant"}]`), `complete`, and `error` (why a conversation stopped early:
        a request that failed; a re-run plays it on from its saved turns).
    """
    profiles = Profiles(profiles)
    check_scenario_roles(scenarios, profiles)
    scenarios = with_ids([replace(s) for s in scenarios], [f"scenarios[{i}]" for i in range(len(scenarios))])
    folder = Path(output_dir)
    run = dialogue_run(
        model_client.model_name, user_client.model_name, max_tokens, temperature, seed, card_extras, scenarios
    )
    check_run(folder, run, RUN_NAME, TURNS_NAME)  # another run's folder is refused before anything in it is written
    conversations = {s.id: Conversation(s, profiles[s.role]) for s in scenarios}
    log_path = folder / TURNS_NAME
    restored = _read_turns(log_path, conversations)
    folder.mkdir(parents=True, exist_ok=True)
    save_run(folder, run, RUN_NAME)
    if restored:
        logger.info("resumed %d saved turns from %s", restored, log_path)
    model_params = {"temperature": temperature, "max_tokens": max_tokens, "seed": seed}
    user_params = {"temperature": user_temperature, "max_tokens": user_max_tokens, "seed": seed}
    with open(log_path, "a", encoding="utf-8") as log:
        while True:
            active = [c for c in conversations.values() if c.open]
            if not active:
                break
            turn = min(len(c.turns) for c in active) + 1  # play the conversations furthest behind first
            active = [c for c in active if len(c.turns) + 1 == turn]
            lines = {}
            ask = [c for c in active if c.turns or not c.scenario.opening_line]
            for c in active:
                if c not in ask:
                    lines[c.scenario.id] = c.scenario.opening_line
            if ask:
                requests = [ChatRequest(c.simulator_messages(), params=dict(user_params)) for c in ask]
                for c, result in zip(ask, user_client.generate(requests, parse=parse_user_line, desc=f"User {turn}")):
                    if result.ok:
                        lines[c.scenario.id] = result.parsed
                    else:
                        c.error = f"user simulator, turn {turn}: {result.error}"
            speaking, saved = [c for c in active if c.scenario.id in lines], []
            requests = [
                ChatRequest(c.role_messages(lines[c.scenario.id], card_extras), params=dict(model_params))
                for c in speaking
            ]
            for c, result in zip(speaking, model_client.generate(requests, desc=f"Role {turn}")):
                if not result.ok:
                    c.error = f"role model, turn {turn}: {result.error}"
                    continue
                record = {"user": lines[c.scenario.id], "assistant": result.text.strip()}
                saved.append({"id": c.scenario.id, "turn": turn, **record})
                c.turns.append(record)
            append_synced(log, saved)  # the turn is on disk before the next one is asked for
    transcripts = [c.transcript(model_client.model_name, user_client.model_name) for c in conversations.values()]
    write_records(transcripts, folder / TRANSCRIPTS_NAME)
    failed = [t for t in transcripts if t["error"]]
    if failed:
        logger.warning(
            "%d of %d conversations stopped early, e.g. %s", len(failed), len(transcripts), failed[0]["error"]
        )
    return transcripts


def read_transcripts(path: str | os.PathLike) -> list[dict]:
    """Read a `transcripts.jsonl` file (one conversation per line)."""
    path = Path(path)
    lines = read_text(path, allow_empty=True).splitlines()
    return [parse_json_line(line, path, n) for n, line in enumerate(lines, start=1) if line.strip()]


def answer_length(texts: Sequence[str]) -> dict:
    """The length of answers: characters, words (whitespace-separated, with a letter or digit, CJK characters not
    counted: they are counted on their own), CJK characters, all summed, and the number of answers.

    >>> answer_length(["Arr, matey!", "俺老孙来也"])
    {'answers': 2, 'chars': 16, 'words': 2, 'cjk_chars': 5}
    """
    chars = sum(len(t) for t in texts)
    cjk = sum(len(_CJK.findall(t)) for t in texts)
    words = sum(sum(bool(_WORD.search(w)) for w in _CJK.sub(" ", t).split()) for t in texts)
    return {"answers": len(texts), "chars": chars, "words": words, "cjk_chars": cjk}
