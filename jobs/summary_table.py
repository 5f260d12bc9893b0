"""The fixed-width summary a finished run prints to the terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

from jobs import formatting as fmt
from jobs.engine.aggregate import RunSummary, band_range
from jobs.engine.response_formats import RunResponseFormat

WIDTH = 46
"""Characters per line, the last line (where the results are) aside."""

# Long lists of positions are cut: the published summary table has them all.
_MAX_POSITION_ROWS = 20
# A rejected form's server answer is cut to this: the manifest has it whole.
_MAX_REASON_CHARS = 160


def format_summary_table(summary: RunSummary, where: str) -> str:
    """A compact fixed-width text table of `summary`, ending with where the results are."""
    rule = "-" * WIDTH

    def line(label: str, value: str) -> str:
        return f"{label:<22}{value:>{WIDTH - 22}}"

    cost = fmt.usd(summary.cost_usd)
    lines = [
        f"Context precision  (scale {summary.scale:g})",
        rule,
        line("judge model", summary.model),
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
    lines += [
        rule,
        line("judge calls", f"{summary.judge_calls:,}"),
        line("prompt tokens", f"{summary.prompt_tokens:,}"),
        line("completion tokens", f"{summary.completion_tokens:,}"),
        line("cache hits", f"{summary.cache_hits:,}"),
        line("estimated cost", cost),
        rule,
    ]
    if summary.response_format is not None:
        lines += [*_response_format_lines(summary.response_format, line), rule]
    lines.append(f"results: {where}")
    return "\n".join(lines)


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
        reason = textwrap.shorten(dropped.reason, _MAX_REASON_CHARS, placeholder="...")
        lines += textwrap.wrap(
            f"{dropped.form} rejected: {reason}",
            WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
    return lines
