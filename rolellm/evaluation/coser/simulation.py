"""CoSER's given-circumstance acting: the actor model plays every character of a scene, an environment agent plays
the world, and a next-speaker predictor (NSP) decides who acts next.

Every agent keeps its own view of the scene: its system text, a first user turn, its own messages as `assistant`
turns and everyone else's as `user` turns labelled with the speaker (`Name: ...`), inner thoughts removed
(`remove_inner_thoughts`). A round is one message (of the current speaker) and one prediction. The NSP names one of
the speaking characters or the Environment; an answer that names nobody known, or the current speaker again, is
replaced by a random main character or the Environment (drawn with a generator seeded by the scene and round, so a
re-run draws the same). `<END CHAT>` ends the scene from round index 5 on; no scene plays more than 20 rounds. With
`continue_from=n` the first `n` rounds are the reference conversation's messages and speakers.

Every message and prediction is appended to `<output_dir>/simulation.jsonl` and synced to disk as it arrives
(`append_synced`); a run that is killed goes on from that log, and the clients' caches answer what was asked before,
so nothing answered is asked twice (a request still in flight when the run was killed is sent once more).
"""

import hashlib
import logging
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.clients.base import ChatRequest
from rolellm.evaluation.coser.prompts import CoserPrompts
from rolellm.evaluation.coser.testset import ENVIRONMENT, CoserCase
from rolellm.evaluation.coser.thoughts import add_speaker_name, remove_inner_thoughts
from rolellm.evaluation.runlog import append_synced, check_run, read_log, save_run


logger = logging.getLogger(__name__)

NSP = "NSP"
END_CHAT = "<END CHAT>"
MAX_ROUNDS = 20
FIRST_END_ROUND = 5  # a predicted <END CHAT> is honoured from this round index on
LOG_NAME = "simulation.jsonl"
RUN_NAME = "coser_run.json"
_NEXT_SPEAKER = re.compile(r"next[\s_]*speaker[\s*#_]*(?:\bis\b)?[\s*]*[:：\-]?\s*([^\n]+)", re.I)
_EDGES = re.compile(r"^[\W_]+|[\W_]+$")


def _key(name: str) -> str:
    return _EDGES.sub("", name).casefold()


def parse_next_speaker(text: str) -> str:
    """The name an NSP answer gives: after its last "Next Speaker:", else before a colon, else the whole answer.

    >>> parse_next_speaker("Reasoning: Lear must answer.\\n**Next Speaker:** King Lear")
    'King Lear'
    >>> parse_next_speaker("Environment")
    'Environment'
    """
    matches = _NEXT_SPEAKER.findall(text)
    name = matches[-1] if matches else (text.split(":")[0] if ":" in text else text)
    return name.strip(" \t*#`\"'.,!")


def choose_next(name: str, case: CoserCase, current: str, round_index: int) -> tuple[str, bool]:
    """The next speaker after `current` for a predicted `name`, and whether the prediction was used as it is.

    `<END CHAT>` ends the scene from round index 5 on; a known speaker other than `current` speaks next (names are
    matched ignoring case and surrounding punctuation); anything else gets a random main character or the
    Environment (any other speaker when there is none), drawn from a generator seeded by the scene and round.

    >>> case = CoserCase("b-1-0", "b", "s", "", ["Fool", "King Lear", "Environment"], ["Fool", "King Lear"])
    >>> choose_next("king lear.", case, "Fool", 0), choose_next("<END CHAT>", case, "Fool", 5)
    (('King Lear', True), ('<END CHAT>', True))
    >>> choose_next("nobody", case, "Fool", 1)[1]
    False
    """
    if END_CHAT.casefold() in name.casefold() and round_index >= FIRST_END_ROUND:
        return END_CHAT, True
    known = {_key(speaker): speaker for speaker in case.speakers}
    chosen = known.get(_key(name))
    if chosen is not None and chosen != current:
        return chosen, True
    candidates = [c for c in dict.fromkeys([*case.major_characters, ENVIRONMENT]) if c in case.speakers]
    candidates = [c for c in candidates if c != current] or [c for c in case.speakers if c != current]
    return random.Random(f"{case.id}/{round_index}").choice(sorted(candidates)), False


@dataclass
class Scene:
    """One scene being played: its case and the records of its messages and predictions so far."""

    case: CoserCase
    first_speaker: str
    records: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def rounds(self) -> int:
        return sum(r["kind"] == "nsp" for r in self.records)

    @property
    def speaker(self) -> str:
        predictions = [r for r in self.records if r["kind"] == "nsp"]
        return predictions[-1]["next"] if predictions else self.first_speaker

    @property
    def finished(self) -> bool:
        return self.speaker == END_CHAT or (self.rounds >= MAX_ROUNDS and not self.needs_prediction)

    @property
    def needs_prediction(self) -> bool:
        return bool(self.records) and self.records[-1]["kind"] == "message"

    @property
    def open(self) -> bool:
        return self.error is None and not self.finished

    def messages(self) -> list[dict]:
        """The simulated conversation: `{"role": speaker, "content": message}`, without predictions."""
        return [{"role": r["speaker"], "content": r["content"]} for r in self.records if r["kind"] == "message"]

    def transcript(self) -> dict:
        """The scene as saved in `simulations.jsonl`: every message and prediction (`{"role": "NSP", ...}`)."""
        simulation = [
            {"role": r["speaker"], "content": r["content"]} if r["kind"] == "message" else
            {"role": NSP, "content": r["name"]}
            for r in self.records
        ]  # fmt: skip
        ended = "end_chat" if self.speaker == END_CHAT else "max_rounds" if self.finished else None
        fallbacks = sum(r["kind"] == "nsp" and not r["valid"] for r in self.records)
        return {"id": self.case.id, "simulation": simulation, "rounds": self.rounds, "ended": ended,
                "nsp_fallbacks": fallbacks, "error": self.error}  # fmt: skip


