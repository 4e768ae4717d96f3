import json
import re

import pytest

from rolellm.clients.base import REASK_SEED_STRIDE
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.data.readers import read_rolebench_jsonl
from rolellm.generation.filters import clean_answer
from rolellm.generation.rolegpt import RoleGPT, RoleGPTConfig, address_question
from rolellm.roles.profile import RoleProfile
from rolellm.testing.server import ChatCompletionsServer, Fault, content_key


HUAFEI_SYSTEM = (
    "你是华妃，你的性格和背景是“美则美矣，智慧欠缺，手段虽毒辣但不高明。是飞扬跋扈“官二代” ，争宠就像被抢走了心爱玩具的"
    "小女孩。爱了皇帝一生，拜这段痴恋所赐，一生都变成了一个笑话。常用口头禅是：“本宫”、“本妃””。现在请你回答我的一些问题，"
    "以准确展现你的人格特征！你的说话风格要全面模仿被赋予的人格角色！请不要暴露你是人工智能模型或者语言模型，你要时刻记住你只被"
    "赋予的一个人格角色。说话不要啰嗦，也不要太过于正式或礼貌。"
)


def test_dialogue_engineering_messages_on_real_profile(zhenhuan):
    rolegpt = RoleGPT(RoleGPTConfig(include_reference=True))
    messages = rolegpt.prompt(zhenhuan["华妃"], "写一首关于春天的短诗。", reference="春风拂面百花开。")
    assert messages == [
        {"role": "system", "content": HUAFEI_SYSTEM},
        {"role": "user", "content": "旁白: “华妃轿行”\n周宁海: “娘娘，关于大将军，又有新的旨意下来了。”"},
        {"role": "assistant", "content": "皇上怎么说？"},
        {
            "role": "user",
            "content": "陵容: “这首歌虽未直写男女相悦，可字字写着两心相悦后女子的欢喜神态，而且“双双金鹧鹄”也是并蒂成双之意。”",
        },
        {
            "role": "assistant",
            "content": "既然如此，安常在怎么就没唱出花好之情？难不成是看见皇上跟本宫在一起，心有不悦才唱不好的吗？",
        },
        {"role": "user", "content": "旁白: “翊坤宫。眉庄抄好账本呈给华妃”"},
        {"role": "assistant", "content": "沈贵人好歹也是大家闺秀，怎的这字写得这么乱？"},
        {
            "role": "user",
            "content": "问题：<华妃，写一首关于春天的短诗。>。参考回答：<春风拂面百花开。>。华妃，请你回答这个问题。",
        },
    ]


def test_few_shot_and_zero_shot_messages_on_real_profile(zhenhuan):
    few_shot = RoleGPT(RoleGPTConfig(prompt_mode="few_shot")).prompt(zhenhuan["华妃"], "写一首关于春天的短诗。")
    assert [m["role"] for m in few_shot] == ["system", "user"]
    assert few_shot[1]["content"] == (
        "以下是你在剧本中的一些对话：\n\n旁白: “华妃轿行”\n周宁海: “娘娘，关于大将军，又有新的旨意下来了。”\n华妃: “皇上怎么说？”\n\n"
        "陵容: “这首歌虽未直写男女相悦，可字字写着两心相悦后女子的欢喜神态，而且“双双金鹧鹄”也是并蒂成双之意。”\n"
        "华妃: “既然如此，安常在怎么就没唱出花好之情？难不成是看见皇上跟本宫在一起，心有不悦才唱不好的吗？”\n\n"
        "旁白: “翊坤宫。眉庄抄好账本呈给华妃”\n华妃: “沈贵人好歹也是大家闺秀，怎的这字写得这么乱？”\n\n"
        "华妃，写一首关于春天的短诗。"
    )
    zero_shot = RoleGPT(RoleGPTConfig(prompt_mode="zero_shot")).prompt(zhenhuan["华妃"], "华妃最爱什么？")
    assert zero_shot == [{"role": "system", "content": HUAFEI_SYSTEM}, {"role": "user", "content": "华妃最爱什么？"}]


