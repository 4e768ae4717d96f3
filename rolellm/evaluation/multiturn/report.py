"""The report of a `rolellm dialogue` folder: `report.md` and `report.html` (per-dimension, per-role and per-judge
tables, radar charts, answer lengths, agreement) and `transcripts.html`, the conversations as a page with one anchor
per conversation (`transcripts.html#<id>`), the target of the links in the report."""

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from rolellm.evaluation.charts import bar_chart, radar_chart
from rolellm.evaluation.multiturn.dialogue import TRANSCRIPTS_NAME, read_transcripts
from rolellm.evaluation.pages import format_number, human_agreement_markdown, markdown_to_html, page


def transcripts_html(transcripts: Sequence[Mapping], scores: Mapping | None = None) -> str:
    """A page of the conversations, one section per transcript with the anchor `#<id>`: the scenario, the turns,
    and, with `scores` (`scores.json` of `judge_transcripts`), each judge's scores and rationales."""
    items = {item["id"]: item for item in (scores or {}).get("items", [])}
    sections = []
    for transcript in transcripts:
        scenario = transcript.get("scenario") or {}
        role = html.escape(transcript["role"])
        parts = [
            f'<section id="{html.escape(str(transcript["id"]))}"><h2>{role}: {html.escape(str(transcript["id"]))}</h2>'
        ]
        situation = scenario.get("situation") or ""
        persona = scenario.get("user_persona") or ""
        meta = [f"model {transcript.get('model', '?')}", f"user {transcript.get('user_model', '?')}"]
        if not transcript.get("complete", True):
            meta.append(f"stopped early: {transcript.get('error')}")
        parts.append(f'<p class="meta">{html.escape("; ".join(meta))}</p>')
        if situation or persona:
            parts.append(f"<p><b>Situation</b>: {html.escape(situation)}<br><b>User</b>: {html.escape(persona)}</p>")
        if transcript.get("greeting"):
            parts.append(f'<div class="turn assistant"><b>{role}</b>: {html.escape(transcript["greeting"])}</div>')
        for turn in transcript["turns"]:
            parts.append(f'<div class="turn user"><b>User</b>: {html.escape(turn["user"])}</div>')
            parts.append(f'<div class="turn assistant"><b>{role}</b>: {html.escape(turn["assistant"])}</div>')
        item = items.get(transcript["id"])
        for judge, verdict in (item or {}).get("judges", {}).items():
            if "error" in verdict:
                parts.append(f'<p class="meta">{html.escape(judge)}: failed ({html.escape(verdict["error"])})</p>')
                continue
            rows = "".join(
                f"<tr><td>{html.escape(d)}</td><td>{score}</td><td>{html.escape(verdict['rationales'].get(d, ''))}"
                "</td></tr>"
                for d, score in verdict["scores"].items()
            )
            parts.append(
                f"<table><tr><th>{html.escape(judge)}</th><th>score</th><th>rationale</th></tr>{rows}</table>"
            )
        sections.append("\n".join(parts) + "</section>")
    return page("Transcripts", "<h1>Transcripts</h1>\n" + "\n".join(sections) + "\n")


