"""The report's SVG chart kit: bar and line charts drawn as inline SVG (no script, no file).

    svg = chart(["0", "1"], [Series("rate", [0.4, 0.2], COLOR_RUN)], ChartSpec("t", "x", "y"))

Every text in the SVG goes through `markupsafe.escape`; a chart comes back as `Markup`, which
the autoescaping page template inserts as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from markupsafe import Markup, escape

COLOR_RUN = "#2563eb"
COLOR_BASELINE = "#9ca3af"
COLOR_BAND = "#0d9488"
COLOR_UP = "#16a34a"
COLOR_DOWN = "#dc2626"


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    color: str
    dashed: bool = False
    # (low, high) per value: drawn as an error bar (the 95% interval) over a bar; None: none
    errors: Sequence[tuple[float, float] | None] | None = None


@dataclass(frozen=True)
class ChartSpec:
    title: str
    x_label: str
    y_label: str
    kind: Literal["bar", "line"] = "bar"
    width: int = 560
    height: int = 280
    y_min: float = 0.0
    y_max: float | None = None
    value_format: Callable[[float], str] = str
    tooltips: Sequence[str] | None = None  # one per category, appended to each mark's title
    diverging: bool = False  # bars colored by sign (up green, down red)
    edge_labels: Sequence[str] | None = None  # len(categories) + 1 labels at the bin edges
    sublabels: Sequence[str] | None = None  # a second, smaller line under each category label
    whole: bool = False  # ticks at whole numbers (counts)
    note: str = ""  # said across the plot (with no category: "no data")


_Y = Callable[[float], float]  # a value's y in the plot
_MARGIN_LEFT = 60
_MARGIN_RIGHT = 16
_MARGIN_TOP = 30
_MARGIN_BOTTOM = 50
_CHAR_PX = 6.2  # average glyph width at font-size 11


def nice_ticks(low: float, high: float, count: int = 5, min_step: float = 0.0) -> list[float]:
    """Round tick values covering [low, high] (about `count` of them; multiples of `min_step`)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    if min_step:
        step = math.ceil(step / min_step - 1e-9) * min_step
    start = math.floor(low / step + 1e-9) * step
    ticks = []
    value = start
    while value <= high + step * 1e-6:
        ticks.append(round(value, 10) + 0.0)  # + 0.0: no "-0" label
        value += step
    if ticks[-1] < high - 1e-12:
        ticks.append(round(value, 10))
    return ticks


def _axis_range(spec: ChartSpec, series: Sequence[Series]) -> tuple[float, float, list[float]]:
    values = [v for s in series for v in s.values if v is not None]
    values += [v for s in series for e in (s.errors or ()) if e is not None for v in e]
    high = spec.y_max if spec.y_max is not None else max([0.0, *values]) * 1.12
    ticks = nice_ticks(min([spec.y_min, *values]), high, min_step=1.0 if spec.whole else 0.0)
    return ticks[0], ticks[-1], ticks


def chart(categories: Sequence[str], series: Sequence[Series], spec: ChartSpec) -> Markup:
    """An inline SVG bar or line chart with axes, ticks, labels and per-mark tooltips."""
    width, height = spec.width, spec.height
    plot_w = width - _MARGIN_LEFT - _MARGIN_RIGHT
    plot_h = height - _MARGIN_TOP - _MARGIN_BOTTOM - (12 if spec.sublabels else 0)
    low, high, ticks = _axis_range(spec, series)

    def y(value: float) -> float:
        return _MARGIN_TOP + (high - value) / (high - low) * plot_h

    n = max(1, len(categories))
    group = plot_w / n
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(spec.title)}">',
        f"<title>{escape(spec.title)}</title>",
    ]
    for tick in ticks:
        parts.append(_rule("grid", width, y(tick)))
        parts.append(_text("tick", _MARGIN_LEFT - 6, y(tick) + 4, spec.value_format(tick), "end"))
    zero = y(0.0) if low <= 0 <= high else y(low)
    parts.append(_rule("axis", width, zero))
    parts.extend(_x_labels(categories, spec, group, _MARGIN_TOP + plot_h))
    marks = _bars if spec.kind == "bar" else _lines
    parts.extend(marks(categories, series, spec, y, group, zero))
    middle = _MARGIN_TOP + plot_h / 2
    parts.append(_text("label", _MARGIN_LEFT + plot_w / 2, height - 8, spec.x_label))
    rotate = f' transform="rotate(-90 14 {middle:.1f})"'
    parts.append(_text("label", 14, middle, spec.y_label, rotate=rotate))
    if len(series) > 1:
        parts.append(_legend(series, width))
    if note := spec.note or ("" if categories else "no data"):
        parts.append(_text("label", width / 2, middle, note))
    parts.append("</svg>")
    # Every part above is markup written here, with each text from outside escaped.
    return Markup("".join(parts))


