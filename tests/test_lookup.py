"""One rule for role names (`Profiles`, `RoleNames`) and one function for where a command's profiles come from
(`profiles_for`); no code outside `rolellm/roles/` normalises names itself."""

import ast
import json
import unicodedata
from pathlib import Path

import pytest

from rolellm.roles.character_card import write_character_card
from rolellm.roles.lookup import AmbiguousRoleError, Profiles, RoleNames, UnknownRoleError, same_role
from rolellm.roles.profile import RoleProfile, Utterance
from rolellm.roles.release import write_release_profiles, write_screenplay_folder
from rolellm.roles.resolve import PROFILES_FILE, ProfileSourceError, load_profiles, profiles_for, write_profiles_jsonl
from rolellm.scripts.cli import main


FIXTURES = Path(__file__).parent / "fixtures"
PACKAGE = Path(__file__).parent.parent / "rolellm"
ODESSA_SCRIPT = """INT. FERRY - NIGHT

                         ODESSA
               Lines off! We sail at moonrise.

                         DECKHAND
               The fog is thick, captain.

                         ODESSA
               Then we listen for the bell.
"""


def profiles(*names, lang="en") -> Profiles:
    return Profiles({name: RoleProfile(name, lang, f"{name}'s description.") for name in names})


def test_a_name_is_found_exactly_by_its_key_by_an_alias_or_by_the_first_name():
    found = profiles("Dr. Frank-N-Furter", "Ada Quill", "Moss Brindle")
    assert found["Dr. Frank N Furter"] is found["Dr. Frank-N-Furter"]  # the release's two spellings
    assert found.find("ADA") == found.find("ada quill") == "Ada Quill"  # a screenplay cue, the case of a name
    assert found.get("Moss").name == "Moss Brindle" and "moss-brindle" in found
    assert list(found) == ["Dr. Frank-N-Furter", "Ada Quill", "Moss Brindle"] and len(found) == 3
    assert found == {name: found[name] for name in found}  # a mapping of the names as read


def test_one_name_in_nfd_and_nfc_is_one_role(tmp_path):
    composed, decomposed = unicodedata.normalize("NFC", "Zoë Renée"), unicodedata.normalize("NFD", "Zoë Renée")
    assert composed != decomposed
    assert profiles(composed)[decomposed].name == composed
    write_release_profiles({composed: RoleProfile(composed, "en", "A cellist.")}, tmp_path / "release")
    screenplay = RoleProfile(decomposed, "en", source="Quartet", dialogue=[Utterance(0, 0, decomposed, "Again.")])
    write_screenplay_folder({decomposed: screenplay}, tmp_path / "screenplay")
    (tmp_path / "screenplay" / "desc.json").write_text(json.dumps({decomposed: ""}), encoding="utf-8")
    both = load_profiles([tmp_path / "release", tmp_path / "screenplay"])
    assert len(both) == 1  # read twice, merged into one role
    assert both[composed].description == "A cellist." and both[composed].dialogue[0].content == "Again."


def test_a_card_is_found_by_its_nickname():
    storyteller = load_profiles(FIXTURES / "card_v3_storyteller.json")
    assert list(storyteller) == ["说书人"] and storyteller["先生"].name == "说书人"  # the V3 card's nickname


def test_a_screenplay_cue_finds_the_card_of_the_role(tmp_path):
    card, script = tmp_path / "odessa.json", tmp_path / "ferry.txt"
    write_character_card(RoleProfile("Odessa Flint", "en", "A night-ferry captain."), card)
    script.write_text(ODESSA_SCRIPT, encoding="utf-8")
    for sources in ([card, script], [script, card]):
        for role in ("Odessa", "ODESSA", "Odessa Flint"):
            found = load_profiles(sources, roles=[role])
            assert list(found) == ["Odessa Flint"], (sources, role)  # one role, under the card's name
            profile = found[role]
            assert profile.description == "A night-ferry captain."
            lines = [u.content for u in profile.dialogue if u.speaker == "Odessa Flint"]
            assert lines == ["Lines off! We sail at moonrise.", "Then we listen for the bell."]
    ada = load_profiles(FIXTURES / "lighthouse_screenplay.txt", roles=["Ada Quill"])
    assert ada["ADA"].name == "Ada Quill"


def test_a_script_file_keeps_a_role_with_dashes(tmp_path):
    frank = RoleProfile("Dr. Frank-N-Furter", "en", "A scientist.", source="Rocky Horror",
                        dialogue=[Utterance(0, 0, "Dr. Frank-N-Furter", "How do you do?")])  # fmt: skip
    write_screenplay_folder({"Dr. Frank-N-Furter": frank}, tmp_path)
    assert (tmp_path / "Rocky Horror-Dr. Frank-N-Furter.jsonl").is_file()
    found = load_profiles(tmp_path)
    assert list(found) == ["Dr. Frank-N-Furter"] and found["Dr. Frank-N-Furter"].dialogue == frank.dialogue


