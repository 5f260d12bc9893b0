"""The report page: each section's data and charts, laid out by the `report.html.j2` template.

`render_report(run, baseline)` returns the whole page as one string. The template autoescapes
every string from the data; only the charts (which escape their own text) and the package's
stylesheet go in as they are.
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
from jobs.engine import RunSummary, Segment, band_range
from jobs.run.canary import CanaryResult
from jobs.tools.comparison import (
    Comparison,
    Gate,
    SegmentShift,
    Thresholds,
    compare_runs,
    differences,
    gate,
    gate_word,
)
from jobs.tools.drilldown import item_views
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
REGRESSIONS = 20
DRILLED = 10  # the first regressions (else worst queries) open onto `ctxprec show`'s view
PASSAGE_CHARS = 300  # a passage's text on the page is cut there
PACKAGE = "jobs.tools.report"  # where the template and the stylesheet are
TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"
_REASON_CHARS = 120  # a rejected form's server answer in the header (the manifest has it whole)


@dataclass(frozen=True, kw_only=True)
class Card:
    """One figure in a row of cards: a label, the value, an optional note under it."""

    label: str
    value: str
    note: str = ""
    tone: str = ""  # "", "good", "bad" or "warn": the card's colour


def _recorded(run: PublishedRun, name: str) -> str:
    recorded = run.manifest is not None and name in run.manifest.model_fields_set
    return str(getattr(run.manifest, name)) if recorded else "–"


def header_meta(run: PublishedRun) -> list[tuple[str, str]]:
    negotiated = run.response_format  # the form the judge used, the forms the endpoint rejected
    form = "–" if negotiated is None else negotiated.describe(max_reason_chars=_REASON_CHARS)
    return [
        ("date", run.run_date.isoformat()),
        ("judge model", run.judge_model),
        ("prompt version", _recorded(run, "prompt_version")),
        ("published", _recorded(run, "published_at")),
        ("score scale", f"{run.summary.scale:g}"),
        ("structured output", form),
    ]


def error_rate(run: PublishedRun) -> tuple[str, bool] | None:
    """The recorded error rate as `ctxprec status` says it, and whether it failed the run."""
    record = run.manifest.error_rate if run.manifest is not None else None
    return None if record is None or not record.errors else (record.describe(), record.exceeded)


def header_cards(summary: RunSummary) -> list[Card]:
    sampled = summary.population is not None and summary.population != summary.items
    sample = f"judged of {fmt.integer(summary.population)} (a sample)" if sampled else ""
    scored_share = fmt.percent(summary.scored / summary.items) if summary.items else ""
    interval = fmt.interval(summary.mean_ci_low, summary.mean_ci_high)
    spread = f"p10 {fmt.number(summary.p10)} · p90 {fmt.number(summary.p90)}"
    cards = [
        Card(label="items", value=fmt.integer(summary.items), note=sample),
        Card(label="scored", value=fmt.integer(summary.scored), note=scored_share),
        Card(
            label="unscored",
            value=fmt.integer(summary.unscored),
            tone="warn" if summary.unscored else "",
        ),
        Card(
            label="errors", value=fmt.integer(summary.errors), tone="bad" if summary.errors else ""
        ),
        Card(label="mean", value=fmt.number(summary.mean), note=f"95% CI {interval}"),
        Card(label="median", value=fmt.number(summary.median), note=spread),
    ]
    canary = CanaryResult.of_metrics(summary.canary)
    if canary:
        judged = f"judge vs labels on {fmt.integer(canary.items)} items"
        cards.append(Card(label="canary kappa", value=fmt.number(canary.kappa, 3), note=judged))
    return cards


def distribution_charts(run: PublishedRun) -> tuple[Markup, Markup]:
    """The score histogram (10 bins over score / scale) and the summary's score bands."""
    summary = run.summary
    empty = "" if summary.scored else "no item scored ok"
    counts = queries.histogram(run.scores(), summary.scale)
    bins = len(counts)
    x_label = "score" if summary.scale == 1 else "score / scale"
    hist = chart(
        [f"{index / bins:.1f}–{(index + 1) / bins:.1f}" for index in range(bins)],
        [Series(name="queries", values=[float(count) for count in counts], color=COLOR_RUN)],
        ChartSpec(
            title="Score distribution (10 bins)",
            x_label=f"{x_label} (bins of 0.1; the last includes 1.0)",
            y_label="queries",
            width=620,
            edge_labels=[f"{index / bins:g}" for index in range(bins + 1)],
            value_format=fmt.integer,
            whole=True,
            note=empty,
        ),
    )
    bands = chart(
        [label for label, _ in summary.bands],
        [
            Series(
                name="queries",
                values=[float(count) for _, count in summary.bands],
                color=COLOR_BAND,
            )
        ],
        ChartSpec(
            title="Score bands",
            x_label=f"band of {x_label}",
            sublabels=[band_range(label) for label, _ in summary.bands],
            y_label="queries",
            width=440,
            value_format=fmt.integer,
            whole=True,
            note=empty,
        ),
    )
    return hist, bands