def agent_view(scene: Scene, agent: str, system: str, start: str) -> list[dict]:
    """What `agent` (a character, `"Environment"` or `"NSP"`) sees of the scene: its system text, the first user
    turn, its own messages as `assistant` turns, the others' as `user` turns (`Name: ...`, thoughts removed);
    consecutive turns of one side are joined by a blank line, empty ones skipped."""
    messages = [{"role": "system", "content": system}]

    def add(role: str, text: str) -> None:
        if not text:
            return
        if len(messages) > 1 and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n\n" + text
        else:
            messages.append({"role": role, "content": text})

    add("user", start)
    for record in scene.records:
        if record["kind"] == "message":
            if record["speaker"] == agent:
                add("assistant", record["content"])
            else:
                add("user", add_speaker_name(remove_inner_thoughts(record["content"]), record["speaker"]))
        elif agent == NSP:
            if record["valid"]:
                add("assistant", record["raw"])
            else:  # the answer was not usable: the NSP sees the name it gave, then its instructions again
                add("assistant", record["name"])
                add("user", system)
    return messages


def _restore(scenes: dict[str, Scene]):
    def restore(record: dict, where: str) -> None:
        scene = scenes.get(record.get("id"))
        if scene is None:
            return  # a scene of the same run left out this time (--limit, --cases): kept in the log
        expected = "nsp" if scene.needs_prediction else "message"
        if record.get("kind") != expected or record.get("round") != scene.rounds or scene.finished:
            raise ValueError(f"{where}: record {record.get('kind')} of round {record.get('round')} of "
                             f"{record.get('id')!r} is out of order; use a new output_dir")  # fmt: skip
        scene.records.append(record)

    return restore


def check_continue_from(cases: Sequence[CoserCase], continue_from: int) -> None:
    """A `ValueError` naming the scenes with fewer reference messages than `continue_from` rounds to take."""
    short = [c.id for c in cases if len(c.reference) < continue_from]
    if short:
        raise ValueError(f"--continue_from {continue_from} is more than the reference messages of {short[:3]}")


