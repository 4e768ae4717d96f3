"""The HTML side of the reports: Markdown reports rendered as self-contained HTML pages, and transcripts as a page.

Every report is written once, in Markdown (`report.md`, `results.md`), and `markdown_to_html` renders the subset
the reports use (headings, tables, paragraphs, links, images) as an HTML page; an image that is an SVG file of the
report's folder is embedded as it is, so its text (Chinese role names included) is drawn by the browser.
`transcripts_html` renders `transcripts.jsonl` as a readable page with one anchor per conversation
(`transcripts.html#<id>`), the target of the links in the reports.

>>> page = markdown_to_html("## Scores\\n\\n| role | mean |\\n|---|---|\\n| 孙悟空 | 4.00 |", title="t")
>>> print(page.split("<body>")[1])
<BLANKLINE>
<h2>Scores</h2>
<table>
<tr><th>role</th><th>mean</th></tr>
<tr><td>孙悟空</td><td>4.00</td></tr>
</table>
</body></html>
<BLANKLINE>
"""

import html
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path


STYLE = """
body { font-family: system-ui, "Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; line-height: 1.45; color: #222; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
svg { max-width: 100%; height: auto; }
.turn { margin: 0.4em 0; padding: 0.4em 0.7em; border-radius: 6px; white-space: pre-wrap; }
.user { background: #eef3fb; } .assistant { background: #f6f1e7; } .meta { color: #666; font-size: 0.9em; }
"""
_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")
_IMAGE_LINE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")


def _inline(text: str) -> str:
    """Escape `text` and turn `[text](href)` into links and `` `code` `` into `<code>`."""
    parts, last = [], 0
    for match in _LINK.finditer(text):
        parts.append(html.escape(text[last : match.start()]))
        bang, label, href = match.groups()
        if bang:
            parts.append(f'<img alt="{html.escape(label)}" src="{html.escape(href)}">')
        else:
            parts.append(f'<a href="{html.escape(href)}">{html.escape(label)}</a>')
        last = match.end()
    parts.append(html.escape(text[last:]))
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", "".join(parts))


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def page(title: str, body: str) -> str:
    """A self-contained HTML page (UTF-8, the report style)."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>\n{body}</body></html>\n"
    )


def markdown_to_html(markdown: str, folder: str | Path | None = None, title: str = "rolellm report") -> str:
    """Render the Markdown of a report as an HTML page; `![alt](name.svg)` lines whose file is in `folder` are
    embedded as inline SVG, other images stay links to their files."""
    lines, out, index = markdown.splitlines(), [], 0
    while index < len(lines):
        line = lines[index].rstrip()
        if not line:
            index += 1
            continue
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{_inline(line[level:].strip())}</h{level}>")
        elif line.startswith("|"):
            block = []
            while index < len(lines) and lines[index].startswith("|"):
                block.append(lines[index])
                index += 1
            header, rows = _cells(block[0]), [_cells(row) for row in block[2:]]
            out.append("<table>")
            out.append("<tr>" + "".join(f"<th>{_inline(cell)}</th>" for cell in header) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{_inline(cell)}</td>" for cell in row) + "</tr>" for row in rows]
            out.append("</table>")
            continue
        elif (image := _IMAGE_LINE.match(line)) and folder is not None and image[2].endswith(".svg"):
            path = Path(folder) / image[2]
            svg = path.read_text(encoding="utf-8") if path.is_file() else None
            out.append(f"<figure>{svg}</figure>" if svg else f"<p>{_inline(line)}</p>")
        else:
            paragraph = [line]
            while index + 1 < len(lines) and lines[index + 1].strip() and lines[index + 1][0] not in "#|!":
                index += 1
                paragraph.append(lines[index].rstrip())
            out.append(f"<p>{_inline(' '.join(paragraph)).replace(chr(92) + '*', '*')}</p>")
        index += 1
    return page(title, "\n".join(out) + "\n")


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


def _number(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _interval(value, ci) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci and ci[0] is not None else f"{value:.3f}"


def human_agreement_markdown(agreement: Mapping) -> list[str]:
    """The agreement of a judge with people (`agreement.json` of `rolellm judge agreement`) as Markdown lines."""
    lines = ["## Agreement with people", "", "| | n | Spearman [CI] | Kendall [CI] |", "|---|---|---|---|"]
    for dimension, row in agreement.get("scores", {}).items():
        lines.append(f"| {dimension} | {row['n']} | {_interval(row['spearman'], row['spearman_ci'])} | "
                     f"{_interval(row['kendall'], row['kendall_ci'])} |")  # fmt: skip
    if "choices" in agreement:
        choices = agreement["choices"]
        lines.append(
            f"| pairwise choice | {choices['n']} | Cohen's kappa "
            f"{_interval(choices['kappa'], choices['kappa_ci'])} | |"
        )
    return lines + [""]


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
        cells = [_number(row["mean"]), str(row["n"]), _number(between.get("krippendorff_alpha"), 3),
                 _number(between.get("mean_spearman"), 3), _number(row["length_spearman"], 3)]  # fmt: skip
        lines.append(f"| {dimension} | " + " | ".join(cells) + " |")
    length = summary["length"]
    lines += ["", f"Overall {_number(summary['overall'])}; mean answer length "
              f"{_number(length['chars_per_answer'], 1)} "
              f"characters; {scores['failures']['count']} judge answers failed.", ""]  # fmt: skip
    dimensions = scores["dimensions"]
    lines += ["## Per role", "", "| role | " + " | ".join(dimensions) + " | chars/answer |",
              "|---|" + "---|" * (len(dimensions) + 1)]  # fmt: skip
    for role, row in summary["per_role"].items():
        lines.append(f"| {role} | " + " | ".join(_number(row[d]) for d in dimensions)
                     + f" | {_number(row['chars_per_answer'], 1)} |")  # fmt: skip
    lines += ["", "![Scores per role](radar.svg)", "", "![Answer length per role](lengths.svg)", ""]
    lines += ["## Per judge", "", "| judge | " + " | ".join(dimensions) + " |", "|---|" + "---|" * len(dimensions)]
    for judge, row in summary["per_judge"].items():
        lines.append(f"| {judge} | " + " | ".join(_number(row[d]) for d in dimensions) + " |")
    lines.append("")
    if agreement:
        lines += human_agreement_markdown(agreement)
    lines += ["## Conversations", "", "| conversation | role | " + " | ".join(dimensions) + " | chars/answer |",
              "|---|---|" + "---|" * (len(dimensions) + 1)]  # fmt: skip
    for item in scores["items"]:
        link = f"[{item['id']}](transcripts.html#{item['id']})"
        lines.append(f"| {link} | {item['role']} | " + " | ".join(_number(item["scores"][d]) for d in dimensions)
                     + f" | {_number(item['length']['chars_per_answer'], 1)} |")  # fmt: skip
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
    from rolellm.evaluation.charts import bar_chart, radar_chart
    from rolellm.evaluation.dialogue import TRANSCRIPTS_NAME, read_transcripts

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
