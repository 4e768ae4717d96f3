"""Reward functions in TRL's form (`reward(prompts, completions, **columns) -> list[float | None]`), built on rolellm.evaluation."""
