"""The report of a benchmark run: tables laid out like the paper's Tables 3-5, charts, model-card scores.

`write_report` takes the `results.json` content of one or more runs (`run_benchmark` writes it) and writes
`results.md` and `results.html` (the main table, one row per model, the per-role and per-type breakdowns of the last
run, answer lengths with the raw and length-controlled win rates, the rubric scores per dimension and subset, and the
judge's agreement with people when `agreement.json` is in the folder), and its charts as SVG: `per_role.svg` (a bar
per role and metric), `comparison.svg` (the metrics side by side across runs), `lengths.svg` and `win_rate.svg`. The
HTML embeds them; their text stays text (`rolellm.evaluation.charts`), so the browser draws Chinese role names with
its own fonts.
`update_model_card` writes the scores into the `model-index` of a model card; `write_benchmark_report` writes the report
of a run's folder again.

>>> result = {"model": "RoleGPT", "dataset_name": "zh", "mode": None, "avg_over": ["CUS", "SPE"],
...           "metrics": {"CUS": 0.5, "RAW": None, "SPE": 0.25, "avg": 0.375, "win_rate": None}}
>>> print(format_table([result]))
### Chinese (paper Table 4)
<BLANKLINE>
| Model | Prompting | CUS | RAW | SPE | Avg. | Win rate |
|---|---|---|---|---|---|---|
| RoleGPT | – | 0.5000 | n/a | 0.2500 | 0.3750* | n/a |
<BLANKLINE>
\\* mean of the available metrics (CUS, SPE); n/a: unavailable (see `unavailable` in results.json).
"""

import json
from pathlib import Path

from rolellm.data.release import HUB_REPO_ID
from rolellm.evaluation.benchmark.scoring import METRICS, is_number
from rolellm.evaluation.charts import PALETTE, bar_chart, grouped_bar_chart, win_rate_chart
from rolellm.evaluation.pages import human_agreement_markdown, markdown_to_html


# dataset config (without its subset suffix) -> heading; the paper's table for the same benchmark
BENCHMARKS = {
    "en-instruction": "English, instruction generalization (paper Table 3)",
    "zh": "Chinese (paper Table 4)",
    "en-role": "English, role generalization (paper Table 5)",
}
COLORS = {"CUS": "#4C72B0", "RAW": "#55A868", "SPE": "#C44E52", "avg": "#8172B2"}


def benchmark_of(dataset_name: str) -> str:
    """The benchmark a config belongs to: `"zh-role_specific"` -> `"zh"`."""
    for suffix in ("-general", "-role_specific"):
        dataset_name = dataset_name.removesuffix(suffix)
    return dataset_name


def _cell(value, percent=False) -> str:
    if not is_number(value):
        return "n/a"
    return f"{100 * value:.2f}" if percent else f"{value:.4f}"


def format_table(results: list[dict]) -> str:
    """The main table: one section per benchmark, one row per run, the paper's columns (CUS, RAW, SPE, Avg., win rate).

    Unavailable metrics read `n/a`; an average over fewer than the three metrics carries a `*`.
    """
    sections, partial = {}, set()
    for result in results:
        metrics = result["metrics"]
        avg = _cell(metrics["avg"])
        if is_number(metrics["avg"]) and len(result["avg_over"]) < len(METRICS):
            avg += "*"
            partial.add(", ".join(result["avg_over"]))
        cells = [result["model"], result.get("mode") or "–", *(_cell(metrics[m]) for m in METRICS), avg]
        cells.append(_cell(metrics.get("win_rate"), percent=True))
        sections.setdefault(benchmark_of(result["dataset_name"]), []).append("| " + " | ".join(cells) + " |")
    blocks = []
    for benchmark, lines in sections.items():
        header = "| Model | Prompting | CUS | RAW | SPE | Avg. | Win rate |\n|---|---|---|---|---|---|---|"
        blocks.append(f"### {BENCHMARKS.get(benchmark, benchmark)}\n\n{header}\n" + "\n".join(lines))
    notes = "n/a: unavailable (see `unavailable` in results.json)."
    if partial:
        notes = f"\\* mean of the available metrics ({'; '.join(sorted(partial))}); " + notes
    return "\n\n".join(blocks) + "\n\n" + notes


