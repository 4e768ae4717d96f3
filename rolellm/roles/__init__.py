"""Stage 1, who a role is and how it is prompted. Modules:

- `profile`: `RoleProfile`, `Utterance`, `role_key` and the text readers every source shares;
- `release`, `screenplay`, `character_card`, `card_prompts`: the readers and writers of a role's sources (release
  profile files, screenplays, Character Cards);
- `resolve`: `load_profiles` and `select_roles`, where a command's profiles come from;
- `retrieval`: BM25 retrieval over a role's dialogue (`DialogueRetriever`, loads numpy on first use);
- `prompts`: the paper's system instruction, the prompting modes and the one conversation builder.

This package imports nothing else of rolellm; every later stage reads roles through it. Import names from their
modules (`from rolellm.roles.profile import RoleProfile`) or from `rolellm`.
"""
