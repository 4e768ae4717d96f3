"""Character Cards prompted as SillyTavern assembles them: where every field of a V2 and a V3 card lands in the
messages of a chat, of the prompting modes, of RoleGPT's requests and of Context-Instruct's prompts."""

import copy
import json
from pathlib import Path

import pytest

from rolellm.generation.context_instruct import ContextInstruct
from rolellm.generation.rolegpt import RoleGPT, RoleGPTConfig
from rolellm.roles.card_prompts import approx_tokens, lorebook_entries
from rolellm.roles.character_card import (
    dumps_character_card,
    parse_mes_example,
    profile_from_card,
    read_character_card,
)
from rolellm.roles.profile import RoleProfile
from rolellm.roles.prompts import (
    PROMPTING_MODES,
    build_chat_messages,
    build_role_messages,
    build_system_instruction,
    role_greeting,
    to_role_messages,
)
from rolellm.roles.retrieval import DialogueRetriever


def entry(keys, content, order, **fields):
    return {"keys": keys, "content": content, "extensions": {}, "enabled": True, "insertion_order": order, **fields}


V2 = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {
    "name": "Ada Quill",
    "description": "{{char}} is an inventor who fixes lighthouses for {{user}}.",
    "personality": "blunt, patient with machines",
    "scenario": "A storm is coming and {{user}} has called {{char}} to the lighthouse.",
    "first_mes": "*{{char}} drops a crate.* Where's the patient, {{user}}?",
    "mes_example": "Ada talks in short sentences.\n<START>\n{{user}}: Can you fix it?\n{{char}}: I can fix anything.\n"
                   "Brass: an alloy she loves.\n<START>\n<USER>: What's in the crate?\n<BOT>: Lungs. Brass ones.",
    "creator_notes": "SECRET creator notes",
    "system_prompt": "",
    "post_history_instructions": "Stay in character as {{char}}; answer {{user}} in two sentences.",
    "alternate_greetings": ["SECRET alternate greeting"],
    "character_book": {"name": "SECRET book name", "description": "SECRET book description", "scan_depth": 2,
                       "extensions": {"SECRET": "book extension"}, "entries": [
        entry(["lamp"], "LORE lamp: the lamp is a Fresnel lens.", 5, comment="SECRET comment", name="SECRET name"),
        entry(["storm"], "LORE storm: storms come from the west.", 1, position="after_char"),
        entry([], "LORE constant: the lighthouse stands on Gull Rock.", 9, constant=True),
        entry(["lamp"], "SECRET disabled entry", 0, enabled=False),
        entry(["lamp"], "LORE selective: the lamp burns whale oil.", 2, selective=True, secondary_keys=["oil"]),
    ]},
    "tags": ["SECRET tag"], "creator": "SECRET creator", "character_version": "SECRET version",
    "extensions": {"rolellm": {"catchphrases": ["Measure twice!"]}, "SECRET": "card extension"},
}}  # fmt: skip

V3 = {"spec": "chara_card_v3", "spec_version": "3.0", "data": {
    "name": "Captain Lune", "nickname": "the Captain",
    "description": "{{char}} ferries people across the bay at night.",
    "personality": "calm", "scenario": "",
    "first_mes": "Steady on, {{user}}.",
    "mes_example": "<START>\n{{user}}: Is it safe?\n{{char}}: As safe as the moon.",
    "creator_notes": "SECRET v3 notes", "creator_notes_multilingual": {"fr": "SECRET notes fr"},
    "system_prompt": "Write {{char}}'s next reply to {{user}}.", "post_history_instructions": "",
    "alternate_greetings": [], "group_only_greetings": ["SECRET group greeting"], "tags": [], "creator": "",
    "character_version": "", "source": ["SECRET source"], "creation_date": 1700000000,
    "character_book": {"extensions": {}, "scan_depth": 1, "entries": [
        {**entry(["^moon(light)?$"], "LORE regex: the moon is full tonight.", 0), "use_regex": True},
        entry(["Bay"], "LORE case: Bay is the ferry's name.", 1, case_sensitive=True),
    ]},
    "assets": [{"type": "icon", "uri": "ccdefault:", "name": "main", "ext": "png"}], "extensions": {},
}}  # fmt: skip

ADA_INSTRUCTION = build_system_instruction(
    RoleProfile("Ada Quill", "en", "Ada Quill is an inventor who fixes lighthouses for User.", ["Measure twice!"])
)
LUNE_DESCRIPTION = "the Captain ferries people across the bay at night."


@pytest.fixture
def ada():
    return profile_from_card(copy.deepcopy(V2))


@pytest.fixture
def lune():
    return profile_from_card(copy.deepcopy(V3))


