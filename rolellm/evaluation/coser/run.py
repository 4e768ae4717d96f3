"""`CoserConfig` and `run_coser`: CoSER's given-circumstance acting evaluation as a library call, beside
`run_dialogue(DialogueConfig)`, following the same interface (`rolellm.evaluation.base`).

The actor (`client`) plays every character of each test scene, `env` plays the world and `nsp` predicts the next
speaker (`rolellm.evaluation.coser.simulation`); the judge lists the flaws of each simulated scene on four
dimensions (`rolellm.evaluation.coser.judge`), which the flaw-deduction score turns into numbers
(`rolellm.evaluation.coser.scoring`). Every client is a `ClientConfig`; answers are cached in
`<output_dir>/cache.sqlite` unless a client sets its own `cache_path`, and every message is saved as it is played:
a run that stops, even killed, goes on where it was when started again, asking nothing twice that was answered (a
request in flight when the run was killed had no answer saved, and is sent once more).

Writes `results.json` (the original's format, `{"scores", "cases"}`, plus `run`: the models, judge and prompts),
`simulations.jsonl` (every scene with its next-speaker predictions), `report.md`, `report.html`,
`conversations.html` and the charts.

>>> import json, tempfile
>>> from rolellm.clients.config import ClientConfig
>>> from rolellm.testing.server import ChatCompletionsServer
>>> folder = tempfile.mkdtemp()
>>> case = {"book": "Othello", "i_c": 0, "scenario": "A street.", "plot": {"i_p": 9, "summary": "Iago plots."},
...         "key_characters": [], "speaking_characters_w_env": ["Iago", "Othello"], "major_characters": ["Iago"],
...         "character_profiles": {}, "dialogues": [{"character": "Iago", "message": "My lord?"}]}
>>> _ = open(folder + "/test.json", "w").write(json.dumps([case]))
>>> def answer(body):
...     if body["model"] == "judge":
...         return '{"flaws": [{"instance": "flat", "type": "Emotional Depth", "severity": 2}]}'
...     return "Next Speaker: <END CHAT>" if body["model"] == "nsp" else "(bows) My lord."
>>> with ChatCompletionsServer(answer) as server:
...     endpoint = dict(base_url=server.base_url, progress=False)
...     config = CoserConfig(test_file=folder + "/test.json", output_dir=folder + "/run",
...                          client=ClientConfig("actor", **endpoint), env=ClientConfig("env", **endpoint),
...                          nsp=ClientConfig("nsp", **endpoint), judge=ClientConfig("judge", **endpoint))
...     result = run_coser(config)
>>> scene = result.results["cases"]["Othello-9-0"]  # <END CHAT> counts from round 5: 6 rounds, 3 of Iago
>>> [m["role"] for m in scene["simulation"]], scene["score"]  # 100 - 5 * (2 - 0.3 * 3)
(['Iago', 'Environment', 'Iago', 'Environment', 'Iago', 'Environment'], 94.5)
"""

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from rolellm.clients.config import ClientConfig, check_endpoints, check_minimums, make_client
from rolellm.evaluation.base import Evaluation, EvaluationConfig, EvaluationResult


logger = logging.getLogger(__name__)

DEFAULT_ENV_MODEL = "gpt-4o"
DEFAULT_NSP_MODEL = "gpt-4o-mini"
PINNED_JUDGE = "gpt-4o-2024-08-06"  # the judge the CoSER authors pin for comparable numbers
RESULTS_NAME = "results.json"
SIMULATIONS_NAME = "simulations.jsonl"


