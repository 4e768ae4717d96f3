"""The report of a benchmark run: tables laid out like the paper's Tables 3-5, charts, model-card scores.

`write_report` takes the `results.json` content of one or more runs (`run_benchmark` writes it) and writes
`results.md` and `results.html` (the main table, one row per model, the per-role and per-type breakdowns of the last
run, answer lengths with the raw and length-controlled win rates, the rubric scores per dimension and subset, and the
judge's agreement with people when `agreement.json` is in the folder), `per_role.png` (a bar per role and metric), `comparison.png` (the metrics side by
side across runs), the same two as SVG, `lengths.svg` and `win_rate.svg`. The HTML embeds the SVGs, whose text stays
text (`rolellm.evaluation.charts`), so Chinese role names show even where no CJK font is installed for matplotlib.
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
import warnings
from pathlib import Path

from rolellm.data.release import HUB_REPO_ID
from rolellm.evaluation.benchmark.scoring import METRICS, is_number
from rolellm.evaluation.charts import bar_chart, svg_pyplot, win_rate_chart
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


def _check_glyphs(plt, labels) -> None:
    if plt.rcParams["font.sans-serif"][0] == "DejaVu Sans" and any(ord(c) > 0x2E80 for label in labels for c in label):
        warnings.warn(
            "no CJK font is installed (e.g. Noto Sans CJK SC: apt-get install fonts-noto-cjk), so Chinese role "
            "names in the plots are drawn as boxes; the tables in results.md are not affected",
            stacklevel=3,
        )


def plot_per_role(result: dict, *paths: str | Path) -> list[Path]:
    """Horizontal bars: each role's CUS, RAW and SPE (the available ones) in one run, drawn once and saved to each of
    `paths` (`.png`, `.svg`)."""
    plt = svg_pyplot()
    roles = list(result["per_role"])
    _check_glyphs(plt, roles)
    metrics = [m for m in METRICS if is_number(result["metrics"][m])]
    height = 0.8 / max(len(metrics), 1)
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.35 * len(roles) * max(len(metrics), 1) ** 0.5))
    for k, metric in enumerate(metrics):
        values = [result["per_role"][r][metric] if is_number(result["per_role"][r][metric]) else 0 for r in roles]
        positions = [i + k * height for i in range(len(roles))]
        ax.barh(positions, values, height=height, label=metric, color=COLORS[metric])
    ax.set_yticks([i + height * (len(metrics) - 1) / 2 for i in range(len(roles))], labels=roles)
    ax.margins(y=0.5 / max(len(roles), 1))  # the default 5% leaves rows of blank space on a long role list
    ax.invert_yaxis()
    ax.tick_params(labeltop=len(roles) > 20)  # long lists: the scale at the top too
    ax.set_xlabel("ROUGE-L recall")
    ax.set_title(f"{result['model']} on {result['dataset_name']}: per role")
    ax.legend(loc="best")
    return _save(fig, plt, paths)


def plot_comparison(results: list[dict], *paths: str | Path) -> list[Path]:
    """Grouped bars: CUS, RAW, SPE and Avg. of every run side by side (unavailable metrics left empty), drawn once and
    saved to each of `paths`."""
    plt = svg_pyplot()
    metrics = [*METRICS, "avg"]
    width = 0.8 / len(results)
    fig, ax = plt.subplots(figsize=(2 + 1.6 * len(metrics), 4))
    for k, result in enumerate(results):
        values = [result["metrics"][m] if is_number(result["metrics"][m]) else 0 for m in metrics]
        label = result["model"] if len(results) == len({r["model"] for r in results}) else _run_label(result)
        bars = ax.bar([i + k * width for i in range(len(metrics))], values, width=width, label=label)
        ax.bar_label(bars, labels=[_cell(result["metrics"][m]) for m in metrics], fontsize=7, rotation=90, padding=2)
    ax.set_xticks([i + width * (len(results) - 1) / 2 for i in range(len(metrics))], labels=metrics)
    ax.set_ylabel("ROUGE-L recall")
    ax.set_ylim(0, 1.1)
    ax.set_title("Models compared")
    ax.legend(fontsize=8, loc="best")
    return _save(fig, plt, paths)


def _run_label(result: dict) -> str:
    return f"{result['model']} ({result['dataset_name']}, {result.get('mode') or 'answers'})"


def _save(fig, plt, paths) -> list[Path]:
    """`fig` laid out once and saved to each of `paths` (the format from the suffix), then closed."""
    paths = [Path(path) for path in paths]
    with warnings.catch_warnings():  # one warning about missing glyphs (`_check_glyphs`), not one per glyph
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.tight_layout()
        for path in paths:  # an SVG without its date: the same chart gives the same file
            fig.savefig(path, dpi=120, **({"metadata": {"Date": None}} if path.suffix == ".svg" else {}))
    plt.close(fig)
    return paths


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
    embedded as SVG, the judge's agreement with people when `agreement.json` is there), `per_role.png`/`.svg` (of
    the last run), `comparison.png`/`.svg` (of all runs), `win_rate.svg` (runs with a judge) and `lengths.svg`.

    Returns:
        `dict[str, Path]`: `"table"`, `"html"`, `"per_role"`, `"comparison"` (the PNGs), and the SVGs by name.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # each chart drawn once, as a PNG and as an SVG (in an SVG the text stays text: the browser draws the names)
    per_role, per_role_svg = plot_per_role(results[-1], output_dir / "per_role.png", output_dir / "per_role.svg")
    comparison, comparison_svg = plot_comparison(results, output_dir / "comparison.png", output_dir / "comparison.svg")
    written = {"per_role": per_role, "comparison": comparison, "per_role_svg": per_role_svg,
               "comparison_svg": comparison_svg}  # fmt: skip
    labels = [_run_label(r) if len(results) != len({x["model"] for x in results}) else r["model"] for r in results]
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
