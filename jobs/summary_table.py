"""The fixed-width summary a finished run prints to the terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from typing import Any

from jobs import formatting as fmt
from jobs.engine.aggregate import RunSummary, band_range
from jobs.engine.response_formats import RunResponseFormat
from jobs.text_safety import terminal_safe

WIDTH = 46
"""Characters per line, the last line (where the results are) aside."""

# Long lists of positions and segments are cut: the published summary table has them all.
_MAX_POSITION_ROWS = 20
_MAX_SEGMENT_ROWS = 20
# A rejected form's server answer is cut to this: the manifest has it whole.
_MAX_REASON_CHARS = 160


def format_summary_table(
    summary: RunSummary, where: str, judge: Mapping[str, Any] | None = None
) -> str:
    """A compact fixed-width text table of `summary`, ending with where the results are.

    `judge` is what the run's judge settled on (the manifest's `judge`: transport,
    structured-output form); the request flow comes from `summary.flow`."""
    rule = "-" * WIDTH

    def line(label: str, value: str) -> str:
        return f"{label:<22}{value:>{WIDTH - 22}}"

    cost = fmt.usd(summary.cost_usd)
    lines = [
        f"Context precision  (scale {summary.scale:g})",
        rule,
        line("judge model", terminal_safe(summary.model)),
        line("items", f"{summary.items:,}"),
        line("  scored (ok)", f"{summary.scored:,}"),
        line("  unscored", f"{summary.unscored:,}"),
        line("  errors", f"{summary.errors:,}"),
        line("mean / median", f"{fmt.number(summary.mean)} / {fmt.number(summary.median)}"),
        line("p10 / p90", f"{fmt.number(summary.p10)} / {fmt.number(summary.p90)}"),
        rule,
        line("band (score / scale)", "items"),
    ]
    lines += [
        line(f"  {label} ({band_range(label)})", f"{count:,}") for label, count in summary.bands
    ]
    lines += [rule, f"{'position':<10}{'judged':>12}{'relevant':>12}{'rate':>12}"]
    shown = summary.position_rates[:_MAX_POSITION_ROWS]
    lines += [f"{r.position:<10}{r.judged:>12,}{r.relevant:>12,}{r.rate:>12.3f}" for r in shown]
    hidden = len(summary.position_rates) - len(shown)
    if hidden > 0:
        lines.append(f"  ... {hidden} more positions")
    for column in summary.segment_columns:
        segments = summary.segments_by(column)
        lines += [rule, f"{_cut('by ' + column, 22):<22}{'items':>8}{'scored':>8}{'mean':>8}"]
        for segment in segments[:_MAX_SEGMENT_ROWS]:
            s = segment.summary
            name = "(null)" if segment.value is None else segment.value
            lines.append(
                f"  {_cut(name, 20):<20}{s.items:>8,}{s.scored:>8,}{fmt.number(s.mean):>8}"
            )
        hidden = len(segments) - _MAX_SEGMENT_ROWS
        if hidden > 0:
            lines.append(f"  ... {hidden} more values")
    lines += [
        rule,
        line("judge calls", f"{summary.judge_calls:,}"),
        line("prompt tokens", f"{summary.prompt_tokens:,}"),
        line("completion tokens", f"{summary.completion_tokens:,}"),
        line("cache hits", f"{summary.cache_hits:,}"),
        line("estimated cost", cost),
    ]
    lines += _judge_lines(summary, judge or {}, line)
    lines += [rule, f"results: {where}"]
    return "\n".join(lines)


def _judge_lines(
    summary: RunSummary, judge: Mapping[str, Any], line: Callable[[str, str], str]
) -> list[str]:
    """How the requests went: transport, structured-output form, in-flight budget, latency."""
    lines: list[str] = []
    if judge.get("mode") == "batch":
        lines.append(
            line(
                "mode",
                f"batch: {fmt.integer(judge.get('batches'))} in "
                f"{fmt.integer(judge.get('rounds'))} round(s)",
            )
        )
        price = str(judge.get("price") or "")
        lines.append(
            line("priced at", "ASSUMED half price" if "ASSUMED" in price else "batch price")
        )
    if judge.get("transport"):
        lines.append(line("transport", str(judge["transport"])))
    negotiated = judge.get("response_format")
    if isinstance(negotiated, Mapping) and negotiated.get("in_use"):
        lines += _response_format_lines(RunResponseFormat.from_dict(negotiated), line)
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


def _cut(text: str, width: int) -> str:
    """`text` as one safe line (control characters escaped: a carried value cannot move the
    cursor or forge a row) of at most `width` characters."""
    text = terminal_safe(text)
    return text if len(text) <= width else text[: width - 1] + "…"