def contents(messages):
    return "\n".join(message["content"] for message in messages)


def test_a_v2_chat_has_every_field_in_its_place(ada):
    history = [
        {"role": "assistant", "content": role_greeting(ada)},
        {"role": "user", "content": "The lamp is out and I have no oil."},
    ]
    messages = build_chat_messages(ada, history)
    assert history[0]["content"] == "*Ada Quill drops a crate.* Where's the patient, User?"
    assert messages == [
        {"role": "system", "content": "\n\n".join([
            ADA_INSTRUCTION,  # no system_prompt: the paper's instruction, the description and catchphrase in it
            "LORE selective: the lamp burns whale oil.",  # before_char entries, by insertion_order
            "LORE lamp: the lamp is a Fresnel lens.",
            "LORE constant: the lighthouse stands on Gull Rock.",
            "Ada Quill's personality: blunt, patient with machines",
            "Scenario: A storm is coming and User has called Ada Quill to the lighthouse.",
            "Example dialogue:\nAda talks in short sentences.",  # the text before the first <START> is kept
            "User: Can you fix it?\nAda Quill: I can fix anything.\nBrass: an alloy she loves.",
            "User: What's in the crate?\nAda Quill: Lungs. Brass ones.",
        ])},
        history[0],
        {"role": "user", "content": "The lamp is out and I have no oil.\n\n"
                                    "Stay in character as Ada Quill; answer User in two sentences."},
    ]  # fmt: skip
    assert history[1]["content"] == "The lamp is out and I have no oil."  # the caller's history is left as it was


def test_the_lorebook_scans_only_the_last_scan_depth_turns(ada):
    def system(*turns):
        return build_chat_messages(ada, [{"role": "user", "content": turn} for turn in turns])[0]["content"]

    near, far = system("Hello", "A storm is near!", "What now?"), system("A storm is near!", "Aye.", "What now?")
    assert (
        "Scenario: A storm is coming and User has called Ada Quill to the lighthouse.\n\n"
        "LORE storm: storms come from the west.\n\nExample dialogue:\n"  # after_char: after the card's fields
    ) in near
    assert "LORE storm" not in far and "LORE lamp" not in far and "LORE constant" in far


def test_lorebook_budget_keeps_constant_then_priority_and_inserts_by_order(ada):
    book = ada.extra["character_card"]["data"]["character_book"]
    lamp = approx_tokens("LORE lamp: the lamp is a Fresnel lens.")
    constant = approx_tokens("LORE constant: the lighthouse stands on Gull Rock.")
    book["token_budget"] = lamp + constant  # room for the constant entry and the highest-ranked keyed one
    # ranked constant first, then by insertion_order (no priority): lamp (5) before selective (2)
    found = lorebook_entries(ada, ["lamp oil"])
    assert found == {"before_char": ["LORE lamp: the lamp is a Fresnel lens.",
                                     "LORE constant: the lighthouse stands on Gull Rock."], "after_char": []}  # fmt: skip
    book["entries"][4]["priority"] = 100  # an explicit priority wins over insertion_order
    book["token_budget"] = approx_tokens("LORE selective: the lamp burns whale oil.") + constant
    assert lorebook_entries(ada, ["lamp oil"])["before_char"] == [
        "LORE selective: the lamp burns whale oil.", "LORE constant: the lighthouse stands on Gull Rock."]  # fmt: skip
    book["token_budget"] = constant - 1
    assert lorebook_entries(ada, ["lamp oil"]) == {"before_char": [], "after_char": []}


def test_lorebook_selective_keys_whole_words_and_case(ada, lune):
    assert "LORE selective" not in lorebook_entries(ada, ["the lamp"])["before_char"][0]  # no secondary key
    assert lorebook_entries(ada, ["lamplighter"])["before_char"] == [
        "LORE constant: the lighthouse stands on Gull Rock."
    ]  # fmt: skip  (a key is a whole word)
    assert lorebook_entries(ada, ["THE LAMP"])["before_char"][0].startswith("LORE lamp")  # case-insensitive
    assert lorebook_entries(lune, ["moonlight"])["before_char"] == ["LORE regex: the moon is full tonight."]
    assert lorebook_entries(lune, ["the bay"])["before_char"] == []  # case_sensitive
    assert lorebook_entries(lune, ["the Bay"])["before_char"] == ["LORE case: Bay is the ferry's name."]
    assert lorebook_entries(lune, ["the Bay", "moon"])["before_char"] == ["LORE regex: the moon is full tonight."]


