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
from jobs.engine import RunSummary, band_range
from jobs.run.canary import CanaryResult
from jobs.tools.comparison import Comparison, Gate, compare_runs, differences, gate, gate_word
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


@dataclass(frozen=True)
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


def header_cards(s: RunSummary) -> list[Card]:
    sampled = s.population is not None and s.population != s.items
    sample = f"judged of {fmt.integer(s.population)} (a sample)" if sampled else ""
    cards = [
        Card("items", fmt.integer(s.items), sample),
        Card("scored", fmt.integer(s.scored), fmt.percent(s.scored / s.items) if s.items else ""),
        Card("unscored", fmt.integer(s.unscored), tone="warn" if s.unscored else ""),
        Card("errors", fmt.integer(s.errors), tone="bad" if s.errors else ""),
        Card("mean", fmt.number(s.mean), f"95% CI {fmt.interval(s.mean_ci_low, s.mean_ci_high)}"),
        Card("median", fmt.number(s.median), f"p10 {fmt.number(s.p10)} · p90 {fmt.number(s.p90)}"),
    ]
    if canary := CanaryResult.of_metrics(s.canary):
        judged = f"judge vs labels on {fmt.integer(canary.items)} items"
        cards.append(Card("canary kappa", fmt.number(canary.kappa, 3), judged))
    return cards


def distribution_charts(run: PublishedRun) -> tuple[Markup, Markup]:
    """The score histogram (10 bins over score / scale) and the summary's score bands."""
    s = run.summary
    empty = "" if s.scored else "no item scored ok"
    counts = queries.histogram(run.scores(), s.scale)
    bins = len(counts)
    x_label = "score" if s.scale == 1 else "score / scale"
    hist = chart(
        [f"{i / bins:.1f}–{(i + 1) / bins:.1f}" for i in range(bins)],
        [Series("queries", [float(c) for c in counts], COLOR_RUN)],
        ChartSpec(
            title="Score distribution (10 bins)",
            x_label=f"{x_label} (bins of 0.1; the last includes 1.0)",
            y_label="queries",
            width=620,
            edge_labels=[f"{i / bins:g}" for i in range(bins + 1)],
            value_format=fmt.integer,
            whole=True,
            note=empty,
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
            value_format=fmt.integer,
            whole=True,
            note=empty,
        ),
    )
    return hist, bands


def _rate_spec(top: float, **spec: Any) -> ChartSpec:
    """A line chart of relevance rates (as percentages), its axis up to a little above `top`."""
    y_max = min(1.0, max(0.05, top * 1.15))
    return ChartSpec(kind="line", y_max=y_max, value_format=lambda v: f"{v:.0%}", **spec)


def positions_view(run: PublishedRun) -> dict[str, Any]:
    """The relevance rate by position: a chart of the first MAX_CHART_POSITIONS, and more."""
    rates = run.summary.position_rates
    shown = rates[:MAX_CHART_POSITIONS]
    svg = chart(
        [str(r.position) for r in shown],
        [Series("relevance rate", [r.rate for r in shown], COLOR_RUN)],
        _rate_spec(
            max((r.rate for r in shown), default=0.0),
            title="Relevance rate by position",
            x_label="position in the retrieved order (0 = first); n = contexts judged there",
            y_label="share judged relevant",
            width=1090,
            height=310,
            tooltips=[f"{r.relevant:,} of {r.judged:,} judged relevant" for r in shown],
            sublabels=[f"n={r.judged:,}" for r in shown],
        ),
    )
    undrawn = sum(r.judged for r in rates[len(shown) :]) if len(rates) > len(shown) else None
    first = f"{shown[0].rate:.0%}" if shown else "–"
    return {"chart": svg, "first_rate": first, "drawn": len(shown), "undrawn_judged": undrawn}


def _segment_name(value: str | None) -> str:
    return "(null)" if value is None else value


def _error(low: float | None, high: float | None) -> tuple[float, float] | None:
    return None if low is None or high is None else (low, high)


def _segment_chart(names: list[str], series: Series, counts: list[int], **spec: Any) -> Markup:
    sublabels = [f"n={n:,}" for n in counts]
    return chart(names, [series], ChartSpec(width=1090, height=310, sublabels=sublabels, **spec))


