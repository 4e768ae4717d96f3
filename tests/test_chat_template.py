"""The system instruction: the paper's English and Chinese text, verbatim, and its options."""

import pytest

from rolellm import RoleProfile, Utterance
from rolellm.roles.prompts import build_system_instruction


# Copied by hand from the paper's appendix (docs: paper-notes.md), independent of the .jinja files.
PAPER_EN = (
    "You are {role}, your description is: {desc}. Now please answer some questions to accurately show your "
    "personality traits! Your speaking style should fully imitate the personality role assigned to you! Please do "
    "not expose that you are an artificial intelligence model or a language model, you must always remember that "
    "you are only assigned one personality role. Don't be verbose or too formal or polite when speaking."
)
PAPER_ZH = (
    "你是{role}，你的性格和背景是“{desc}”。现在请你回答我的一些问题，以准确展现你的人格特征！你的说话风格要全面模仿被赋予的人格"
    "角色！请不要暴露你是人工智能模型或者语言模型，你要时刻记住你只被赋予的一个人格角色。说话不要啰嗦，也不要太过于正式或礼貌。"
)


def test_english_instruction_is_the_papers_verbatim():
    profile = RoleProfile(name="Jack Sparrow", lang="en", description="A witty, eccentric pirate captain")
    expected = PAPER_EN.format(role="Jack Sparrow", desc="A witty, eccentric pirate captain")
    assert build_system_instruction(profile) == expected


def test_chinese_instruction_is_the_papers_verbatim():
    profile = RoleProfile(name="李白", lang="zh", description="为人爽朗大方，乐于交友，爱好饮酒作诗。")
    expected = PAPER_ZH.format(role="李白", desc="为人爽朗大方，乐于交友，爱好饮酒作诗。")
    assert build_system_instruction(profile) == expected


def test_desc_includes_the_catchphrase_sentence():
    profile = RoleProfile(name="孙悟空", lang="zh", description="生性聪明、活泼、忠诚、嫉恶如仇，代表了机智、勇敢。",
                          catchphrases=["俺老孙", "我齐天大圣", "我美猴王"])  # fmt: skip
    desc = "生性聪明、活泼、忠诚、嫉恶如仇，代表了机智、勇敢。常用口头禅是：“俺老孙”、“我齐天大圣”、“我美猴王”"
    assert build_system_instruction(profile) == PAPER_ZH.format(role="孙悟空", desc=desc)


def test_lang_overrides_the_profile_language():
    profile = RoleProfile(name="Sun Wukong", lang="zh", description="The Monkey King")
    assert build_system_instruction(profile, lang="en") == PAPER_EN.format(role="Sun Wukong", desc="The Monkey King")


def test_user_name_and_retrieved_dialogue_are_appended():
    profile = RoleProfile(name="Jack Sparrow", lang="en", description="A pirate")
    groups = [
        [Utterance(1, 1, "Will", "Where is the ship?"), Utterance(1, 1, "Jack Sparrow", "Gone, mate.")],
        [Utterance(2, 5, "Elizabeth", "You are a pirate!"), Utterance(2, 5, "Jack Sparrow", "Indeed.")],
    ]
    text = build_system_instruction(profile, user_name="Will Turner", retrieved_dialogue=groups)
    assert text == (
        PAPER_EN.format(role="Jack Sparrow", desc="A pirate") + " You are talking with Will Turner.\n\n"
        "Here are some of your dialogues from the script:\n\n"
        "Will: Where is the ship?\nJack Sparrow: Gone, mate.\n\n"
        "Elizabeth: You are a pirate!\nJack Sparrow: Indeed."
    )
    zh = RoleProfile(name="孙悟空", lang="zh", description="齐天大圣")
    text = build_system_instruction(
        zh, user_name="唐僧", retrieved_dialogue=[[Utterance(1, 1, "唐僧", "悟空"), Utterance(1, 1, "孙悟空", "师父")]]
    )
    assert text == PAPER_ZH.format(role="孙悟空", desc="齐天大圣") + (
        "和你说话的人是唐僧。\n\n以下是你在剧本中的一些对话：\n\n唐僧：“悟空”\n孙悟空：“师父”"
    )


def test_custom_template():
    profile = RoleProfile(name="张飞", lang="zh", description="猛将", catchphrases=["吃我一矛！"])
    template = "{{ role }}|{{ description }}|{{ catchphrases | join(',') }}|{{ lang }}"
    assert build_system_instruction(profile, template=template) == "张飞|猛将|吃我一矛！|zh"


def test_bad_inputs_raise_clear_errors():
    profile = RoleProfile(name="X", lang="en", description="d")
    with pytest.raises(ValueError, match="unknown variable"):
        build_system_instruction(profile, template="{{ nickname }}")
    with pytest.raises(ValueError, match="not valid Jinja"):
        build_system_instruction(profile, template="{% if %}")
    with pytest.raises(ValueError, match="lang='fr'"):
        build_system_instruction(profile, lang="fr")


def test_example_script_runs(capsys):
    import runpy
    from pathlib import Path

    runpy.run_path(
        str(Path(__file__).resolve().parents[1] / "examples" / "role_chat_template.py"), run_name="__main__"
    )
    out = capsys.readouterr().out
    assert "'如意金箍棒！<|im_end|>'" in out
    assert "Inference prompt is the trained prefix: True" in out
    assert "control tokens with the injected question: 3 (the template's own: 3)" in out
    assert "PASS  multi-turn masks" in out and "the template is supported" in out
