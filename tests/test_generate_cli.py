import json
import re
from pathlib import Path

import pytest
import yaml

from rolellm.clients.config import ClientConfig
from rolellm.scripts.cli import main
from rolellm.scripts.generate import GenerateArguments
from rolellm.scripts.recipe import read_recipe
from rolellm.testing.server import ChatCompletionsServer


RECIPES = Path(__file__).resolve().parents[1] / "examples" / "recipes"


def test_recipes_hold_only_known_fields():
    for name, command in (("rolegpt", "rolegpt"), ("context_instruct", "context-instruct"), ("profile", "describe")):
        from rolellm.scripts.generate import SUBCOMMANDS

        (types, _) = SUBCOMMANDS[command]
        recipe = read_recipe(RECIPES / f"generate_{name}.yaml", types)
        assert recipe["output_dir"].startswith("runs/generate/")


def test_recipe_with_unknown_key_or_api_key_is_an_error(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: gpt-4\nnum_sample: 6\n")
    with pytest.raises(ValueError, match=r"bad.yaml: unknown keys \['num_sample'\]"):
        read_recipe(path, (ClientConfig, GenerateArguments))
    path.write_text("api_key: sk-123\n")
    with pytest.raises(ValueError, match="never put an API key in a recipe"):
        read_recipe(path, (ClientConfig, GenerateArguments))


def _rolegpt_answer(body):
    role = re.match(r"你是(.+?)，", body["messages"][0]["content"]).group(1)
    return f"{role}以为此事不难，第{body['seed']}回。"


def test_cli_rolegpt_from_recipe_against_server(screenplay_dir, shared_data_dir, tmp_path, capsys):
    out = tmp_path / "rolegpt"
    with ChatCompletionsServer(_rolegpt_answer) as server:
        code = main(
            ["generate", "rolegpt", "--config", str(RECIPES / "generate_rolegpt.yaml"),
             "--profiles", str(screenplay_dir / "profile_zhenhuan"),
             "--instructions", str(shared_data_dir / "rolebench" / "rolebench-zh" / "general" / "test.jsonl"),
             "--max_instructions", "40", "--output_dir", str(out), "--base_url", server.base_url,
             "--model", "test-model", "--num_samples", "3"]
        )  # fmt: skip
        sent = len(server.requests)
    assert code == 0
    general = out / "rolebench-zh" / "general"
    rows = [
        json.loads(line)
        for split in ("train", "test")
        for line in (general / f"{split}.jsonl").open("r", encoding="utf-8")
    ]
    # the first 40 test questions asked of each of 华妃 and 皇帝 (the recipe's roles), each answered 2 + 1 times
    test_rows = [json.loads(line) for line in (shared_data_dir / "rolebench/rolebench-zh/general/test.jsonl").open()]
    expected = [(r["role"], r["question"]) for r in test_rows if r["role"] == "华妃"][:40]
    expected += [(r["role"], r["question"]) for r in test_rows if r["role"] == "皇帝"][:40]
    assert sorted((r["role"], r["question"]) for r in rows) == sorted(expected) and sent == 3 * len(expected)
    assert {r["role"] for r in rows} == {"华妃", "皇帝"} and len(expected) == 80  # every role keeps its share
    rows = [json.loads(line) for line in (general / "train.jsonl").open("r", encoding="utf-8")]
    assert rows[0]["generated"] == [
        f"{rows[0]['role']}以为此事不难，第0回。",
        f"{rows[0]['role']}以为此事不难，第1回。",
    ]
    config = json.loads((out / "generation" / "rolegpt" / "generation_config.json").read_text("utf-8"))
    assert config["config"]["num_samples"] == 3 and config["config"]["prompt_mode"] == "few-shot-dialogue"
    assert (out / "cache.sqlite").exists()
    assert "'rejected': {}" in capsys.readouterr().out


def test_cli_profile_against_server(screenplay_dir, tmp_path):
    # a catchphrase he says in the script's first acts (the slice's), so the describer keeps it
    reply = json.dumps({"description": "齐天大圣，神通广大。", "catchphrases": ["师父"]}, ensure_ascii=False)
    with ChatCompletionsServer(lambda body: reply) as server:
        code = main(
            ["generate", "describe", "--config", str(RECIPES / "generate_profile.yaml"),
             "--profiles", str(screenplay_dir / "profile_xiyou"), "--output_dir", str(tmp_path),
             "--base_url", server.base_url, "--model", "test-model"]
        )  # fmt: skip
    assert code == 0
    desc = json.loads((tmp_path / "profiles-zh" / "desc.json").read_text("utf-8"))
    assert desc == {"孙悟空": "齐天大圣，神通广大。常用口头禅是：“师父”"}


def test_cli_rejects_bad_choice(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "rolegpt", "--prompt_mode", "two_shot"])
    assert "invalid choice: 'two_shot'" in capsys.readouterr().err


def test_recipe_files_are_valid_yaml():
    for path in RECIPES.glob("generate_*.yaml"):
        assert isinstance(yaml.safe_load(path.read_text("utf-8")), dict), path


@pytest.mark.slow
def test_cli_profile_with_local_backend(screenplay_dir, tiny_model_path, tmp_path):
    code = main(
        ["generate", "describe", "--profiles", str(screenplay_dir / "profile_xiyou"), "--output_dir", str(tmp_path),
         "--backend", "local", "--model", str(tiny_model_path), "--chat_template", "chatml",
         "--max_dialogue_tokens", "300", "--max_tokens", "8"]
    )  # fmt: skip
    # the random tiny model writes no JSON: asked three times, then the run has nothing to show and says so
    assert code == 3
    failures = tmp_path / "generation" / "describe" / "failures.jsonl"
    [failure] = [json.loads(line) for line in failures.read_text("utf-8").splitlines()]
    assert failure["role"] == "孙悟空" and failure["error"].startswith("unparseable answer after 3 attempts")
    assert (tmp_path / "cache.sqlite").exists() and not (tmp_path / "profiles-zh").exists()
    assert not (tmp_path / "generation" / "describe" / "generation_stats.json").exists()
