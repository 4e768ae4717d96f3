"""RoCIT training: `RoCITConfig`, `RoCITTrainer`, the RoleBench-to-chat conversion and the model card.

Names are imported on first use, so importing a submodule (`rolellm.training.packing`) does not pull in trl.
"""

import importlib


_EXPORTS = {
    "RoCITConfig": "rolellm.training.config",
    "RoCITTrainer": "rolellm.training.trainer",
    "DataCollatorForRoleLM": "rolellm.training.trainer",
    "mix_subsets": "rolellm.training.data",
    "rolebench_to_conversations": "rolellm.training.data",
    "build_model_card": "rolellm.training.card",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'rolellm.training' has no attribute {name!r}")
