"""The runner's prompting modes and its resumable generation, on real RoleBench rows and profiles."""

import json
import shutil

import pytest

from rolellm.clients.config import ClientConfig
from rolellm.data.readers import read_rolebench_jsonl
from rolellm.evaluation.benchmark.answers import generate_predictions
from rolellm.evaluation.benchmark.config import BenchmarkConfig
from rolellm.roles.lookup import select_rows
from rolellm.roles.prompts import PROMPTING_MODES, build_role_messages, build_system_instruction
from rolellm.roles.resolve import profiles_for
from rolellm.roles.retrieval import DialogueRetriever, dialogue_to_messages
from rolellm.testing.server import ChatCompletionsServer, Fault


@pytest.fixture(scope="module")
def zh_rows(rolebench_dir):
    general = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/general/test.jsonl", "general", "zh")
    specific = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/role_specific/test.jsonl", "role_specific", "zh")
    return general + specific


@pytest.fixture(scope="module")
def zh_profiles(rolebench_dir, shared_data_dir):
    config = BenchmarkConfig(
        client=ClientConfig("m"),
        output_dir="unused",
        data_dir=str(rolebench_dir),
        profiles=[str(shared_data_dir / "roleglm-screenplay/profile_xiyou")],
    )
    return profiles_for(config.profiles, data_dir=config.data_dir, lang="zh")  # as `run_benchmark` reads them


def _select(rows, n):
    from datasets import Dataset

    return select_rows(Dataset.from_list(rows), max_samples_per_role=n)


def test_select_rows_per_role_and_subset(zh_rows):
    rows = _select(zh_rows, 2)
    # 5 roles x 2 subsets x 2 rows, in dataset order
    assert len(rows) == 20
    assert {(r["role"], r["subset"]) for r in rows} == {(r["role"], r["subset"]) for r in zh_rows}
    assert rows[0] == zh_rows[0]
    with pytest.raises(ValueError, match="not in the dataset"):
        from datasets import Dataset

        select_rows(Dataset.from_list(zh_rows[:3]), roles=["Jack Sparrow"])


def test_profiles_join_release_and_screenplay(zh_profiles, shared_data_dir):
    assert sorted(zh_profiles) == sorted(["皇帝", "孙悟空", "华妃", "张飞", "李白"])
    wukong = zh_profiles["孙悟空"]
    assert wukong.description  # from the release's desc.json
    script = shared_data_dir / "roleglm-screenplay/profile_xiyou/西游记-孙悟空.jsonl"
    assert len(wukong.dialogue) == len(script.read_text(encoding="utf-8").splitlines())  # 6254 in the full release
    assert zh_profiles["李白"].dialogue == []


def test_every_mode_builds_the_documented_messages(zh_profiles):
    profile = zh_profiles["孙悟空"]
    question = "孙悟空，你为什么大闹天宫？"
    groups = DialogueRetriever(profile).retrieve(question, k=3)
    instruction = build_system_instruction(profile, "zh")
    by_mode = {m: build_role_messages(profile, question, m, examples=groups) for m in PROMPTING_MODES}

    assert by_mode["system"] == [{"role": "system", "content": instruction}, {"role": "user", "content": question}]
    assert by_mode["no-system"] == [{"role": "user", "content": instruction + "\n\n" + question}]
    assert by_mode["few-shot-dialogue"] == [
        {"role": "system", "content": instruction},
        *dialogue_to_messages(groups, "孙悟空"),
        {"role": "user", "content": question},
    ]
    lines = ["".join(f"{u.speaker}: “{u.content}”\n" for u in group) for group in groups]
    pasted = "以下是你在剧本中的一些对话：\n\n" + "\n".join(lines)  # a blank line between groups
    assert by_mode["few-shot"] == [
        {"role": "system", "content": instruction},
        {"role": "user", "content": pasted + "\n" + question},
    ]
    assert by_mode["few-shot-prompt"] == [{"role": "user", "content": instruction + "\n\n" + pasted + "\n" + question}]
    assert by_mode["retrieval"][0] == {
        "role": "system",
        "content": build_system_instruction(profile, "zh", retrieved_dialogue=groups),
    }
    assert len(groups) == 3 and by_mode["retrieval"][0]["content"] != instruction
    with pytest.raises(ValueError, match="pass examples="):
        build_role_messages(profile, question, mode="retrieval")
    with pytest.raises(ValueError, match="mode='chat' is not a prompting mode"):
        build_role_messages(profile, question, mode="chat")


