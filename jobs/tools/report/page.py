"""The report page: each section's data and charts, laid out by the `report.html.j2` template.

`render_report(run, baseline)` returns the whole page as one string. The template is rendered
with autoescape on, so every string from the data (query ids, reasons, errors, run ids) is
escaped there; the only markup inserted as it is are the charts (`charts.chart` escapes its
own text) and the package's stylesheet `report.css`, inlined so the page stays one file.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from jobs.core import formatting as fmt
from jobs.engine import RunResponseFormat, RunSummary, Segment, band_range
from jobs.run.canary import CanaryResult
from jobs.tools.comparison import Comparison, SegmentShift, compare_runs, gate
from jobs.tools.published_runs import PublishedRun
from jobs.tools.report import report_queries as queries
from jobs.tools.report.charts import (
    COLOR_BAND,
    COLOR_BASELINE,
    COLOR_DOWN,
    COLOR_RUN,
    ChartSpec,
    Series,
    chart,
)
from jobs.tools.tool_options import CompareOptions
from scorer_core.capabilities import is_offline

MAX_CHIPS = 40
MAX_CHART_POSITIONS = 40
MAX_CHART_SEGMENTS = 30  # a chart draws the lowest-scoring ones; the table lists them all
PACKAGE = "jobs.tools.report"  # where the template and the stylesheet are
TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"


@dataclass(frozen=True)
class Card:
    """One figure in a row of cards: a label, the value, an optional note under it."""

    label: str
    value: str
    note: str = ""
    tone: str = ""  # "", "good", "bad" or "warn": the card's colour


@dataclass(frozen=True)
class StatRow:
    """One statistic of the baseline and this run, over the queries ok in both."""

    name: str
    baseline: float | None
    this_run: float | None
    digits: int

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.this_run is None:
            return None
        return self.this_run - self.baseline


@dataclass(frozen=True)
class SegmentShifts:
    """One segment column's shifts against the baseline: a table and a chart."""

    column: str
    rows: tuple[tuple[SegmentShift, str], ...]  # each shift and its gate: FAIL, ok or small
    chart: Markup
    undrawn: int  # segments not in the chart


@dataclass(frozen=True)
class Baseline:
    comparison: Comparison
    cards: tuple[Card, ...]
    stats: tuple[StatRow, ...]
    position_charts: tuple[Markup, Markup]  # both runs' rates, the change
    regressions: tuple[queries.Regression, ...]
    segments: tuple[SegmentShifts, ...] = ()


@dataclass(frozen=True)
class Segments:
    """One `summary.by` column: every value's summary in a table, the mean of each in a chart."""

    column: str
    rows: tuple[Segment, ...]  # as in the summary: values sorted as text, null last
    chart: Markup
    undrawn: int  # segments not in the chart (it draws the MAX_CHART_SEGMENTS lowest means)


@dataclass(frozen=True)
class Positions:
    chart: Markup
    first_rate: str  # relevance rate at position 0, as a percentage
    drawn: int  # positions drawn
    undrawn_judged: int | None  # contexts judged at the positions not drawn (None: all drawn)


@dataclass(frozen=True)
class Cost:
    cards: tuple[Card, ...]
    stages: tuple[tuple[str, str], ...]  # (stage, seconds) from the manifest's timings
    shards: str


# --------------------------------------------------------------------------------------------
# sections


def _recorded(run: PublishedRun, name: str) -> str:
    """A manifest field as text, "–" when the run did not record it."""
    manifest = run.manifest
    if manifest is None or name not in manifest.model_fields_set:
        return "–"
    return str(getattr(manifest, name))


def header_meta(run: PublishedRun) -> list[tuple[str, str]]:
    return [
        ("date", run.run_date.isoformat()),
        ("judge model", run.judge_model),
        ("prompt version", _recorded(run, "prompt_version")),
        ("published", _recorded(run, "published_at")),
        ("score scale", f"{run.summary.scale:g}"),
        ("structured output", _response_format(run.response_format)),
    ]


# A rejected form's server answer in the header is cut to this (the manifest has it whole).
_REASON_CHARS = 120