def _rate_spec(top: float, **spec: Any) -> ChartSpec:
    """A line chart of relevance rates (as percentages), its axis up to a little above `top`."""
    y_max = min(1.0, max(0.05, top * 1.15))
    return ChartSpec(kind="line", y_max=y_max, value_format=lambda rate: f"{rate:.0%}", **spec)


def positions_view(run: PublishedRun) -> dict[str, Any]:
    """The relevance rate by position: a chart of the first MAX_CHART_POSITIONS, and more."""
    rates = run.summary.position_rates
    shown = rates[:MAX_CHART_POSITIONS]
    svg = chart(
        [str(rate.position) for rate in shown],
        [Series(name="relevance rate", values=[rate.rate for rate in shown], color=COLOR_RUN)],
        _rate_spec(
            max((rate.rate for rate in shown), default=0.0),
            title="Relevance rate by position",
            x_label="position in the retrieved order (0 = first); n = contexts judged there",
            y_label="share judged relevant",
            width=1090,
            height=310,
            tooltips=[f"{rate.relevant:,} of {rate.judged:,} judged relevant" for rate in shown],
            sublabels=[f"n={rate.judged:,}" for rate in shown],
        ),
    )
    undrawn = None  # the contexts judged at the positions past the chart's last
    if len(rates) > len(shown):
        undrawn = sum(rate.judged for rate in rates[len(shown) :])
    first = f"{shown[0].rate:.0%}" if shown else "–"
    return {"chart": svg, "first_rate": first, "drawn": len(shown), "undrawn_judged": undrawn}


def _segment_name(value: str | None) -> str:
    return "(null)" if value is None else value