@dataclass
class CoserConfig(EvaluationConfig):
    """What `run_coser` and `rolellm coser run` read, who plays and judges, and where they write.

    The clients are values (`ClientConfig`): `rolellm coser run` builds `client` (the actor) from its
    `ClientConfig` flags (`--actor_model`/`--model`, `--base_url`, `--max_new_tokens`, ...) and derives `env`, `nsp`
    and `judge` from the `--env_*`, `--nsp_*` and `--judge_*` flags (`rolellm.clients.config.derive_client`).

    > Parameters that control the test set

    Args:
        test_file (`str`): the test set JSON (CoSER's `data/test/test_set.json` schema).
        cases (`list[str]`, *optional*): only these case ids (`"{book}-{i_p}-{i_c}"`).
        limit (`int`, *optional*): only the first `limit` cases (after `cases`).

    > Parameters that control the protocol

        continue_from (`int`, *optional*, defaults to 0): the first rounds are the reference conversation's.
        no_thoughts (`bool`, *optional*, defaults to `False`): the characters write no inner thoughts.
        prompts_from (`str`, *optional*): a local checkout of the CoSER repository whose prompt templates to use
            instead of rolellm's own (for numbers comparable with published ones).
        seed (`int`, *optional*, defaults to 0): every request's seed (all agents decode greedily).
        judge_max_tokens (`int`, *optional*, defaults to 4096): the answer budget of a judge call.

    > Parameters that control the models

        client (`ClientConfig`): the actor; its `max_new_tokens` is every agent's answer budget (`rolellm coser run`
            defaults it to the original's 512).
        env (`ClientConfig`): the Environment agent.
        nsp (`ClientConfig`): the next-speaker predictor.
        judge (`ClientConfig`, *optional*): the judge; required unless `dry_run`.

    > Parameters that control the output

        output_dir (`str`): where the log, results and report go.
        dry_run (`bool`, *optional*, defaults to `False`): check the test file and the prompts, count what would be
            asked, send nothing.
        allow_partial (`bool`, *optional*, defaults to `False`): `rolellm coser run` exits 0 although some scenes
            failed.
    """

    test_file: str = field(metadata={"help": "CoSER test set JSON (data/test/test_set.json schema)."})
    output_dir: str = field(metadata={"help": "Where the log, results.json and the report go."})
    client: ClientConfig = field(metadata={"help": "The actor (from the ClientConfig flags)."})
    env: ClientConfig = field(metadata={"help": "The Environment agent (--env_* flags)."})
    nsp: ClientConfig = field(metadata={"help": "The next-speaker predictor (--nsp_* flags)."})
    judge: ClientConfig | None = field(default=None, metadata={"help": "The judge (--judge_* flags)."})
    cases: list[str] | None = field(default=None, metadata={"help": "Only these case ids ('{book}-{i_p}-{i_c}')."})
    limit: int | None = field(default=None, metadata={"help": "Only the first N cases."})
    continue_from: int = field(default=0, metadata={"help": "Rounds taken from the reference before simulating."})
    no_thoughts: bool = field(default=False, metadata={"help": "Characters write no inner thoughts."})
    prompts_from: str | None = field(
        default=None, metadata={"help": "A local checkout of the CoSER repository: use its prompt templates."}
    )
    seed: int = field(default=0, metadata={"help": "Sampling seed of every request (decoding is greedy)."})
    judge_max_tokens: int = field(default=4096, metadata={"help": "Answer budget of a judge call."})
    dry_run: bool = field(default=False, metadata={"help": "Check the test file and prompts; send nothing."})
    allow_partial: bool = field(default=False, metadata={"help": "Exit 0 although some scenes failed."})

    def __post_init__(self):
        check_minimums(self, limit=1, continue_from=0, judge_max_tokens=1)
        if self.judge is None and not self.dry_run:
            raise ValueError("the following argument is required: --judge_model")
        self.set_default_caches()  # one cache for all: its keys hold the model's name


def run_record(config: CoserConfig, prompts_source: str) -> dict:
    """What a results file records of its run: the models, the judge, the prompts and the settings."""
    judge = config.judge.model if config.judge else None
    record = {
        "actor_model": config.client.model, "env_model": config.env.model, "nsp_model": config.nsp.model,
        "judge_model": judge, "prompts": prompts_source, "continue_from": config.continue_from,
        "no_thoughts": config.no_thoughts, "max_tokens": config.client.max_new_tokens, "seed": config.seed,
        "test_file": str(config.test_file), "pinned_judge": PINNED_JUDGE,
    }  # fmt: skip
    if judge is not None and judge != PINNED_JUDGE:
        record["warning"] = (
            f"the judge is {judge}, not {PINNED_JUDGE}: scores are not comparable with numbers judged by the pinned one"
        )
    return record