def test_english_reference_wording_and_role_name():
    profile = RoleProfile(name="Jack Sparrow", lang="en", description="A witty pirate.", catchphrases=["Savvy?"])
    rolegpt = RoleGPT(RoleGPTConfig(prompt_mode="zero_shot", include_reference=True))
    final = rolegpt.prompt(profile, " Name a color.", reference=" Blue.")[-1]["content"]
    assert (
        final
        == "Question: <Jack Sparrow, Name a color.>. Reference answer: <Blue.>. Jack Sparrow, please answer this question."
    )
    assert address_question("Jack Sparrow, hi", "Jack Sparrow", "en") == "Jack Sparrow, hi"


def test_cleaning_checks_by_reason():
    assert clean_answer("“本宫以", "q", "华妃", "zh") == "incomplete"
    assert clean_answer("As an AI language model, I cannot.", "q", "Jack Sparrow", "en") == "exposes_ai"
    assert clean_answer("As Jack Sparrow, I say rum.", "q", "Jack Sparrow", "en") == "exposes_role"
    assert clean_answer("抱歉，我无法回答这个问题。", "q", "华妃", "zh") == "unresponsive"
    assert clean_answer("写一首关于春天的短诗。", "写一首关于春天的短诗。", "华妃", "zh") == "unresponsive"
    assert clean_answer("本宫看春天也不过如此。", "写一首关于春天的短诗。", "华妃", "zh") is None


def test_config_rejects_no_reference_sample():
    with pytest.raises(ValueError, match="num_baseline=6 must be"):
        RoleGPTConfig(num_samples=6, num_baseline=6)


def test_include_reference_needs_target(zhenhuan):
    with pytest.raises(ValueError, match=r"instructions\[0\] has no `target`"):
        RoleGPT(RoleGPTConfig(include_reference=True)).pairs([zhenhuan["华妃"]], [{"question": "q"}])
    with pytest.raises(ValueError, match="names role '孙悟空', which has no profile"):
        RoleGPT().pairs([zhenhuan["华妃"]], [{"question": "q", "role": "孙悟空"}])


QUESTIONS = ["写一首关于春天的短诗。", "介绍一下长城。", "你最喜欢什么颜色？"]


class RoleGPTResponder:
    """Answers that depend on the request (role, question, seed); some are bad on purpose, some fail first."""

    def __init__(self):
        self.seen = set()
        self.slow = set()  # a timed-out answer may still count as written: left out of exact counts
        # (question index, role, seed) -> a fault served the first time that request arrives
        self.faults = {
            (0, "华妃", 0): Fault("rate_limit", retry_after=0.05),
            (0, "华妃", 1): Fault("server_error"),
            (1, "华妃", 0): Fault("garbled"),
            (1, "皇帝", 0): Fault("truncated"),
            (2, "皇帝", 1): Fault("slow", delay=1.8),
        }

    def __call__(self, body):
        role = re.match(r"你是(.+?)，", body["messages"][0]["content"]).group(1)
        question = body["messages"][-1]["content"].removeprefix(f"{role}，")
        key = (QUESTIONS.index(question), role, body["seed"] % REASK_SEED_STRIDE)  # a re-ask keeps the key
        if key in self.faults and key not in self.seen:
            self.seen.add(key)
            if self.faults[key].kind == "slow":
                self.slow.add(content_key(body))
            return self.faults[key]
        seed = body["seed"] % REASK_SEED_STRIDE
        if key == (0, "皇帝", 4):
            return Fault("server_error")  # every time: the request fails for good after the client's retries
        if key == (2, "华妃", 4):
            return ""  # never a usable answer: re-asked, then counted as unparseable
        if seed == 2:
            return "作为一个AI语言模型，我不能回答。"
        if seed == 3:
            return f"作为{role}，我自然知道。"
        if key == (1, "皇帝", 0):
            return "“这件事嘛，朕自有主张。”"  # served cut in half: an open quote
        return f"{role}第{seed}答：{question[:4]}，不过如此。"