def test_a_v3_system_prompt_replaces_the_instruction_and_the_nickname_is_char(lune):
    [system, user] = build_role_messages(lune, "Is it safe?")
    assert system["content"] == (
        "Write the Captain's next reply to User.\n\n"  # system_prompt without {{original}}: replaces the instruction
        f"{LUNE_DESCRIPTION}\n\n"  # so the description follows on its own
        "the Captain's personality: calm"  # an empty scenario adds nothing
    )
    assert user == {"role": "user", "content": "Is it safe?"}
    lune.extra["character_card"]["data"]["system_prompt"] = "{{original}}\n\nNever break character, {{user}}."
    # the paper's instruction, with one full stop after the card's description (a release profile would get two)
    original = build_system_instruction(RoleProfile("Captain Lune", "en", LUNE_DESCRIPTION)).replace("..", ".", 1)
    assert build_role_messages(lune, "Is it safe?")[0]["content"] == (
        f"{original}\n\nNever break character, User.\n\nthe Captain's personality: calm"
    )
    assert role_greeting(lune) == "Steady on, User."
    assert build_chat_messages(lune, [{"role": "user", "content": "Hi"}])[-1] == {"role": "user", "content": "Hi"}


def test_rolegpt_few_shot_and_dialogue_show_the_cards_examples(ada):
    question = "Ada Quill, Can you fix the storm lamp?"
    system = "\n\n".join([
        ADA_INSTRUCTION, "LORE lamp: the lamp is a Fresnel lens.", "LORE constant: the lighthouse stands on Gull Rock.",
        "Ada Quill's personality: blunt, patient with machines",
        "Scenario: A storm is coming and User has called Ada Quill to the lighthouse.",
        "LORE storm: storms come from the west.",  # after_char: after the card's fields
    ])  # fmt: skip
    few_shot = RoleGPT(RoleGPTConfig(prompt_mode="few_shot", num_examples=1)).prompt(
        ada, "Can you fix the storm lamp?"
    )
    assert few_shot == [
        {"role": "system", "content": system},
        {"role": "user", "content": "Here are some of your dialogues from the script:\n\nuser: “Can you fix it?”\n"
                                    "Ada Quill: “I can fix anything.\nBrass: an alloy she loves.”\n\n" + question},
    ]  # fmt: skip
    config = RoleGPTConfig(prompt_mode="dialogue", num_examples=2, num_samples=2)
    [request, _] = RoleGPT(config).requests([ada], ["Can you fix the storm lamp?"])
    assert request.messages == [
        {"role": "system", "content": system},
        {"role": "user", "content": "user: “Can you fix it?”"},
        {"role": "assistant", "content": "I can fix anything.\nBrass: an alloy she loves."},
        {"role": "user", "content": "user: “What's in the crate?”"},
        {"role": "assistant", "content": "Lungs. Brass ones."},
        {"role": "user", "content": question},
    ]


def test_context_instruct_gets_the_cards_fields_and_examples(ada):
    [request] = ContextInstruct().requests([ada])
    prompt = request.messages[0]["content"]
    assert (
        'Description: Ada Quill is an inventor who fixes lighthouses for User. Your catchphrase is: "Measure twice!"\n'
        "Ada Quill's personality: blunt, patient with machines\n"
        "Scenario: A storm is coming and User has called Ada Quill to the lighthouse.\n\n"
        "Script segment:\nnarration: Ada talks in short sentences.\nuser: Can you fix it?\n"
        "Ada Quill: I can fix anything.\nBrass: an alloy she loves.\nuser: What's in the crate?\n"
        "Ada Quill: Lungs. Brass ones.\n\n"
    ) in prompt


def test_metadata_never_reaches_a_prompt(ada, lune):
    for profile in (ada, lune):
        question = "The lamp, the storm, the moon, the Bay: tell me everything."
        texts = [contents(build_chat_messages(profile, [{"role": "user", "content": question}]))]
        for mode in PROMPTING_MODES:
            texts.append(
                contents(build_role_messages(profile, question, mode, examples=DialogueRetriever(profile).groups))
            )
        for prompt_mode in ("zero_shot", "few_shot", "dialogue"):
            texts.append(contents(RoleGPT(RoleGPTConfig(prompt_mode=prompt_mode)).prompt(profile, question)))
        texts.append(contents(ContextInstruct().requests([profile])[0].messages))
        row = {"role": profile.name, "question": question, "generated": ["Aye."], "lang": "en"}
        texts.append(contents(to_role_messages(row, profile)[0]))
        assert "LORE" in "".join(texts)  # the lorebook did fire
        for text in texts:
            assert "SECRET" not in text and "{{" not in text and "<BOT>" not in text and "<USER>" not in text


