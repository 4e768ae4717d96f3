"""The RoleBench release's constants, defined once: where it lives, its vocabularies, its licence and citation.

The language folder names (`en` <-> `eng`) are `rolellm.roles.release.RELEASE_LANG_DIRS`, since the profile files of
stage 1 are named with them too; they are re-exported here.

>>> HUB_REPO_ID, RELEASE_LANG_DIRS["en"], SUBSETS
('ZenMoore/RoleBench', 'eng', ('general', 'role_specific'))
"""

from rolellm.roles.release import RELEASE_LANG_DIRS


HUB_REPO_ID = "ZenMoore/RoleBench"
HOMEPAGE = f"https://huggingface.co/datasets/{HUB_REPO_ID}"
LICENSE = "apache-2.0"
PAPER = "arXiv 2310.00746"

SUBSETS = ("general", "role_specific")
TYPES = ("script_based", "script_agnostic")
LANGS = tuple(RELEASE_LANG_DIRS)

# The paper's BibTeX with its full author list (arXiv 2310.00746v3). README.md and the metric's README.md carry the
# same text; tests/test_release_constants.py checks that they do.
CITATION = """\
@article{wang2023rolellm,
  title   = {RoleLLM: Benchmarking, Eliciting, and Enhancing Role-Playing Abilities of Large Language Models},
  author  = {Zekun Moore Wang and Zhongyuan Peng and Haoran Que and Jiaheng Liu and Wangchunshu Zhou and Yuhan Wu
             and Hongcheng Guo and Ruitong Gan and Zehao Ni and Jian Yang and Man Zhang and Zhaoxiang Zhang
             and Wanli Ouyang and Ke Xu and Stephen W. Huang and Jie Fu and Junran Peng},
  journal = {arXiv preprint arXiv:2310.00746},
  year    = {2023}
}
"""
