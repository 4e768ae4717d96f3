import pytest

from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.retrieval import DialogueRetriever, dialogue_to_messages, tokenize_for_bm25


@pytest.fixture(scope="module")
def huafei(zhenhuan):
    return zhenhuan["华妃"]


def test_groups_indexed_and_skipped_on_real_profile(huafei):
    retriever = DialogueRetriever(huafei)
    # 820 diag_id groups in 甄嬛传-华妃.jsonl: 77 have more than 6 lines, 70 more are not an exchange closed by 华妃
    assert len(huafei.dialogue_groups()) == 820
    assert retriever.skipped == {"too_long": 77, "not_an_exchange": 70}
    assert len(retriever) == 673
    assert max(len(group) for group in retriever.groups) == 6
    assert all(group[-1].speaker == "华妃" and group[0].speaker != "华妃" for group in retriever.groups)


def test_retrieve_and_render_known_question(huafei):
    retriever = DialogueRetriever(huafei)
    groups = retriever.retrieve("华妃，你觉得皇后这个人怎么样？", k=3)
    assert [(g[0].act_id, g[0].diag_id, len(g)) for g in groups] == [(12, 65, 2), (68, 370, 3), (48, 249, 2)]
    scores = retriever.scores("华妃，你觉得皇后这个人怎么样？")
    assert scores[retriever.groups.index(groups[0])] == scores.max()
    assert dialogue_to_messages(groups, "华妃") == [
        {"role": "user", "content": "夏冬春: “这个是皇后（重读）娘娘赏的料子，今日觐见，嫔妾特意穿上。”"},
        {"role": "assistant", "content": "倒知道知恩图报，是个有心的人，起来吧。"},
        {
            "role": "user",
            "content": "陵容: “多谢娘娘赐教。”\n"
            "皇后: “看来华妃你跟安答应还有很长的时间可以见面，妹妹慢慢教，反正有的是时间。”",
        },
        {"role": "assistant", "content": "这个当然，皇后治理后宫已然是千头万绪，臣妾理当为您分忧。"},
        {
            "role": "user",
            "content": "皇后: “景仁宫那么大，总会有地方安置，更何况丽嫔她虽说神志不清，可言语之间口口声声涉及余氏投毒之事，"
            "事关重大，本宫不得不追查。难道华妃觉得丽嫔在本宫那里有什么不妥吗？”",
        },
        {
            "role": "assistant",
            "content": "恢复镇定）：臣妾自然不担心皇后照顾有何不妥，只是皇上亲命臣妾协理六宫，当日是觉得臣妾可以为皇后分忧了，"
            "臣妾怕皇上怪罪臣妾不体恤皇后。",
        },
    ]


def test_max_group_lines_changes_the_index(huafei):
    assert len(DialogueRetriever(huafei, max_group_lines=2)) < len(DialogueRetriever(huafei))
    assert max(len(group) for group in DialogueRetriever(huafei, max_group_lines=2).groups) == 2


def _english_profile():
    lines = [
        ("Gibbs", "Captain, the rum is gone!"),
        ("Jack Sparrow", "Jack Sparrow: Why is the rum always gone?"),
        ("Will", "Where is the Black Pearl?"),
        ("Jack Sparrow", "Over the horizon, mate, where she belongs."),
        ("Elizabeth", "You are a pirate."),
        ("Jack Sparrow", "Captain. Captain Jack Sparrow, savvy?"),
    ]
    dialogue = [Utterance(act_id=0, diag_id=i // 2, speaker=s, content=c) for i, (s, c) in enumerate(lines)]
    return RoleProfile(name="Jack Sparrow", lang="en", dialogue=dialogue)


def test_english_profile_word_tokens_and_speaker_prefix_stripped():
    assert tokenize_for_bm25("Where's the RUM, mate?", "en") == ["where", "s", "the", "rum", "mate"]
    retriever = DialogueRetriever(_english_profile())
    (group,) = retriever.retrieve("Jack, where did all the rum go?", k=1)
    assert dialogue_to_messages([group], "Jack Sparrow") == [
        {"role": "user", "content": "Gibbs: “Captain, the rum is gone!”"},
        {"role": "assistant", "content": "Why is the rum always gone?"},
    ]
    assert len(retriever.retrieve("rum", k=10)) == 3


def test_group_that_cannot_alternate_is_rejected():
    group = [Utterance(act_id=3, diag_id=7, speaker="Jack Sparrow", content="Savvy?")]
    with pytest.raises(ValueError, match="act 3, dialogue 7.*must open with another speaker"):
        dialogue_to_messages([group], "Jack Sparrow")


def test_profile_without_usable_dialogue_is_a_clear_error():
    profile = RoleProfile(
        name="Jack", lang="en", dialogue=[Utterance(act_id=0, diag_id=0, speaker="Will", content="Hello.")]
    )
    with pytest.raises(ValueError, match="'Jack' has no dialogue group.*speaker names"):
        DialogueRetriever(profile)
