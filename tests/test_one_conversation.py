"""A model `rolellm train` wrote gets, at inference, the conversation it was trained on: the first turn rendered
through training, `rolellm evaluate`, `rolellm dialogue` and `rolellm chat` gives the same messages, and the same
token ids on four real chat templates. A card's example dialogue, greeting and post-history text are added only for
models that were not trained by rolellm (or when asked, `card_extras`)."""

import pytest

from rolellm.clients.chat_session import ChatSession
from rolellm.clients.openai_compatible import OpenAIChatClient
from rolellm.encoding.encode import encode_chat
from rolellm.evaluation.multiturn.dialogue import Scenario, run_dialogues
from rolellm.roles.character_card import profile_from_card
from rolellm.roles.prompts import build_role_messages, to_role_messages
from rolellm.testing.data import find_test_data
from rolellm.testing.models import tiny_tokenizer_for_template
from rolellm.testing.server import ChatCompletionsServer


QUESTION = "Where do the clouds go at night?"
CARD = {
    "spec": "chara_card_v2",
    "spec_version": "2.0",
    "data": {
        "name": "Juniper",
        "description": "{{char}} maps the clouds above Lowmere from a basket balloon.",
        "personality": "curious, patient",
        "scenario": "{{user}} climbs into {{char}}'s basket at dawn.",
        "first_mes": "*Juniper taps the barometer.* Hold on tight.",
        "mes_example": "<START>\n{{user}}: Why clouds?\n{{char}}: Because they never hold still.",
        "post_history_instructions": "Answer in two sentences.",
        "character_book": {"entries": [{"keys": ["clouds"], "content": "Juniper names every cloud she maps.",
                                        "enabled": True, "insertion_order": 0}]},
    },
}  # fmt: skip
TEMPLATES = ["qwen2.5-instruct", "llama-3.1-instruct", "gemma-2-it", "mistral-7b-instruct-v0.3"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """The first turn's messages as each command builds them for a model trained by rolellm (`card_extras=False`)."""
    profile = profile_from_card(CARD, "en")
    row = {"role": "Juniper", "question": QUESTION, "generated": ["They sleep in the valleys."], "lang": "en"}
    trained = to_role_messages(row, profile)[0][:2]  # the sample, without its answer
    evaluated = build_role_messages(profile, QUESTION, "system", lang="en")
    with ChatCompletionsServer(lambda body: "They sleep in the valleys.") as server:
        client = OpenAIChatClient("m", base_url=server.base_url, progress=False)
        session = ChatSession(client, {"Juniper": profile}, "Juniper", card_extras=False, temperature=0)
        "".join(session.send(QUESTION))
        scenario = Scenario(role="Juniper", situation="Dawn.", user_persona="A passenger.", opening_line=QUESTION,
                            num_turns=1)  # fmt: skip
        user = OpenAIChatClient("u", base_url=server.base_url, progress=False)
        run_dialogues([scenario], {"Juniper": profile}, client, user, tmp_path_factory.mktemp("d"), card_extras=False)
        chat, dialogue = (request["body"]["messages"] for request in server.requests[:2])
    return {"train": trained, "evaluate": evaluated, "chat": chat, "dialogue": dialogue}


def test_every_path_sends_the_trained_first_turn(paths):
    assert paths["evaluate"] == paths["chat"] == paths["dialogue"] == paths["train"]
    system = paths["train"][0]["content"]
    assert "curious, patient" in system and "Juniper names every cloud she maps." in system  # the card's own text
    assert "Why clouds?" not in system and "Answer in two sentences." not in str(paths["train"])  # no extras
    assert [m["role"] for m in paths["train"]] == ["system", "user"]  # no greeting turn


@pytest.mark.parametrize("name", TEMPLATES)
def test_the_same_token_ids_on_real_templates(paths, name):
    data = find_test_data()
    if data is None or not (data / "chat-templates" / name).is_dir():
        pytest.skip(f"chat-templates/{name} not found")
    tokenizer = tiny_tokenizer_for_template(data / "chat-templates" / name)
    ids = {
        path: encode_chat(tokenizer, messages, add_generation_prompt=True)["input_ids"]
        for path, messages in paths.items()
    }
    assert len(set(map(tuple, ids.values()))) == 1 and ids["train"]


def test_other_models_get_the_cards_assembly():
    profile = profile_from_card(CARD, "en")
    with ChatCompletionsServer(lambda body: "Aye.") as server:
        client = OpenAIChatClient("m", base_url=server.base_url, progress=False)
        session = ChatSession(client, {"Juniper": profile}, "Juniper")  # card_extras: SillyTavern's assembly
        "".join(session.send(QUESTION))
        messages = server.requests[0]["body"]["messages"]
    assert [m["role"] for m in messages] == ["system", "assistant", "user"]  # the greeting first
    assert "Why clouds?" in messages[0]["content"] and messages[-1]["content"].endswith("Answer in two sentences.")