def scene_result(scene, verdict: dict, text: str, continue_from: int = 0) -> dict:
    """A played scene's entry of `results.json`: the judged simulation and text, the critique (each dimension's flaws
    and score, BLEU and ROUGE-L), the scene score (`None` when a verdict failed, with `errors`), rounds, how the scene
    ended and the next-speaker fallbacks."""
    from rolellm.evaluation.coser.judge import judged_simulation
    from rolellm.evaluation.coser.prompts import DIMENSIONS
    from rolellm.evaluation.coser.scoring import bleu_rouge, count_actor_rounds, dimension_score, scene_score
    from rolellm.evaluation.coser.thoughts import reference_without_thoughts

    simulation = judged_simulation(scene.messages())
    rounds = count_actor_rounds(simulation)
    critique = {d: {**verdict[d], "score": dimension_score(verdict[d]["flaws"], rounds)}
                for d in DIMENSIONS if d in verdict}  # fmt: skip
    reference = reference_without_thoughts(scene.case.reference)
    critique["bleu"], critique["rouge_l"] = bleu_rouge(reference[continue_from:], simulation[continue_from:])
    entry = {"simulation": simulation, "simulation_str": text, "score": None, "critique": critique}
    if verdict["errors"]:
        entry["errors"] = verdict["errors"]
    else:
        entry["score"] = scene_score(critique)
    transcript = scene.transcript()
    entry.update(rounds=transcript["rounds"], ended=transcript["ended"], nsp_fallbacks=transcript["nsp_fallbacks"])
    return entry


def check_results_kept(path: Path, case_ids: list[str]) -> None:
    """A `ValueError` when `path` (a folder's `results.json`) holds scenes that this run does not play: it would be
    rewritten with fewer (`--limit 2` on the folder of a 3-scene run), before anything is asked or written."""
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))["cases"]
    except (OSError, ValueError, TypeError, KeyError):  # no results yet, or none that can be read: nothing to keep
        return
    if not isinstance(recorded, dict):
        return
    left_out = [case_id for case_id in recorded if case_id not in set(case_ids)]
    if left_out:
        raise ValueError(
            f"{path} holds {len(recorded)} scenes, {len(left_out)} of them not in this run "
            f"({', '.join(left_out[:3])}{', ...' if len(left_out) > 3 else ''}): it would be rewritten with "
            f"{len(case_ids)}; select those scenes too (--limit, --cases), or write to another --output_dir"
        )


