"""The row schema every stage reads and writes (the release's own field names).

>>> sorted(ROW_FEATURES)
['generated', 'lang', 'question', 'role', 'subset', 'type']
"""

import datasets

from rolellm.data.release import LANGS, SUBSETS, TYPES  # noqa: F401  (re-exported: the schema's vocabularies)


ROW_FEATURES = datasets.Features(
    {
        "role": datasets.Value("string"),
        "question": datasets.Value("string"),
        # references: RoleGPT answers for general rows, Context-Instruct answers for role-specific rows
        "generated": datasets.List(datasets.Value("string")),
        # role-specific rows: one of TYPES per reference; general rows: empty
        "type": datasets.List(datasets.Value("string")),
        "subset": datasets.Value("string"),  # one of SUBSETS
        "lang": datasets.Value("string"),  # "en" or "zh"
    }
)
