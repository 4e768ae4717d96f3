"""The documents and the metric of the RoleBench lm-evaluation-harness tasks (`rolebench_{zh,en}_{raw,cus,spe}`).

lm-eval loads this file by path (`!function utils.load_docs` in `_default_template_yaml`), so it imports rolellm
absolutely. The data come from rolellm's RoleBench reader, offline from a local copy of the release: the
`data_dir` task metadata (`lm_eval --metadata '{"data_dir": "RoleBench"}'`,
`TaskManager(include_path=..., metadata={"data_dir": ...})`), else the `ROLEBENCH_RELEASE_DIR` environment
variable, else the Hub (`ZenMoore/RoleBench`, fetched and cached by `huggingface_hub`).

>>> process_results({"references": ["俺老孙来也"], "lang": "zh"}, ["俺老孙"])
{'rouge_l': 0.6}
"""

import logging
import os
from pathlib import Path

import datasets

from rolellm.data.builder import load_rolebench, load_rolebench_profiles
from rolellm.data.readers import read_raw_targets
from rolellm.roles.lookup import Profiles
from rolellm.roles.prompts import build_role_messages
from rolellm.roles.release import RELEASE_LANG_DIRS
from rolellm.rouge.score import rouge_l_scores


logger = logging.getLogger(__name__)

DATA_DIR_VARIABLE = "ROLEBENCH_RELEASE_DIR"


def _raw_targets(lang: str, data_dir: str | None) -> dict[str, str]:
    relative = f"instructions-{RELEASE_LANG_DIRS[lang]}/instructions-general.jsonl"
    if data_dir is None:
        from huggingface_hub import hf_hub_download

        from rolellm.data.release import HUB_REPO_ID

        return read_raw_targets(hf_hub_download(HUB_REPO_ID, relative, repo_type="dataset"))
    path = Path(data_dir) / relative
    if not path.is_file():
        raise FileNotFoundError(f"RAW needs the raw answers of the release: {path} does not exist")
    return read_raw_targets(path)


def load_docs(config: str, subset: str, targets: str = "generated", data_dir: str | None = None, **metadata):
    """The test documents of one RoleBench task: `role`, `question` (as sent: stripped), `references`, `system` (the
    paper's system instruction for the role, from its profile), `lang`.

    Args:
        config (`str`): `"zh"` or `"en-instruction"`; subset (`str`): `"general"` or `"role_specific"`.
        targets (`str`, *optional*, defaults to `"generated"`): `"generated"` (RoleGPT's answers: CUS, SPE) or
            `"raw"` (the release's raw answers to the general instructions: RAW; rows without one are left out and
            counted in a warning).
        data_dir (`str`, *optional*): the release folder; defaults to `$ROLEBENCH_RELEASE_DIR`, else the Hub.
        **metadata: the rest of the task metadata (version, ...), unused.

    Returns:
        `datasets.DatasetDict` with a `test` split.
    """
    data_dir = data_dir or os.environ.get(DATA_DIR_VARIABLE) or None
    rows = load_rolebench(f"{config}-{subset}", data_dir=data_dir, splits=["test"])["test"]
    lang = rows[0]["lang"]
    profiles = Profiles(load_rolebench_profiles(lang, data_dir=data_dir)).require(
        rows.unique("role"),
        "the test rows",
        f"the system instruction needs each role's description (profiles-{RELEASE_LANG_DIRS[lang]} of "
        f"{data_dir or 'the Hub'})",
    )
    raw = _raw_targets(lang, data_dir) if targets == "raw" else None
    systems, docs = {}, []
    for row in rows:
        question = row["question"].strip()  # the English release starts every question with a space
        if raw is not None and question not in raw:
            continue
        if row["role"] not in systems:  # lm-eval's `description` is the system turn: the `system` prompting mode
            system, _ = build_role_messages(profiles[row["role"]], question, "system", lang=lang)
            systems[row["role"]] = system["content"]
        references = [raw[question]] if raw is not None else list(row["generated"])
        docs.append({"role": row["role"], "question": question, "references": references, "lang": lang,
                     "system": systems[row["role"]]})  # fmt: skip
    if raw is not None and len(docs) < len(rows):
        logger.warning("RAW: %d of %d general questions have no raw answer and are left out", len(rows) - len(docs),
                       len(rows))  # fmt: skip
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def process_results(doc: dict, results: list[str]) -> dict[str, float]:
    """The paper's ROUGE-L recall of the generated answer against the best of the document's references."""
    return {"rouge_l": rouge_l_scores([results[0]], [doc["references"]], lang=doc["lang"])[0]}
