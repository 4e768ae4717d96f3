import hashlib
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import threading

import pytest

from rolellm.clients.base import REASK_SEED_STRIDE
from rolellm.clients.openai_compatible import OpenAIChatClient, estimate_tokens
from rolellm.data.readers import read_rolebench_jsonl
from rolellm.generation.context_instruct import ContextInstruct, ContextInstructConfig, parse_items, segment_profile
from rolellm.generation.job import NothingGenerated, stable_split
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import read_release_profiles
from rolellm.testing.server import ChatCompletionsServer, Fault, content_key


def first_acts(profile: RoleProfile, num_acts: int) -> RoleProfile:
    acts = sorted({u.act_id for u in profile.dialogue})[:num_acts]
    return RoleProfile(
        name=profile.name, lang=profile.lang, description=profile.description, catchphrases=profile.catchphrases,
        source=profile.source, dialogue=[u for u in profile.dialogue if u.act_id in acts],
    )  # fmt: skip


def test_segments_of_real_profile(zhenhuan):
    segments = segment_profile(zhenhuan["华妃"], max_segment_tokens=2000)
    assert len(segments) == 49
    assert max(estimate_tokens(s) for s in segments) <= 2000
    # every line of the script is in exactly one segment, in order
    lines = [f"{u.speaker}: {u.content.strip()}" for u in zhenhuan["华妃"].dialogue]
    assert "\n".join(segments).split("\n") == lines
    # whole acts: a segment boundary never falls inside an act that fits the budget
    assert segments[0].split("\n")[0] == "旁白: 景仁宫" and segments[1].split("\n")[0].startswith("旁白: ")


def test_prompt_follows_the_rules(zhenhuan):
    profile = zhenhuan["华妃"]
    segment = segment_profile(profile)[0]
    (message,) = ContextInstruct(ContextInstructConfig(num_questions=4)).prompt(profile, segment)
    content = message["content"]
    assert content.startswith("你熟悉《甄嬛传》中的角色“华妃”。")
    assert "角色简介：" + profile.description_with_catchphrases() in content
    assert "剧本片段：\n" + segment + "\n" in content
    assert "请为“华妃”设计4个问题" in content and "“script_based”" in content and "“script_agnostic”" in content
    assert content.endswith(
        '{"question": "...", "type": "script_based", "completeness": "High", "confidence": 0.9, "answer": "..."}'
    )


def test_parse_repairs_and_counts_invalid_items():
    text = (
        "Sure! Here they are:\n```json\n[\n"
        '{"question": "Jack, who stole the Pearl?", "type": "Script-Based", "completeness": "high", '
        '"confidence": "0.9", "answer": "Barbossa, mate."},\n'
        '{"question": "Jack, do you like rum?", "type": "other", "completeness": "High", "confidence": 1, "answer": "Aye."},\n'
        '{"question": "Jack, who are you?", "type": "script_agnostic", "completeness": "High", "answer": "Jack."},\n'
        '{"question": "Jack?", "type": "script_agnostic", "completeness": "High", "confidence": 7, "answer": "Aye."},\n'
        "]\n```"
    )
    parsed = parse_items(text)
    assert parsed["items"] == [
        {"question": "Jack, who stole the Pearl?", "type": "script_based", "completeness": "High", "confidence": 0.9,
         "answer": "Barbossa, mate."}
    ]  # fmt: skip
    assert parsed["invalid"] == {"invalid_type": 1, "invalid_confidence": 2}
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_items('[{"question": "Jack, who stole the Pe')
    with pytest.raises(ValueError, match="no JSON array"):
        parse_items("I cannot do that.")
    with pytest.raises(ValueError, match="no valid item"):
        parse_items('[{"question": "q"}]')


