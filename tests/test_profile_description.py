import json
import re

import pytest

from rolellm.clients.openai_compatible import OpenAIChatClient, estimate_tokens
from rolellm.generation.profile_description import ProfileDescriber, ProfileDescriptionConfig, sample_dialogue
from rolellm.roles.release import read_release_profiles
from rolellm.testing.server import ChatCompletionsServer


def test_dialogue_sample_spans_the_script(zhenhuan):
    profile = zhenhuan["华妃"]
    sample = sample_dialogue(profile, max_tokens=3000)
    assert 2000 < estimate_tokens(sample) <= 3000
    groups = sample.split("\n\n")
    assert all("\n华妃: " in "\n" + group for group in groups)
    # taken evenly: the sample reaches the last third of the script, not only its opening acts
    last_acts = {u.content.strip() for u in profile.dialogue if u.act_id > 100}
    assert any(line.split(": ", 1)[1] in last_acts for group in groups[-3:] for line in group.split("\n"))


class DescriptionResponder:
    def __init__(self):
        self.calls = {}

    def __call__(self, body):
        content = body["messages"][0]["content"]
        role = re.search(r"角色“(.+?)”", content).group(1)
        self.calls[role] = self.calls.get(role, 0) + 1
        if role == "皇帝" and self.calls[role] == 1:
            return "朕以为此人甚好。"  # no JSON: asked again
        if role == "槿汐":
            return '{"catchphrases": []}'  # never a description: counted as unparseable
        phrases = {"华妃": ["本宫", "欢宜香", "天下第一"], "皇帝": ["朕", "苏培盛"]}[role]
        return json.dumps({"description": f"{role}的性格描述。", "catchphrases": phrases}, ensure_ascii=False)


def test_describe_real_profiles_against_server(zhenhuan, tmp_path):
    profiles = [zhenhuan["华妃"], zhenhuan["皇帝"], zhenhuan["槿汐"]]
    describer = ProfileDescriber(ProfileDescriptionConfig(max_dialogue_tokens=1000))
    with ChatCompletionsServer(DescriptionResponder()) as server:
        client = OpenAIChatClient(
            "test-model", base_url=server.base_url, cache_path=tmp_path / "c.sqlite", progress=False
        )
        result = describer.generate(client, profiles, output_dir=tmp_path / "out")
    assert result.dataset["name"] == ["华妃", "皇帝"] and result.dataset["generated"] == [True, True]
    huafei, emperor = result.details["profiles"]
    assert (huafei.description, huafei.catchphrases) == ("华妃的性格描述。", ["本宫", "欢宜香"])
    assert (emperor.description, emperor.catchphrases) == ("皇帝的性格描述。", ["朕", "苏培盛"])
    assert len(huafei.dialogue) == len(zhenhuan["华妃"].dialogue)
    assert zhenhuan["华妃"].generated is False  # the input profiles are left as they were
    assert result.stats["dropped"] == {"catchphrase_not_in_script": 1}  # 华妃 never says 天下第一
    assert result.stats["failed"] == {"unparseable": 1} and result.stats["usage"]["reasks"] == 3

    written = read_release_profiles(tmp_path / "out", "zh")
    assert written["华妃"].description_with_catchphrases() == "华妃的性格描述。常用口头禅是：“本宫”、“欢宜香”"
    marker = json.loads((tmp_path / "out" / "profiles-zh" / "generated.json").read_text("utf-8"))
    assert marker == {"generated": ["华妃", "皇帝"], "reviewed": []}
    assert (tmp_path / "out" / "generation" / "describe" / "generation_config.json").exists()


def test_profile_without_own_lines_is_an_error(zhenhuan):
    profile = zhenhuan["华妃"]
    stranger = type(profile)(name="果郡王", lang="zh", dialogue=profile.dialogue[:20])
    with pytest.raises(ValueError, match="'果郡王' has no line of its own"):
        ProfileDescriber().generate(None, [stranger])