def format_breakdowns(result: dict) -> str:
    """Per-role and per-type tables of one run, in Markdown."""
    lines = [f"### {result['model']}: per role\n", "| Role | CUS | RAW | SPE | Avg. | n general | n role-specific |"]
    lines.append("|---|---|---|---|---|---|---|")
    for role, scores in result["per_role"].items():
        cells = [role, *(_cell(scores[m]) for m in (*METRICS, "avg")), str(scores["n_CUS"]), str(scores["n_SPE"])]
        lines.append("| " + " | ".join(cells) + " |")
    if result["per_type"]:
        lines += ["", f"### {result['model']}: SPE per question type\n", "| Type | SPE | n |", "|---|---|---|"]
        lines += [f"| {name} | {_cell(s['SPE'])} | {s['n']} |" for name, s in result["per_type"].items()]
    return "\n".join(lines)


def per_role_chart(result: dict) -> str:
    """Horizontal bars: each role's CUS, RAW and SPE (the available ones) in one run, as SVG."""
    metrics = [m for m in METRICS if is_number(result["metrics"][m])]
    rows = {role: {m: scores[m] if is_number(scores[m]) else None for m in metrics}
            for role, scores in result["per_role"].items()}  # fmt: skip
    return grouped_bar_chart(rows, "ROUGE-L recall", f"{result['model']} on {result['dataset_name']}: per role",
                             {m: COLORS[m] for m in metrics})  # fmt: skip


def comparison_chart(results: list[dict]) -> str:
    """Grouped bars: CUS, RAW, SPE and Avg. of every run side by side (unavailable metrics "n/a"), as SVG."""
    labels = run_labels(results)
    rows = {metric: {label: r["metrics"][metric] if is_number(r["metrics"][metric]) else None
                     for label, r in zip(labels, results)} for metric in (*METRICS, "avg")}  # fmt: skip
    colors = {label: PALETTE[k % len(PALETTE)] for k, label in enumerate(labels)}
    return grouped_bar_chart(rows, "ROUGE-L recall", "Models compared", colors, shown=_cell)


def run_labels(results: list[dict]) -> list[str]:
    """Each run's name in the charts: its model, or with its dataset and prompting when a model ran more than once."""
    if len(results) == len({result["model"] for result in results}):
        return [result["model"] for result in results]
    return [f"{r['model']} ({r['dataset_name']}, {r.get('mode') or 'answers'})" for r in results]


