"""The fixed-width summary a finished run prints to the terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from jobs.core import formatting as fmt
from jobs.core.formatting import Column, table
from jobs.core.run_manifest import JudgeRecord, ResponseFormatRecord
from jobs.core.text_safety import terminal_safe
from jobs.engine.publish.aggregate import RunSummary, band_range
from scorer_core.errors import one_line

WIDTH = 46
"""Characters per line, the last line (where the results are) aside."""

# Long lists of positions and segments are cut: the published summary table has them all.
_MAX_POSITION_ROWS = 20
_MAX_SEGMENT_ROWS = 20
# A rejected form's server answer is cut to this: the manifest has it whole.
_MAX_REASON_CHARS = 160
# A label and its value, and the columns of the positions' and segments' tables: fixed widths.
_LINE = (Column(align="<", width=22, grow=False), Column(width=WIDTH - 22, grow=False))
_POSITIONS = (
    Column(header="position", align="<", width=10, grow=False),
    *(Column(header=name, width=12, grow=False) for name in ("judged", "relevant", "rate")),
)
_SEGMENT_FIGURES = tuple(
    Column(header=name, width=7, grow=False) for name in ("items", "scored", "mean", "± 95%")
)


def format_summary_table(
    summary: RunSummary, where: str, judge: JudgeRecord | Mapping[str, Any] | None = None
) -> str:
    """A compact fixed-width text table of `summary`, ending with where the results are.

    `judge` is what the run's judge settled on (the manifest's `judge`: transport,
    structured-output form); the request flow comes from `summary.flow`."""
    rule = "-" * WIDTH
    record = judge if isinstance(judge, JudgeRecord) else JudgeRecord.model_validate(judge or {})
    population = summary.population
    sampled = population is not None and population != summary.items
    interval = fmt.interval(summary.mean_ci_low, summary.mean_ci_high, missing="-")
    lines = [
        f"Context precision  (scale {summary.scale:g})",
        rule,
        *_pairs(
            ("judge model", summary.model),
            ("items", f"{summary.items:,}"),
            *([("  of population", f"{population:,}")] if sampled else []),
            ("  scored (ok)", f"{summary.scored:,}"),
            ("  unscored", f"{summary.unscored:,}"),
            ("  errors", f"{summary.errors:,}"),
            ("mean / median", f"{fmt.number(summary.mean)} / {fmt.number(summary.median)}"),
            ("mean 95% interval", interval),
            ("p10 / p90", f"{fmt.number(summary.p10)} / {fmt.number(summary.p90)}"),
        ),
        rule,
        *_pairs(
            ("band (score / scale)", "items"),
            *((f"  {label} ({band_range(label)})", f"{count:,}") for label, count in summary.bands),
        ),
        *_position_lines(summary, rule),
        *_segment_lines(summary, rule),
        rule,
        *_pairs(
            ("judge calls", f"{summary.judge_calls:,}"),
            ("prompt tokens", f"{summary.prompt_tokens:,}"),
            ("  from prompt cache", f"{summary.cached_prompt_tokens:,}"),
            ("completion tokens", f"{summary.completion_tokens:,}"),
            ("cache hits", f"{summary.cache_hits:,}"),
            ("estimated cost", fmt.cost(summary.cost_usd, summary.model)),
            ("  per 1,000 items", fmt.cost(summary.cost_per_1000_items, summary.model)),
            ("judge tokens per item", fmt.integer(summary.tokens_per_item)),
            *_canary_pairs(dict(summary.canary)),
        ),
        *_judge_lines(dict(summary.flow), record),
        rule,
        f"results: {where}",
    ]
    return "\n".join(lines)


def _pairs(*pairs: tuple[str, str]) -> list[str]:
    """One line per (label, value), in the table's two fixed-width columns."""
    return table(_LINE, pairs, header=False, gap="").splitlines() if pairs else []