def estimate_run(cases, prompts, config: CoserConfig) -> dict:
    """What a run of `cases` asks at most, counted before anything is sent (`dry_run`): per agent the requests and
    their estimated prompt and completion tokens (the basis of its cost at each provider's price), and the batches
    played one after the other (a batch lasts as long as its slowest answer: the run's time is about that many
    slow answers).

    An upper bound: every scene plays all `MAX_ROUNDS` rounds with messages as long as its reference's on average,
    and every judge answer is re-asked as often as the judge client allows (`MAX_PARSE_ATTEMPTS`).
    """
    from rolellm.clients.base import MAX_PARSE_ATTEMPTS, estimate_tokens
    from rolellm.evaluation.coser.prompts import DIMENSIONS
    from rolellm.evaluation.coser.simulation import MAX_ROUNDS

    max_tokens, thoughts = config.client.max_new_tokens, not config.no_thoughts
    rounds = max(0, MAX_ROUNDS - config.continue_from)
    rows = {agent: {"agent": agent, "model": model, "requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
            for agent, model in (("actor and Environment", f"{config.client.model}, {config.env.model}"),
                                 ("next speaker", config.nsp.model),
                                 ("judge", config.judge.model if config.judge else "(not set)"))}  # fmt: skip

    def add(agent: str, system: str, history: int, completion: int, requests: int = 1) -> None:
        row = rows[agent]
        row["requests"] += requests
        row["prompt_tokens"] += requests * (
            estimate_tokens(system) + estimate_tokens(prompts.conversation_start) + history
        )
        row["completion_tokens"] += requests * completion

    for case in cases:
        systems = [prompts.environment(case)] + [
            prompts.actor(case, character, thoughts, config.client.model) for character in case.characters
        ]
        speaker_system = max(systems, key=len)
        nsp_system = prompts.nsp(case)
        lengths = [estimate_tokens(f"{m['character']}: {m['message']}") + 4 for m in case.reference]
        message = min(max_tokens, sum(lengths) // len(lengths)) if lengths else max_tokens
        for index in range(config.continue_from, config.continue_from + rounds):
            add("actor and Environment", speaker_system, index * message, max_tokens)
            add("next speaker", nsp_system, (index + 1) * message, max_tokens)
        played = (config.continue_from + rounds) * message
        for dimension in DIMENSIONS:
            judge_system = prompts.judge(case, dimension, config.continue_from)
            for attempt in range(MAX_PARSE_ATTEMPTS):  # a re-ask carries the answer rejected and a reminder
                add("judge", judge_system, played + attempt * (config.judge_max_tokens + 40), config.judge_max_tokens)
    batches = 3 * rounds + len(DIMENSIONS) * MAX_PARSE_ATTEMPTS  # Environment, characters, next speaker a round
    return {"agents": list(rows.values()), "rounds": rounds, "judge_attempts": MAX_PARSE_ATTEMPTS,
            "batches": batches if cases else 0}  # fmt: skip


@dataclass
class CoserResult(EvaluationResult):
    """What `run_coser` returns: what `results.json` holds, the scenes played and scored, what failed (`failures`, and
    counted in `failed`: scenes stopped early, judge answers), the report's files (`report`) and, when no scene could
    be scored, why (`error`); a dry run's estimate.

    Args:
        results (`dict`, *optional*): the content of `results.json` (`scores`, `cases`, `run`, `failures`); `None` on
            a dry run.
        scenes (`int`): the scenes of the run.
        scored (`int`): the scenes with a score.
        failures (`list[dict]`): `{"case", "error"}` of each scene stopped early, and of each judge answer that never
            fit (with its `dimension`).
        requests (`int`, *optional*): a dry run's most requests, judge re-asks included; `estimate` (`dict`,
            *optional*): its `estimate_run`.
    """

    results: dict | None
    scenes: int
    scored: int = 0
    failures: list[dict] = field(default_factory=list)
    requests: int | None = None
    estimate: dict | None = None

    def __post_init__(self):
        stopped = {f["case"] for f in self.failures if "dimension" not in f}
        self.failed = {"scenes": len(stopped), "judge answers": len(self.failures) - len(stopped)}

    def describe_failures(self) -> str:
        """What failed, scenes and judge answers counted apart.

        >>> CoserResult(results=None, scenes=2, output_dir="o", failures=[
        ...     *({"case": "a", "dimension": d} for d in "wxyz"), {"case": "b", "error": "timeout"}
        ... ]).describe_failures()
        '1 scene stopped early; 4 judge answers failed, in 1 scene'
        """
        stopped = {f["case"] for f in self.failures if "dimension" not in f}
        judged = [f for f in self.failures if "dimension" in f]
        parts = [f"{count(len(stopped), 'scene')} stopped early"] if stopped else []
        if judged:
            parts.append(
                f"{count(len(judged), 'judge answer')} failed, in {count(len({f['case'] for f in judged}), 'scene')}"
            )
        return "; ".join(parts)


def count(n: int, what: str) -> str:
    """`count(1, "scene")` -> `'1 scene'`, `count(4, "scene")` -> `'4 scenes'`."""
    return f"{n} {what}{'' if n == 1 else 's'}"


def run_coser(config: CoserConfig) -> CoserResult:
    """Play, judge and score the test scenes of `config`, and write the results and the report.

    Every endpoint is checked before the first request (`check_endpoints`: an `EndpointError` stops the run).

    Returns:
        `CoserResult`: what `results.json` holds (`None` on a dry run), the scenes, the failures, the scenes scored,
        a dry run's most requests and its `estimate` (`estimate_run`), and the report's files.
        A run that scored no scene writes neither `results.json` nor the report (`report` is `None`, `error` says
        so): what was played is in the log and `simulations.jsonl`, and a re-run goes on from it.
    """
    from rolellm.evaluation.coser.judge import judge_scenes, judged_simulation, simulation_text
    from rolellm.evaluation.coser.prompts import load_prompts
    from rolellm.evaluation.coser.report import write_coser_report
    from rolellm.evaluation.coser.scoring import bleu_tokenizer_name, mean_scores
    from rolellm.evaluation.coser.simulation import (
        LOG_NAME,
        RUN_NAME,
        check_continue_from,
        file_digest,
        run_simulations,
    )
    from rolellm.evaluation.coser.testset import read_coser_test_set, select_cases
    from rolellm.evaluation.runlog import check_run, write_records

    cases = select_cases(read_coser_test_set(config.test_file), config.cases, config.limit)
    check_continue_from(cases, config.continue_from)
    prompts = load_prompts(config.prompts_from)
    record = run_record(config, prompts.source)
    if record.get("warning"):
        logger.warning("%s", record["warning"])
    if config.dry_run:  # every prompt renders, and what the run would ask is counted
        estimate = estimate_run(cases, prompts, config)
        requests = sum(row["requests"] for row in estimate["agents"])
        return CoserResult(results=None, scenes=len(cases), requests=requests, estimate=estimate,
                           output_dir=config.output_dir)  # fmt: skip
    output_dir = Path(config.output_dir)
    check_results_kept(output_dir / RESULTS_NAME, [case.id for case in cases])
    identity = {k: v for k, v in record.items() if k not in ("judge_model", "warning", "pinned_judge", "test_file")}
    identity["test_set_sha256"] = file_digest(config.test_file)
    check_run(output_dir, identity, RUN_NAME, LOG_NAME)  # another run's folder: before any write
    output_dir.mkdir(parents=True, exist_ok=True)
    actor, env, nsp, judge = (make_client(c) for c in (config.client, config.env, config.nsp, config.judge))
    check_endpoints(actor, env, nsp, judge)  # every endpoint answers before the first scene is played
    scenes = run_simulations(
        cases, prompts, actor, env, nsp, output_dir, identity, continue_from=config.continue_from,
        thoughts=not config.no_thoughts, max_tokens=config.client.max_new_tokens, seed=config.seed,
    )  # fmt: skip
    write_records([s.transcript() for s in scenes], output_dir / SIMULATIONS_NAME)
    failures = [{"case": s.case.id, "error": s.error} for s in scenes if s.error]
    finished = [(s, judged_simulation(s.messages())) for s in scenes if s.error is None]
    texts = {s.case.id: simulation_text(simulation, prompts.name_speakers) for s, simulation in finished}
    verdicts = judge_scenes(
        [(s.case, texts[s.case.id]) for s, _ in finished], judge, prompts, config.continue_from,
        config.judge_max_tokens, config.seed,
    )  # fmt: skip
    verdicts = {s.case.id: verdict for (s, _), verdict in zip(finished, verdicts)}
    cases_out = {}
    for scene in scenes:
        if scene.error:
            cases_out[scene.case.id] = {"simulation": judged_simulation(scene.messages()), "score": None,
                                        "error": scene.error}  # fmt: skip
        else:
            entry = scene_result(scene, verdicts[scene.case.id], texts[scene.case.id], config.continue_from)
            failures += [
                {"case": scene.case.id, "error": f"judge, {d}: {e}", "dimension": d}
                for d, e in entry.get("errors", {}).items()
            ]
            cases_out[scene.case.id] = entry
    record["bleu_tokenizer"] = bleu_tokenizer_name()
    results = {"scores": mean_scores(cases_out), "cases": cases_out, "run": record, "failures": failures}
    scored = sum(1 for c in cases_out.values() if c["score"] is not None)
    result = CoserResult(results=results, scenes=len(scenes), scored=scored, failures=failures,
                         output_dir=config.output_dir)  # fmt: skip
    if scored == 0:  # no results file or report that reads like a finished run: the log and simulations are kept
        result.error = "no scene could be scored; run again to go on from what was saved"
        return result
    path = output_dir / RESULTS_NAME
    partial = path.with_suffix(".json.tmp")
    partial.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)
    result.report = write_coser_report(output_dir)
    return result


def _write_coser_report(folder):
    from rolellm.evaluation.coser.report import write_coser_report

    return write_coser_report(folder)


COSER = Evaluation(CoserConfig, run_coser, _write_coser_report)