def test_an_ambiguous_name_names_the_candidates():
    found = profiles("Ada Quill", "Ada Lovelace", "Moss Brindle")
    with pytest.raises(AmbiguousRoleError, match=r"role 'ADA' matches several roles of the profiles: \['Ada Quill', 'Ada Lovelace'\]"):  # fmt: skip
        found["ADA"]
    with pytest.raises(AmbiguousRoleError):
        found.get("Ada")  # not silently absent
    assert found["Ada Lovelace"].name == "Ada Lovelace"  # the full name is no ambiguity


def test_an_unknown_name_lists_the_roles():
    found = profiles("Po", "Shifu")
    with pytest.raises(UnknownRoleError) as error:
        found["Oogway"]
    assert str(error.value) == "role 'Oogway' is not in the profiles; roles found: ['Po', 'Shifu']"
    assert isinstance(error.value, KeyError) and isinstance(error.value, ValueError)
    assert found.get("Oogway") is None and "Oogway" not in found and found.get("Oogway", 0) == 0


def test_rows_are_matched_by_the_same_rule():
    names = RoleNames(["Dr. Frank-N-Furter", "Ada Quill"], where="the data")
    assert [names.find(role) for role in ["dr frank n furter", "ADA", "Riff Raff"]] == [
        "Dr. Frank-N-Furter", "Ada Quill", None]  # fmt: skip
    with pytest.raises(UnknownRoleError, match=r"not in the data; roles found: \['Ada Quill', 'Dr. Frank-N-Furter'\]"):
        names.resolve("Riff Raff")
    assert same_role("Dr. Frank N Furter", "Dr. Frank-N-Furter") and not same_role("Po", "Shifu")


@pytest.fixture
def layers(tmp_path):
    """A release in `data/`, a checkpoint in `model/` and a card, each with a description of Po of its own."""
    write_release_profiles({"Po": RoleProfile("Po", "en", "From the data."),
                            "Shifu": RoleProfile("Shifu", "en", "A master.")}, tmp_path / "data")  # fmt: skip
    write_profiles_jsonl({"Po": RoleProfile("Po", "en", "From the checkpoint.")}, tmp_path / "model" / PROFILES_FILE)
    write_character_card(RoleProfile("Po", "en", "From the card."), tmp_path / "po.json")
    return tmp_path


def test_explicit_sources_then_the_checkpoint_then_the_data_folder(layers):
    data, model, card = layers / "data", layers / "model", layers / "po.json"
    assert profiles_for(data_dir=data)["Po"].description == "From the data."
    assert profiles_for(model_dir=model)["Po"].description == "From the checkpoint."
    with_model = profiles_for(model_dir=model, data_dir=data)
    assert with_model["Po"].description == "From the checkpoint." and list(with_model) == ["Shifu", "Po"]
    explicit = profiles_for([str(card)], model_dir=model, data_dir=data)  # the checkpoint's are not read
    assert explicit["Po"].description == "From the card." and sorted(explicit) == ["Po", "Shifu"]
    assert list(profiles_for([str(card)], model_dir=model)) == ["Po"]
    assert list(profiles_for(data_dir=data, roles=["po"])) == ["Po"]
    assert list(profiles_for(data_dir=data, lang="zh")) == [] and list(profiles_for(model_dir="org/hub-id")) == []


def test_a_role_that_matches_nothing_names_the_known_roles(layers, tmp_path, capsys):
    with pytest.raises(ProfileSourceError, match=r"roles \['Oogway'\] are not in .*roles found: \['Po', 'Shifu'\]"):
        profiles_for(data_dir=layers / "data", roles=["Oogway"])
    with pytest.raises(ProfileSourceError, match=r"roles \['Oogway'\] are not in any profiles: .*holds no"):
        profiles_for(data_dir=tmp_path / "nothing", roles=["Oogway"])
    code = main(["generate", "context-instruct", "--profiles", str(layers / "data"), "--roles", "Oogway", "--model",
                 "m", "--base_url", "http://127.0.0.1:1/v1", "--output_dir", str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "roles ['Oogway'] are not in" in err and "roles found: ['Po', 'Shifu']" in err


def test_no_code_outside_roles_normalises_role_names():
    """Role names are matched in `rolellm/roles/` only (`Profiles`, `RoleNames`, `same_role`), never with
    `role_key` elsewhere."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "roles") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            names += [node.id] if isinstance(node, ast.Name) else []
            names += [node.attr] if isinstance(node, ast.Attribute) else []
            if "role_key" in names or any(name.endswith(".role_key") for name in names):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not offenders, f"role_key used outside rolellm/roles/: {offenders}"


def test_require_matches_rows_by_the_rule_and_names_the_roles_without_a_profile():
    profiles = Profiles({name: RoleProfile(name, "en") for name in ["Dr. Frank-N-Furter", "Odessa Flint"]})
    assert profiles.require(["dr frank n furter", "ODESSA", "Odessa Flint"]) is profiles
    missing = [f"Extra {i:02d}" for i in range(12)]
    with pytest.raises(ValueError) as error:
        profiles.require(["Odessa", *missing, "Extra 00"], "the train rows", "pass --profiles")
    assert str(error.value) == (
        f"no profile for 12 role(s) of the train rows: {missing[:10]} ...; the profiles hold "
        "['Dr. Frank-N-Furter', 'Odessa Flint']: pass --profiles"
    )