def _response_format(negotiated: RunResponseFormat | None) -> str:
    """The form the judge's requests used and the forms the endpoint rejected."""
    return "–" if negotiated is None else negotiated.describe(max_reason_chars=_REASON_CHARS)


def header_cards(s: RunSummary) -> tuple[Card, ...]:
    sampled = s.population is not None and s.population != s.items
    canary = CanaryResult.of_metrics(s.canary)
    return (
        Card(
            "items",
            fmt.integer(s.items),
            f"judged of {fmt.integer(s.population)} (a sample)" if sampled else "",
        ),
        Card("scored", fmt.integer(s.scored), fmt.percent(s.scored / s.items) if s.items else ""),
        Card("unscored", fmt.integer(s.unscored), tone="warn" if s.unscored else ""),
        Card("errors", fmt.integer(s.errors), tone="bad" if s.errors else ""),
        Card("mean", fmt.number(s.mean), f"95% CI {fmt.interval(s.mean_ci_low, s.mean_ci_high)}"),
        Card("median", fmt.number(s.median), f"p10 {fmt.number(s.p10)} · p90 {fmt.number(s.p90)}"),
        *(
            [
                Card(
                    "canary kappa",
                    fmt.number(canary.kappa, 3),
                    f"judge vs labels on {fmt.integer(canary.items)} items",
                )
            ]
            if canary
            else []
        ),
    )


def distribution_charts(run: PublishedRun) -> tuple[Markup, Markup]:
    """The score histogram (10 bins over score / scale) and the summary's score bands."""
    s = run.summary
    counts = queries.histogram(run.scores(), s.scale)
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
            x_label=f"band of {x_label}",
            sublabels=[band_range(label) for label, _ in s.bands],
            y_label="queries",
            width=440,
            value_format=lambda v: f"{v:,.0f}",
        ),
    )
    return hist, bands


def positions_view(run: PublishedRun) -> Positions:
    """The relevance rate by position (the first MAX_CHART_POSITIONS positions drawn)."""
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
    undrawn = sum(r.judged for r in rates[len(shown) :]) if len(rates) > len(shown) else None
    return Positions(
        chart=svg,
        first_rate=f"{shown[0].rate:.0%}" if shown else "–",
        drawn=len(shown),
        undrawn_judged=undrawn,
    )


def _segment_name(value: str | None) -> str:
    return "(null)" if value is None else value


def segments_view(summary: RunSummary) -> tuple[Segments, ...]:
    """Per `summary.by` column: its segments' table, and a bar chart of their mean scores (the
    MAX_CHART_SEGMENTS lowest means, lowest first; n = scored items under each bar)."""
    views = []
    for column in summary.segment_columns:
        rows = summary.segments_by(column)
        scored = [r for r in rows if r.summary.mean is not None]
        drawn = sorted(scored, key=lambda r: (r.summary.mean or 0.0, _segment_name(r.value)))
        drawn = drawn[:MAX_CHART_SEGMENTS]
        svg = chart(
            [_segment_name(r.value) for r in drawn],
            [
                Series(
                    "mean score",
                    [r.summary.mean for r in drawn],
                    COLOR_RUN,
                    errors=[_error(r.summary.mean_ci_low, r.summary.mean_ci_high) for r in drawn],
                )
            ],
            ChartSpec(
                title=f"Mean score by {column}, with 95% intervals"
                + (f" (the {len(drawn)} lowest)" if len(drawn) < len(scored) else ""),
                x_label=f"{column} (n = items scored ok)",
                y_label="mean score",
                width=1090,
                height=310,
                y_max=summary.scale or 1.0,
                value_format=lambda v: f"{v:.2f}",
                tooltips=[
                    f"{r.summary.scored:,} scored of {r.summary.items:,} items; 95% CI "
                    f"{fmt.interval(r.summary.mean_ci_low, r.summary.mean_ci_high)}; median "
                    f"{fmt.number(r.summary.median)}"
                    for r in drawn
                ],
                sublabels=[f"n={r.summary.scored:,}" for r in drawn],
            ),
        )
        views.append(Segments(column, rows, svg, len(rows) - len(drawn)))
    return tuple(views)