def _position_lines(summary: RunSummary, rule: str) -> list[str]:
    """Relevance by position, the first `_MAX_POSITION_ROWS` positions."""
    shown = summary.position_rates[:_MAX_POSITION_ROWS]
    rows = [
        (rate.position, f"{rate.judged:,}", f"{rate.relevant:,}", f"{rate.rate:.3f}")
        for rate in shown
    ]
    hidden = len(summary.position_rates) - len(shown)
    return [rule, table(_POSITIONS, rows, gap=""), *_more(hidden, "positions")]


def _more(hidden: int, what: str) -> list[str]:
    return [f"  ... {hidden} more {what}"] if hidden > 0 else []


def _segment_lines(summary: RunSummary, rule: str) -> list[str]:
    """Per `summary.by` column: each value's items, scored, mean and interval half-width."""
    lines: list[str] = []
    for column in summary.segment_columns:
        segments = summary.segments_by(column)
        segment_column = Column(header=f"by {column}", align="<", width=18, limit=18, grow=False)
        columns = [segment_column, *_SEGMENT_FIGURES]
        rows = [
            (
                "  " + ("(null)" if segment.value is None else segment.value),
                f"{segment.summary.items:,}",
                f"{segment.summary.scored:,}",
                fmt.number(segment.summary.mean),
                _half_width(segment.summary),
            )
            for segment in segments[:_MAX_SEGMENT_ROWS]
        ]
        lines += [
            rule,
            table(columns, rows, gap=""),
            *_more(len(segments) - _MAX_SEGMENT_ROWS, "values"),
        ]
    return lines


def _canary_pairs(canary: dict[str, float | None]) -> list[tuple[str, str]]:
    """The judge canary's agreement with its labels (`canary:`); nothing without one."""
    if not canary:
        return []
    items = fmt.integer(canary.get("canary_items"))
    kappa = fmt.number(canary.get("canary_kappa"), 3)
    precision = fmt.number(canary.get("canary_precision"), 3)
    return [
        ("canary items / kappa", f"{items} / {kappa}"),
        ("canary prec / recall", f"{precision} / {fmt.number(canary.get('canary_recall'), 3)}"),
    ]


def _judge_lines(flow: dict[str, float | None], judge: JudgeRecord) -> list[str]:
    """How the requests went: transport, structured-output form, in-flight budget, latency."""
    lines: list[str] = []
    if judge.mode == "batch":
        price = "ASSUMED half price" if "ASSUMED" in (judge.price or "") else "batch price"
        batches = f"batch: {fmt.integer(judge.batches)} in {fmt.integer(judge.rounds)} round(s)"
        lines += _pairs(("mode", batches), ("priced at", price))
    if judge.transport:
        lines += _pairs(("transport", judge.transport))
    negotiated = judge.response_format
    if negotiated is not None and negotiated.in_use:
        lines += _response_format_lines(negotiated)
    if flow:
        budget = " / ".join(
            fmt.integer(flow.get(name)) for name in ("in_flight_budget", "max_in_flight")
        )
        latency = " / ".join(
            fmt.number(flow.get(f"latency_{quantile}_s")) for quantile in ("p50", "p90", "p99")
        )
        lines += _pairs(("in flight: budget/max", budget), ("latency p50/p90/p99 s", latency))
    return lines


def _response_format_lines(negotiated: ResponseFormatRecord) -> list[str]:
    """The form the judge's requests used, and each form the endpoint rejected with its
    answer (cut to a few lines: the manifest has it whole)."""
    form = negotiated.in_use if negotiated.confirmed else f"{negotiated.in_use} (unconfirmed)"
    lines = _pairs(("structured output", form))
    if negotiated.setting != "auto":
        lines += _pairs(("  setting", negotiated.setting))
    for dropped in negotiated.dropped:
        reason = one_line(terminal_safe(dropped.reason), _MAX_REASON_CHARS)
        text = f"{dropped.form} rejected: {reason}"
        lines += textwrap.wrap(text, WIDTH, initial_indent="  ", subsequent_indent="    ")
    return lines


def _half_width(summary: RunSummary) -> str:
    """Half the 95% interval's width (the intervals are symmetric); "-" without one."""
    if summary.mean_ci_low is None or summary.mean_ci_high is None:
        return "-"
    return fmt.number((summary.mean_ci_high - summary.mean_ci_low) / 2, 3)
