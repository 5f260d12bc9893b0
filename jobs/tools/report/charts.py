"""The report's SVG chart kit: bar and line charts drawn as inline SVG (no script, no file).

    rate = Series(name="rate", values=[0.4, 0.2], color=COLOR_RUN)
    svg = chart(["0", "1"], [rate], ChartSpec(title="t", x_label="x", y_label="y"))

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


@dataclass(frozen=True, kw_only=True)
class Series:
    """One series of values, a value per category (None: no mark there)."""

    name: str
    values: Sequence[float | None]
    color: str
    dashed: bool = False
    # (low, high) per value: drawn as an error bar (the 95% interval) over a bar; None: none
    errors: Sequence[tuple[float, float] | None] | None = None


@dataclass(frozen=True, kw_only=True)
class ChartSpec:
    """How a chart is drawn: its texts, kind, size, axis and marks."""

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
    step = next(
        multiple * magnitude for multiple in (1, 2, 2.5, 5, 10) if multiple * magnitude >= raw
    )
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


@dataclass(frozen=True)
class _Plot:
    """Where the marks go: a value's y in pixels, the width of a category, the zero line's y."""

    y_of: Callable[[float], float]
    slot: float
    zero: float


def _drawn_values(series: Sequence[Series]) -> list[float]:
    """Every value the axis must reach: the series' values and the ends of their error bars."""
    values: list[float] = []
    for entry in series:
        values += [value for value in entry.values if value is not None]
        for error in entry.errors or ():
            if error is not None:
                values += error
    return values


def _axis_range(spec: ChartSpec, series: Sequence[Series]) -> tuple[float, float, list[float]]:
    values = _drawn_values(series)
    high = spec.y_max if spec.y_max is not None else max([0.0, *values]) * 1.12
    ticks = nice_ticks(min([spec.y_min, *values]), high, min_step=1.0 if spec.whole else 0.0)
    return ticks[0], ticks[-1], ticks


def chart(categories: Sequence[str], series: Sequence[Series], spec: ChartSpec) -> Markup:
    """An inline SVG bar or line chart with axes, ticks, labels and per-mark tooltips."""
    width, height = spec.width, spec.height
    plot_w = width - _MARGIN_LEFT - _MARGIN_RIGHT
    plot_h = height - _MARGIN_TOP - _MARGIN_BOTTOM - (12 if spec.sublabels else 0)
    low, high, ticks = _axis_range(spec, series)

    def y_of(value: float) -> float:
        return _MARGIN_TOP + (high - value) / (high - low) * plot_h

    group = plot_w / max(1, len(categories))
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(spec.title)}">',
        f"<title>{escape(spec.title)}</title>",
    ]
    for tick in ticks:
        parts.append(_rule("grid", width, y_of(tick)))
        label = spec.value_format(tick)
        parts.append(_text("tick", _MARGIN_LEFT - 6, y_of(tick) + 4, label, anchor="end"))
    zero = y_of(0.0) if low <= 0 <= high else y_of(low)
    parts.append(_rule("axis", width, zero))
    parts.extend(_x_labels(categories, spec, group, _MARGIN_TOP + plot_h))
    plot = _Plot(y_of, group, zero)
    if spec.kind == "bar":
        parts.extend(_bars(categories, series, spec, plot))
    else:
        parts.extend(_lines(categories, series, spec, plot))
    middle = _MARGIN_TOP + plot_h / 2
    parts.append(_text("label", _MARGIN_LEFT + plot_w / 2, height - 8, spec.x_label))
    parts.append(_y_label(spec.y_label, middle))
    if len(series) > 1:
        parts.append(_legend(series, width))
    note = spec.note
    if not note and not categories:
        note = "no data"
    if note:
        parts.append(_text("label", width / 2, middle, note))
    parts.append("</svg>")
    # Every part above is markup written here, with each text from outside escaped.
    return Markup("".join(parts))


