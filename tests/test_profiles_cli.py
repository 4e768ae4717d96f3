"""`--profiles` through the command line of every command that reads roles: a Character Card, a `desc.json`, a
screenplay file with `--roles`, two sources at once, and a source that cannot be read."""

import json
import re
from pathlib import Path

import pytest
from fixtures.mini_release import write_mini_release

from rolellm.clients.config import ClientConfig
from rolellm.roles.profile import role_key
from rolellm.scripts.cli import main
from rolellm.testing.server import ChatCompletionsServer


FIXTURES = Path(__file__).parent / "fixtures"
CARD = FIXTURES / "card_v2_ada.json"
SCREENPLAY = FIXTURES / "lighthouse_screenplay.txt"
CARD_PERSONALITY = "Ada Quill's personality: curious, blunt, patient with machines, impatient with excuses"
ITEM = {"question": "Ada Quill, what do you fix?", "type": "script_agnostic", "completeness": "High",
        "confidence": 0.9, "answer": "Anything that admits it's broken."}  # fmt: skip


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_mini_release(tmp_path_factory.mktemp("release"))


def sources(release):
    """The `--profiles` arguments of each case, with the roles it should give."""
    desc = str(release / "profiles-eng" / "desc.json")
    return {
        "card": (["--profiles", str(CARD)], ["Ada Quill"]),
        "desc.json": (["--profiles", desc, "--roles", "Ada Quill", "Dr. Frank N Furter"],
                      ["Ada Quill", "Dr. Frank-N-Furter"]),
        "screenplay": (["--profiles", str(SCREENPLAY), "--roles", "Ada Quill"], ["Ada Quill"]),
        "two sources": (["--profiles", desc, "--profiles", str(CARD), "--roles", "Ada Quill", "Dr. Frank N Furter"],
                        ["Ada Quill", "Dr. Frank-N-Furter"]),
    }  # fmt: skip


CASES = ["card", "desc.json", "screenplay", "two sources"]


def only(*kept: str) -> list:
    """The cases, those not in `kept` for `make test-all` only: the commands share one reader of `--profiles`, which
    `generate context-instruct` runs on every source in `make test`."""
    return [case if case in kept else pytest.param(case, marks=pytest.mark.exhaustive) for case in CASES]


def role_of(system: str) -> str:
    return role_key(re.match(r"You are (.+?), your description", system).group(1))


def keys(roles) -> list[str]:
    return sorted({role_key(role) for role in roles})


def assert_one_line_error(code, err, command, source):
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("rolellm ")]  # no progress bars
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"rolellm {command}: {source}: no such file or folder; profiles are read from ")
    assert "Character Card (.json or .png)" in err and "desc.json" in err and "screenplay file" in err


@pytest.mark.parametrize("case", CASES)
def test_generate_context_instruct(case, release, tmp_path):
    argv, roles = sources(release)[case]
    with ChatCompletionsServer(lambda body: json.dumps([ITEM])) as server:
        code = main(["generate", "context-instruct", *argv, "--model", "m", "--base_url", server.base_url,
                     "--output_dir", str(tmp_path / "out")])  # fmt: skip
        prompts = [request["body"]["messages"][0]["content"] for request in server.requests]
    assert code == 0
    assert keys(re.match(r'You know the character "(.+?)"', prompt).group(1) for prompt in prompts) == keys(roles)
    card_prompts = [prompt for prompt in prompts if CARD_PERSONALITY in prompt]
    assert bool(card_prompts) == (case in ("card", "two sources"))  # the card's fields reach Context-Instruct
    written = list((tmp_path / "out").glob("rolebench-*/**/role_specific/*.jsonl"))
    assert written and all(path.stat().st_size > 0 for path in written)


@pytest.mark.parametrize("case", only("two sources"))
def test_evaluate(case, release, tmp_path):
    argv, roles = sources(release)[case]
    with ChatCompletionsServer(lambda body: "Aye.") as server:
        code = main(["evaluate", "--model_name_or_path", "m", "--base_url", server.base_url, "--data_dir",
                     str(release), "--dataset_name", "en-instruction-role_specific", *argv,
                     "--output_dir", str(tmp_path / "run")])  # fmt: skip
        systems = [request["body"]["messages"][0]["content"] for request in server.requests]
    assert code == 0
    if "--roles" not in argv:  # the card adds to the release's profiles: every role of the data is answered
        roles = ["Ada Quill", "Dr. Frank-N-Furter", "Moss Brindle"]
    assert sorted({role_of(system) for system in systems}) == keys(roles)
    from_card = [system for system in systems if CARD_PERSONALITY in system]
    assert bool(from_card) == (case in ("card", "two sources"))
    assert json.loads((tmp_path / "run" / "results.json").read_text())["counts"]


