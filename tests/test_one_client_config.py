"""One client description: no dataclass of rolellm repeats a `ClientConfig` field (issue 19).

Client options (`model`, `base_url`, `max_concurrency`, `keep_think`, ...) are declared once, in `ClientConfig`; a
command takes `ClientConfig` itself among its parser's dataclasses, and the other endpoints of a run get prefixed
options generated from it (`endpoint_options`). Per-request sampling (`temperature`, `seed`) belongs to the tasks.
"""

import dataclasses
import importlib
import pkgutil

import rolellm
from rolellm.clients.config import ClientConfig


def rolellm_dataclasses():
    """Every dataclass defined in a `rolellm` module outside `rolellm/training/` (TRL's configs have their own)."""
    found = {}
    for module_info in pkgutil.walk_packages(rolellm.__path__, "rolellm."):
        if module_info.name.startswith("rolellm.training") or module_info.name.endswith(("__main__", "lcs_numba")):
            continue
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_no_dataclass_repeats_a_client_config_field():
    client_fields = {field.name for field in dataclasses.fields(ClientConfig)}
    checked = {name: cls for name, cls in rolellm_dataclasses().items() if cls is not ClientConfig}
    assert "rolellm.evaluation.benchmark.config.BenchmarkConfig" in checked  # the walk reaches the command configs
    assert "rolellm.evaluation.multiturn.run.DialogueConfig" in checked
    assert "rolellm.scripts.chat.ChatArguments" in checked
    repeats = {
        name: sorted(client_fields & {field.name for field in dataclasses.fields(cls)})
        for name, cls in checked.items()
    }
    assert {name: found for name, found in repeats.items() if found} == {}