def _text(kind: str, x: float, y: float, text: str, anchor: str = "middle") -> str:
    """A `<text>` element of class `kind` (the text escaped)."""
    return (
        f'<text class="{kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _y_label(text: str, middle: float) -> str:
    """The y axis's label, turned to run up beside the axis (the text escaped)."""
    turned = f"rotate(-90 14 {middle:.1f})"
    return (
        f'<text class="label" x="14.0" y="{middle:.1f}" text-anchor="middle" '
        f'transform="{turned}">{escape(text)}</text>'
    )


def _rule(kind: str, width: int, y: float) -> str:
    """A horizontal line across the plot."""
    x2 = width - _MARGIN_RIGHT
    return f'<line class="{kind}" x1="{_MARGIN_LEFT}" x2="{x2}" y1="{y:.1f}" y2="{y:.1f}"/>'


def _x_labels(categories: Sequence[str], spec: ChartSpec, group: float, base_y: float) -> list[str]:
    """Category (or bin-edge) labels under the bars, every k-th when they would overlap."""
    labels = list(spec.edge_labels) if spec.edge_labels else list(categories)
    offset = 0.0 if spec.edge_labels else 0.5
    sublabels = list(spec.sublabels or [])
    widest: float = max((len(label) for label in labels), default=1)
    if sublabels:
        widest = max(widest, max(len(sublabel) for sublabel in sublabels) * 0.85)
    plot_w = group * max(1, len(categories))
    step = max(1, math.ceil(len(labels) * (widest * _CHAR_PX + 6) / plot_w))
    parts = []
    for index, label in enumerate(labels):
        if index % step == 0:
            x = _MARGIN_LEFT + group * (index + offset)
            parts.append(_text("tick", x, base_y + 16, label))
            if index < len(sublabels):
                parts.append(_text("sub", x, base_y + 29, sublabels[index]))
    return parts


def _mark_title(spec: ChartSpec, category: str, name: str, value: float, index: int) -> str:
    """A mark's tooltip: its series, category and value, and the category's own tooltip."""
    said = f"{name} {category}: {spec.value_format(value)}"
    if spec.tooltips and index < len(spec.tooltips):
        said += f" — {spec.tooltips[index]}"
    return f"<title>{escape(said)}</title>"


def _bar_color(spec: ChartSpec, series: Series, value: float) -> str:
    """A bar's colour: the series', or by its sign on a diverging chart (up green, down red)."""
    if not spec.diverging:
        return series.color
    if value > 0:
        return COLOR_UP
    return COLOR_DOWN


def _bars(
    names: Sequence[str], series: Sequence[Series], spec: ChartSpec, plot: _Plot
) -> list[str]:
    parts: list[str] = []
    slot = plot.slot
    bar = slot * 0.78 / max(1, len(series))
    for number, bars in enumerate(series):
        for index, value in enumerate(bars.values):
            if value is None or index >= len(names):
                continue
            x = _MARGIN_LEFT + slot * index + slot * 0.11 + bar * number
            top, bottom = sorted((plot.y_of(value), plot.zero))
            color = _bar_color(spec, bars, value)
            parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{escape(color)}">'
                f"{_mark_title(spec, names[index], bars.name, value, index)}</rect>"
            )
            error = None
            if bars.errors and index < len(bars.errors):
                error = bars.errors[index]
            if error is not None:
                low, high = error
                parts.append(_error_bar(x + bar / 2, plot.y_of(low), plot.y_of(high), bar))
            text = spec.value_format(value)
            if error is None and len(text) * _CHAR_PX * 0.9 <= bar + 4:
                label_y = top - 4 if value >= 0 else bottom + 12
                parts.append(_text("value", x + bar / 2, label_y, text))
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
    names: Sequence[str], series: Sequence[Series], spec: ChartSpec, plot: _Plot
) -> list[str]:
    parts: list[str] = []
    label_room = plot.slot >= 34 and len(series) == 1
    for line in series:
        # (category index, x, y, value) of each point drawn
        points = [
            (index, _MARGIN_LEFT + plot.slot * (index + 0.5), plot.y_of(value), value)
            for index, value in enumerate(line.values)
            if value is not None and index < len(names)
        ]
        if not points:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for _, x, y, _ in points)
        dash = ' stroke-dasharray="5 4"' if line.dashed else ""
        color = escape(line.color)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2.2"{dash}/>'
        )
        for index, x, y, value in points:
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.6" fill="{color}">'
                f"{_mark_title(spec, names[index], line.name, value, index)}</circle>"
            )
            if label_room:
                parts.append(_text("value", x, y - 8, spec.value_format(value)))
    return parts


def _legend(series: Sequence[Series], width: int) -> str:
    parts = []
    x = float(width - _MARGIN_RIGHT)
    for entry in reversed(series):
        x -= len(entry.name) * _CHAR_PX + 22
        parts.append(
            f'<rect x="{x:.1f}" y="8" width="12" height="12" fill="{escape(entry.color)}"/>'
            f'<text class="tick" x="{x + 16:.1f}" y="18">{escape(entry.name)}</text>'
        )
        x -= 10
    return "".join(parts)