def _error(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (low, high)


def segment_shifts_view(c: Comparison, min_segment_size: int) -> tuple[SegmentShifts, ...]:
    """Per segment column of the comparison: each value's change with its 95% interval and
    Holm-adjusted p-value (with the gate's word for it at the defaults of `ctxprec compare`),
    and a chart of the largest drops with their intervals."""
    verdict = gate(c, CompareOptions.min_effect, min_segment_size)
    tested = {(s.by, s.value): s for s in verdict.segments}
    views = []
    for column in c.segment_columns:
        shifts = [tested.get((s.by, s.value), s) for s in c.segments_by(column)]
        rows = tuple((s, "FAIL" if s.failed else "ok" if s.gated else "small") for s in shifts)
        drawn = sorted(
            (s for s in shifts if s.shift is not None),
            key=lambda s: (s.shift or 0.0, _segment_name(s.value)),
        )[:MAX_CHART_SEGMENTS]
        extent = max(
            [abs(v or 0.0) for s in drawn for v in (s.shift, s.ci_low, s.ci_high)], default=0.0
        )
        extent = max(extent * 1.1, 0.01)
        svg = chart(
            [_segment_name(s.value) for s in drawn],
            [
                Series(
                    "mean change",
                    [s.shift for s in drawn],
                    COLOR_DOWN,
                    errors=[_error(s.ci_low, s.ci_high) for s in drawn],
                )
            ],
            ChartSpec(
                title=f"Change in mean by {column} (this run − baseline), largest drops first, "
                "with 95% intervals",
                x_label=f"{column} (n = queries compared)",
                y_label="change in mean score",
                width=1090,
                height=310,
                y_min=-extent,
                y_max=extent,
                diverging=True,
                value_format=lambda v: f"{v:+.3f}",
                tooltips=[
                    f"95% CI {fmt.interval(s.ci_low, s.ci_high, 4)}, "
                    f"p {fmt.number(s.p_adjusted, 4)} after Holm"
                    for s in drawn
                ],
                sublabels=[f"n={s.paired:,}" for s in drawn],
            ),
        )
        views.append(SegmentShifts(column, rows, svg, len(shifts) - len(drawn)))
    return tuple(views)


def _cost_text(cost: float | None, model: str) -> tuple[str, str]:
    if cost is not None:
        return fmt.usd(cost), "from litellm's price map"
    if is_offline(model):
        return fmt.usd(0.0), "offline lexical judge"
    return fmt.MISSING, "model not in litellm's price map"


def cost_view(run: PublishedRun) -> Cost:
    s = run.summary
    seconds = run.seconds
    rate = s.items / seconds if seconds else None
    cost_value, cost_note = _cost_text(s.cost_usd, run.judge_model)
    per_1k = (
        f"${s.cost_usd / s.items * 1000:,.4f} per 1,000 items" if s.cost_usd and s.items else ""
    )
    hit_rate = fmt.percent(s.cache_hits / s.judge_calls) if s.judge_calls else ""
    cards = (
        Card("judge calls", fmt.integer(s.judge_calls)),
        Card("cache hits", fmt.integer(s.cache_hits), f"{hit_rate} of calls" if hit_rate else ""),
        Card("prompt tokens", fmt.integer(s.prompt_tokens)),
        Card("completion tokens", fmt.integer(s.completion_tokens)),
        Card("estimated cost", cost_value, per_1k or cost_note),
        Card("seconds", "–" if seconds is None else f"{seconds:,.1f}", "wall clock"),
        Card("items / s", "–" if rate is None else f"{rate:,.1f}"),
    )
    timings = run.manifest.timings_s if run.manifest is not None else {}
    stages = tuple((name, _text(seconds)) for name, seconds in timings.items())
    return Cost(cards=cards, stages=stages, shards=_recorded(run, "shards"))


def _text(value: object) -> str:
    return "" if value is None else str(value)


def baseline_view(c: Comparison) -> Baseline:
    """The comparison with the baseline run: cards, statistics, position charts, regressions."""
    shift = c.mean_shift
    verdict = gate(c, CompareOptions.min_effect, CompareOptions.min_segment_size)
    o = verdict.overall
    significant = o is not None and o.significant
    tone = "" if shift is None or not significant else ("good" if shift > 0 else "bad")
    canary = verdict.canary
    cards = (
        Card("baseline mean", fmt.number(c.stats_a.mean, 3), f"run {c.run_a}"),
        Card("this run mean", fmt.number(c.stats_b.mean, 3), f"run {c.run_b}"),
        Card(
            "mean shift",
            fmt.number(shift, 3, signed=True),
            f"95% CI {fmt.interval(o.ci_low, o.ci_high, 4)}, p {fmt.number(o.p_adjusted, 4)}; "
            f"{o.method} over {o.paired:,} queries"
            if o is not None
            else f"over {c.paired:,} queries ok in both",
            tone,
        ),
        Card("gate", "pass" if verdict.passed else "FAIL", tone="" if verdict.passed else "bad"),
        *(
            [
                Card(
                    "canary kappa",
                    f"{fmt.number(canary.a.kappa, 3)} → {fmt.number(canary.b.kappa, 3)}",
                    "the judge changed" if canary.failed else "judge steady",
                    "bad" if canary.failed else "",
                )
            ]
            if canary
            else []
        ),
        Card("improved", fmt.integer(c.improved), tone="good" if c.improved else ""),
        Card("regressed", fmt.integer(c.regressed), tone="bad" if c.regressed else ""),
        Card("unchanged", fmt.integer(c.unchanged)),
    )
    a, b = c.stats_a.as_dict(), c.stats_b.as_dict()
    stats = tuple(
        StatRow(name, a[name], b[name], 0 if name == "count" else 3)
        for name in ("count", "mean", "median", "p10", "p90")
    )
    return Baseline(
        comparison=c,
        cards=cards,
        stats=stats,
        position_charts=_position_compare_charts(c),
        regressions=tuple(queries.regressions(c)),
        segments=segment_shifts_view(c, CompareOptions.min_segment_size),
    )


def _position_compare_charts(c: Comparison) -> tuple[Markup, Markup]:
    change = queries.position_change(c, MAX_CHART_POSITIONS)
    categories = [str(p) for p in change.positions]
    top = max([v for v in change.rate_a + change.rate_b if v is not None], default=0.0)
    both = chart(
        categories,
        [
            Series(f"baseline {c.run_a}", change.rate_a, COLOR_BASELINE, dashed=True),
            Series(f"this run {c.run_b}", change.rate_b, COLOR_RUN),
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
    extent = max([abs(v) for v in change.delta if v is not None], default=0.0)
    extent = max(extent * 1.25, 0.01)
    delta = chart(
        categories,
        [Series("change", change.delta, COLOR_RUN)],
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
    return both, delta


# --------------------------------------------------------------------------------------------
# the page


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(PACKAGE, "."),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(number=fmt.number, integer=fmt.integer, percent=fmt.percent, usd=fmt.usd)
    return env


def stylesheet() -> Markup:
    """The report's CSS, to inline in a <style> element (where entities are not decoded, so
    it must not be escaped; it is the package's own file)."""
    return Markup(resources.files(PACKAGE).joinpath(STYLESHEET).read_text(encoding="utf-8"))


def render_report(run: PublishedRun, baseline: PublishedRun | None = None) -> str:
    """The whole report page as one HTML string (with a baseline section when given one)."""
    summary = run.summary
    context: dict[str, Any] = {
        "css": stylesheet(),
        "run_id": run.run_id,
        "meta": header_meta(run),
        "header_cards": header_cards(summary),
        "summary": summary,
        "baseline": baseline_view(compare_runs(baseline, run)) if baseline else None,
        "distribution_charts": distribution_charts(run),
        "segments": segments_view(summary),
        "min_segment_size": CompareOptions.min_segment_size,
        "positions": positions_view(run),
        "cost": cost_view(run),
        "worst": queries.worst_queries(run),
        "failed": queries.failed_items(run) if summary.unscored or summary.errors else [],
        "max_chips": MAX_CHIPS,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "root": run.store.url(run.store.root),
    }
    return _environment().get_template(TEMPLATE).render(context)
