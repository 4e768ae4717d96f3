"""The report of a `rolellm coser run` folder: `report.md` and `report.html` (the scores, a chart of the four
dimensions, a chart of each dimension's scene scores, a table of scenes) and `conversations.html`, every simulated
scene with its critiques, one anchor per scene (`conversations.html#<case id>`)."""

import html
import json
import re
from pathlib import Path

from rolellm.evaluation.charts import bar_chart
from rolellm.evaluation.coser.prompts import DIMENSIONS
from rolellm.evaluation.pages import format_number, markdown_to_html, page


def anchor(case_id: str) -> str:
    """An HTML id and URL fragment for a case id (`King Lear-17-0` -> `King-Lear-17-0`)."""
    return re.sub(r"[^\w-]+", "-", case_id).strip("-")


def _slug(dimension: str) -> str:
    return dimension.lower().replace(" ", "_")


def coser_report_markdown(results: dict) -> str:
    """The Markdown of a CoSER run: the run's models and prompts, the scores, the charts and one row per scene."""
    run, scores, cases = results.get("run", {}), results["scores"], results["cases"]
    scored = [c for c in cases.values() if c.get("score") is not None]
    lines = ["# CoSER given-circumstance acting", ""]
    lines += [f"{len(cases)} scenes, {len(scored)} scored. Actor {run.get('actor_model')}, environment "
              f"{run.get('env_model')}, next speaker {run.get('nsp_model')}, judge {run.get('judge_model')}; "
              f"prompts: {run.get('prompts')}. Conversations: [conversations.html](conversations.html).", ""]  # fmt: skip
    if run.get("warning"):
        lines += [f"Warning: {run['warning']}.", ""]
    lines += ["## Scores", "", "| " + " | ".join([*DIMENSIONS, "avg", "bleu", "rouge_l"]) + " |",
              "|" + "---|" * (len(DIMENSIONS) + 3)]  # fmt: skip
    cells = [format_number(scores.get(d)) for d in (*DIMENSIONS, "avg")]
    cells += [format_number(scores.get(m), 4) for m in ("bleu", "rouge_l")]
    lines += ["| " + " | ".join(cells) + " |", "", "![Mean per dimension](dimensions.svg)", ""]
    lines += [f"![{d}](scenes_{_slug(d)}.svg)" for d in DIMENSIONS] + [""]
    failures = results.get("failures") or []
    if failures:
        lines += [f"## Failures ({len(failures)})", "", "| scene | error |", "|---|---|"]
        lines += [f"| {f['case']} | {' '.join(str(f['error']).split())[:200].replace('|', '/')} |" for f in failures]
        lines.append("")
    lines += ["## Scenes", "", "| scene | score | " + " | ".join(DIMENSIONS) + " | rounds | NSP fallbacks |",
              "|---|---|" + "---|" * (len(DIMENSIONS) + 2)]  # fmt: skip
    for case_id, case in cases.items():
        critique = case.get("critique") or {}
        dims = [format_number((critique.get(d) or {}).get("score")) for d in DIMENSIONS]
        lines.append(f"| [{case_id}](conversations.html#{anchor(case_id)}) | {format_number(case.get('score'))} | "
                     + " | ".join(dims) + f" | {case.get('rounds', 'n/a')} | {case.get('nsp_fallbacks', 'n/a')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def conversations_html(results: dict) -> str:
    """Every simulated scene, its messages and each dimension's flaws, one `<section id=...>` per scene."""
    sections = []
    for case_id, case in results["cases"].items():
        parts = [f'<section id="{anchor(case_id)}"><h2>{html.escape(case_id)}</h2>']
        parts.append(f'<p class="meta">score {format_number(case.get("score"))}'
                     + (f"; stopped: {html.escape(case['error'])}" if case.get("error") else "") + "</p>")  # fmt: skip
        for message in case.get("simulation", []):
            side = "user" if message["role"] == "Environment" else "assistant"
            parts.append(f'<div class="turn {side}"><b>{html.escape(message["role"])}</b>: '
                         f"{html.escape(message['content'])}</div>")  # fmt: skip
        for dimension in DIMENSIONS:
            entry = (case.get("critique") or {}).get(dimension)
            if entry is None:
                error = (case.get("errors") or {}).get(dimension)
                if error:
                    parts.append(f'<p class="meta">{html.escape(dimension)}: failed ({html.escape(error)})</p>')
                continue
            rows = "".join(
                f"<tr><td>{html.escape(str(f.get('type', '')))}</td><td>{html.escape(str(f.get('severity')))}</td>"
                f"<td>{html.escape(str(f.get('instance', '')))}</td></tr>"
                for f in entry["flaws"]
            )
            parts.append(f"<table><tr><th>{html.escape(dimension)}: {format_number(entry['score'])}</th>"
                         f"<th>severity</th><th>instance</th></tr>{rows}</table>")  # fmt: skip
        sections.append("\n".join(parts) + "</section>")
    return page("CoSER conversations", "<h1>CoSER conversations</h1>\n" + "\n".join(sections) + "\n")


def write_coser_report(folder: str | Path) -> dict[str, Path]:
    """Write the report of a `rolellm coser run` folder from its `results.json`: `report.md`, `report.html`,
    `conversations.html`, `dimensions.svg` and one `scenes_<dimension>.svg` per dimension.

    Returns:
        `dict[str, Path]`: the files written, by name without suffix.
    """
    folder = Path(folder)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    written = {"dimensions": folder / "dimensions.svg"}
    means = {d: results["scores"].get(d) for d in DIMENSIONS}
    written["dimensions"].write_text(bar_chart(means, "mean score (0-100)", "CoSER: mean per dimension"), "utf-8")
    for dimension in DIMENSIONS:
        per_scene = {case_id: (case.get("critique") or {}).get(dimension, {}).get("score")
                     for case_id, case in results["cases"].items()}  # fmt: skip
        name = f"scenes_{_slug(dimension)}"
        written[name] = folder / f"{name}.svg"
        written[name].write_text(bar_chart(per_scene, "score (0-100)", f"{dimension}, per scene"), "utf-8")
    markdown = coser_report_markdown(results)
    written["report"] = folder / "report.md"
    written["report"].write_text(markdown, encoding="utf-8")
    written["html"] = folder / "report.html"
    written["html"].write_text(markdown_to_html(markdown, folder, title="CoSER evaluation"), encoding="utf-8")
    written["conversations"] = folder / "conversations.html"
    written["conversations"].write_text(conversations_html(results), encoding="utf-8")
    return written