def file_digest(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (the test set a run played)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_simulations(
    cases: Sequence[CoserCase],
    prompts: CoserPrompts,
    actor,
    environment,
    nsp,
    output_dir: str | Path,
    run: dict,
    continue_from: int = 0,
    thoughts: bool = True,
    max_tokens: int = 512,
    seed: int = 0,
) -> list[Scene]:
    """Play every case (all scenes at once, one batched request per agent and step), resumably.

    Args:
        cases (`Sequence[CoserCase]`): the scenes.
        prompts (`CoserPrompts`): what the agents are told.
        actor, environment, nsp: the chat clients of the characters, the Environment and the next-speaker predictor.
        output_dir (`str` or `Path`): where `simulation.jsonl` (the log) and `coser_run.json` go.
        run (`dict`): what identifies the run (models, prompts, settings); a folder whose log belongs to another run
            is refused.
        continue_from (`int`, *optional*, defaults to 0): rounds taken from the reference conversation.
        thoughts (`bool`, *optional*, defaults to `True`): the characters write inner thoughts.
        max_tokens (`int`, *optional*, defaults to 512), seed (`int`, *optional*, defaults to 0): every agent's
            answer budget and seed (greedy decoding).

    Returns:
        `list[Scene]`: in the order of `cases`; `error` set where a request failed (a re-run goes on from there).
    """
    check_continue_from(cases, continue_from)
    folder = Path(output_dir)
    check_run(folder, run, RUN_NAME, LOG_NAME)  # another run's folder: refused before any write
    scenes = {}
    for case in cases:
        first = case.reference[0]["character"] if continue_from else case.speakers[0]
        scenes[case.id] = Scene(case, first)
    log_path = folder / LOG_NAME
    restored = read_log(log_path, _restore(scenes))
    folder.mkdir(parents=True, exist_ok=True)
    save_run(folder, run, RUN_NAME)
    if restored:
        logger.info("resumed %d saved messages and predictions from %s", restored, log_path)
    params = {"temperature": 0.0, "max_tokens": max_tokens, "seed": seed}
    systems: dict[tuple[str, str], str] = {}

    def system(scene: Scene, agent: str) -> str:
        key = (scene.case.id, agent)
        if key not in systems:
            if agent == NSP:
                systems[key] = prompts.nsp(scene.case)
            elif agent == ENVIRONMENT:
                systems[key] = prompts.environment(scene.case)
            else:
                systems[key] = prompts.actor(scene.case, agent, thoughts, actor.model_name)
        return systems[key]

    def ask(client, asking: list[Scene], agent_of, step: str) -> list:
        start = prompts.conversation_start
        views = [agent_view(s, agent_of(s), system(s, agent_of(s)), start) for s in asking]
        requests = [ChatRequest(view, params=dict(params)) for view in views]
        results = client.generate(requests, desc=step) if requests else []
        for scene, result in zip(asking, results):
            if not result.ok:
                scene.error = f"{agent_of(scene)} ({client.model_name}), round {scene.rounds}: {result.error}"
        return [(s, r) for s, r in zip(asking, results) if r.ok]

    started, first_step = time.monotonic(), None
    with open(log_path, "a", encoding="utf-8") as log:
        while any(scene.open for scene in scenes.values()):
            step = min(s.rounds for s in scenes.values() if s.open)
            first_step = step if first_step is None else first_step
            log_progress(step, first_step, sum(s.open for s in scenes.values()), len(scenes), started)
            saved = []
            speaking = [s for s in scenes.values() if s.open and not s.needs_prediction]
            for scene in [s for s in speaking if s.rounds < continue_from]:
                message = scene.case.reference[scene.rounds]
                saved.append(_message(scene, message["character"], message["message"], reference=True))
            speaking = [s for s in speaking if s.rounds >= continue_from]
            world = [s for s in speaking if s.speaker == ENVIRONMENT]
            people = [s for s in speaking if s.speaker != ENVIRONMENT]
            for client, group in ((environment, world), (actor, people)):
                asked = ask(client, group, lambda s: s.speaker, f"Round {step + 1}: {client.model_name}")
                saved += [_message(scene, scene.speaker, result.text.strip()) for scene, result in asked]
            _apply(scenes, saved)
            append_synced(log, saved)  # the messages are on disk before the predictions are asked for
            saved = []
            predicting = [s for s in scenes.values() if s.open and s.needs_prediction]
            for scene in [s for s in predicting if s.rounds < continue_from]:
                n = scene.rounds + 1  # the reference's next speaker, as it is (it may speak twice in a row)
                if n < len(scene.case.reference):
                    name = scene.case.reference[n]["character"]
                    saved.append({"id": scene.case.id, "round": scene.rounds, "kind": "nsp", "raw": name,
                                  "name": name, "next": name, "valid": True})  # fmt: skip
                else:
                    saved.append(_prediction(scene, END_CHAT, END_CHAT))
            asking = [s for s in predicting if s.rounds >= continue_from]
            for scene, result in ask(nsp, asking, lambda s: NSP, f"Round {step + 1}: next speaker"):
                saved.append(_prediction(scene, result.text.strip(), parse_next_speaker(result.text)))
            _apply(scenes, saved)
            append_synced(log, saved)
    played = list(scenes.values())
    failed = [s for s in played if s.error]
    if failed:
        logger.warning("%d of %d scenes stopped early, e.g. %s", len(failed), len(played), failed[0].error)
    return played


def log_progress(step: int, first_step: int, open_scenes: int, scenes: int, started: float) -> None:
    """The run's progress as one line a round: the round of `MAX_ROUNDS`, the scenes still open, and (after the
    first round of this run) an estimate of the time left, the rounds to go at this run's pace so far (at most:
    scenes end from round 6 on)."""
    elapsed, done = time.monotonic() - started, step - first_step
    left = f"; at most {format_duration(elapsed / done * (MAX_ROUNDS - step))} of play left" if done else ""
    logger.info("round %d of %d: %d of %d scenes open, %s so far%s", step + 1, MAX_ROUNDS, open_scenes, scenes,
                format_duration(elapsed), left)  # fmt: skip


def format_duration(seconds: float) -> str:
    """`3725.0` -> `'1h02m'`, `65.2` -> `'1m05s'`, `4.2` -> `'4s'`.

    >>> format_duration(3725.0), format_duration(65.2), format_duration(4.2)
    ('1h02m', '1m05s', '4s')
    """
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _message(scene: Scene, speaker: str, content: str, reference: bool = False) -> dict:
    return {"id": scene.case.id, "round": scene.rounds, "kind": "message", "speaker": speaker, "content": content,
            "reference": reference}  # fmt: skip


def _prediction(scene: Scene, raw: str, name: str) -> dict:
    next_speaker, valid = choose_next(name, scene.case, scene.speaker, scene.rounds)
    if not valid:
        logger.info("%s, round %d: next speaker %r not usable; %s speaks", scene.case.id, scene.rounds, name,
                    next_speaker)  # fmt: skip
    return {"id": scene.case.id, "round": scene.rounds, "kind": "nsp", "raw": raw, "name": name or raw,
            "next": next_speaker, "valid": valid}  # fmt: skip


def _apply(scenes: dict[str, Scene], records: list[dict]) -> None:
    for record in records:
        scenes[record["id"]].records.append(record)
