"""CoSER's flaw-deduction judge as a reward function in TRL's form, for the preference and RL stages.

`make_coser_flaw_reward(judge)` returns `coser_flaw_reward(prompts, completions, **columns) -> list[float | None]`,
the function `GRPOTrainer(reward_funcs=[...])` calls with a batch. Each completion is the next message of a
character in a CoSER scene; the judge scores the scene so far plus that message on CoSER's four dimensions, exactly
as `rolellm coser run` scores a simulated scene (`rolellm.evaluation.coser`), and the reward is the scene score
(0 to 100). A completion whose verdicts could not be read gets `None` (TRL leaves it out), never a made-up score.

The dataset's columns say where each completion stands:

- `case`: the scene, an entry of CoSER's test set (`data/test/test_set.json` schema), as a dict or its JSON text;
- `character`: who speaks the completion;
- `simulation` (*optional*): the scene's messages before it, `[{"role": speaker, "content": text}]`.

>>> import json
>>> from rolellm.clients.config import ClientConfig
>>> from rolellm.testing.server import ChatCompletionsServer
>>> case = {"book": "Othello", "i_c": 0, "scenario": "A street.", "plot": {"i_p": 9, "summary": "Iago plots."},
...         "speaking_characters_w_env": ["Iago", "Othello"], "major_characters": ["Iago"],
...         "dialogues": [{"character": "Iago", "message": "My lord?"}]}
>>> verdict = '{"flaws": [{"instance": "too polite", "type": "Self-identity", "severity": 4}]}'
>>> with ChatCompletionsServer(lambda body: verdict) as server:
...     reward = make_coser_flaw_reward(ClientConfig("judge", base_url=server.base_url, progress=False))
...     reward(["..."], ["[He suspects nothing.] Good morrow, my lord."], case=[case], character=["Iago"])
[81.5]
"""

import json
from collections.abc import Sequence

from rolellm.clients.base import ChatClient
from rolellm.clients.config import ClientConfig, make_client
from rolellm.evaluation.coser.judge import judge_scenes, judged_simulation, simulation_text
from rolellm.evaluation.coser.prompts import CoserPrompts, builtin_prompts
from rolellm.evaluation.coser.scoring import count_actor_rounds, dimension_score, scene_score
from rolellm.evaluation.coser.testset import case_from_dict
from rolellm.rewards.text import completion_text


def make_coser_flaw_reward(
    judge: ClientConfig | ChatClient,
    prompts: CoserPrompts | None = None,
    max_tokens: int = 4096,
    seed: int = 0,
):
    """The reward function `coser_flaw_reward(prompts, completions, case, character, simulation=None, **columns)`.

    Args:
        judge (`ClientConfig` or `ChatClient`): the judge; a `ClientConfig` is built with `make_client` (set its
            `cache_path` to keep verdicts across runs).
        prompts (`CoserPrompts`, *optional*): the judge's prompts; defaults to rolellm's own (`builtin_prompts`).
        max_tokens (`int`, *optional*, defaults to 4096), seed (`int`, *optional*, defaults to 0): the judge's answer
            budget and seed (greedy decoding).
    """
    client = make_client(judge) if isinstance(judge, ClientConfig) else judge
    judge_prompts = prompts or builtin_prompts()

    def coser_flaw_reward(
        prompts: Sequence, completions: Sequence, case: Sequence, character: Sequence, simulation=None, **columns
    ) -> list[float | None]:
        items, rounds = [], []
        for index, completion in enumerate(completions):
            record = json.loads(case[index]) if isinstance(case[index], str) else case[index]
            scene = case_from_dict(record, f"case column, row {index}")
            before = list(simulation[index] or []) if simulation is not None else []
            judged = judged_simulation([*before, {"role": character[index], "content": completion_text(completion)}])
            items.append((scene, simulation_text(judged, judge_prompts.name_speakers)))
            rounds.append(count_actor_rounds(judged))
        verdicts = judge_scenes(items, client, judge_prompts, max_tokens=max_tokens, seed=seed)
        rewards = []
        for verdict, n in zip(verdicts, rounds):
            if verdict["errors"]:
                rewards.append(None)
                continue
            critique = {d: {"score": dimension_score(v["flaws"], n)} for d, v in verdict.items() if d != "errors"}
            rewards.append(scene_score(critique))
        return rewards

    return coser_flaw_reward