class ContextInstructResponder:
    """JSON items that depend on the role and segment; the first answer to some requests is bad or fails."""

    def __init__(self, faults=None, block_at=None):
        self.seen = set()
        self.slow = set()  # a timed-out answer may still count as written: left out of exact counts
        self.arrivals = 0
        self.faults = faults or {}
        self.block_at = block_at  # block the request arriving n-th (for the kill test) until `release` is set
        self.blocked = threading.Event()
        self.release = threading.Event()

    def __call__(self, body):
        content = body["messages"][0]["content"]
        role = re.search(r"角色“(.+?)”", content).group(1)
        segment = content.split("剧本片段：\n", 1)[1].split("\n\n请为", 1)[0]
        tag = hashlib.sha256(segment.encode()).hexdigest()[:8]
        key = content_key({**body, "seed": body["seed"] % REASK_SEED_STRIDE})  # a re-ask is not served the fault
        first = key not in self.seen
        self.seen.add(key)
        self.arrivals += 1
        if self.block_at is not None and self.arrivals == self.block_at:
            self.blocked.set()
            self.release.wait()
        if first and tag in self.faults:
            if isinstance(self.faults[tag], Fault) and self.faults[tag].kind == "slow":
                self.slow.add(key)
            return self.faults[tag]
        items = [
            {"question": f"{role}，片段{tag}里发生了什么？", "type": "script_based", "completeness": "High",
             "confidence": 0.9, "answer": f"{role}记得片段{tag}。"},
            {"question": f"{role}，你最喜欢什么？", "type": "script_agnostic", "completeness": "Medium",
             "confidence": 0.95, "answer": "本宫最喜欢欢宜香。"},
            {"question": f"{role}，片段{tag}之后呢？", "type": "script_based", "completeness": "High",
             "confidence": 0.3, "answer": "不知道。"},
            {"question": f"{role}，片段{tag}是哪一年？", "type": "script_based", "completeness": "Low",
             "confidence": 0.9, "answer": "雍正元年。"},
            {"question": f"{role}，片段{tag}的天气？", "type": "weather", "completeness": "High",
             "confidence": 0.9, "answer": "晴。"},
        ]  # fmt: skip
        return json.dumps(items, ensure_ascii=False)


def _tags(profile, config):
    return [hashlib.sha256(s.encode()).hexdigest()[:8] for s in segment_profile(profile, config.max_segment_tokens)]


def test_context_instruct_job_against_faulty_server(zhenhuan, tmp_path):
    config = ContextInstructConfig(max_segment_tokens=600, test_fraction=0.3)
    profiles = [first_acts(zhenhuan["华妃"], 12), first_acts(zhenhuan["皇帝"], 6)]
    tags = {p.name: _tags(p, config) for p in profiles}
    num_segments = {name: len(t) for name, t in tags.items()}
    assert num_segments == {"华妃": 10, "皇帝": 5}
    faults = {
        tags["华妃"][0]: "好的，下面是问题。",  # prose, no JSON: re-asked
        tags["华妃"][1]: Fault("truncated"),  # JSON cut in half: re-asked
        tags["华妃"][2]: Fault("rate_limit", retry_after=0.05),
        tags["皇帝"][0]: Fault("server_error"),
        tags["皇帝"][1]: Fault("garbled"),
        tags["皇帝"][2]: Fault("slow", delay=1.8),
    }
    responder = ContextInstructResponder(faults)
    with ChatCompletionsServer(responder) as server:
        client = OpenAIChatClient(
            "test-model", base_url=server.base_url, max_concurrency=4, timeout=1.0, initial_backoff=0.01,
            cache_path=tmp_path / "cache.sqlite", progress=False,
        )  # fmt: skip
        generator = ContextInstruct(config)
        result = generator.generate(client, profiles, output_dir=tmp_path / "out")
        answered = server.answered_counts()
    assert len(answered) == 17 and len(responder.slow) == 1
    counts = sorted(n for key, n in answered.items() if key not in responder.slow)
    assert counts == [1] * 16  # every body once: the prose and the truncated answers were asked again...
    reasked = [json.loads(key) for key in answered if json.loads(key)["seed"] >= REASK_SEED_STRIDE]
    assert len(reasked) == 2  # ...each with another seed
    stats = result.stats
    assert stats["usage"]["reasks"] == 2 and stats["failed"] == {}
    # per segment: 1 unique script-based item kept, the shared question kept once, 3 dropped for different reasons
    assert stats["dropped"] == {
        "duplicate": 13, "invalid_type": 15, "low_completeness": 15, "low_confidence": 15,
    }  # fmt: skip
    assert stats["items"] == {"华妃": 11, "皇帝": 6}
    rows = result.dataset["train"].to_list() + result.dataset["test"].to_list()
    # each item's split is a hash of its role and question alone
    splits = {split: [(r["role"], r["question"]) for r in result.dataset[split]] for split in ("train", "test")}
    assert all(stable_split(*key, 0.3) == split for split, keys in splits.items() for key in keys)
    assert (stats["train"], stats["test"]) == (len(splits["train"]), len(splits["test"])) and stats["test"] > 0
    assert len({(r["role"], r["question"]) for r in rows}) == 17
    assert {r["question"] for r in rows if r["role"] == "华妃"} == {
        f"华妃，片段{t}里发生了什么？" for t in tags["华妃"]
    } | {"华妃，你最喜欢什么？"}
    assert all(r["subset"] == "role_specific" and len(r["generated"]) == len(r["type"]) == 1 for r in rows)

    out = tmp_path / "out"
    assert (out / "instructions-zh" / "split_info.txt").read_text(encoding="utf-8") == "华妃\t10\n皇帝\t5\n"
    nums = [json.loads(line) for line in (out / "instructions-zh" / "nums.jsonl").read_text("utf-8").splitlines()]
    assert nums == [{"role": "华妃", "num": 11}, {"role": "皇帝", "num": 6}]
    record = json.loads((out / "instructions-zh" / "role-specific-华妃.jsonl").read_text("utf-8").splitlines()[0])
    assert record == {
        "id": 0, "instruction": f"华妃，片段{tags['华妃'][0]}里发生了什么？", "answer": f"华妃记得片段{tags['华妃'][0]}。",
        "type": "script_based", "metrics": "Completeness: High, Confidence: 0.9", "split": record["split"],
    }  # fmt: skip
    specific = out / "rolebench-zh" / "role_specific"
    train = [json.loads(line) for line in (specific / "train.jsonl").read_text("utf-8").splitlines()]
    test = [json.loads(line) for line in (specific / "test.jsonl").read_text("utf-8").splitlines()]
    assert isinstance(train[0]["type"], str) and isinstance(test[0]["type"], list)
    for split in ("train", "test"):  # the data layer reads both files back into the same rows
        path = specific / f"{split}.jsonl"
        assert read_rolebench_jsonl(path, "role_specific", "zh") == result.dataset[split].to_list()
    saved = json.loads((out / "generation" / "context-instruct" / "generation_config.json").read_text("utf-8"))
    assert saved["config"]["test_fraction"] == 0.3
    assert set(read_release_profiles(out, "zh")) == {"华妃", "皇帝"}  # the profiles travel with the rows


