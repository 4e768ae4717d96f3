"""The HTML side of every report: Markdown rendered as a self-contained HTML page, shared by the benchmark's
`results.html` and the multi-turn `report.html`.

Every report is written once, in Markdown (`report.md`, `results.md`), and `markdown_to_html` renders the subset
the reports use (headings, tables, paragraphs, links, images) as an HTML page; an image that is an SVG file of the
report's folder is embedded as it is, so its text (Chinese role names included) is drawn by the browser.

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
import re
from collections.abc import Mapping
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


def format_number(value, digits: int = 2) -> str:
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
