"""The prompts of a CoSER run: rolellm's own (`builtin_prompts`), or the original repository's, read from a user's
checkout of it at run time (`checkout_prompts`), for runs meant to be compared with published numbers.

rolellm's prompts are its own words (`rolellm/prompts/coser_{actor,environment,nsp,judge}.jinja`). From a checkout,
`checkout_prompts` reads the templates where the original keeps them, without importing any of its modules:

- `gca_evaluation/prompts.py`: the judge's template and dimension details (`critic_prompts`, read as a literal);
- `gca_evaluation/utils.py`: the functions `get_character_prompt`, `get_environment_prompt` and `get_nsp_prompt`,
  compiled alone and called with their own random choices drawn from a generator seeded per scene and agent;
- `gca_evaluation/agent.py`: the length instruction added to every character's system text;
- `gca_evaluation/main.py`: the first user turn of every agent and the judge's note for `continue_from`.

>>> prompts = builtin_prompts()
>>> prompts.source, prompts.name_speakers
('rolellm', True)
"""

import ast
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from rolellm.evaluation.coser.testset import ENVIRONMENT, CoserCase
from rolellm.evaluation.coser.thoughts import reference_without_thoughts
from rolellm.roles.profile import DataFormatError, read_text
from rolellm.roles.prompts import load_prompt


DIMENSIONS = ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality")
_CHECKOUT_FUNCTIONS = ("get_character_prompt", "get_environment_prompt", "get_nsp_prompt")


@dataclass
class CoserPrompts:
    """What every agent of a CoSER run is told.

    Args:
        source (`str`): `"rolellm"`, or the path of the checkout the templates came from.
        actor (`Callable[[CoserCase, str, bool, str], str]`): `(case, character, thoughts, actor_model)` -> the
            character's system text.
        environment (`Callable[[CoserCase], str]`): the Environment's system text.
        nsp (`Callable[[CoserCase], str]`): the next-speaker predictor's system text.
        judge (`Callable[[CoserCase, str, int], str]`): `(case, dimension, continue_from)` -> the judge's system
            text; the simulated conversation is the user message.
        conversation_start (`str`): every agent's first user turn.
        name_speakers (`bool`): whether the judge's view of the simulation labels each message with its speaker
            (the original shows the messages as the models wrote them).
    """

    source: str
    actor: Callable[[CoserCase, str, bool, str], str]
    environment: Callable[[CoserCase], str]
    nsp: Callable[[CoserCase], str]
    judge: Callable[[CoserCase, str, int], str]
    conversation_start: str
    name_speakers: bool


def reference_text(case: CoserCase) -> str:
    """The reference conversation as the judge reads it: `Name: message`, thoughts removed (not the Environment's)."""
    return "\n\n".join(
        f"{m['character']}: {m['message']}".strip("\n") for m in reference_without_thoughts(case.reference)
    )


def builtin_prompts() -> CoserPrompts:
    """rolellm's own prompts (`rolellm/prompts/coser_*.jinja`)."""

    def actor(case: CoserCase, character: str, thoughts: bool, actor_model: str) -> str:
        others = {name: text for name, text in case.profiles.items() if name != character}
        return load_prompt("coser_actor.jinja").render(
            book=case.book, character=character, profile=case.profiles.get(character, ""), scenario=case.scenario,
            others=others, motivation=case.motivations.get(character, ""), thoughts=thoughts,
        )  # fmt: skip

    def environment(case: CoserCase) -> str:
        majors = [c for c in case.major_characters if c != ENVIRONMENT] or case.characters
        return load_prompt("coser_environment.jinja").render(majors=majors, scenario=case.scenario)

    def nsp(case: CoserCase) -> str:
        return load_prompt("coser_nsp.jinja").render(speakers=case.speakers, scenario=case.scenario)

    def judge(case: CoserCase, dimension: str, continue_from: int) -> str:
        return load_prompt("coser_judge.jinja").render(
            book=case.book, dimension=dimension, continue_from=continue_from, plot_summary=case.plot_summary,
            scenario=case.scenario, profiles=case.profiles, reference=reference_text(case),
            majors=", ".join(case.major_characters),
        )  # fmt: skip

    return CoserPrompts("rolellm", actor, environment, nsp, judge, "The scene begins.", name_speakers=True)


# --- the original's templates, from a checkout -----------------------------------------------------------------------


def _parse(path: Path) -> ast.Module:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; --prompts_from takes a checkout of the CoSER repository")
    try:
        return ast.parse(read_text(path), filename=str(path))
    except SyntaxError as error:
        raise DataFormatError(
            f"{path}:{error.lineno}: not valid Python ({error.msg}); is this a checkout of the CoSER repository?"
        ) from None


def _missing(path: Path, what: str) -> ValueError:
    return ValueError(f"{path}: {what} not found; is this a checkout of the CoSER repository?")