def segments_view(summary: RunSummary) -> list[dict[str, Any]]:
    """Per `summary.by` column: its segments, and a chart of the lowest mean scores."""
    views = []
    for column in summary.segment_columns:
        rows = summary.segments_by(column)
        scored = [r for r in rows if r.summary.mean is not None]
        by_mean = sorted(scored, key=lambda r: (r.summary.mean or 0.0, _segment_name(r.value)))
        drawn = by_mean[:MAX_CHART_SEGMENTS]
        lows = [r.summary for r in drawn]
        errors = [_error(s.mean_ci_low, s.mean_ci_high) for s in lows]
        svg = _segment_chart(
            [_segment_name(r.value) for r in drawn],
            Series("mean score", [s.mean for s in lows], COLOR_RUN, errors=errors),
            [s.scored for s in lows],
            title=f"Mean score by {column}, with 95% intervals"
            + (f" (the {len(drawn)} lowest)" if len(drawn) < len(scored) else ""),
            x_label=f"{column} (n = items scored ok)",
            y_label="mean score",
            y_max=summary.scale or 1.0,
            value_format=lambda v: f"{v:.2f}",
            tooltips=[
                f"{s.scored:,} scored of {s.items:,} items; 95% CI "
                f"{fmt.interval(s.mean_ci_low, s.mean_ci_high)}; median {fmt.number(s.median)}"
                for s in lows
            ],
        )
        views.append(dict(column=column, rows=rows, chart=svg, undrawn=len(rows) - len(drawn)))
    return views


def segment_shifts_view(c: Comparison, verdict: Gate) -> list[dict[str, Any]]:
    """Per segment column: each value's shift and gate word, and a chart of the largest drops."""
    views = []
    for column in c.segment_columns:
        shifts = verdict.segments_by(column)
        changed = [s for s in shifts if s.shift is not None]
        by_shift = sorted(changed, key=lambda s: (s.shift or 0.0, _segment_name(s.value)))
        drawn = by_shift[:MAX_CHART_SEGMENTS]
        extent = max([abs(v or 0.0) for s in drawn for v in (s.shift, s.ci_low, s.ci_high)] or [0])
        extent = max(extent * 1.1, 0.01)
        errors = [_error(s.ci_low, s.ci_high) for s in drawn]
        svg = _segment_chart(
            [_segment_name(s.value) for s in drawn],
            Series("mean change", [s.shift for s in drawn], COLOR_DOWN, errors=errors),
            [s.paired for s in drawn],
            title=f"Change in mean by {column} (this run − baseline), largest drops first, "
            "with 95% intervals",
            x_label=f"{column} (n = queries compared)",
            y_label="change in mean score",
            y_min=-extent,
            y_max=extent,
            diverging=True,
            value_format=lambda v: f"{v:+.3f}",
            tooltips=[
                f"95% CI {fmt.interval(s.ci_low, s.ci_high, 4)}, "
                f"p {fmt.number(s.p_adjusted, 4)} after Holm"
                for s in drawn
            ],
        )
        rows = [(s, gate_word(s)) for s in shifts]
        views.append(dict(column=column, rows=rows, chart=svg, undrawn=len(shifts) - len(drawn)))
    return views


def cost_view(run: PublishedRun) -> dict[str, Any]:
    """Cards of the calls, tokens, cost and time; the manifest's stage timings; its shards."""
    s, seconds = run.summary, run.seconds
    rate = s.items / seconds if seconds else None
    cost = fmt.cost(s.cost_usd, run.judge_model)  # the offline judge's reads as everywhere
    if is_offline(run.judge_model):
        note = "no API cost"
    elif s.cost_usd is not None:
        note = "from litellm's price map"
    else:
        note = "model not in litellm's price map"
    if s.cost_usd and s.items:
        note = f"${s.cost_per_1000_items:,.4f} per 1,000 items"
    hit_rate = fmt.percent(s.cache_hits / s.judge_calls) if s.judge_calls else ""
    timings = run.manifest.timings_s if run.manifest is not None else {}
    cards = [
        Card("judge calls", fmt.integer(s.judge_calls)),
        Card("cache hits", fmt.integer(s.cache_hits), f"{hit_rate} of calls" if hit_rate else ""),
        Card("prompt tokens", fmt.integer(s.prompt_tokens), f"{s.cached_prompt_tokens:,} cached"),
        Card("completion tokens", fmt.integer(s.completion_tokens)),
        Card("judge tokens per item", fmt.integer(s.tokens_per_item), "prompt and completion"),
        Card("estimated cost", cost, note),
        Card("seconds", "–" if seconds is None else f"{seconds:,.1f}", "wall clock"),
        Card("items / s", "–" if rate is None else f"{rate:,.1f}"),
    ]
    stages = [(name, "" if took is None else str(took)) for name, took in timings.items()]
    return {"cards": cards, "stages": stages, "shards": _recorded(run, "shards")}


