"""The private TRL and transformers methods rolellm's trainers override still exist in the installed versions, with
the parameters the overrides take: a TRL release that renames or reshapes one fails here, not by silently training
without rolellm's role prompts, masks or grouped losses. setup.cfg pins `trl<2` for the same reason."""

import inspect

import pytest


def overridden_private_methods():
    from rolellm.training.grpo import RoleGRPOTrainer
    from rolellm.training.preference import RoleDPOTrainer, RoleKTOTrainer
    from rolellm.training.trainer import RoCITTrainer

    found = []
    for trainer in (RoCITTrainer, RoleGRPOTrainer, RoleDPOTrainer, RoleKTOTrainer):
        library = next(base for base in trainer.__mro__ if base.__module__.startswith("trl."))
        for name, method in vars(trainer).items():
            if name.startswith("_") and not name.startswith("__") and inspect.isfunction(method):
                owner = next((base for base in library.__mro__ if name in vars(base)), None)
                if owner is not None:
                    found.append(pytest.param(method, vars(owner)[name], id=f"{trainer.__name__}.{name}"))
    return found


def test_the_overrides_are_found():
    names = {param.id for param in overridden_private_methods()}
    assert {
        "RoCITTrainer._prepare_dataset",
        "RoleGRPOTrainer._calculate_rewards",
        "RoleDPOTrainer._compute_loss",
    } <= names


@pytest.mark.parametrize("ours,theirs", overridden_private_methods())
def test_an_override_takes_the_parameters_of_the_method_it_replaces(ours, theirs):
    def positional(function):
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]

    mine = inspect.signature(ours).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in mine.values())
    assert positional(ours)[: len(positional(theirs))] == positional(theirs) or takes_any, (
        f"{theirs.__qualname__}{inspect.signature(theirs)} is overridden by {ours.__qualname__}{inspect.signature(ours)}"
    )
    missing = [name for name in inspect.signature(theirs).parameters if name not in mine and not takes_any]
    assert missing == [], f"{ours.__qualname__} lacks {missing} of {theirs.__qualname__}"