def dialogue_report_markdown(scores: Mapping | None, transcripts: Sequence[Mapping], agreement: Mapping | None) -> str:
    """The Markdown of a multi-turn evaluation: per-dimension, per-role and per-judge tables with answer lengths,
    the judges' agreement with each other (and with people, given `agreement`), radar charts and transcript links."""
    roles = list(dict.fromkeys(t["role"] for t in transcripts))
    played = sum(len(t["turns"]) for t in transcripts)
    lines = ["# Multi-turn evaluation", ""]
    models = sorted({str(t.get("model")) for t in transcripts})
    lines += [f"{len(transcripts)} conversations, {played} turns, {len(roles)} roles; model {', '.join(models)}. "
              "Readable conversations: [transcripts.html](transcripts.html).", ""]  # fmt: skip
    if scores is None:
        return "\n".join(lines + ["No judge scored these conversations (no `--judge_model`).", ""])
    summary, agreement_between = scores["summary"], scores.get("agreement", {})
    lo, hi = scores["scale"]
    lines += [f"## Scores per dimension (judges: {', '.join(scores['judges'])}; scale {lo}-{hi})", ""]
    lines += ["| dimension | mean | n | Krippendorff's alpha | judges' mean Spearman | length-score Spearman |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for dimension, row in summary["per_dimension"].items():
        between = agreement_between.get(dimension, {})
        cells = [format_number(row["mean"]), str(row["n"]), format_number(between.get("krippendorff_alpha"), 3),
                 format_number(between.get("mean_spearman"), 3), format_number(row["length_spearman"], 3)]  # fmt: skip
        lines.append(f"| {dimension} | " + " | ".join(cells) + " |")
    length = summary["length"]
    lines += ["", f"Overall {format_number(summary['overall'])}; mean answer length "
              f"{format_number(length['chars_per_answer'], 1)} "
              f"characters; {scores['failures']['count']} judge answers failed.", ""]  # fmt: skip
    dimensions = scores["dimensions"]
    lines += ["## Per role", "", "| role | " + " | ".join(dimensions) + " | chars/answer |",
              "|---|" + "---|" * (len(dimensions) + 1)]  # fmt: skip
    for role, row in summary["per_role"].items():
        lines.append(f"| {role} | " + " | ".join(format_number(row[d]) for d in dimensions)
                     + f" | {format_number(row['chars_per_answer'], 1)} |")  # fmt: skip
    lines += ["", "![Scores per role](radar.svg)", "", "![Answer length per role](lengths.svg)", ""]
    lines += ["## Per judge", "", "| judge | " + " | ".join(dimensions) + " |", "|---|" + "---|" * len(dimensions)]
    for judge, row in summary["per_judge"].items():
        lines.append(f"| {judge} | " + " | ".join(format_number(row[d]) for d in dimensions) + " |")
    lines.append("")
    if agreement:
        lines += human_agreement_markdown(agreement)
    lines += ["## Conversations", "", "| conversation | role | " + " | ".join(dimensions) + " | chars/answer |",
              "|---|---|" + "---|" * (len(dimensions) + 1)]  # fmt: skip
    for item in scores["items"]:
        link = f"[{item['id']}](transcripts.html#{item['id']})"
        lines.append(f"| {link} | {item['role']} | " + " | ".join(format_number(item["scores"][d]) for d in dimensions)
                     + f" | {format_number(item['length']['chars_per_answer'], 1)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_dialogue_report(folder: str | Path) -> dict[str, Path]:
    """Write the report of a `rolellm dialogue` folder from its `transcripts.jsonl`, `scores.json` (when judged) and
    `agreement.json` (when `rolellm judge agreement` was run on it): `report.md`, `report.html` (charts embedded as
    SVG), `transcripts.html`, and, with scores, `radar.svg` and `lengths.svg`.

    Returns:
        `dict[str, Path]`: the files written, by name without suffix.
    """
    folder = Path(folder)
    transcripts = read_transcripts(folder / TRANSCRIPTS_NAME)
    scores, agreement = (_read_json(folder / name) for name in ("scores.json", "agreement.json"))
    written = {}
    if scores is not None:
        per_role = {
            role: {d: row[d] for d in scores["dimensions"]} for role, row in scores["summary"]["per_role"].items()
        }
        lengths = {role: row["chars_per_answer"] for role, row in scores["summary"]["per_role"].items()}
        written["radar"] = folder / "radar.svg"
        written["radar"].write_text(radar_chart(per_role, tuple(scores["scale"]), lengths), encoding="utf-8")
        written["lengths"] = folder / "lengths.svg"
        written["lengths"].write_text(bar_chart(lengths, "characters per answer", "Answer length per role"), "utf-8")
    markdown = dialogue_report_markdown(scores, transcripts, agreement)
    written["report"] = folder / "report.md"
    written["report"].write_text(markdown, encoding="utf-8")
    written["html"] = folder / "report.html"
    written["html"].write_text(markdown_to_html(markdown, folder, title="Multi-turn evaluation"), encoding="utf-8")
    written["transcripts"] = folder / "transcripts.html"
    written["transcripts"].write_text(transcripts_html(transcripts, scores), encoding="utf-8")
    return written