def format_win_rates(results: list[dict]) -> str:
    """Answer lengths and judged win rates of the runs: raw and length-controlled, with their CIs and counts."""
    header = ("| Model | Dataset | Chars/answer | Baseline | Win rate [95% CI] | LC win rate [95% CI] | Avg. rank | "
              "Baseline chars/answer | W / T / L / failed |")  # fmt: skip
    lines = ["### Answer lengths and win rates\n", header, "|---" * 9 + "|"]
    for result in results:
        judged = result.get("win_rate") or {}
        cells = [result["model"], result["dataset_name"], _number((result.get("answer_length") or {}).get("chars"))]
        if judged:
            cells += [judged.get("baseline") or "RoleGPT", _rate(judged, ""), _rate(judged, "lc_"),
                      _number(judged["average_rank"], 2), _number(judged["baseline_length"]),
                      f"{judged['wins']} / {judged['ties']} / {judged['losses']} / {judged['failed']}"]  # fmt: skip
        else:
            cells += ["–", "n/a", "n/a", "n/a", "n/a", "–"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ("LC: length-controlled, the judge's preference at equal answer lengths (a logistic regression on the "
             "normalized length difference, `rolellm.evaluation.judge.length_control`). Lengths in characters.")  # fmt: skip
    return "\n".join(lines) + "\n\n" + notes


def format_rubric(results: list[dict]) -> str:
    """The rubric scores of the runs that have them: one row per run and dimension, the mean over all rows and per
    subset (the general rows CUS scores, the role-specific rows SPE scores), with the failed verdicts; `""` when no
    run was scored on the rubric.

    >>> run = {"model": "m", "dataset_name": "zh", "rubric": {"judge": "j", "dimensions": ["knowledge"],
    ...        "scale": [1, 5], "per_dimension": {"knowledge": 4.0}, "overall": 4.0, "n": 2, "asked": 3, "failed": 1,
    ...        "per_subset": {"general": {"per_dimension": {"knowledge": 4.0}, "overall": 4.0, "n": 2}}}}
    >>> print(format_rubric([run]).splitlines()[4])
    | m | zh | j | knowledge | 4.00 | 4.00 | n/a |
    """
    scored = [result for result in results if result.get("rubric")]
    if not scored:
        return ""
    lines = ["### Rubric scores\n", "| Model | Dataset | Judge | Dimension | All rows | General (CUS rows) | "
             "Role-specific (SPE rows) |", "|---" * 7 + "|"]  # fmt: skip
    notes = []
    for result in scored:
        rubric = result["rubric"]
        subsets = [rubric["per_subset"].get(name) or {} for name in ("general", "role_specific")]
        for dimension in [*rubric["dimensions"], "overall"]:
            means = [_rubric_mean(part, dimension) for part in (rubric, *subsets)]
            name = "**overall**" if dimension == "overall" else dimension
            cells = [result["model"], result["dataset_name"], rubric["judge"], name, *(_number(m, 2) for m in means)]
            lines.append("| " + " | ".join(cells) + " |")
        notes.append(f"{result['model']}: {rubric['n']} of {rubric['asked']} answers scored, {rubric['failed']} "
                     "verdicts failed")  # fmt: skip
    scale = scored[-1]["rubric"]["scale"]
    return "\n".join(lines) + (
        f"\n\nScores from {scale[0]} to {scale[1]} (the rubric of `rolellm dialogue`, "
        f"single-turn dimensions); overall: the mean of the dimensions. " + "; ".join(notes) + "."
    )


def _rubric_mean(part: dict, dimension: str) -> float | None:
    return part.get("overall") if dimension == "overall" else (part.get("per_dimension") or {}).get(dimension)


def _number(value, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if is_number(value) else "n/a"


def _rate(judged: dict, key: str) -> str:
    value = judged.get(f"{key}win_rate")
    if not is_number(value):
        return "n/a"
    return f"{100 * value:.2f} [{100 * judged[f'{key}ci_low']:.2f}, {100 * judged[f'{key}ci_high']:.2f}]"


def write_report(results: list[dict], output_dir: str | Path) -> dict[str, Path]:
    """Write the report of one or more runs to `output_dir`: `results.md` and `results.html` (the tables, the charts
    embedded as SVG, the judge's agreement with people when `agreement.json` is there), `per_role.svg` (of the last
    run), `comparison.svg` (of all runs), `lengths.svg` and `win_rate.svg` (runs with a judge).

    Returns:
        `dict[str, Path]`: `"table"`, `"html"`, and the charts by name (`"per_role"`, `"comparison"`, `"lengths"`,
        `"win_rate"`).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = {"per_role": output_dir / "per_role.svg", "comparison": output_dir / "comparison.svg"}
    written["per_role"].write_text(per_role_chart(results[-1]), encoding="utf-8")
    written["comparison"].write_text(comparison_chart(results), encoding="utf-8")
    labels = run_labels(results)
    lengths = {label: (r.get("answer_length") or {}).get("chars") for label, r in zip(labels, results)}
    written["lengths"] = output_dir / "lengths.svg"
    written["lengths"].write_text(bar_chart(lengths, "characters per answer", "Answer length"), encoding="utf-8")
    sections = [format_table(results), format_breakdowns(results[-1]), format_win_rates(results)]
    sections += [rubric] if (rubric := format_rubric(results)) else []
    judged = [{"label": f"{label} vs {r['win_rate'].get('baseline') or 'RoleGPT'}", **r["win_rate"]}
              for label, r in zip(labels, results) if r.get("win_rate")]  # fmt: skip
    images = ["![Per role](per_role.svg)", "![Runs compared](comparison.svg)", "![Answer length](lengths.svg)"]
    if judged:
        written["win_rate"] = output_dir / "win_rate.svg"
        written["win_rate"].write_text(win_rate_chart(judged), encoding="utf-8")
        images.append("![Win rate](win_rate.svg)")
    agreement_path = output_dir / "agreement.json"
    if agreement_path.is_file():
        sections.append("\n".join(human_agreement_markdown(json.loads(agreement_path.read_text(encoding="utf-8")))))
    markdown = "\n\n".join([*sections, "\n\n".join(images)]) + "\n"
    written["table"] = output_dir / "results.md"
    written["table"].write_text(markdown, encoding="utf-8")
    written["html"] = output_dir / "results.html"
    written["html"].write_text(markdown_to_html(markdown, output_dir, title="RoleBench evaluation"), encoding="utf-8")
    return written


def rewrite_reports(folder: str | Path) -> list[Path]:
    """Write again the reports of a results folder (a `rolellm dialogue` and/or `rolellm evaluate` output), as
    `rolellm judge agreement` does to show the agreement it wrote there; returns the HTML pages written."""
    from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME
    from rolellm.evaluation.multiturn.report import write_dialogue_report

    folder = Path(folder)
    written = []
    if (folder / TRANSCRIPTS_NAME).is_file():
        written.append(write_dialogue_report(folder)["html"])
    if (folder / "results.json").is_file():
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        if "per_role" in results:  # a full run_benchmark result, not only verdicts
            written.append(write_benchmark_report(folder)["html"])
    return written


def write_benchmark_report(folder: str | Path) -> dict[str, Path]:
    """Write again the report of a `rolellm evaluate` folder from its `results.json`, beside the runs it was compared
    with (the `compare_with` files of its config that are still there): `write_report`'s files, which it returns."""
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    compared = [Path(path) for path in (results.get("config") or {}).get("compare_with") or []]
    others = [read_compared_results(path) for path in compared if path.is_file()]
    return write_report([*others, results], folder)


def eval_results(result: dict, dataset_type: str = HUB_REPO_ID) -> list:
    """The available scores of a run as `huggingface_hub.EvalResult`s (the entries of a card's `model-index`)."""
    from huggingface_hub import EvalResult

    baseline = (result.get("win_rate") or {}).get("baseline") or "RoleGPT"
    names = {"CUS": "CUS (ROUGE-L recall)", "RAW": "RAW (ROUGE-L recall)", "SPE": "SPE (ROUGE-L recall)"}
    names.update({"avg": "Avg. (ROUGE-L recall)", "win_rate": f"Win rate vs {baseline}"})
    names["lc_win_rate"] = f"Length-controlled win rate vs {baseline}"
    if result.get("rubric"):
        names["rubric"] = f"Rubric score (1-5, judge {result['rubric']['judge']})"
    return [
        EvalResult(
            task_type="text-generation",
            task_name="Role-playing",
            dataset_type=dataset_type,
            dataset_name="RoleBench",
            dataset_config=result["dataset_name"],
            dataset_split=result.get("split", "test"),
            metric_type="win_rate" if name.endswith("win_rate") else "rubric" if name == "rubric" else "rouge",
            metric_name=f"{label} [{result.get('mode') or 'answers'}]",
            metric_value=round(result["metrics"][name], 4),
        )
        for name, label in names.items()
        if is_number(result["metrics"].get(name))
    ]


def load_model_card(card_path: str | Path):
    """The model card at `card_path` (`--model_card`), or `None` when there is none yet; a folder, or a YAML header
    that cannot be read, is an error naming the file. `rolellm evaluate` calls it before anything is generated."""
    import yaml
    from huggingface_hub import ModelCard

    from rolellm.roles.profile import DataFormatError, read_text

    card_path = Path(card_path)
    if card_path.is_dir():
        raise IsADirectoryError(f"--model_card {card_path} is a folder: give the model card file (its README.md)")
    if not card_path.exists():
        return None
    try:
        text = read_text(card_path, allow_empty=True)
    except DataFormatError as error:
        raise DataFormatError(f"--model_card {error}") from None
    try:
        return ModelCard(text)
    except (yaml.YAMLError, ValueError) as error:
        cause = " ".join(str(error).split())
        raise ValueError(f"--model_card {card_path}: its YAML header cannot be read ({cause})") from None


def read_compared_results(path: str | Path) -> dict:
    """The `results.json` of another run (`--compare_with`, the file or the run's output folder): a JSON object with
    `model` and `metrics`, else an error naming the file."""
    from rolellm.roles.profile import DataFormatError, read_json_file

    if Path(path).is_dir():
        if not (Path(path) / "results.json").is_file():
            raise FileNotFoundError(
                f"--compare_with {path} is a folder without results.json: give a run's results.json"
            )
        path = Path(path) / "results.json"
    results = read_json_file(path, "results.json of a rolellm evaluate run (--compare_with)")
    if not isinstance(results, dict) or not isinstance(results.get("metrics"), dict) or "model" not in results:
        raise DataFormatError(f"--compare_with {path}: not the results.json of a rolellm evaluate run (an object "
                              "with 'model' and 'metrics')")  # fmt: skip
    # what the report's table and charts read of it, checked now rather than after this run's answers
    for key, kind in (("model", str), ("dataset_name", str), ("avg_over", list)):
        if not isinstance(results.get(key), kind):
            raise DataFormatError(f"--compare_with {path}: field {key!r} must be a {kind.__name__}, got "
                                  f"{results.get(key)!r}")  # fmt: skip
    for name in (*METRICS, "avg"):
        if name not in results["metrics"]:
            raise DataFormatError(f"--compare_with {path}: field 'metrics.{name}' is missing")
        value = results["metrics"][name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise DataFormatError(f"--compare_with {path}: field 'metrics.{name}' must be a number or null, got "
                                  f"{value!r}")  # fmt: skip
    if results.get("win_rate") is not None and not isinstance(results["win_rate"], dict):
        raise DataFormatError(
            f"--compare_with {path}: field 'win_rate' must be an object, got {results['win_rate']!r}"
        )
    return results


def update_model_card(card_path: str | Path, result: dict) -> Path:
    """Write the scores of a run into the `model-index` of the model card at `card_path` (created if missing).

    Entries for the same dataset config, split and metric name are replaced; others are kept.
    """
    from huggingface_hub import ModelCard, ModelCardData

    card_path = Path(card_path)
    card = load_model_card(card_path)
    if card is None:
        card = ModelCard.from_template(ModelCardData(), model_id=result["model"])
    new = eval_results(result)
    keys = {(e.dataset_config, e.dataset_split, e.metric_name) for e in new}
    kept = [e for e in card.data.eval_results or [] if (e.dataset_config, e.dataset_split, e.metric_name) not in keys]
    card.data.eval_results = kept + new
    card.data.model_name = card.data.model_name or result["model"]
    card_path.parent.mkdir(parents=True, exist_ok=True)
    card.save(card_path)
    return card_path
