"""`ctxprec report <run> [--baseline <run>]`: one self-contained HTML page about a run.

    ctxprec report 20261130-1a2b3c4d --baseline 20261129-9f8e7d6c --output s3://evals/cp/

The page has no external resources (inline CSS, SVG charts drawn here, no script): it can be
mailed, attached to a ticket or opened offline. Sections: header (run, date, judge, counts,
mean/median); with --baseline, the comparison against that run (mean shift, regressions,
relevance rate by position of both); score distribution (10 bins and the summary bands);
relevance rate by position; cost and throughput; the worst queries with their per-position
verdicts and reasons; unscored/failed items. Every string that comes from data (query ids,
reasons, errors) is HTML-escaped.

Written to `<output>/reports/<run>.html` unless --html says otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TextIO

import polars as pl

from jobs import formatting as fmt
from jobs.tools.compare import Comparison, compare_runs
from jobs.tools.runs import (
    PublishedRun,
    add_output_arguments,
    load_run,
    open_output,
    parse_storage_options,
    write_file,
)
from scorer_core.errors import ConfigError, CtxPrecError

WORST_QUERIES = 20
FAILED_ITEMS = 10
REGRESSIONS = 20
MAX_CHIPS = 40
MAX_CHART_POSITIONS = 40
HISTOGRAM_BINS = 10

COLOR_RUN = "#2563eb"
COLOR_BASELINE = "#9ca3af"
COLOR_BAND = "#0d9488"
COLOR_UP = "#16a34a"
COLOR_DOWN = "#dc2626"


def esc(value: object) -> str:
    """`value` as text safe inside HTML elements and quoted attributes."""
    return html.escape("" if value is None else str(value), quote=True)


# --------------------------------------------------------------------------------------------
# number formatting


# --------------------------------------------------------------------------------------------
# SVG charts


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    color: str
    dashed: bool = False


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


_MARGIN_LEFT = 60
_MARGIN_RIGHT = 16
_MARGIN_TOP = 30
_MARGIN_BOTTOM = 50
_CHAR_PX = 6.2  # average glyph width at font-size 11


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (about `count` of them)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
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
    low = min([spec.y_min, *values]) if values else spec.y_min
    high = spec.y_max if spec.y_max is not None else max([0.0, *values]) * 1.12
    if high <= low:
        high = low + 1.0
    ticks = nice_ticks(low, high)
    return ticks[0], ticks[-1], ticks


def chart(categories: Sequence[str], series: Sequence[Series], spec: ChartSpec) -> str:
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
        f'role="img" aria-label="{esc(spec.title)}">',
        f"<title>{esc(spec.title)}</title>",
    ]
    for tick in ticks:
        ty = y(tick)
        parts.append(
            f'<line class="grid" x1="{_MARGIN_LEFT}" x2="{width - _MARGIN_RIGHT}" '
            f'y1="{ty:.1f}" y2="{ty:.1f}"/>'
            f'<text class="tick" x="{_MARGIN_LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{esc(spec.value_format(tick))}</text>"
        )
    zero = y(0.0) if low <= 0 <= high else y(low)
    parts.append(
        f'<line class="axis" x1="{_MARGIN_LEFT}" x2="{width - _MARGIN_RIGHT}" '
        f'y1="{zero:.1f}" y2="{zero:.1f}"/>'
    )
    parts.extend(_x_labels(categories, spec, group, _MARGIN_TOP + plot_h))
    marks = _bars if spec.kind == "bar" else _lines
    parts.extend(marks(categories, series, spec, y, group, zero))
    parts.append(
        f'<text class="label" x="{_MARGIN_LEFT + plot_w / 2:.1f}" y="{height - 8}" '
        f'text-anchor="middle">{esc(spec.x_label)}</text>'
        f'<text class="label" x="14" y="{_MARGIN_TOP + plot_h / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {_MARGIN_TOP + plot_h / 2:.1f})">{esc(spec.y_label)}</text>'
    )
    if len(series) > 1:
        parts.append(_legend(series, width))
    if not categories:
        parts.append(
            f'<text class="label" x="{width / 2}" y="{_MARGIN_TOP + plot_h / 2}" '
            f'text-anchor="middle">no data</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _x_labels(categories: Sequence[str], spec: ChartSpec, group: float, base_y: float) -> list[str]:
    """Category labels under the bars (every k-th when they would overlap), or bin-edge labels
    at the bar boundaries when `spec.edge_labels` is given."""
    labels = list(spec.edge_labels) if spec.edge_labels else list(categories)
    offset = 0.0 if spec.edge_labels else 0.5
    longest = max((len(label) for label in labels), default=1)
    plot_w = group * max(1, len(categories))
    step = max(1, math.ceil(len(labels) * (longest * _CHAR_PX + 6) / plot_w))
    parts = []
    subs = list(spec.sublabels or [])
    if subs:
        widest = max(longest, max(len(sub) for sub in subs) * 0.85)
        step = max(1, math.ceil(len(labels) * (widest * _CHAR_PX + 6) / plot_w))
    for i, label in enumerate(labels):
        if i % step == 0:
            x = _MARGIN_LEFT + group * (i + offset)
            parts.append(
                f'<text class="tick" x="{x:.1f}" y="{base_y + 16:.1f}" text-anchor="middle">'
                f"{esc(label)}</text>"
            )
            if i < len(subs):
                parts.append(
                    f'<text class="sub" x="{x:.1f}" y="{base_y + 29:.1f}" '
                    f'text-anchor="middle">{esc(subs[i])}</text>'
                )
    return parts


def _mark_title(spec: ChartSpec, category: str, name: str, value: float, index: int) -> str:
    extra = f" — {spec.tooltips[index]}" if spec.tooltips and index < len(spec.tooltips) else ""
    return f"<title>{esc(f'{name} {category}: {spec.value_format(value)}{extra}')}</title>"


def _bars(
    categories: Sequence[str],
    series: Sequence[Series],
    spec: ChartSpec,
    y: Callable[[float], float],
    group: float,
    zero: float,
) -> list[str]:
    parts: list[str] = []
    count = max(1, len(series))
    bar = group * 0.78 / count
    for s_index, s in enumerate(series):
        for i, value in enumerate(s.values):
            if value is None or i >= len(categories):
                continue
            x = _MARGIN_LEFT + group * i + group * 0.11 + bar * s_index
            top, bottom = sorted((y(value), zero))
            color = s.color
            if spec.diverging:
                color = COLOR_UP if value > 0 else COLOR_DOWN
            parts.append(
                f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" fill="{color}">'
                f"{_mark_title(spec, categories[i], s.name, value, i)}</rect>"
            )
            text = spec.value_format(value)
            if len(text) * _CHAR_PX * 0.9 <= bar + 4:
                ty = top - 4 if value >= 0 else bottom + 12
                parts.append(
                    f'<text class="value" x="{x + bar / 2:.1f}" y="{ty:.1f}" '
                    f'text-anchor="middle">{esc(text)}</text>'
                )
    return parts


def _lines(
    categories: Sequence[str],
    series: Sequence[Series],
    spec: ChartSpec,
    y: Callable[[float], float],
    group: float,
    zero: float,
) -> list[str]:
    parts: list[str] = []
    label_room = group >= 34 and len(series) == 1
    for s in series:
        points = [
            (i, _MARGIN_LEFT + group * (i + 0.5), y(value), value)
            for i, value in enumerate(s.values)
            if value is not None and i < len(categories)
        ]
        if not points:
            continue
        path = " ".join(f"{px:.1f},{py:.1f}" for _, px, py, _ in points)
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2.2"{dash}/>'
        )
        for i, px, py, value in points:
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.6" fill="{s.color}">'
                f"{_mark_title(spec, categories[i], s.name, value, i)}</circle>"
            )
            if label_room:
                parts.append(
                    f'<text class="value" x="{px:.1f}" y="{py - 8:.1f}" text-anchor="middle">'
                    f"{esc(spec.value_format(value))}</text>"
                )
    return parts


def _legend(series: Sequence[Series], width: int) -> str:
    parts = []
    x = float(width - _MARGIN_RIGHT)
    for s in reversed(series):
        text_w = len(s.name) * _CHAR_PX
        x -= text_w + 22
        parts.append(
            f'<rect x="{x:.1f}" y="8" width="12" height="12" fill="{s.color}"/>'
            f'<text class="tick" x="{x + 16:.1f}" y="18">{esc(s.name)}</text>'
        )
        x -= 10
    return "".join(parts)


# --------------------------------------------------------------------------------------------
# data for the sections


def histogram(scores: pl.LazyFrame, scale: float, bins: int = HISTOGRAM_BINS) -> list[int]:
    """Counts of ok scores / scale in `bins` equal bins over [0, 1] (1.0 in the last bin)."""
    normalized = pl.col("score") / scale if scale > 0 else pl.col("score") * 0.0
    index = (normalized * bins + 1e-9).floor().clip(0, bins - 1).cast(pl.Int32).alias("bin")
    counts = (
        scores.filter((pl.col("status") == "ok") & pl.col("score").is_not_null())
        .select(index)
        .group_by("bin")
        .agg(pl.len().alias("n"))
        .collect()
    )
    found = dict(zip(counts["bin"].to_list(), counts["n"].to_list(), strict=True))
    return [int(found.get(i, 0)) for i in range(bins)]


@dataclass(frozen=True)
class Verdict:
    position: int
    relevant: bool | None
    reason: str | None


def worst_queries(run: PublishedRun, n: int = WORST_QUERIES) -> pl.DataFrame:
    """The `n` lowest-scored ok queries (ties by query_id)."""
    return (
        run.scores()
        .filter(pl.col("status") == "ok")
        .select("query_id", "score", "relevant_count", "context_count", "reason")
        .sort(["score", "query_id"])
        .head(n)
        .collect()
    )


def verdicts_for(run: PublishedRun, query_ids: Sequence[str]) -> dict[str, list[Verdict]]:
    """Per query_id, its verdicts in position order."""
    if not query_ids:
        return {}
    wanted = pl.LazyFrame({"query_id": list(query_ids)}, schema={"query_id": pl.String})
    rows = (
        run.verdicts()
        .join(wanted, on="query_id", how="semi")
        .select("query_id", "position", "relevant", "judge_reason")
        .sort(["query_id", "position"])
        .collect()
    )
    out: dict[str, list[Verdict]] = {}
    for row in rows.iter_rows(named=True):
        out.setdefault(str(row["query_id"]), []).append(
            Verdict(int(row["position"]), row["relevant"], row["judge_reason"])
        )
    return out


def failed_items(run: PublishedRun, n: int = FAILED_ITEMS) -> pl.DataFrame:
    return (
        run.scores()
        .filter(pl.col("status") != "ok")
        .select("query_id", "status", pl.coalesce("error", "reason").alias("why"))
        .sort(["status", "query_id"])
        .head(n)
        .collect()
    )


# --------------------------------------------------------------------------------------------
# HTML pieces


def _card(label: str, value: str, note: str = "", tone: str = "") -> str:
    klass = f"card {tone}".strip()
    note_html = f'<div class="note">{esc(note)}</div>' if note else ""
    return (
        f'<div class="{klass}"><div class="k">{esc(label)}</div>'
        f'<div class="v">{esc(value)}</div>{note_html}</div>'
    )


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """An HTML table; `rows` cells are already-escaped HTML."""
    ths = "".join(
        f'<th class="num">{esc(h)}</th>' if i in numeric else f"<th>{esc(h)}</th>"
        for i, h in enumerate(head)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{ths}</tr></thead><tbody>{body}</tbody></table>"


def _chip(verdict: Verdict) -> str:
    word = {True: "yes", False: "no", None: "not judged"}[verdict.relevant]
    klass = {True: "yes", False: "no", None: "na"}[verdict.relevant]
    tip = f"[{verdict.position}] {word}: {verdict.reason or ''}"
    return f'<span class="chip {klass}" title="{esc(tip)}">{verdict.position}</span>'


def _chips(verdicts: Sequence[Verdict]) -> str:
    shown = "".join(_chip(v) for v in verdicts[:MAX_CHIPS])
    hidden = len(verdicts) - MAX_CHIPS
    more = f'<span class="more">+{hidden} more</span>' if hidden > 0 else ""
    return f'<div class="chips">{shown}{more}</div>'


def _judge_reasons(verdicts: Sequence[Verdict]) -> str:
    if not verdicts:
        return ""
    items = "".join(
        f'<li><span class="chip {"yes" if v.relevant else "no" if v.relevant is False else "na"}'
        f'">{v.position}</span> {esc(v.reason or "")}</li>'
        for v in verdicts
    )
    return f'<details><summary>judge reasons</summary><ul class="reasons">{items}</ul></details>'


def header_section(run: PublishedRun) -> str:
    s = run.summary
    m = run.manifest
    meta = [
        ("date", run.run_date.isoformat()),
        ("judge model", run.judge_model),
        ("prompt version", str(m.get("prompt_version", "–"))),
        ("published", str(m.get("published_at", "–"))),
        ("score scale", f"{s.scale:g}"),
    ]
    meta_html = "".join(f"<span><b>{esc(k)}</b> {esc(v)}</span>" for k, v in meta)
    cards = [
        _card("items", fmt.integer(s.items)),
        _card("scored", fmt.integer(s.scored), fmt.percent(s.scored / s.items) if s.items else ""),
        _card("unscored", fmt.integer(s.unscored), tone="warn" if s.unscored else ""),
        _card("errors", fmt.integer(s.errors), tone="bad" if s.errors else ""),
        _card("mean", fmt.number(s.mean), "over scored items"),
        _card("median", fmt.number(s.median), f"p10 {fmt.number(s.p10)} · p90 {fmt.number(s.p90)}"),
    ]
    return (
        f'<header><div class="eyebrow">Context precision report</div>'
        f"<h1>run {esc(run.run_id)}</h1>"
        f'<div class="meta">{meta_html}</div>'
        f'<div class="cards">{"".join(cards)}</div></header>'
    )


def distribution_section(run: PublishedRun) -> str:
    s = run.summary
    counts = histogram(run.scores(), s.scale)
    bins = len(counts)
    labels = [f"{i / bins:.1f}–{(i + 1) / bins:.1f}" for i in range(bins)]
    edges = [f"{i / bins:g}" for i in range(bins + 1)]
    x_label = "score" if s.scale == 1 else "score / scale"
    hist = chart(
        labels,
        [Series("queries", [float(c) for c in counts], COLOR_RUN)],
        ChartSpec(
            title="Score distribution (10 bins)",
            x_label=f"{x_label} (bins of 0.1; the last includes 1.0)",
            y_label="queries",
            width=620,
            edge_labels=edges,
            value_format=lambda v: f"{v:,.0f}",
        ),
    )
    bands = chart(
        [label for label, _ in s.bands],
        [Series("queries", [float(c) for _, c in s.bands], COLOR_BAND)],
        ChartSpec(
            title="Score bands",
            x_label=f"band of {x_label} (“0” is exactly 0)",
            y_label="queries",
            width=440,
            value_format=lambda v: f"{v:,.0f}",
        ),
    )
    return (
        '<section id="distribution"><h2>Score distribution</h2>'
        f"<p>{fmt.integer(s.scored)} scored items; mean {fmt.number(s.mean)}, median "
        f"{fmt.number(s.median)}, p10 {fmt.number(s.p10)}, p90 {fmt.number(s.p90)}.</p>"
        f'<div class="row"><figure>{hist}</figure><figure>{bands}</figure></div></section>'
    )


def positions_section(run: PublishedRun) -> str:
    rates = run.summary.position_rates
    shown = rates[:MAX_CHART_POSITIONS]
    top = max((r.rate for r in shown), default=0.0)
    svg = chart(
        [str(r.position) for r in shown],
        [Series("relevance rate", [r.rate for r in shown], COLOR_RUN)],
        ChartSpec(
            title="Relevance rate by position",
            x_label="position in the retrieved order (0 = first); n = contexts judged there",
            y_label="share judged relevant",
            kind="line",
            width=1090,
            height=310,
            y_max=min(1.0, max(0.05, top * 1.15)),
            value_format=lambda v: f"{v:.0%}",
            tooltips=[f"{r.relevant:,} of {r.judged:,} judged relevant" for r in shown],
            sublabels=[f"n={r.judged:,}" for r in shown],
        ),
    )
    more = ""
    if len(rates) > len(shown):
        hidden = sum(r.judged for r in rates[len(shown) :])
        more = (
            f"<p class='muted'>Positions {len(shown)} and later are not drawn "
            f"({fmt.integer(hidden)} judged contexts).</p>"
        )
    first = f"{shown[0].rate:.0%}" if shown else "–"
    return (
        '<section id="positions"><h2>Relevance rate by position</h2>'
        "<p>The share of contexts at each position that the judge found relevant. A good ranker "
        f"puts relevant context first: the curve should start high and fall. Position 0: {first}."
        f"</p><figure>{svg}</figure>{more}</section>"
    )


def worst_section(run: PublishedRun, n: int = WORST_QUERIES) -> str:
    worst = worst_queries(run, n)
    verdicts = verdicts_for(run, worst.get_column("query_id").to_list())
    rows = []
    for rank, row in enumerate(worst.iter_rows(named=True), start=1):
        query_id = str(row["query_id"])
        mine = verdicts.get(query_id, [])
        relevant = f"{fmt.integer(row['relevant_count'])} / {fmt.integer(row['context_count'])}"
        rows.append(
            [
                str(rank),
                f'<span class="qid">{esc(query_id)}</span>',
                fmt.number(row["score"]),
                esc(relevant),
                _chips(mine),
                f'<div class="reason">{esc(row["reason"] or "")}</div>{_judge_reasons(mine)}',
            ]
        )
    legend = (
        '<p class="muted">Chips are the retrieved contexts in order (the number is the position): '
        '<span class="chip yes">yes</span> relevant, <span class="chip no">no</span> not relevant, '
        '<span class="chip na">–</span> not judged. Hover a chip for the judge\'s reason.</p>'
    )
    body = (
        _table(
            ["#", "query id", "score", "relevant / contexts", "verdicts by position", "reason"],
            rows,
            numeric={0, 2, 3},
        )
        if rows
        else "<p>No scored items.</p>"
    )
    ties = ""
    if rows:
        lowest = float(worst.get_column("score")[0])  # sorted by score
        tied = (
            run.scores()
            .filter((pl.col("status") == "ok") & (pl.col("score") == lowest))
            .select(pl.len())
        )
        tied_count = int(tied.collect().item())
        if tied_count > len(rows):
            ties = (
                f"<p>{fmt.integer(tied_count)} scored items share the lowest score, "
                f"{fmt.number(lowest)}; these are the first {len(rows)} by query id.</p>"
            )
    return (
        f'<section id="worst"><h2>Worst {len(rows)} queries</h2>{ties}{legend}'
        f'<div class="scroll">{body}</div></section>'
    )


def failed_section(run: PublishedRun) -> str:
    s = run.summary
    if not s.unscored and not s.errors:
        return ""
    failed = failed_items(run)
    rows = [
        [f'<span class="qid">{esc(r["query_id"])}</span>', esc(r["status"]), esc(r["why"] or "")]
        for r in failed.iter_rows(named=True)
    ]
    total = s.unscored + s.errors
    return (
        '<section id="failed"><h2>Unscored and failed items</h2>'
        f"<p>{fmt.integer(s.unscored)} unscored, {fmt.integer(s.errors)} errors; "
        f"the first {len(rows)} of {fmt.integer(total)}:</p>"
        f'<div class="scroll">{_table(["query id", "status", "why"], rows, set())}</div></section>'
    )


def _cost_text(cost: float | None, model: str) -> tuple[str, str]:
    if cost is not None:
        return fmt.usd(cost), "from litellm's price map"
    if model == "lexical":
        return fmt.usd(0.0), "offline lexical judge"
    return fmt.MISSING, "model not in litellm's price map"


def cost_section(run: PublishedRun) -> str:
    s = run.summary
    seconds = run.seconds
    rate = s.items / seconds if seconds else None
    cost, cost_note = _cost_text(s.cost_usd, run.judge_model)
    per_1k = (
        f"${s.cost_usd / s.items * 1000:,.4f} per 1,000 items" if s.cost_usd and s.items else ""
    )
    hit_rate = fmt.percent(s.cache_hits / s.judge_calls) if s.judge_calls else ""
    cards = [
        _card("judge calls", fmt.integer(s.judge_calls)),
        _card("cache hits", fmt.integer(s.cache_hits), f"{hit_rate} of calls" if hit_rate else ""),
        _card("prompt tokens", fmt.integer(s.prompt_tokens)),
        _card("completion tokens", fmt.integer(s.completion_tokens)),
        _card("estimated cost", cost, per_1k or cost_note),
        _card("seconds", "–" if seconds is None else f"{seconds:,.1f}", "wall clock"),
        _card("items / s", "–" if rate is None else f"{rate:,.1f}"),
    ]
    timings = run.manifest.get("timings_s")
    timing_text = ""
    if isinstance(timings, dict) and timings:
        timing_text = "<p class='muted'>Stages: " + ", ".join(
            f"{esc(k)} {esc(v)} s" for k, v in timings.items()
        )
        timing_text += f"; shards {esc(run.manifest.get('shards', '–'))}.</p>"
    return (
        '<section id="cost"><h2>Cost and throughput</h2>'
        f'<div class="cards">{"".join(cards)}</div>{timing_text}</section>'
    )


def baseline_section(comparison: Comparison) -> str:
    c = comparison
    shift = c.mean_shift
    tone = "" if shift is None else ("good" if shift > 0 else "bad" if shift < 0 else "")
    cards = [
        _card("baseline mean", fmt.number(c.stats_a.mean, 3), f"run {c.run_a}"),
        _card("this run mean", fmt.number(c.stats_b.mean, 3), f"run {c.run_b}"),
        _card(
            "mean shift",
            fmt.number(shift, 3, signed=True),
            f"over {c.paired:,} queries ok in both",
            tone,
        ),
        _card("improved", fmt.integer(c.improved), tone="good" if c.improved else ""),
        _card("regressed", fmt.integer(c.regressed), tone="bad" if c.regressed else ""),
        _card("unchanged", fmt.integer(c.unchanged)),
    ]
    presence = (
        f"<p>Queries in both runs {fmt.integer(c.presence['both'])}, only in the baseline "
        f"{fmt.integer(c.presence['only_a'])}, only in this run "
        f"{fmt.integer(c.presence['only_b'])}; "
        f"scored in the baseline but not in this run {fmt.integer(c.lost)}.</p>"
    )
    reading = (
        "<p class='muted'>Means and percentiles are over the queries scored ok in both runs, so "
        "the shift is not moved by queries that were added, removed or failed. "
        "<code>ctxprec compare</code> exits 1 when the mean falls by more than "
        "<code>--max-mean-drop</code> (default 0.02).</p>"
    )
    stats_rows = [
        [
            esc(name),
            fmt.number(c.stats_a.as_dict()[name], 0 if name == "count" else 3),
            fmt.number(c.stats_b.as_dict()[name], 0 if name == "count" else 3),
            fmt.number(
                _diff(c.stats_a.as_dict()[name], c.stats_b.as_dict()[name]),
                0 if name == "count" else 3,
                signed=True,
            ),
        ]
        for name in ("count", "mean", "median", "p10", "p90")
    ]
    stats = _table(["statistic", "baseline", "this run", "change"], stats_rows, {1, 2, 3})
    regressions = c.regressions(REGRESSIONS)
    reg_rows = [
        [
            f'<span class="qid">{esc(r["query_id"])}</span>',
            fmt.number(r["score_a"]),
            fmt.number(r["score_b"]),
            f'<span class="down">{fmt.number(r["delta"], 2, signed=True)}</span>',
            esc(f"{fmt.integer(r['relevant_count_a'])} → {fmt.integer(r['relevant_count_b'])}"),
        ]
        for r in regressions.iter_rows(named=True)
    ]
    reg_html = (
        _table(
            ["query id", "baseline", "this run", "change", "relevant contexts"],
            reg_rows,
            {1, 2, 3, 4},
        )
        if reg_rows
        else "<p>No query scored lower than in the baseline.</p>"
    )
    return (
        f'<section id="baseline"><h2>Compared with baseline {esc(c.run_a)}</h2>'
        f'<div class="cards">{"".join(cards)}</div>'
        f'<div class="row"><div>{stats}</div><div class="aside">{presence}{reading}</div></div>'
        f"{_position_compare_charts(c)}"
        f"<h3>Largest regressions ({len(reg_rows)})</h3>"
        f'<div class="scroll">{reg_html}</div></section>'
    )


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _position_compare_charts(c: Comparison) -> str:
    rows = c.positions.head(MAX_CHART_POSITIONS)
    categories = [str(p) for p in rows.get_column("position").to_list()]
    rate_a = rows.get_column("rate_a").to_list()
    rate_b = rows.get_column("rate_b").to_list()
    delta = rows.get_column("delta").to_list()
    top = max([v for v in rate_a + rate_b if v is not None], default=0.0)
    both = chart(
        categories,
        [
            Series(f"baseline {c.run_a}", rate_a, COLOR_BASELINE, dashed=True),
            Series(f"this run {c.run_b}", rate_b, COLOR_RUN),
        ],
        ChartSpec(
            title="Relevance rate by position, baseline and this run",
            x_label="position (0 = first)",
            y_label="share judged relevant",
            kind="line",
            width=620,
            y_max=min(1.0, max(0.05, top * 1.15)),
            value_format=lambda v: f"{v:.0%}",
        ),
    )
    extent = max([abs(v) for v in delta if v is not None], default=0.0)
    extent = max(extent * 1.25, 0.01)
    change = chart(
        categories,
        [Series("change", delta, COLOR_RUN)],
        ChartSpec(
            title="Change in relevance rate by position (this run − baseline)",
            x_label="position (0 = first)",
            y_label="change in rate (points)",
            width=440,
            y_min=-extent,
            y_max=extent,
            diverging=True,
            value_format=lambda v: f"{v * 100:+.1f}",
        ),
    )
    return (
        "<h3>Relevance rate by position</h3>"
        f'<div class="row"><figure>{both}</figure><figure>{change}</figure></div>'
    )


CSS = """
:root { --fg:#111827; --muted:#6b7280; --line:#e5e7eb; --bg:#f8fafc; --card:#fff;
  --yes:#16a34a; --no:#dc2626; --na:#9ca3af; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif; }
main { max-width:1200px; margin:0 auto; padding:24px 28px 48px; }
header, section { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:18px 22px; margin-bottom:18px; }
h1 { margin:2px 0 8px; font-size:24px; word-break:break-all; }
h2 { margin:0 0 8px; font-size:18px; }
h3 { margin:18px 0 6px; font-size:15px; }
p { margin:4px 0 10px; }
.eyebrow { color:var(--muted); text-transform:uppercase; letter-spacing:.06em; font-size:12px; }
.meta { display:flex; flex-wrap:wrap; gap:6px 18px; color:var(--muted); margin-bottom:12px; }
.meta b { color:var(--fg); font-weight:600; margin-right:4px; }
.cards { display:grid; grid-template-columns:repeat(auto-fill,minmax(140px,1fr)); gap:10px; }
.card { border:1px solid var(--line); border-radius:8px; padding:10px 12px; background:#fff; }
.card .k { color:var(--muted); font-size:12px; }
.card .v { font-size:22px; font-weight:650; font-variant-numeric:tabular-nums; }
.card .note { color:var(--muted); font-size:12px; overflow-wrap:anywhere; }
.card.good { border-color:#86efac; background:#f0fdf4; }
.card.bad { border-color:#fca5a5; background:#fef2f2; }
.card.warn { border-color:#fcd34d; background:#fffbeb; }
.row { display:flex; flex-wrap:wrap; gap:18px; align-items:flex-start; margin-top:12px; }
figure { margin:0; }
svg.chart { display:block; max-width:100%; height:auto; font-size:11px; }
svg.chart .grid { stroke:#eef0f3; }
svg.chart .axis { stroke:#9ca3af; }
svg.chart .tick { fill:#4b5563; }
svg.chart .label { fill:#374151; font-size:12px; }
svg.chart .value { fill:#111827; font-size:10px; }
svg.chart .sub { fill:#9ca3af; font-size:9.5px; }
table { border-collapse:collapse; width:100%; }
th, td { text-align:left; vertical-align:top; padding:6px 8px;
  border-bottom:1px solid var(--line); }
th { font-size:12px; color:var(--muted); font-weight:600; white-space:nowrap; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
.scroll { overflow-x:auto; }
.qid { font-family:ui-monospace,"DejaVu Sans Mono",monospace; font-size:12px;
  overflow-wrap:anywhere; }
.reason { color:#374151; font-size:12.5px; max-width:520px; overflow-wrap:anywhere; }
.chips { display:flex; flex-wrap:wrap; gap:3px; max-width:300px; }
.chip { display:inline-block; min-width:20px; padding:1px 5px; border-radius:5px; color:#fff;
  font-size:11px; text-align:center; font-variant-numeric:tabular-nums; }
.chip.yes { background:var(--yes); } .chip.no { background:var(--no); }
.chip.na { background:var(--na); }
.more { color:var(--muted); font-size:11px; }
details { margin-top:4px; font-size:12px; }
summary { cursor:pointer; color:var(--muted); }
ul.reasons { list-style:none; padding-left:0; margin:4px 0; }
ul.reasons li { margin:2px 0; overflow-wrap:anywhere; }
.muted { color:var(--muted); font-size:12.5px; }
.aside { flex:1; min-width:280px; max-width:560px; padding-top:6px; }
.down { color:var(--no); }
footer { color:var(--muted); font-size:12px; text-align:center; }
"""


def render_report(run: PublishedRun, baseline: PublishedRun | None = None) -> str:
    """The whole report page as one HTML string."""
    comparison = compare_runs(baseline, run) if baseline is not None else None
    title = f"Context precision — run {run.run_id}"
    sections = [
        header_section(run),
        baseline_section(comparison) if comparison is not None else "",
        distribution_section(run),
        positions_section(run),
        cost_section(run),
        worst_section(run),
        failed_section(run),
    ]
    generated = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    footer = (
        f"<footer>Generated by ctxprec report at {esc(generated)} from "
        f"{esc(run.store.url(run.store.root))}. Scores are average precision over the "
        "retrieved order (see README, “How the score is computed”).</footer>"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        + "\n".join(part for part in sections if part)
        + footer
        + "</main></body></html>\n"
    )


# --------------------------------------------------------------------------------------------
# command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id to report on")
    parser.add_argument(
        "--baseline", metavar="RUN", default=None, help="also compare with this run id"
    )
    add_output_arguments(parser)
    parser.add_argument(
        "--html",
        metavar="PATH",
        default=None,
        help="where to write the page (default <output>/reports/<run>.html)",
    )


def run_report(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The handler of `ctxprec report`."""
    out = out if out is not None else sys.stdout
    store = open_output(args)
    run = load_run(store, args.run)
    baseline = load_run(store, args.baseline) if args.baseline else None
    if baseline is not None and baseline.location == run.location:
        raise ConfigError(f"--baseline {args.baseline} is the run itself")
    page = render_report(run, baseline)
    written = write_file(
        store,
        args.html,
        f"reports/{run.run_id}.html",
        page.encode("utf-8"),
        parse_storage_options(args.storage_option),
    )
    out.write(f"report: {written}\n")
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `report` to the `ctxprec` subcommands."""
    parser = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report of a published run",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
    )
    add_arguments(parser)
    parser.set_defaults(handler=run_report)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ctxprec report")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_report(args)
    except CtxPrecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