def _critic_prompts(path: Path) -> dict:
    for node in _parse(path).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "critic_prompts" for t in node.targets):
            try:
                prompts = ast.literal_eval(node.value)  # a literal: nothing of the file is run
            except (ValueError, TypeError, SyntaxError, RecursionError):
                raise _missing(path, "critic_prompts as a literal dict") from None
            details = prompts.get("dimension_details", {}) if isinstance(prompts, dict) else {}
            if (
                isinstance(details, dict)
                and "self-play-deduct-template" in prompts
                and all(isinstance(details.get(d), dict) for d in DIMENSIONS)
            ):
                return prompts
    raise _missing(path, "critic_prompts with 'self-play-deduct-template' and the four dimensions")


def _prompt_functions(path: Path) -> dict:
    tree = _parse(path)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in _CHECKOUT_FUNCTIONS]
    missing = sorted(set(_CHECKOUT_FUNCTIONS) - {n.name for n in found})
    if missing:
        raise _missing(path, f"the functions {missing}")
    namespace = {"Dict": dict, "List": list, "random": random.Random(0)}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)  # only these functions
    return namespace


def _length_instruction(path: Path) -> str:
    """The string `Agent.__init__` adds to a character's system text (the branch on `special_characters`)."""
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.If) and "special_characters" in ast.unparse(node.test):
            for statement in node.body:
                value = getattr(statement, "value", None)
                if isinstance(value, ast.BinOp) and isinstance(value.right, ast.Constant):
                    return value.right.value
    raise _missing(path, "the instruction added to a character's system prompt")


def _main_texts(path: Path) -> tuple[str, ast.expr]:
    """The first user turn of every agent (`agent.update('user', ...)`) and the judge's `continue_from` note."""
    start = note = None
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "update" and len(node.args) == 2:
            first, text = node.args
            if isinstance(first, ast.Constant) and first.value == "user" and isinstance(text, ast.Constant):
                start = start if start is not None else text.value
        named = isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "additional_instructions" for t in node.targets
        )
        if named and isinstance(node.value, ast.JoinedStr):
            note = node.value
    if start is None or note is None:
        raise _missing(path, "the agents' first turn or the judge's note on continue_from")
    return start, note


def checkout_prompts(checkout: str | Path) -> CoserPrompts:
    """The original repository's prompts, read from `checkout` (a local clone of it); nothing else of it is run.

    Raises:
        `FileNotFoundError` when a file is missing, `ValueError` naming the file when a template is not found in it.
    """
    root = Path(checkout) / "gca_evaluation"
    critic = _critic_prompts(root / "prompts.py")
    functions = _prompt_functions(root / "utils.py")
    length = _length_instruction(root / "agent.py")
    start, note = _main_texts(root / "main.py")
    note_code = compile(ast.Expression(note), str(root / "main.py"), "eval")

    def seeded(case: CoserCase, agent: str) -> None:
        functions["random"] = random.Random(f"{case.id}/{agent}")  # the same prompt for a scene on every run

    def actor(case: CoserCase, character: str, thoughts: bool, actor_model: str) -> str:
        seeded(case, character)
        text = functions["get_character_prompt"](
            case.book, character, case.profiles.get(character, ""), case.plot_summary, case.scenario,
            case.motivations.get(character, ""), thoughtless=not thoughts, other_character_profiles=case.profiles,
            exclude_plot_summary=True, fixed_template=True, add_output_example="coser" not in actor_model.lower(),
            add_rag=False,
        )  # fmt: skip
        return text.strip("\n") + length

    def environment(case: CoserCase) -> str:
        seeded(case, ENVIRONMENT)
        return functions["get_environment_prompt"](case.major_characters, case.scenario).strip("\n")

    def nsp(case: CoserCase) -> str:
        seeded(case, "NSP")
        return functions["get_nsp_prompt"](case.speakers, case.scenario).strip("\n")

    def judge(case: CoserCase, dimension: str, continue_from: int) -> str:
        extra = eval(note_code, {"args": SimpleNamespace(continue_from=continue_from)}) if continue_from else ""
        profiles = "\n\n".join(f"### {name}\n\n{text}" for name, text in case.profiles.items())
        detail = critic["dimension_details"][dimension]
        text = critic["self-play-deduct-template"]
        for key, value in (
            ("book", case.book), ("plot_summary", case.plot_summary), ("scenario", case.scenario),
            ("character_profiles", profiles), ("original_conversation", reference_text(case)),
            ("major_characters", ", ".join(case.major_characters)), ("additional_instructions", extra),
            ("dimension_name", dimension), ("dimension_brief", detail["dimension_brief"]),
            ("dimension_criteria", detail["dimension_criteria"]),
        ):  # fmt: skip
            text = text.replace("{" + key + "}", value)  # in this order, as the original fills them
        return text

    return CoserPrompts(str(Path(checkout)), actor, environment, nsp, judge, start, name_speakers=False)


def load_prompts(prompts_from: str | None = None) -> CoserPrompts:
    """`checkout_prompts(prompts_from)` when given, else `builtin_prompts()`."""
    return checkout_prompts(prompts_from) if prompts_from else builtin_prompts()