def test_release_profiles_are_prompted_as_before():
    profile = RoleProfile("Jack Sparrow", "en", "A witty pirate.", ["Savvy?"])
    instruction = build_system_instruction(profile)
    assert build_chat_messages(profile, [{"role": "user", "content": "Hi"}]) == [
        {"role": "system", "content": instruction}, {"role": "user", "content": "Hi"}]  # fmt: skip
    assert build_role_messages(profile, "Hi") == [
        {"role": "system", "content": instruction}, {"role": "user", "content": "Hi"}]  # fmt: skip
    assert role_greeting(profile) is None


def test_catchphrases_come_from_the_card_and_round_trip(ada):
    assert ada.description == "{{char}} is an inventor who fixes lighthouses for {{user}}."
    assert ada.catchphrases == ["Measure twice!"]
    assert json.loads(dumps_character_card(ada)) == V2  # an unchanged card is written back as it was
    ada.catchphrases.append("Progress!")
    card = json.loads(dumps_character_card(ada))
    assert card["data"]["extensions"]["rolellm"]["catchphrases"] == ["Measure twice!", "Progress!"]
    assert card["data"]["description"] == V2["data"]["description"]


def test_prose_with_a_colon_is_not_a_speaker():
    text = (
        "<START>\n{{user}}: Teach me words.\n{{char}}: Gladly.\nBrass: copper and zinc.\nNote: never {{user}}'s.\n"
        "Ada: Another message.\nUser: And the user's.\n<START>\nMoss: a plant.\n{{char}}: Right."
    )
    utterances = parse_mes_example(text, "Ada")
    assert [(u.act_id, u.speaker, u.content) for u in utterances] == [
        (0, "user", "Teach me words."),
        (0, "Ada", "Gladly.\nBrass: copper and zinc.\nNote: never User's."),
        (0, "Ada", "Another message."),
        (0, "user", "And the user's."),
        (1, "narration", "Moss: a plant."),
        (1, "Ada", "Right."),
    ]


def test_a_chinese_v3_card_gets_chinese_labels_and_its_nickname():
    profile = read_character_card(Path(__file__).parent / "fixtures" / "card_v3_storyteller.json")
    assert build_chat_messages(profile, [{"role": "user", "content": "讲个故事"}])[0]["content"] == (
        "你是先生。\n\n"  # system_prompt without {{original}}; {{char}} is the V3 nickname
        "走街串巷的说书先生，嗓门洪亮，最爱讲英雄故事。常用口头禅是：“列位看官”、“且听下回分解”\n\n"
        "先生的性格：热情、夸张、记性好\n\n"
        "场景：茶馆里，一壶茶，一块醒木。\n\n"
        "示例对话：\n你: 今天讲什么？\n先生: 今天讲武松打虎，列位看官坐稳了！"
    )
    assert role_greeting(profile) == "（醒木一拍）列位看官！"


@pytest.mark.parametrize("family", ["gemma-2-it", "mistral-7b-instruct-v0.3", "qwen3", "llama-3.1-instruct"])
def test_a_card_chat_encodes_with_real_templates(ada, shared_data_dir, family):
    """The post-history instructions ride in the last user turn, so templates that take a system message only at
    the start (Gemma, Mistral) encode a card's chat, and the prompt holds the system text and the instructions."""
    from rolellm.encoding.encode import encode_chat
    from rolellm.testing.models import tiny_tokenizer_for_template

    folder = shared_data_dir / "chat-templates" / family
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    tokenizer = tiny_tokenizer_for_template(folder)
    history = [{"role": "assistant", "content": role_greeting(ada)}, {"role": "user", "content": "The lamp is out."}]
    if family.startswith(("gemma", "mistral")):  # these templates want the conversation to open with the user
        history = history[1:]
    prompt = tokenizer.decode(
        encode_chat(tokenizer, build_chat_messages(ada, history), add_generation_prompt=True)["input_ids"]
    )
    assert "Scenario: A storm is coming" in prompt
    assert prompt.index("The lamp is out.") < prompt.index("Stay in character as Ada Quill")


def test_a_card_description_ending_in_a_full_stop_is_followed_by_one_full_stop():
    card = copy.deepcopy(V3)
    card["data"]["system_prompt"] = ""
    card["data"]["character_book"] = None
    text = build_system_instruction(profile_from_card(card))
    assert "your description is: the Captain ferries people across the bay at night. Now please" in text
    assert ".." not in text
    # the release's profiles keep the paper's text exactly, full stops and all
    release = build_system_instruction(RoleProfile("Jack Sparrow", "en", "A witty pirate."))
    assert "your description is: A witty pirate.. Now please" in release