@pytest.mark.parametrize("case", only("screenplay", "two sources"))
def test_dialogue(case, release, tmp_path, capsys):
    argv, roles = sources(release)[case]
    scenarios = tmp_path / "scenarios.yaml"
    scenarios.write_text("".join(f"- role: {role}\n  situation: A storm.\n  user_persona: A keeper.\n"
                                 f"  opening_line: Hello {role}.\n" for role in roles))  # fmt: skip

    def responder(body):
        return "User: Is the lamp lit?" if body["model"] == "user-sim" else "Aye, it is."

    with ChatCompletionsServer(responder) as server:
        code = main(["dialogue", *argv, "--scenarios", str(scenarios), "--model", "role-model", "--user_model",
                     "user-sim", "--base_url", server.base_url, "--num_turns", "1",
                     "--output_dir", str(tmp_path / "out")])  # fmt: skip
        systems = [r["body"]["messages"][0]["content"] for r in server.requests if r["body"]["model"] == "role-model"]
    if case == "screenplay":  # a script gives lines, not a description: the system text would say nothing
        err = capsys.readouterr().err
        assert code == 2 and "role 'Ada Quill' has no description" in err and "rolellm generate describe" in err
        assert systems == [] and "Traceback" not in err
        return
    assert code == 0
    assert sorted({role_of(system) for system in systems}) == keys(roles)
    assert any(CARD_PERSONALITY in system for system in systems) == (case in ("card", "two sources"))


@pytest.mark.parametrize("case", only("two sources"))
def test_train(case, release, tmp_path, tiny_model_path, capsys):
    argv, roles = sources(release)[case]
    if "--roles" not in argv:  # the card's role only: the data's other roles have no profile
        argv = [*argv, "--roles", *roles]
    code = main(["train", "--model_name_or_path", str(tiny_model_path), "--data_dir", str(release),
                 "--dataset_configs", "en-instruction", *argv, "--max_steps", "1", "--use_cpu", "true", "--bf16",
                 "false", "--activation_checkpointing", "false", "--report_to", "none", "--save_strategy", "no",
                 "--disable_tqdm", "true", "--output_dir", str(tmp_path / "out")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and f"of {len(roles)} roles in 1 steps" in out, err
    assert (tmp_path / "out" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "command",
    [
        ["generate", "rolegpt", "--model", "m", "--instructions", "i.jsonl", "--output_dir", "o"],
        ["evaluate", "--model_name_or_path", "m", "--output_dir", "o", "--dataset_name", "en-instruction"],
        ["dialogue", "--model", "m", "--user_model", "u", "--output_dir", "o"],
        [
            "train",
            "--model_name_or_path",
            "m",
            "--dataset_configs",
            "en-instruction",
            "--output_dir",
            "o",
            "--use_cpu",
            "true",
            "--bf16",
            "false",
        ],
    ],
)
def test_a_bad_source_is_named_in_one_line_with_exit_code_2(command, release, tmp_path, capsys, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    if command[0] in ("evaluate", "train"):
        command = [*command, "--data_dir", str(release)]
    if command[0] == "train":  # a model it can find: `train` checks it first (a Hub id offline is not in the cache)
        command[command.index("m")] = str(request.getfixturevalue("tiny_model_path"))
    code = main([*command, "--profiles", str(CARD), "--profiles", "/no/such/card.png"])
    assert_one_line_error(code, capsys.readouterr().err, command[0], "/no/such/card.png")


def test_recipes_take_a_string_or_a_list_and_flags_replace_them(release, tmp_path):
    from rolellm.scripts.generate import GenerateArguments, make_parser
    from rolellm.scripts.recipe import dataclasses_from

    recipe = tmp_path / "recipe.yaml"
    base = ["generate", "describe", "--config", str(recipe), "--model", "m", "--output_dir", "o"]
    parser = make_parser()
    recipe.write_text(f"profiles: {CARD}\n")
    [args] = dataclasses_from(parser.parse_args(base[1:]), [GenerateArguments])
    assert args.profiles == [str(CARD)]
    recipe.write_text(f"profiles: [{CARD}, {SCREENPLAY}]\n")
    [args] = dataclasses_from(parser.parse_args(base[1:]), [GenerateArguments])
    assert args.profiles == [str(CARD), str(SCREENPLAY)]
    [args] = dataclasses_from(parser.parse_args([*base[1:], "--profiles", "a", "b", "--profiles", "c"]),
                              [GenerateArguments])  # fmt: skip
    assert args.profiles == ["a", "b", "c"]


def test_the_never_released_aliases_are_gone(release, tmp_path, capsys):
    """`profiles_dir`, `profiles_path` and `generate profile` were dropped before a release: `--profiles` and
    `generate describe` are the only spellings."""
    from rolellm.evaluation.benchmark.config import BenchmarkConfig
    from rolellm.scripts.generate import GenerateArguments
    from rolellm.training.config import RoCITConfig

    with pytest.raises(TypeError, match="profiles_dir"):
        GenerateArguments(output_dir="o", profiles_dir=str(CARD))
    with pytest.raises(TypeError, match="profiles_dir"):
        BenchmarkConfig("o", ClientConfig("m"), profiles=[str(CARD)], profiles_dir=[str(SCREENPLAY)])
    with pytest.raises(TypeError, match="profiles_path"):
        RoCITConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, profiles_path=str(release))
    with pytest.raises(SystemExit):
        main(["generate", "profile", "--profiles", str(CARD), "--model", "m", "--output_dir", "o"])
    assert "invalid choice: 'profile'" in capsys.readouterr().err
    assert BenchmarkConfig("o", ClientConfig("m"), profiles=str(CARD)).profiles == [str(CARD)]
    with pytest.raises(ValueError, match="required: --profiles"):
        GenerateArguments(output_dir="o")