def test_rolegpt_and_the_runner_share_the_builder(zh_profiles):
    """RoleGPT's paper modes are prompting modes of the one builder: the same messages from both stages."""
    from rolellm.generation.rolegpt import RoleGPT, RoleGPTConfig
    from rolellm.roles.prompts import PAPER_MODE_NAMES as PROMPTING_MODE

    profile = zh_profiles["孙悟空"]
    question = "孙悟空，你为什么大闹天宫？"
    for rolegpt_mode, mode in PROMPTING_MODE.items():
        rolegpt = RoleGPT(RoleGPTConfig(prompt_mode=rolegpt_mode, num_examples=2))
        examples = DialogueRetriever(profile).retrieve(question, k=2) if mode != "system" else None
        assert rolegpt.prompt(profile, question) == build_role_messages(profile, question, mode, examples)


def _answer(body):
    return "答：" + body["messages"][-1]["content"][:10]


def test_generation_on_server_resumes_without_resending(zh_rows, zh_profiles, rolebench_dir, tmp_path):
    rows = _select(zh_rows, 2)
    with ChatCompletionsServer(_answer) as server:
        client = ClientConfig("served-model", base_url=server.base_url)
        config = BenchmarkConfig(client=client, output_dir=str(tmp_path / "run"), save_every=7)
        predictions = generate_predictions(rows, zh_profiles, config)
        assert predictions == ["答：" + r["question"].strip()[:10] for r in rows]  # questions are sent stripped
        assert len(server.requests) == len(rows) == 20
        sent = server.requests[0]["body"]
        assert sent["model"] == "served-model" and sent["temperature"] == 0.0 and sent["max_tokens"] == 256
        # requests arrive in any order (concurrently), and other roles ask the same general question: the first row's
        # question is sent with the first row's role instruction
        system = {"role": "system", "content": build_system_instruction(zh_profiles[rows[0]["role"]], "zh")}
        asked = [r["body"]["messages"] for r in server.requests]
        assert [system, {"role": "user", "content": rows[0]["question"]}] in [[m[0], m[-1]] for m in asked]

        # a run killed after 4 answers were saved, with its request cache lost: only the rest is sent again
        log = tmp_path / "run" / "generations.jsonl"
        lines = log.read_text(encoding="utf-8").splitlines()
        log.write_text("\n".join(lines[:4]) + "\n" + lines[4][:15], encoding="utf-8")  # last line cut mid-write
        (tmp_path / "run" / "cache.sqlite").unlink()
        assert generate_predictions(rows, zh_profiles, config) == predictions
        assert len(server.requests) == 20 + 16

        # a finished run sends nothing
        assert generate_predictions(rows, zh_profiles, config) == predictions
        assert len(server.requests) == 36
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["index"] for r in records) == list(range(20))

    other = BenchmarkConfig(**{**vars(config), "mode": "no-system"})
    with pytest.raises(ValueError, match="mode: 'system' there, 'no-system' now"):
        generate_predictions(rows, zh_profiles, other)


def test_failed_generations_are_none_and_retried_on_rerun(zh_rows, zh_profiles, tmp_path):
    rows = _select(zh_rows, 1)
    broken, role = rows[3]["question"], rows[3]["role"]  # general questions repeat across roles

    def flaky(body):
        hit = body["messages"][-1]["content"] == broken and body["messages"][0]["content"].startswith(f"你是{role}")
        return Fault("server_error") if hit else _answer(body)

    with ChatCompletionsServer(flaky) as server:
        config = BenchmarkConfig(client=ClientConfig("m", base_url=server.base_url), output_dir=str(tmp_path))
        from rolellm.clients.openai_compatible import OpenAIChatClient

        client = OpenAIChatClient("m", base_url=server.base_url, max_retries=1, initial_backoff=0.01, progress=False)
        predictions = generate_predictions(rows, zh_profiles, config, client=client)
        assert predictions[3] is None
        assert sum(p is None for p in predictions) == 1
        server.responder = _answer
        assert generate_predictions(rows, zh_profiles, config, client=client)[3] == "答：" + broken[:10]


def test_missing_profile_and_dialogue_are_clear_errors(zh_rows, zh_profiles, tmp_path):
    rows = _select(zh_rows, 1)
    with pytest.raises(ValueError, match=r"no profile for 1 role\(s\) of the evaluation rows: \['张飞'\]"):
        profiles = {k: v for k, v in zh_profiles.items() if k != "张飞"}
        generate_predictions(rows, profiles, BenchmarkConfig(client=ClientConfig("m"), output_dir=str(tmp_path)))
    config = BenchmarkConfig(client=ClientConfig("m"), output_dir=str(tmp_path / "b"), mode="few-shot-dialogue")
    li_bai = [r for r in rows if r["role"] == "李白"]
    with pytest.raises(ValueError, match="needs script dialogue of '李白'"):
        generate_predictions(li_bai, zh_profiles, config, client=object())


