"""Role profiles from three sources: the RoleBench release, screenplay text and a character card.

    python examples/role_profiles.py                       # uses ../shared/data or $ROLEBENCH_DATA_DIR when present
    python examples/role_profiles.py --data-dir path/to/rolebench --screenplay-dir path/to/profile_zhenhuan

Everything ends up as `RoleProfile`: description, catchphrases and dialogue grouped the way RoleGPT retrieval and
Context-Instruct read it.
"""

import argparse
import tempfile
from pathlib import Path

from rolellm import (
    card_from_profile,
    parse_screenplay,
    profile_from_card,
    read_release_profiles,
    read_screenplay_folder,
    write_character_card,
    write_screenplay,
)
from rolellm.testing.data import find_rolebench_data


SCREENPLAY = """\
                                                              1.
INT. NIGHT FERRY - WHEELHOUSE - NIGHT

Fog. CAPTAIN LUNE (50s) steers by the moon alone.

                         DECKHAND
               We're off course, Captain.

                         LUNE
               (calm)
               The moon is never off course. Steady on.

CUT TO:

EXT. FERRY DECK - CONTINUOUS

                         DECKHAND (O.S.)
               Lights to port!

                         LUNE
               Moon up, oars out.
"""


def main(args):
    data = find_rolebench_data()
    data_dir = args.data_dir or (data / "rolebench" if data else None)
    if data_dir and (data_dir / "profiles-zh").is_dir():
        profiles = read_release_profiles(data_dir, "zh")
        wukong = profiles["孙悟空"]
        print(f"release: {len(profiles)} Chinese roles; 孙悟空 catchphrases {wukong.catchphrases}")
        print(f"  the paper's {{desc}}: {wukong.description_with_catchphrases()}")
    screenplay_dir = args.screenplay_dir or (data / "roleglm-screenplay" / "profile_zhenhuan" if data else None)
    if screenplay_dir and screenplay_dir.is_dir():
        scripted = read_screenplay_folder(screenplay_dir)
        emperor = scripted["皇帝"]
        print(f"screenplay folder: {len(scripted)} roles; 皇帝 has {len(emperor.dialogue):,} lines "
              f"in {len(emperor.dialogue_groups()):,} dialogue groups")  # fmt: skip

    lune = parse_screenplay(SCREENPLAY, role="Captain Lune", aliases=["LUNE"], source="Night Ferry")
    print("\nscreenplay text -> dialogue groups:")
    for group in lune.dialogue_groups():
        print("  " + " / ".join(f"{u.speaker}: {u.content}" for u in group))
    lune.description = "A night-ferry captain who trusts the moon more than the compass."
    lune.catchphrases = ["Steady on.", "Moon up, oars out."]

    with tempfile.TemporaryDirectory() as folder:
        path = write_character_card(lune, Path(folder) / "captain_lune.json", spec="chara_card_v3")
        card = card_from_profile(lune, spec="chara_card_v3")
        print(f"\ncharacter card ({card['spec']}): {path.name}, mes_example:\n{card['data']['mes_example']}")
        again = profile_from_card(card)
        print(f"\nback from the card: {again.name!r}, catchphrases {again.catchphrases}")
    print("\nscreenplay written back:\n" + write_screenplay(lune))


def make_parser():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None, help="The RoleBench release folder.")
    parser.add_argument("--screenplay-dir", type=Path, default=None, help="A folder of screenplay profiles.")
    return parser


if __name__ == "__main__":
    main(make_parser().parse_args())
