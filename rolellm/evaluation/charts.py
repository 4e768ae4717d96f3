"""SVG charts of the evaluation reports, written directly, with their text kept as text.

Every label is a `<text>` element in the fonts of `CJK_FONTS` (then the browser's own), so the browser showing a
report draws Chinese role names with its fonts, whatever fonts the machine that wrote it has (a PNG drawn where no CJK
font is installed shows boxes); the charts are embedded in the HTML reports as they are. Written without a plotting
library: a report draws several, and matplotlib took 80-350 ms for each.

>>> svg = radar_chart({"孙悟空": {"knowledge": 4.0, "memory": 3.5, "engagement": 5.0}}, scale=(1, 5))
>>> "孙悟空" in svg and svg.lstrip().startswith("<svg")
True
"""

import functools
import html
import math
import unicodedata


CJK_FONTS = [
    "Noto Sans CJK SC",
    "Noto Sans SC",
    "Source Han Sans SC",
    "WenQuanYi Zen Hei",
    "SimHei",
    "Microsoft YaHei",
]
# the colors of a chart's series (runs compared), in turn
PALETTE = [
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
    "#CCB974",
    "#64B5CD",
]
COLORS = {"raw": PALETTE[0], "lc": PALETTE[1], "bar": PALETTE[2]}