_JOB = """
import sys
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.generation.context_instruct import ContextInstruct, ContextInstructConfig
from rolellm.roles.profile import RoleProfile
from rolellm.roles.release import read_release_profiles
from rolellm.roles.release import read_screenplay_folder


def main(base_url, cache, out, folder):
    profile = read_screenplay_folder(folder)["华妃"]
    acts = sorted({u.act_id for u in profile.dialogue})[:12]
    profile.dialogue = [u for u in profile.dialogue if u.act_id in acts]
    client = OpenAIChatClient("test-model", base_url=base_url, max_concurrency=1, cache_path=cache, progress=False)
    ContextInstruct(ContextInstructConfig(max_segment_tokens=300)).generate(client, [profile], output_dir=out)


if __name__ == "__main__":
    main(*sys.argv[1:5])
"""


@pytest.mark.slow
def test_killed_job_restarts_without_resending(zhenhuan, tmp_path, slice_data_dir):
    folder = str(slice_data_dir / "roleglm-screenplay" / "profile_zhenhuan")
    script = tmp_path / "job.py"
    script.write_text(_JOB, encoding="utf-8")
    responder = ContextInstructResponder(block_at=6)
    with ChatCompletionsServer(responder) as server:
        argv = [
            sys.executable,
            str(script),
            server.base_url,
            str(tmp_path / "cache.sqlite"),
            str(tmp_path / "out"),
            folder,
        ]
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert responder.blocked.wait(timeout=120), "the job never reached its sixth request"
            first.send_signal(signal.SIGKILL)
            assert first.wait(timeout=30) == -signal.SIGKILL
            answered_first = server.answered_counts(held=1)  # the sixth request is still held
            assert sum(answered_first.values()) == 5 and not (tmp_path / "out").exists()
            responder.block_at = None
            runpy.run_path(str(script), run_name="job")["main"](*argv[2:])  # the restart, in this process
            answered = server.answered_counts(held=1)
        finally:
            responder.release.set()
            first.kill()
    # every request was answered exactly once over the two runs: the restart re-sent none of the first five
    assert set(answered.values()) == {1}
    segments = segment_profile(first_acts(zhenhuan["华妃"], 12), max_segment_tokens=300)
    assert len(answered) == len(segments) == 21
    stats = json.loads(
        (tmp_path / "out" / "generation" / "context-instruct" / "generation_stats.json").read_text("utf-8")
    )
    assert stats["usage"]["cached"] == 5 and stats["usage"]["requests"] == len(segments) - 5
    assert stats["items"] == {"华妃": len(segments) + 1}
    rows = [
        json.loads(line)
        for name in ("train", "test")
        for line in (tmp_path / "out" / "rolebench-zh" / "role_specific" / f"{name}.jsonl")
        .read_text("utf-8")
        .splitlines()
    ]
    assert len(rows) == len({r["question"] for r in rows}) == len(segments) + 1


