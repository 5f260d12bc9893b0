"""The fixed-width summary a finished run prints to the terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from jobs.core import formatting as fmt
from jobs.core.formatting import Column, table
from jobs.core.run_manifest import JudgeRecord
from jobs.core.text_safety import terminal_safe
from jobs.engine.publish.aggregate import RunSummary, band_range
from jobs.engine.publish.response_formats import RunResponseFormat

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
    Column("position", "<", 10, grow=False),
    *(Column(name, width=12, grow=False) for name in ("judged", "relevant", "rate")),
)
_SEGMENT_FIGURES = tuple(
    Column(name, width=7, grow=False) for name in ("items", "scored", "mean", "± 95%")
)


def format_summary_table(
    summary: RunSummary, where: str, judge: JudgeRecord | Mapping[str, Any] | None = None
) -> str:
    """A compact fixed-width text table of `summary`, ending with where the results are.

    `judge` is what the run's judge settled on (the manifest's `judge`: transport,
    structured-output form); the request flow comes from `summary.flow`."""
    rule = "-" * WIDTH

    def line(label: str, value: str) -> str:
        return table(_LINE, [(label, value)], header=False, gap="")

    cost = fmt.usd(summary.cost_usd)
    lines = [
        f"Context precision  (scale {summary.scale:g})",
        rule,
        line("judge model", summary.model),
        line("items", f"{summary.items:,}"),
        *(
            [line("  of population", f"{summary.population:,}")]
            if summary.population is not None and summary.population != summary.items
            else []
        ),
        line("  scored (ok)", f"{summary.scored:,}"),
        line("  unscored", f"{summary.unscored:,}"),
        line("  errors", f"{summary.errors:,}"),
        line("mean / median", f"{fmt.number(summary.mean)} / {fmt.number(summary.median)}"),
        line(
            "mean 95% interval",
            fmt.interval(summary.mean_ci_low, summary.mean_ci_high, missing="-"),
        ),
        line("p10 / p90", f"{fmt.number(summary.p10)} / {fmt.number(summary.p90)}"),
        rule,
        line("band (score / scale)", "items"),
    ]
    lines += [
        line(f"  {label} ({band_range(label)})", f"{count:,}") for label, count in summary.bands
    ]
    lines += _position_lines(summary, rule)
    lines += _segment_lines(summary, rule)
    lines += [
        rule,
        line("judge calls", f"{summary.judge_calls:,}"),
        line("prompt tokens", f"{summary.prompt_tokens:,}"),
        line("completion tokens", f"{summary.completion_tokens:,}"),
        line("cache hits", f"{summary.cache_hits:,}"),
        line("estimated cost", cost),
    ]
    lines += _canary_lines(summary, line)
    record = judge if isinstance(judge, JudgeRecord) else JudgeRecord.model_validate(judge or {})
    lines += _judge_lines(summary, record, line)
    lines += [rule, f"results: {where}"]
    return "\n".join(lines)


def _position_lines(summary: RunSummary, rule: str) -> list[str]:
    """Relevance by position, the first `_MAX_POSITION_ROWS` positions."""
    shown = summary.position_rates[:_MAX_POSITION_ROWS]
    rows = [(r.position, f"{r.judged:,}", f"{r.relevant:,}", f"{r.rate:.3f}") for r in shown]
    lines = [rule, table(_POSITIONS, rows, gap="")]
    hidden = len(summary.position_rates) - len(shown)
    if hidden > 0:
        lines.append(f"  ... {hidden} more positions")
    return lines


def _segment_lines(summary: RunSummary, rule: str) -> list[str]:
    """Per `summary.by` column: each value's items, scored, mean and interval half-width."""
    lines: list[str] = []
    for column in summary.segment_columns:
        segments = summary.segments_by(column)
        columns = [Column(f"by {column}", "<", 18, limit=18, grow=False), *_SEGMENT_FIGURES]
        rows = [
            (
                f"  {'(null)' if segment.value is None else segment.value}",
                f"{segment.summary.items:,}",
                f"{segment.summary.scored:,}",
                fmt.number(segment.summary.mean),
                _half_width(segment.summary),
            )
            for segment in segments[:_MAX_SEGMENT_ROWS]
        ]
        lines += [rule, table(columns, rows, gap="")]
        hidden = len(segments) - _MAX_SEGMENT_ROWS
        if hidden > 0:
            lines.append(f"  ... {hidden} more values")
    return lines


def _judge_lines(
    summary: RunSummary, judge: JudgeRecord, line: Callable[[str, str], str]
) -> list[str]:
    """How the requests went: transport, structured-output form, in-flight budget, latency."""
    lines: list[str] = []
    if judge.mode == "batch":
        lines.append(
            line(
                "mode",
                f"batch: {fmt.integer(judge.batches)} in {fmt.integer(judge.rounds)} round(s)",
            )
        )
        price = judge.price or ""
        lines.append(
            line("priced at", "ASSUMED half price" if "ASSUMED" in price else "batch price")
        )
    if judge.transport:
        lines.append(line("transport", judge.transport))
    negotiated = judge.response_format
    if negotiated is not None and negotiated.in_use:
        lines += _response_format_lines(RunResponseFormat.from_dict(negotiated.model_dump()), line)
    flow = dict(summary.flow)
    if flow:
        lines.append(
            line(
                "in flight: budget/max",
                (
                    f"{fmt.integer(flow.get('in_flight_budget'))} / "
                    f"{fmt.integer(flow.get('max_in_flight'))}"
                ),
            )
        )
        lines.append(
            line(
                "latency p50/p90/p99 s",
                (
                    " / ".join(
                        fmt.number(flow.get(name))
                        for name in ("latency_p50_s", "latency_p90_s", "latency_p99_s")
                    )
                ),
            )
        )
    return lines


def _response_format_lines(
    negotiated: RunResponseFormat, line: Callable[[str, str], str]
) -> list[str]:
    """The form the judge's requests used, and each form the endpoint rejected with its
    answer (cut to a few lines: the manifest has it whole)."""
    form = negotiated.in_use if negotiated.confirmed else f"{negotiated.in_use} (unconfirmed)"
    lines = [line("structured output", form)]
    if negotiated.setting != "auto":
        lines.append(line("  setting", negotiated.setting))
    for dropped in negotiated.dropped:
        reason = textwrap.shorten(
            terminal_safe(dropped.reason), _MAX_REASON_CHARS, placeholder="..."
        )
        lines += textwrap.wrap(
            f"{dropped.form} rejected: {reason}",
            WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    return lines


def _canary_lines(summary: RunSummary, line: Callable[[str, str], str]) -> list[str]:
    """The judge canary's agreement with its labels (`canary:`); nothing without one."""
    canary = dict(summary.canary)
    if not canary:
        return []
    return [
        line(
            "canary items / kappa",
            f"{fmt.integer(canary.get('canary_items'))} / "
            f"{fmt.number(canary.get('canary_kappa'), 3)}",
        ),
        line(
            "canary prec / recall",
            f"{fmt.number(canary.get('canary_precision'), 3)} / "
            f"{fmt.number(canary.get('canary_recall'), 3)}",
        ),
    ]


def _half_width(summary: RunSummary) -> str:
    """Half the 95% interval's width (the intervals are symmetric); "-" without one."""
    if summary.mean_ci_low is None or summary.mean_ci_high is None:
        return "-"
    return fmt.number((summary.mean_ci_high - summary.mean_ci_low) / 2, 3)