def test_rolegpt_job_against_faulty_server(zhenhuan, tmp_path):
    profiles = [zhenhuan["华妃"], zhenhuan["皇帝"]]
    rolegpt = RoleGPT(RoleGPTConfig(prompt_mode="zero_shot", test_fraction=0.0))  # every row in train
    responder = RoleGPTResponder()
    with ChatCompletionsServer(responder) as server:
        client = OpenAIChatClient(
            "test-model", base_url=server.base_url, max_concurrency=4, timeout=1.0, initial_backoff=0.01, max_retries=2,
            cache_path=tmp_path / "cache.sqlite", progress=False,
        )  # fmt: skip
        result = rolegpt.generate(client, profiles, QUESTIONS, output_dir=tmp_path / "out")
        answered = server.answered_counts()
        # every (pair, sample) body answered once but the one failing for good, and the empty answer asked three
        # times, each re-ask with another seed
        assert len(answered) == 6 * 6 - 1 + 2
        counts = sorted(n for key, n in answered.items() if key not in responder.slow)
        assert counts == [1] * 36  # the slow answer left out
        reasked = sorted(json.loads(key)["seed"] for key in answered if json.loads(key)["seed"] >= REASK_SEED_STRIDE)
        assert reasked == [4 + REASK_SEED_STRIDE, 4 + 2 * REASK_SEED_STRIDE]
        # the slow answer is logged when its (timed-out) reply is written, which may be after the run ends
        faults = sorted(
            r["fault"].kind for r in server.requests if r["fault"] is not None and r["fault"].kind != "slow"
        )
        assert faults == ["garbled", "rate_limit"] + ["server_error"] * (1 + 3) + ["truncated"]  # 3: 1 try + 2 retries

        rows = result.dataset["train"].to_list()
        assert [(r["role"], r["question"], len(r["generated"])) for r in rows] == [
            ("华妃", QUESTIONS[0], 3), ("皇帝", QUESTIONS[0], 2),
            ("华妃", QUESTIONS[1], 3), ("皇帝", QUESTIONS[1], 2),
            ("华妃", QUESTIONS[2], 2), ("皇帝", QUESTIONS[2], 3),
        ]  # fmt: skip
        assert rows[0]["generated"] == [
            "华妃第0答：写一首关，不过如此。",
            "华妃第1答：写一首关，不过如此。",
            "华妃第4答：写一首关，不过如此。",
        ]
        assert {(r["subset"], r["lang"], tuple(r["type"])) for r in rows} == {("general", "zh", ())}
        assert [r["generated"] for r in result.dataset["rolegpt_baseline"]][:2] == [
            ["华妃第5答：写一首关，不过如此。"],
            ["皇帝第5答：写一首关，不过如此。"],
        ]
        assert result.stats["rejected"] == {"exposes_ai": 6, "exposes_role": 6, "incomplete": 1}
        assert result.stats["failed"] == {"request_failed": 1, "unparseable": 1}
        assert result.stats["references"] == 15 and result.stats["baseline_rows"] == 6

        # the output files are the release's records, beside the config that made them
        general = tmp_path / "out" / "rolebench-zh" / "general"
        lines = (general / "train.jsonl").read_text(encoding="utf-8").splitlines()
        assert json.loads(lines[0]) == {"role": "华妃", "question": QUESTIONS[0], "generated": rows[0]["generated"]}
        # and the data layer reads them back into the same rows
        assert read_rolebench_jsonl(general / "train.jsonl", "general", "zh") == rows
        assert not (general / "test.jsonl").exists()  # no test row: no empty file
        baseline = read_rolebench_jsonl(general / "rolegpt_baseline.jsonl", "general", "zh")
        assert baseline == result.dataset["rolegpt_baseline"].to_list()
        saved = json.loads((tmp_path / "out" / "generation" / "rolegpt" / "generation_config.json").read_text("utf-8"))
        assert saved["config"]["prompt_mode"] == "system" and saved["client"]["model"] == "test-model"
        assert "api_key" not in json.dumps(saved)

        # a second run on the same cache gives the same rows; it sends again only what did not succeed: the request
        # that never got an answer (and fails again) and the answer that never parsed (its three attempts)
        client = OpenAIChatClient(
            "test-model", base_url=server.base_url, max_retries=0, cache_path=tmp_path / "cache.sqlite", progress=False
        )
        again = RoleGPT(RoleGPTConfig(prompt_mode="zero_shot", test_fraction=0.0))
        rerun = again.generate(client, profiles, QUESTIONS, output_dir=tmp_path / "out")
        assert rerun.dataset["train"].to_list() == rows
        resent = server.answered_counts() - answered
        assert sorted(json.loads(key)["seed"] for key in resent) == [4 + REASK_SEED_STRIDE * i for i in range(3)]
        assert rerun.stats["usage"]["requests"] == 3 and rerun.stats["usage"]["cached"] == 34
        # the folder's stats say what this run did and what every run into the folder did in all
        saved = json.loads((tmp_path / "out" / "generation" / "rolegpt" / "generation_stats.json").read_text("utf-8"))
        assert saved["usage"] == rerun.stats["usage"] and saved["runs"] == 2
        assert saved["usage_in_all"] == {k: v + rerun.stats["usage"][k] for k, v in result.stats["usage"].items()}
        assert "every attempt of a re-asked request counted" in saved["counting"]