def radar_chart(per_role: dict[str, dict[str, float | None]], scale=(1, 5), lengths: dict | None = None) -> str:
    """One radar per role: its mean score on each dimension. A missing score (every verdict failed) is no point:
    its axis is labelled "n/a", and a role with no score at all shows "n/a" in its middle. SVG written directly,
    its text as `<text>` (see `bar_chart`); the first dimension points up, the others follow clockwise.

    Args:
        per_role (`dict[str, dict[str, float | None]]`): role -> dimension -> mean score.
        scale (`tuple[int, int]`, *optional*, defaults to `(1, 5)`): the score range (the radius).
        lengths (`dict[str, float]`, *optional*): role -> mean answer length in characters, shown under the name.
    """
    roles = list(per_role)
    dimensions = list(next(iter(per_role.values()))) if roles else []
    columns = min(3, max(len(roles), 1))
    cell_width, cell_height, radius = 259.0, 245.0, 72.0  # points: 3.6 x 3.4 inches a role
    width, height = cell_width * columns, cell_height * -(-max(len(roles), 1) // columns)
    inner = scale[0] - (scale[1] - scale[0]) / 8  # room in the middle below the lowest score
    ticks = list(range(scale[0], scale[1] + 1, max(1, (scale[1] - scale[0]) // 5)))  # 1-5: every point; 0-100: by 20
    parts = []
    for index, role in enumerate(roles):
        cx = cell_width * (index % columns + 0.5)
        cy = cell_height * (index // columns) + 58 + radius
        center = (cx, cy)
        point = functools.partial(_radar_point, center, radius, len(dimensions), inner, scale[1])
        polygon = functools.partial(_radar_polygon, center, radius, len(dimensions), inner, scale[1])
        for tick in ticks:  # the rings, and their values along the first axis
            parts.append(f'<polygon points="{polygon(tick)}" fill="none" stroke="#ddd" stroke-width="0.8"/>')
            x, y = point(0, tick)
            parts.append(_text(x + 3, y + 3, str(tick), 6))
        values = [per_role[role][d] for d in dimensions]
        for k, (dimension, value) in enumerate(zip(dimensions, values)):
            x, y = point(k, scale[1])
            parts.append(
                f'<line x1="{cx:.1f}" y1="{cy:.1f}" x2="{x:.1f}" y2="{y:.1f}" stroke="#ddd" stroke-width="0.8"/>'
            )
            lx, ly = point(k, scale[1] + (scale[1] - inner) * 0.12)
            anchor = "middle" if abs(lx - cx) < 1 else "start" if lx > cx else "end"
            label = dimension.replace("_", " ") + (" (n/a)" if value is None else "")
            parts.append(_text(lx, ly + 3, label, 7, anchor=anchor))
        scored = [(k, v) for k, v in enumerate(values) if v is not None]
        if scored and len(scored) == len(values):
            shape = " ".join(f"{x:.1f},{y:.1f}" for x, y in (point(k, v) for k, v in scored))
            parts.append(f'<polygon points="{shape}" fill="{COLORS["raw"]}" fill-opacity="0.25" '
                         f'stroke="{COLORS["raw"]}" stroke-width="1.5"/>')  # fmt: skip
        for (k, v), (k_next, v_next) in zip(scored, scored[1:]):  # lines between neighbouring scores only
            if k_next == k + 1:
                (x1, y1), (x2, y2) = point(k, v), point(k_next, v_next)
                parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                             f'stroke="{COLORS["raw"]}" stroke-width="1.5"/>')  # fmt: skip
        for k, v in scored:
            x, y = point(k, v)
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{COLORS["raw"]}"/>')
        if not scored:
            parts.append(_text(cx, cy + 4, "n/a", 12, anchor="middle"))
        length = (lengths or {}).get(role)
        top = cell_height * (index // columns) + 18
        parts.append(_text(cx, top, role, 10, anchor="middle"))
        if length is not None:
            parts.append(_text(cx, top + 13, f"{length:.0f} chars/answer", 10, anchor="middle"))
    return _svg(width, height, parts)


def _radar_point(center, radius, count, inner, outer, k: int, value: float) -> tuple[float, float]:
    """Where `value` lies on axis `k` of `count` (the first up, then clockwise): `inner` at the center, `outer` at
    `radius`."""
    angle, r = 2 * math.pi * k / max(count, 1), radius * (value - inner) / (outer - inner)
    return center[0] + r * math.sin(angle), center[1] - r * math.cos(angle)


def _radar_polygon(center, radius, count, inner, outer, value: float) -> str:
    """The `points` of the ring at `value` on every axis."""
    corners = (_radar_point(center, radius, count, inner, outer, k, value) for k in range(count))
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in corners)


def win_rate_chart(entries: list[dict]) -> str:
    """Horizontal bars: each comparison's raw and length-controlled win rate with their confidence intervals, and
    the 50% line (a tie with the baseline). SVG written directly (`grouped_bar_chart`).

    Args:
        entries (`list[dict]`): `label` and the judge's result (`win_rate`, `ci_low`, `ci_high`, `lc_win_rate`,
            `lc_ci_low`, `lc_ci_high`; `None` when nothing was judged).
    """
    kinds = {"raw": "", "length-controlled": "lc_"}
    rows, errors = {}, {}
    for entry in entries:
        rows[entry["label"]] = {
            name: None if entry[f"{key}win_rate"] is None else 100 * entry[f"{key}win_rate"]
            for name, key in kinds.items()
        }
        errors[entry["label"]] = {
            name: (100 * (entry[f"{key}ci_low"] or 0), 100 * (entry[f"{key}ci_high"] or 0))
            for name, key in kinds.items()
        }
    colors = {"raw": COLORS["raw"], "length-controlled": COLORS["lc"]}
    return grouped_bar_chart(rows, "win rate (%), ties count half; bars: 95% CI", "Win rate against the baseline",
                             colors, shown=lambda number: f"{number:.1f}", errors=errors, reference=50)  # fmt: skip


def bar_chart(values: dict[str, float | None], xlabel: str, title: str) -> str:
    """Horizontal bars of one value per label (answer lengths per role or per model, CoSER's scores); `None` is an
    empty bar marked "n/a". Written as SVG directly (a report draws dozens: matplotlib took 80 ms for each), its
    text as `<text>` in the fonts of `CJK_FONTS`, then the browser's own.

    >>> svg = bar_chart({"孙悟空": 42.0, "Po": None}, "characters per answer", "Answer length")
    >>> [text for text in ("孙悟空", ">42<", ">n/a<") if text not in svg]
    []
    """
    rows = {label: {"": value} for label, value in values.items()}
    return grouped_bar_chart(rows, xlabel, title, {"": COLORS["bar"]}, shown=lambda number: f"{number:.0f}")


def grouped_bar_chart(
    rows: dict[str, dict[str, float | None]],
    xlabel: str,
    title: str,
    colors: dict[str, str],
    shown=lambda number: f"{number:.2f}",
    errors: dict[str, dict[str, tuple[float, float]]] | None = None,
    reference: float | None = None,
) -> str:
    """Horizontal bars, a group of them per row: `rows` is label -> series -> value (the series in `colors`'
    order, each in its color, named in a legend when there are several); `None` is an empty bar marked "n/a", and
    `shown(value)` is the text at the end of a bar. `errors` (label -> series -> (low, high)) draws an interval
    across a bar, and `reference` a dashed line at that value. SVG written directly, its text as `<text>` (see
    `bar_chart`).

    >>> svg = grouped_bar_chart({"孙悟空": {"CUS": 0.5, "SPE": None}}, "ROUGE-L", "Per role",
    ...                         {"CUS": "#4C72B0", "SPE": "#C44E52"})
    >>> [text for text in ("孙悟空", ">0.50<", ">n/a<", ">CUS<", ">SPE<") if text not in svg]
    []
    """
    labels, series, errors = list(rows), list(colors), errors or {}
    numbers = [rows[label].get(name) or 0.0 for label in labels for name in series]
    numbers += [end for spans in errors.values() for span in spans.values() for end in span]
    numbers += [] if reference is None else [reference]
    ticks = _nice_ticks(min([0.0, *numbers]), max([0.0, *numbers]))
    low, high = ticks[0], ticks[-1]
    bar = 23.2 if len(series) == 1 else 11.0  # points: the bars of a group, with a fifth of a row between groups
    row = bar * len(series) / 0.8
    left = 14 + max([_text_width(label, 10) for label in labels] or [0])
    width, plot_right = 504.0, 504.0 - 40  # 7 inches; room right of the longest bar for its value
    legend = []  # (x, y) of each series' entry, in lines that fit the width
    place, line = 10.0, 0
    for name in series if series != [""] else []:  # one unnamed series: no legend
        entry = 24 + _text_width(name, 9)
        if place > 10 and place + entry > width - 10:
            place, line = 10.0, line + 1
        legend.append((place, 33.0 + 14 * line))
        place += entry
    top, bottom = 34.0 + (16 + 14 * line if legend else 0), 46.0  # room for the title, the legend, the axis
    height = top + bottom + row * max(len(labels), 1)
    x = lambda value: left + (value - low) / (high - low) * (plot_right - left)  # noqa: E731
    parts = [_text(width / 2, 20, title, 12, anchor="middle")]
    for name, (place, y) in zip(series, legend):
        parts.append(f'<rect x="{place:.1f}" y="{y:g}" width="9" height="9" fill="{colors[name]}"/>')
        parts.append(_text(place + 12, y + 8, name, 9))
    for tick in ticks:
        parts.append(f'<line x1="{x(tick):.1f}" y1="{top:g}" x2="{x(tick):.1f}" y2="{height - bottom + 4:g}" '
                     'stroke="#ddd" stroke-width="0.8"/>')  # fmt: skip
        parts.append(_text(x(tick), height - bottom + 15, f"{tick:g}", 9, anchor="middle"))
    for index, label in enumerate(labels):
        y = top + row * index
        parts.append(_text(left - 6, y + row / 2 + 3.5, label, 10, anchor="end"))
        for k, name in enumerate(series):
            value = rows[label].get(name)
            number = value or 0.0
            start, end = sorted((x(0.0), x(number)))
            y_bar = y + 0.1 * row + k * bar
            parts.append(f'<rect x="{start:.1f}" y="{y_bar:.1f}" width="{end - start:.1f}" height="{bar:.1f}" '
                         f'fill="{colors[name]}"/>')  # fmt: skip
            middle, after = y_bar + bar / 2, x(max(number, 0.0))
            if (span := errors.get(label, {}).get(name)) is not None and value is not None:
                low_x, high_x = x(span[0]), x(span[1])
                parts.append(f'<path d="M{low_x:.1f} {middle:.1f}H{high_x:.1f}M{low_x:.1f} {middle - 3:.1f}v6'
                             f'M{high_x:.1f} {middle - 3:.1f}v6" stroke="black" stroke-width="0.8"/>')  # fmt: skip
                after = max(after, high_x)
            text = "n/a" if value is None else shown(number)
            parts.append(_text(after + 3, middle + 2.5, text, 7))
    if reference is not None:
        parts.append(f'<line x1="{x(reference):.1f}" y1="{top:g}" x2="{x(reference):.1f}" y2="{height - bottom + 4:g}" '
                     'stroke="grey" stroke-width="1" stroke-dasharray="4 3"/>')  # fmt: skip
    parts.append(f'<line x1="{left:g}" y1="{height - bottom + 4:g}" x2="{plot_right:g}" y2="{height - bottom + 4:g}" '
                 'stroke="black" stroke-width="0.8"/>')  # fmt: skip
    parts.append(_text((left + plot_right) / 2, height - 12, xlabel, 10, anchor="middle"))
    return _svg(width, height, parts)


def _svg(width: float, height: float, parts: list[str]) -> str:
    """A chart of `width` x `height` points drawn by `parts`: its `<svg>` element (the fonts of `CJK_FONTS`, then
    DejaVu Sans, then the browser's) on a white background."""
    font = ", ".join([*(f"'{name}'" for name in CJK_FONTS), "'DejaVu Sans'", "sans-serif"])
    opening = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}pt" height="{height:g}pt" '
        f'viewBox="0 0 {width:g} {height:g}" font-family="{font}">',
        f'<rect width="{width:g}" height="{height:g}" fill="white"/>',
    ]
    return "\n".join([*opening, *parts, "</svg>"]) + "\n"


def _nice_ticks(low: float, high: float) -> list[float]:
    """Round ticks from at most `low` to at least `high`, 1, 2 or 5 times a power of ten apart (about five)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / 5
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(factor * power for factor in (1, 2, 5, 10) if factor * power >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [round(k * step, 12) for k in range(first, last + 1)]


def _text_width(text: str, size: float) -> float:
    """The width of `text` at `size` points, estimated: a wide (CJK) character one em, any other 0.6 em."""
    return size * sum(1.0 if unicodedata.east_asian_width(char) in "WF" else 0.6 for char in text)


def _text(x: float, y: float, text: str, size: float, anchor: str = "start") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}">{html.escape(text)}</text>'
