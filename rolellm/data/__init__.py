"""RoleBench. Modules:

- `release`: the release's constants (`LANGS`, `SUBSETS`, `TYPES`, `HUB_REPO_ID`, `CITATION`);
- `readers`: `read_rolebench_jsonl` and the row normalisation (standard library only);
- `schema`, `layout`: the row features and the release's file layout (`CONFIG_NAMES`, `MissingFilesError`);
- `builder`: the `datasets` builder `RoleBench`, `load_rolebench`, `load_rolebench_profiles`;
- `preference`: the preference configs' rows (DPO pairs, KTO labelled answers) and SillyTavern chats as pairs;
- `stats`: statistics (paper Table 1) and leakage checks;
- `heldout`: each role's questions split into train and held-out questions (`split_role_questions`), written as a
  release folder (`write_split_release`);
- `hub`, `card`: export, push and the dataset card.

Import names from their modules (`from rolellm.data.builder import load_rolebench`) or from `rolellm`.
"""