def baseline_view(c: Comparison) -> dict[str, Any]:
    """The comparison with the baseline run: cards, statistics, charts, segments, regressions."""
    shift = c.mean_shift
    verdict = gate(c, CompareOptions.min_effect, CompareOptions.min_segment_size)
    o = verdict.overall
    tone = "" if shift is None or o is None or not o.significant else "good" if shift > 0 else "bad"
    test = (
        f"95% CI {fmt.interval(o.ci_low, o.ci_high, 4)}, p {fmt.number(o.p_adjusted, 4)}; "
        f"{o.method} over {o.paired:,} queries"
        if o is not None
        else f"over {c.paired:,} queries ok in both"
    )
    cards = [
        Card("baseline mean", fmt.number(c.stats_a.mean, 3), f"run {c.run_a}"),
        Card("this run mean", fmt.number(c.stats_b.mean, 3), f"run {c.run_b}"),
        Card("mean shift", fmt.number(shift, 3, signed=True), test, tone),
        Card("gate", "pass" if verdict.passed else "FAIL", tone="" if verdict.passed else "bad"),
    ]
    if canary := verdict.canary:
        kappas = f"{fmt.number(canary.a.kappa, 3)} → {fmt.number(canary.b.kappa, 3)}"
        judge = "the judge changed" if canary.failed else "judge steady"
        cards.append(Card("canary kappa", kappas, judge, "bad" if canary.failed else ""))
    cards += [
        Card("improved", fmt.integer(c.improved), tone="good" if c.improved else ""),
        Card("regressed", fmt.integer(c.regressed), tone="bad" if c.regressed else ""),
        Card("unchanged", fmt.integer(c.unchanged)),
    ]
    keys = ("name", "baseline", "this_run", "change", "digits")
    stats = [dict(zip(keys, row, strict=True)) for row in c.stat_rows()]
    failed = [s for s in (o, *verdict.failed_segments) if s is not None and s.failed]
    return {
        "comparison": c,
        "runs": {"baseline": c.facts_a.describe(), "this run": c.facts_b.describe()},
        "warnings": differences(c.facts_a, c.facts_b, ("baseline", "this run")),
        "moved": [
            f"{f'Segment {s.by}={_segment_name(s.value)}' if s.by else 'The mean'} fell: "
            f"{s.moves()}."
            for s in failed
        ],
        "cards": cards,
        "stats": stats,
        "position_charts": _position_compare_charts(c),
        "regressions": c.regressions(REGRESSIONS).to_dicts(),
        "segments": segment_shifts_view(c, verdict),
    }


def _position_compare_charts(c: Comparison) -> tuple[Markup, Markup]:
    change = c.positions.head(MAX_CHART_POSITIONS)
    categories = [str(p) for p in change["position"]]
    rate_a, rate_b, delta = (change[name].to_list() for name in ("rate_a", "rate_b", "delta"))
    both = chart(
        categories,
        [
            Series(f"baseline {c.run_a}", rate_a, COLOR_BASELINE, dashed=True),
            Series(f"this run {c.run_b}", rate_b, COLOR_RUN),
        ],
        _rate_spec(
            max([v for v in rate_a + rate_b if v is not None], default=0.0),
            title="Relevance rate by position, baseline and this run",
            x_label="position (0 = first)",
            y_label="share judged relevant",
            width=620,
        ),
    )
    extent = max(max([abs(v) for v in delta if v is not None], default=0.0) * 1.25, 0.01)
    change_chart = chart(
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