@pytest.mark.slow
def test_context_instruct_on_real_profile_with_local_tiny_model(zhenhuan, tiny_model_path, tmp_path):
    from rolellm.clients.local import LocalChatClient

    profile = first_acts(zhenhuan["华妃"], 3)
    config = ContextInstructConfig(max_segment_tokens=400, max_tokens=12)
    client = LocalChatClient(tiny_model_path, chat_template="chatml", cache_path=tmp_path / "c.sqlite", progress=False)
    generator = ContextInstruct(config)
    requests = generator.requests([profile])
    assert [r.metadata["segment"] for r in requests] == [0, 1, 2]
    assert requests[0].messages == generator.prompt(profile, segment_profile(profile, 400)[0])
    result = generator.generate(client, [profile])
    # a random tiny model writes no JSON: every segment is asked three times, then counted as unparseable
    assert result.stats["failed"] == {"unparseable": 3}
    assert result.stats["usage"]["reasks"] == 6 and result.stats["usage"]["requests"] == 9
    assert len(result.dataset["train"]) == len(result.dataset["test"]) == 0
    assert [f["segment"] for f in result.failures] == [0, 1, 2]
    # saving such a run writes the failures and nothing that looks like data
    with pytest.raises(NothingGenerated, match="no row generated and 3 requests failed"):
        generator.save(tmp_path / "out", result, client)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["generation"]
    assert sorted(p.name for p in (tmp_path / "out" / "generation" / "context-instruct").iterdir()) == [
        "failures.jsonl"
    ]


def test_english_profiles_from_a_dataset(tmp_path):
    import datasets

    from rolellm.roles.profile import Utterance

    lines = [("Gibbs", "The Pearl is gone, Captain!"), ("Jack Sparrow", "Then we'll take her back, savvy?")]
    profile = RoleProfile(
        name="Jack Sparrow", lang="en", description="A witty pirate captain.", catchphrases=["Savvy?"],
        source="Pirates of the Caribbean",
        dialogue=[Utterance(act_id=0, diag_id=0, speaker=s, content=c) for s, c in lines],
    )  # fmt: skip
    rows = datasets.Dataset.from_list([profile.to_dict()])
    items = [
        {"question": "Jack Sparrow, who took the Black Pearl from you?", "type": "script_based",
         "completeness": "High", "confidence": 0.95, "answer": "Barbossa, the mutinous dog."},
        {"question": "Jack Sparrow, what do you value most?", "type": "script_agnostic",
         "completeness": "High", "confidence": 0.9, "answer": "Freedom, mate. And rum."},
    ]  # fmt: skip
    generator = ContextInstruct(ContextInstructConfig(test_fraction=0.2))
    with ChatCompletionsServer(lambda body: json.dumps(items)) as server:
        client = OpenAIChatClient("test-model", base_url=server.base_url, progress=False)
        result = generator.generate(client, rows, output_dir=tmp_path)
        prompt = server.requests[0]["body"]["messages"][0]["content"]
    assert prompt.startswith('You know the character "Jack Sparrow" from "Pirates of the Caribbean".')
    assert 'Description: A witty pirate captain. Your catchphrase is: "Savvy?"' in prompt
    assert (
        "Script segment:\nGibbs: The Pearl is gone, Captain!\nJack Sparrow: Then we'll take her back, savvy?\n"
        in prompt
    )
    assert (len(result.dataset["train"]), len(result.dataset["test"])) == (1, 1)  # the hashes fall apart at 0.2
    assert sorted([*result.dataset["train"]["question"], *result.dataset["test"]["question"]]) == sorted(
        i["question"] for i in items
    )
    assert set(result.dataset["train"]["lang"]) == {"en"}
    assert (tmp_path / "instructions-eng" / "role-specific-Jack Sparrow.jsonl").exists()


@pytest.mark.parametrize("confidence", [float("nan"), float("inf"), "NaN", "-inf"])
def test_a_confidence_that_is_not_a_finite_number_is_counted_invalid(confidence):
    # NaN passes every `<` comparison, so it would slip through the confidence filter if it were kept as a number;
    # json.dumps writes the floats as the bare literals NaN / Infinity, which json.loads reads back
    good = {"question": "Q?", "type": "script_based", "completeness": "High", "confidence": 0.9, "answer": "A."}
    result = parse_items(json.dumps([good, {**good, "question": "Q2?", "confidence": confidence}]))
    assert [item["question"] for item in result["items"]] == ["Q?"]
    assert result["invalid"] == {"invalid_confidence": 1}
