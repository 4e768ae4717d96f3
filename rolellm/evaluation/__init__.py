"""Evaluation, its rooms from the ground up (each imports only those before it):

- `charts`, `pages` (SVG charts, the Markdown-to-HTML page), `runlog` (the resumable run log: completed work
  appended and synced, replayed after a kill, a folder never resumed by another run) and `base` (the interface every
  evaluation follows: a config holding its clients, `run_<name>(config)` returning a typed result, a report writer,
  `EVALUATIONS` by name): shared by every evaluation;
- `rolellm.evaluation.judge`: the paper's pairwise GPT judge with its length-controlled win rate;
- `rolellm.evaluation.multiturn`: multi-turn evaluation (simulated users, rubric judges, agreement,
  `run_dialogue`);
- `rolellm.evaluation.benchmark`: the single-turn benchmark (ROUGE-L RAW/CUS/SPE, `run_benchmark`, its report, which
  can score multi-turn transcripts with the rubric judges);
- `rolellm.evaluation.coser`: CoSER's given-circumstance acting, judged by its flaw-deduction rubric (`run_coser`);
- `rolellm.evaluation.preference`: `rolellm generate preferences`, the model's answers ranked by the pairwise judge,
  the rubric or ROUGE-L into DPO/KTO data (here, after the judges, as `generation/` may not import them).

The metric itself, ROUGE-L as RoleBench scores it, is `rolellm.rouge`, below every stage.
"""