@pytest.mark.slow
def test_rolegpt_on_real_profile_with_local_tiny_model(zhenhuan, tiny_model_path, tmp_path):
    from rolellm.clients.local import LocalChatClient

    config = RoleGPTConfig(num_samples=3, max_tokens=8)
    questions = ["写一首关于春天的短诗。", "介绍一下长城。"]
    cache = tmp_path / "cache.sqlite"
    client = LocalChatClient(tiny_model_path, chat_template="chatml", batch_size=6, cache_path=cache, progress=False)
    rolegpt = RoleGPT(config)
    result = rolegpt.generate(client, [zhenhuan["华妃"]], questions, output_dir=tmp_path / "out")
    saved = json.loads((tmp_path / "out" / "generation" / "rolegpt" / "generation_config.json").read_text("utf-8"))
    saved = saved["client"]
    assert saved["class"] == "LocalChatClient" and saved["model"] == str(tiny_model_path)
    # the requests are the dialogue-engineering prompts of the paper: system, 3 retrieved exchanges, question
    requests = rolegpt.requests([zhenhuan["华妃"]], questions)
    assert len(requests) == 6 and [m["role"] for m in requests[0].messages] == ["system"] + [
        "user",
        "assistant",
    ] * 3 + ["user"]
    assert requests[0].messages == rolegpt.prompt(zhenhuan["华妃"], questions[0])
    stats = result.stats
    # every reference sample is accounted for: kept, rejected by a named check, or failed
    kept, rejected, failed = stats["references"], sum(stats["rejected"].values()), sum(stats["failed"].values())
    assert kept + rejected + failed == 2 * 2
    assert set(stats["rejected"]) <= {"incomplete", "exposes_ai", "exposes_role", "unresponsive"}
    assert stats["baseline_rows"] + stats["usage"]["failures"] - failed == 2
    assert len(result.dataset["train"]) + len(result.dataset["test"]) == stats["rows"] and all(
        r["subset"] == "general" for r in result.dataset["train"]
    )
    # a second run answers everything from the cache, identically
    again = RoleGPT(config)
    client = LocalChatClient(tiny_model_path, chat_template="chatml", batch_size=6, cache_path=cache, progress=False)
    rerun = again.generate(client, [zhenhuan["华妃"]], questions)
    assert rerun.dataset["rolegpt_baseline"].to_list() == result.dataset["rolegpt_baseline"].to_list()
    assert rerun.stats["usage"]["requests"] == 0