def test_generation_with_tiny_local_model_resumes_without_the_model(zh_rows, zh_profiles, tiny_model_path, tmp_path):
    model = shutil.copytree(tiny_model_path, tmp_path / "model")
    rows = _select(zh_rows, 1)[:4]
    client = ClientConfig(str(model), chat_template="chatml", max_new_tokens=6)
    config = BenchmarkConfig(client=client, output_dir=str(tmp_path / "run"))
    predictions = generate_predictions(rows, zh_profiles, config)
    assert len(predictions) == 4 and all(isinstance(p, str) for p in predictions)
    shutil.rmtree(model)  # everything is answered: a re-run must not even load the model
    assert generate_predictions(rows, zh_profiles, config) == predictions


def test_roles_are_selected_however_they_are_spelled():
    rows = [{"role": "Dr. Frank-N-Furter", "subset": "general"}, {"role": "Po", "subset": "general"}]
    assert select_rows(rows, roles=["Dr. Frank N Furter"]) == rows[:1]
    with pytest.raises(ValueError, match=r"roles=\['Shifu'\] are not in the dataset"):
        select_rows(rows, roles=["Shifu"])


def test_the_paper_names_are_aliases_of_the_registry_modes(tmp_path):
    from rolellm.generation.rolegpt import RoleGPTConfig
    from rolellm.roles.prompts import PAPER_MODE_NAMES, PROMPTING_MODE_TABLE, prompting_mode
    from rolellm.scripts import evaluate, generate

    assert PAPER_MODE_NAMES == {"zero_shot": "system", "few_shot": "few-shot", "dialogue": "few-shot-dialogue"}
    assert set(PROMPTING_MODE_TABLE) == set(PROMPTING_MODES)
    for spelling, mode in [("zero-shot", "system"), ("Few_Shot", "few-shot"), ("few_shot_dialogue", "few-shot-dialogue"),
                           ("no_system", "no-system"), ("dialogue", "few-shot-dialogue")]:  # fmt: skip
        assert prompting_mode(spelling) == mode
        assert RoleGPTConfig(prompt_mode=spelling).prompt_mode == mode
        assert BenchmarkConfig(output_dir="o", client=ClientConfig("m"), mode=spelling).mode == mode
    assert RoleGPTConfig().prompt_mode == "few-shot-dialogue"
    assert BenchmarkConfig(output_dir="o", client=ClientConfig("m")).mode == "system"
    with pytest.raises(ValueError, match=r"prompt_mode='two_shot' is not a prompting mode; choose one of system, "):
        RoleGPTConfig(prompt_mode="two_shot")

    # a flag and a recipe take every spelling; the configs built from them hold the registry's name
    parser = evaluate.make_parser()
    args = parser.parse_args(["--model_name_or_path", "m", "--output_dir", "o", "--mode", "zero_shot"])
    assert evaluate.evaluate_config(args).mode == "system"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("output_dir: o\nmodel: m\ninstructions: i.jsonl\nprompt_mode: few_shot\n")
    args = generate.make_parser().parse_args(["rolegpt", "--config", str(recipe), "--profiles", "p"])
    assert args.prompt_mode == "few_shot"
    with pytest.raises(SystemExit):
        parser.parse_args(["--model_name_or_path", "m", "--output_dir", "o", "--mode", "three_shot"])


def test_a_checkpoint_is_evaluated_with_the_profiles_it_was_trained_with(rolebench_dir, tmp_path):
    """Without --profiles, a local model folder's role_profiles.jsonl takes precedence over the data folder's."""
    from rolellm.clients.openai_compatible import OpenAIChatClient
    from rolellm.evaluation.benchmark.runner import run_benchmark
    from rolellm.roles.profile import RoleProfile
    from rolellm.roles.resolve import PROFILES_FILE, write_profiles_jsonl

    checkpoint = tmp_path / "checkpoint"
    trained = RoleProfile("孙悟空", "zh", "训练时的描述：齐天大圣。", ["俺老孙来也"])
    write_profiles_jsonl({"孙悟空": trained}, checkpoint / PROFILES_FILE)
    config = BenchmarkConfig(
        output_dir=str(tmp_path / "eval"), client=ClientConfig(str(checkpoint)), dataset_name="zh-general",
        data_dir=str(rolebench_dir), roles=["孙悟空"], max_samples_per_role=1,
    )  # fmt: skip
    with ChatCompletionsServer(_answer) as server:
        run_benchmark(config, client=OpenAIChatClient("m", base_url=server.base_url, progress=False))
        systems = {request["body"]["messages"][0]["content"] for request in server.requests}
    assert systems == {build_system_instruction(trained, lang="zh", context=[])}
    assert "训练时的描述" in systems.pop()