def _text(
    kind: str, x: float, y: float, text: str, anchor: str = "middle", rotate: str = ""
) -> str:
    """A `<text>` element of class `kind` (the text escaped)."""
    return (
        f'<text class="{kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{rotate}>'
        f"{escape(text)}</text>"
    )


def _rule(kind: str, width: int, y: float) -> str:
    """A horizontal line across the plot."""
    x2 = width - _MARGIN_RIGHT
    return f'<line class="{kind}" x1="{_MARGIN_LEFT}" x2="{x2}" y1="{y:.1f}" y2="{y:.1f}"/>'


def _x_labels(categories: Sequence[str], spec: ChartSpec, group: float, base_y: float) -> list[str]:
    """Category (or bin-edge) labels under the bars, every k-th when they would overlap."""
    labels = list(spec.edge_labels) if spec.edge_labels else list(categories)
    offset = 0.0 if spec.edge_labels else 0.5
    subs = list(spec.sublabels or [])
    widest: float = max((len(label) for label in labels), default=1)
    if subs:
        widest = max(widest, max(len(sub) for sub in subs) * 0.85)
    plot_w = group * max(1, len(categories))
    step = max(1, math.ceil(len(labels) * (widest * _CHAR_PX + 6) / plot_w))
    parts = []
    for i, label in enumerate(labels):
        if i % step == 0:
            x = _MARGIN_LEFT + group * (i + offset)
            parts.append(_text("tick", x, base_y + 16, label))
            if i < len(subs):
                parts.append(_text("sub", x, base_y + 29, subs[i]))
    return parts


def _mark_title(spec: ChartSpec, category: str, name: str, value: float, index: int) -> str:
    extra = f" — {spec.tooltips[index]}" if spec.tooltips and index < len(spec.tooltips) else ""
    return f"<title>{escape(f'{name} {category}: {spec.value_format(value)}{extra}')}</title>"


def _bars(
    names: Sequence[str], series: Sequence[Series], spec: ChartSpec, y: _Y, slot: float, zero: float
) -> list[str]:
    parts: list[str] = []
    bar = slot * 0.78 / max(1, len(series))
    for s_index, s in enumerate(series):
        for i, value in enumerate(s.values):
            if value is None or i >= len(names):
                continue
            x = _MARGIN_LEFT + slot * i + slot * 0.11 + bar * s_index
            top, bottom = sorted((y(value), zero))
            color = (COLOR_UP if value > 0 else COLOR_DOWN) if spec.diverging else s.color
            parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{escape(color)}">'
                f"{_mark_title(spec, names[i], s.name, value, i)}</rect>"
            )
            error = s.errors[i] if s.errors and i < len(s.errors) else None
            if error is not None:
                parts.append(_error_bar(x + bar / 2, y(error[0]), y(error[1]), bar))
            text = spec.value_format(value)
            if error is None and len(text) * _CHAR_PX * 0.9 <= bar + 4:
                ty = top - 4 if value >= 0 else bottom + 12
                parts.append(_text("value", x + bar / 2, ty, text))
    return parts


def _error_bar(x: float, low: float, high: float, bar: float) -> str:
    """A 95% interval: a vertical line from `low` to `high` (pixels) with caps."""
    cap = min(bar * 0.3, 6.0)
    return (
        f'<path class="errorbar" d="M{x:.1f},{low:.1f}V{high:.1f}'
        f'M{x - cap:.1f},{low:.1f}H{x + cap:.1f}M{x - cap:.1f},{high:.1f}H{x + cap:.1f}" '
        'stroke="#111827" stroke-width="1.3" fill="none"/>'
    )


def _lines(
    names: Sequence[str], series: Sequence[Series], spec: ChartSpec, y: _Y, slot: float, zero: float
) -> list[str]:
    parts: list[str] = []
    label_room = slot >= 34 and len(series) == 1
    for s in series:
        points = [
            (i, _MARGIN_LEFT + slot * (i + 0.5), y(value), value)
            for i, value in enumerate(s.values)
            if value is not None and i < len(names)
        ]
        if not points:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for _, px, py, _ in points)
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        color = escape(s.color)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2.2"{dash}/>'
        )
        for i, px, py, value in points:
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.6" fill="{color}">'
                f"{_mark_title(spec, names[i], s.name, value, i)}</circle>"
            )
            if label_room:
                parts.append(_text("value", px, py - 8, spec.value_format(value)))
    return parts


def _legend(series: Sequence[Series], width: int) -> str:
    parts = []
    x = float(width - _MARGIN_RIGHT)
    for s in reversed(series):
        x -= len(s.name) * _CHAR_PX + 22
        parts.append(
            f'<rect x="{x:.1f}" y="8" width="12" height="12" fill="{escape(s.color)}"/>'
            f'<text class="tick" x="{x + 16:.1f}" y="18">{escape(s.name)}</text>'
        )
        x -= 10
    return "".join(parts)