def _error(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (low, high)


def _segment_chart(names: list[str], series: Series, counts: list[int], **spec: Any) -> Markup:
    sublabels = [f"n={count:,}" for count in counts]
    return chart(names, [series], ChartSpec(width=1090, height=310, sublabels=sublabels, **spec))


def _by_mean(segment: Segment) -> tuple[float, str]:
    """A segment's place in the chart of the lowest means: by mean, then by name."""
    return (segment.summary.mean or 0.0, _segment_name(segment.value))


def _segment_tooltip(summary: RunSummary) -> str:
    interval = fmt.interval(summary.mean_ci_low, summary.mean_ci_high)
    return (
        f"{summary.scored:,} scored of {summary.items:,} items; 95% CI {interval}; "
        f"median {fmt.number(summary.median)}"
    )


def segments_view(summary: RunSummary) -> list[dict[str, Any]]:
    """Per `summary.by` column: its segments, and a chart of the lowest mean scores."""
    views = []
    for column in summary.segment_columns:
        rows = summary.segments_by(column)
        scored = [row for row in rows if row.summary.mean is not None]
        by_mean = sorted(scored, key=_by_mean)
        drawn = by_mean[:MAX_CHART_SEGMENTS]
        lows = [row.summary for row in drawn]
        errors = [_error(low.mean_ci_low, low.mean_ci_high) for low in lows]
        means = [low.mean for low in lows]
        title = f"Mean score by {column}, with 95% intervals"
        if len(drawn) < len(scored):
            title += f" (the {len(drawn)} lowest)"
        svg = _segment_chart(
            [_segment_name(row.value) for row in drawn],
            Series(name="mean score", values=means, color=COLOR_RUN, errors=errors),
            [low.scored for low in lows],
            title=title,
            x_label=f"{column} (n = items scored ok)",
            y_label="mean score",
            y_max=summary.scale or 1.0,
            value_format=lambda value: f"{value:.2f}",
            tooltips=[_segment_tooltip(low) for low in lows],
        )
        views.append(dict(column=column, rows=rows, chart=svg, undrawn=len(rows) - len(drawn)))
    return views


def _by_shift(shift: SegmentShift) -> tuple[float, str]:
    """A segment's place in the chart of the largest drops: by its change, then by name."""
    return (shift.shift or 0.0, _segment_name(shift.value))


def _extent(shifts: list[SegmentShift]) -> float:
    """How far the changes and their intervals reach from 0 (the axis a little beyond)."""
    reach = 0.0
    for shift in shifts:
        for bound in (shift.shift, shift.ci_low, shift.ci_high):
            reach = max(reach, abs(bound or 0.0))
    return max(reach * 1.1, 0.01)


def _shift_tooltip(shift: SegmentShift) -> str:
    interval = fmt.interval(shift.ci_low, shift.ci_high, 4)
    return f"95% CI {interval}, p {fmt.number(shift.p_adjusted, 4)} after Holm"


def segment_shifts_view(comparison: Comparison, verdict: Gate) -> list[dict[str, Any]]:
    """Per segment column: each value's shift and gate word, and a chart of the largest drops."""
    views = []
    for column in comparison.segment_columns:
        shifts = verdict.segments_by(column)
        changed = [shift for shift in shifts if shift.shift is not None]
        drawn = sorted(changed, key=_by_shift)[:MAX_CHART_SEGMENTS]
        extent = _extent(drawn)
        errors = [_error(shift.ci_low, shift.ci_high) for shift in drawn]
        changes = [shift.shift for shift in drawn]
        svg = _segment_chart(
            [_segment_name(shift.value) for shift in drawn],
            Series(name="mean change", values=changes, color=COLOR_DOWN, errors=errors),
            [shift.paired for shift in drawn],
            title=f"Change in mean by {column} (this run − baseline), largest drops first, "
            "with 95% intervals",
            x_label=f"{column} (n = queries compared)",
            y_label="change in mean score",
            y_min=-extent,
            y_max=extent,
            diverging=True,
            value_format=lambda value: f"{value:+.3f}",
            tooltips=[_shift_tooltip(shift) for shift in drawn],
        )
        rows = [(shift, gate_word(shift)) for shift in shifts]
        views.append(dict(column=column, rows=rows, chart=svg, undrawn=len(shifts) - len(drawn)))
    return views


def cost_view(run: PublishedRun) -> dict[str, Any]:
    """Cards of the calls, tokens, cost and time; the manifest's stage timings; its shards."""
    summary = run.summary
    seconds = run.seconds
    cost = fmt.cost(summary.cost_usd, run.judge_model)  # the offline judge's reads as everywhere
    if is_offline(run.judge_model):
        note = "no API cost"
    elif summary.cost_usd is not None:
        note = "from litellm's price map"
    else:
        note = "model not in litellm's price map"
    if summary.cost_usd and summary.items:
        note = f"${summary.cost_per_1000_items:,.4f} per 1,000 items"
    hits = ""
    if summary.judge_calls:
        hits = f"{fmt.percent(summary.cache_hits / summary.judge_calls)} of calls"
    took = "–" if seconds is None else f"{seconds:,.1f}"
    rate = "–" if not seconds else f"{summary.items / seconds:,.1f}"
    cards = [
        Card(label="judge calls", value=fmt.integer(summary.judge_calls)),
        Card(label="cache hits", value=fmt.integer(summary.cache_hits), note=hits),
        Card(
            label="prompt tokens",
            value=fmt.integer(summary.prompt_tokens),
            note=f"{summary.cached_prompt_tokens:,} cached",
        ),
        Card(label="completion tokens", value=fmt.integer(summary.completion_tokens)),
        Card(
            label="judge tokens per item",
            value=fmt.integer(summary.tokens_per_item),
            note="prompt and completion",
        ),
        Card(label="estimated cost", value=cost, note=note),
        Card(label="seconds", value=took, note="wall clock"),
        Card(label="items / s", value=rate),
    ]
    timings = run.manifest.timings_s if run.manifest is not None else {}
    stages = [(name, "" if spent is None else str(spent)) for name, spent in timings.items()]
    return {"cards": cards, "stages": stages, "shards": _recorded(run, "shards")}


def _shift_tone(shift: float | None, overall: SegmentShift | None) -> str:
    """The mean shift card's colour: good or bad when the shift is significant, else none."""
    if shift is None or overall is None or not overall.significant:
        return ""
    if shift > 0:
        return "good"
    return "bad"


def _test_note(comparison: Comparison, overall: SegmentShift | None) -> str:
    """What the mean shift card says of its test."""
    if overall is None:
        return f"over {comparison.paired:,} queries ok in both"
    interval = fmt.interval(overall.ci_low, overall.ci_high, 4)
    return (
        f"95% CI {interval}, p {fmt.number(overall.p_adjusted, 4)}; "
        f"{overall.method} over {overall.paired:,} queries"
    )


def _fell(shift: SegmentShift) -> str:
    """The sentence under a failed line: what fell and why its queries moved."""
    what = f"Segment {shift.by}={_segment_name(shift.value)}" if shift.by else "The mean"
    return f"{what} fell: {shift.moves()}."


def _baseline_cards(comparison: Comparison, verdict: Gate) -> list[Card]:
    """The baseline section's cards: both means, the shift, the gate, the canary, the counts."""
    shift = comparison.mean_shift
    overall = verdict.overall
    cards = [
        Card(
            label="baseline mean",
            value=fmt.number(comparison.stats_a.mean, 3),
            note=f"run {comparison.run_a}",
        ),
        Card(
            label="this run mean",
            value=fmt.number(comparison.stats_b.mean, 3),
            note=f"run {comparison.run_b}",
        ),
        Card(
            label="mean shift",
            value=fmt.number(shift, 3, signed=True),
            note=_test_note(comparison, overall),
            tone=_shift_tone(shift, overall),
        ),
        Card(
            label="gate",
            value="pass" if verdict.passed else "FAIL",
            tone="" if verdict.passed else "bad",
        ),
    ]
    canary = verdict.canary
    if canary is not None:
        kappa_a = fmt.number(canary.canary_a.kappa, 3)
        kappa_b = fmt.number(canary.canary_b.kappa, 3)
        cards.append(
            Card(
                label="canary kappa",
                value=f"{kappa_a} → {kappa_b}",
                note="the judge changed" if canary.failed else "judge steady",
                tone="bad" if canary.failed else "",
            )
        )
    cards += [
        Card(
            label="improved",
            value=fmt.integer(comparison.improved),
            tone="good" if comparison.improved else "",
        ),
        Card(
            label="regressed",
            value=fmt.integer(comparison.regressed),
            tone="bad" if comparison.regressed else "",
        ),
        Card(label="unchanged", value=fmt.integer(comparison.unchanged)),
    ]
    return cards


def baseline_view(comparison: Comparison) -> dict[str, Any]:
    """The comparison with the baseline run: cards, statistics, charts, segments, regressions."""
    verdict = gate(comparison, Thresholds())
    overall = verdict.overall
    cards = _baseline_cards(comparison, verdict)
    keys = ("name", "baseline", "this_run", "change", "digits")
    stats = [dict(zip(keys, row, strict=True)) for row in comparison.stat_rows()]
    failed = [
        segment
        for segment in (overall, *verdict.failed_segments)
        if segment is not None and segment.failed
    ]
    runs = {"baseline": comparison.facts_a.describe(), "this run": comparison.facts_b.describe()}
    return {
        "comparison": comparison,
        "runs": runs,
        "warnings": differences(comparison.facts_a, comparison.facts_b, ("baseline", "this run")),
        "moved": [_fell(segment) for segment in failed],
        "cards": cards,
        "stats": stats,
        "position_charts": _position_compare_charts(comparison),
        "regressions": comparison.regressions(REGRESSIONS).to_dicts(),
        "segments": segment_shifts_view(comparison, verdict),
    }


def _position_compare_charts(comparison: Comparison) -> tuple[Markup, Markup]:
    positions = comparison.positions.head(MAX_CHART_POSITIONS)
    categories = [str(position) for position in positions["position"]]
    rate_a = positions["rate_a"].to_list()
    rate_b = positions["rate_b"].to_list()
    delta = positions["delta"].to_list()
    both = chart(
        categories,
        [
            Series(
                name=f"baseline {comparison.run_a}",
                values=rate_a,
                color=COLOR_BASELINE,
                dashed=True,
            ),
            Series(name=f"this run {comparison.run_b}", values=rate_b, color=COLOR_RUN),
        ],
        _rate_spec(
            max([rate for rate in rate_a + rate_b if rate is not None], default=0.0),
            title="Relevance rate by position, baseline and this run",
            x_label="position (0 = first)",
            y_label="share judged relevant",
            width=620,
        ),
    )
    reach = max([abs(value) for value in delta if value is not None], default=0.0)
    extent = max(reach * 1.25, 0.01)
    change_chart = chart(
        categories,
        [Series(name="change", values=delta, color=COLOR_RUN)],
        ChartSpec(
            title="Change in relevance rate by position (this run − baseline)",
            x_label="position (0 = first)",
            y_label="change in rate (points)",
            width=440,
            y_min=-extent,
            y_max=extent,
            diverging=True,
            value_format=lambda value: f"{value * 100:+.1f}",
        ),
    )
    return both, change_chart


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


def render_report(run: PublishedRun, baseline: PublishedRun | None = None) -> str:
    """The whole report page as one HTML string (with a baseline section when given one)."""
    summary = run.summary
    compared = baseline_view(compare_runs(baseline, run)) if baseline else None
    worst = queries.worst_queries(run)
    rows = compared["regressions"] if compared else worst["rows"]
    drilled = item_views(run, [row["query_id"] for row in rows[:DRILLED]], baseline)
    # Not escaped: a <style> element does not decode entities (and the file is our own).
    css = resources.files(PACKAGE).joinpath(STYLESHEET).read_text(encoding="utf-8")
    context: dict[str, Any] = {
        "css": Markup(css),
        "run_id": run.run_id,
        "meta": header_meta(run),
        "header_cards": header_cards(summary),
        "error_rate": error_rate(run),
        "summary": summary,
        "baseline": compared,
        "distribution_charts": distribution_charts(run),
        "segments": segments_view(summary),
        "min_segment_size": CompareOptions.min_segment_size,
        "positions": positions_view(run),
        "cost": cost_view(run),
        "worst": worst,
        "drilled": {view.query_id: view for view in drilled},
        "drilled_limits": (DRILLED, PASSAGE_CHARS),
        "failed": queries.failed_items(run) if summary.unscored or summary.errors else [],
        "max_chips": MAX_CHIPS,
        "generated": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "root": run.store.url(run.store.root),
    }
    return _environment().get_template(TEMPLATE).render(context)
