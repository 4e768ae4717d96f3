"""Evaluation in three rooms, each importing only the ones before it, and the preference pairs ranked by their judges:

- `rolellm.evaluation.judge`: the paper's pairwise GPT judge with its length-controlled win rate;
- `rolellm.evaluation.benchmark`: the single-turn benchmark (ROUGE-L RAW/CUS/SPE, `run_benchmark`, its report);
- `rolellm.evaluation.multiturn`: multi-turn evaluation (simulated users, rubric judges, agreement,
  `run_dialogue_eval`);
- `rolellm.evaluation.preference`: `rolellm generate preferences`, the model's answers ranked by the pairwise judge,
  the rubric or ROUGE-L into DPO/KTO data (here, after the judges, as `generation/` may not import them).

`charts` and `pages` (SVG charts and the Markdown-to-HTML page) are shared by the reports of all three.
"""
