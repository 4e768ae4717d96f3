"""The runner's prompting modes and its resumable generation, on real RoleBench rows and profiles."""

import json
import shutil

import pytest

from rolellm.data import read_rolebench_jsonl
from rolellm.evaluation.benchmark.runner import EvaluateConfig, generate_predictions, read_profiles, select_rows
from rolellm.roles.profile import role_key
from rolellm.roles.prompts import PROMPTING_MODES, build_role_messages, build_system_instruction
from rolellm.roles.retrieval import DialogueRetriever, dialogue_to_messages
from rolellm.testing.server import ChatCompletionsServer, Fault


@pytest.fixture(scope="module")
def zh_rows(rolebench_dir):
    general = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/general/test.jsonl", "general", "zh")
    specific = read_rolebench_jsonl(rolebench_dir / "rolebench-zh/role_specific/test.jsonl", "role_specific", "zh")
    return general + specific


@pytest.fixture(scope="module")
def zh_profiles(rolebench_dir, shared_data_dir):
    config = EvaluateConfig(
        model_name_or_path="m",
        output_dir="unused",
        data_dir=str(rolebench_dir),
        profiles=[str(shared_data_dir / "roleglm-screenplay/profile_xiyou")],
    )
    return read_profiles(config, "zh")


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
    assert sorted(zh_profiles) == sorted(role_key(r) for r in ["皇帝", "孙悟空", "华妃", "张飞", "李白"])
    wukong = zh_profiles[role_key("孙悟空")]
    assert wukong.description  # from the release's desc.json
    script = shared_data_dir / "roleglm-screenplay/profile_xiyou/西游记-孙悟空.jsonl"
    assert len(wukong.dialogue) == len(script.read_text(encoding="utf-8").splitlines())  # 6254 in the full release
    assert zh_profiles[role_key("李白")].dialogue == []


def test_every_mode_builds_the_documented_messages(zh_profiles):
    profile = zh_profiles[role_key("孙悟空")]
    question = "孙悟空，你为什么大闹天宫？"
    groups = DialogueRetriever(profile).retrieve(question, k=3)
    instruction = build_system_instruction(profile, "zh")
    by_mode = {m: build_role_messages(profile, question, m, examples=groups) for m in PROMPTING_MODES}

    assert by_mode["system"] == [{"role": "system", "content": instruction}, {"role": "user", "content": question}]
    assert by_mode["zero-shot"] == [{"role": "user", "content": instruction + "\n\n" + question}]
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
    from rolellm.generation.rolegpt import PROMPTING_MODE, RoleGPT, RoleGPTConfig

    profile = zh_profiles[role_key("孙悟空")]
    question = "孙悟空，你为什么大闹天宫？"
    for rolegpt_mode, mode in PROMPTING_MODE.items():
        rolegpt = RoleGPT(RoleGPTConfig(prompt_mode=rolegpt_mode, num_examples=2))
        examples = DialogueRetriever(profile).retrieve(question, k=2) if mode != "system" else None
        assert rolegpt.prompt(profile, question) == build_role_messages(profile, question, mode, examples)


def _answer(body):
    return "答：" + body["messages"][-1]["content"][:10]


def test_generation_on_server_resumes_without_resending(zh_rows, zh_profiles, rolebench_dir, tmp_path):
    rows = _select(zh_rows, 2)
    config = EvaluateConfig(
        model_name_or_path="served-model", base_url=None, output_dir=str(tmp_path / "run"), save_every=7
    )
    with ChatCompletionsServer(_answer) as server:
        config.base_url = server.base_url
        predictions = generate_predictions(rows, zh_profiles, config)
        assert predictions == ["答：" + r["question"].strip()[:10] for r in rows]  # questions are sent stripped
        assert len(server.requests) == len(rows) == 20
        sent = server.requests[0]["body"]
        assert sent["model"] == "served-model" and sent["temperature"] == 0.0 and sent["max_tokens"] == 256
        # requests arrive in any order (concurrently), and other roles ask the same general question: the first row's
        # question is sent with the first row's role instruction
        system = {"role": "system", "content": build_system_instruction(zh_profiles[role_key(rows[0]["role"])], "zh")}
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

    other = EvaluateConfig(**{**vars(config), "mode": "zero-shot"})
    with pytest.raises(ValueError, match="mode: 'system' there, 'zero-shot' now"):
        generate_predictions(rows, zh_profiles, other)


def test_failed_generations_are_none_and_retried_on_rerun(zh_rows, zh_profiles, tmp_path):
    rows = _select(zh_rows, 1)
    broken, role = rows[3]["question"], rows[3]["role"]  # general questions repeat across roles

    def flaky(body):
        hit = body["messages"][-1]["content"] == broken and body["messages"][0]["content"].startswith(f"你是{role}")
        return Fault("server_error") if hit else _answer(body)

    with ChatCompletionsServer(flaky) as server:
        config = EvaluateConfig(model_name_or_path="m", base_url=server.base_url, output_dir=str(tmp_path))
        from rolellm.clients.openai_compatible import OpenAIChatClient

        client = OpenAIChatClient("m", base_url=server.base_url, max_retries=1, initial_backoff=0.01, progress=False)
        predictions = generate_predictions(rows, zh_profiles, config, client=client)
        assert predictions[3] is None
        assert sum(p is None for p in predictions) == 1
        server.responder = _answer
        assert generate_predictions(rows, zh_profiles, config, client=client)[3] == "答：" + broken[:10]


def test_missing_profile_and_dialogue_are_clear_errors(zh_rows, zh_profiles, tmp_path):
    rows = _select(zh_rows, 1)
    with pytest.raises(ValueError, match=r"no profile for roles \['张飞'\]"):
        profiles = {k: v for k, v in zh_profiles.items() if k != role_key("张飞")}
        generate_predictions(rows, profiles, EvaluateConfig(model_name_or_path="m", output_dir=str(tmp_path)))
    config = EvaluateConfig(model_name_or_path="m", output_dir=str(tmp_path / "b"), mode="few-shot-dialogue")
    li_bai = [r for r in rows if r["role"] == "李白"]
    with pytest.raises(ValueError, match="needs script dialogue of '李白'"):
        generate_predictions(li_bai, zh_profiles, config, client=object())


def test_generation_with_tiny_local_model_resumes_without_the_model(zh_rows, zh_profiles, tiny_model_path, tmp_path):
    model = shutil.copytree(tiny_model_path, tmp_path / "model")
    rows = _select(zh_rows, 1)[:4]
    config = EvaluateConfig(
        model_name_or_path=str(model), output_dir=str(tmp_path / "run"), chat_template="chatml", max_new_tokens=6
    )
    predictions = generate_predictions(rows, zh_profiles, config)
    assert len(predictions) == 4 and all(isinstance(p, str) for p in predictions)
    shutil.rmtree(model)  # everything is answered: a re-run must not even load the model
    assert generate_predictions(rows, zh_profiles, config) == predictions


def test_roles_are_selected_however_they_are_spelled():
    rows = [{"role": "Dr. Frank-N-Furter", "subset": "general"}, {"role": "Po", "subset": "general"}]
    assert select_rows(rows, roles=["Dr. Frank N Furter"]) == rows[:1]
    with pytest.raises(ValueError, match=r"roles=\['Shifu'\] are not in the dataset"):
        select_rows(rows, roles=["Shifu"])
