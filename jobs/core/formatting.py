"""How every command prints numbers, a missing value (`MISSING`), text tables (`table`) and
its `--json` result (`JsonRecord`), so that every tool reads the same and every cell is
terminal-safe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict

from jobs.core.text_safety import terminal_safe
from scorer_core.capabilities import is_offline

MISSING = "n/a"
FREE = "free (offline judge)"


def number(value: float | None, digits: int = 2, *, signed: bool = False) -> str:
    """`value` with `digits` decimals (a leading sign when `signed`), or `MISSING`."""
    if value is None or value != value:  # None or NaN
        return MISSING
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def integer(value: float | None) -> str:
    """A count with thousands separators, or `MISSING`."""
    if value is None or value != value:
        return MISSING
    return f"{value:,.0f}"


def percent(value: float | None, digits: int = 0) -> str:
    """A share (0.25) as a percentage ("25%"), or `MISSING`."""
    if value is None or value != value:
        return MISSING
    return f"{value:.{digits}%}"


def interval(
    low: float | None,
    high: float | None,
    digits: int = 3,
    *,
    signed: bool = False,
    missing: str = MISSING,
) -> str:
    """A 95% interval as "[low, high]", or `missing` without one."""
    if low is None or high is None:
        return missing
    return f"[{number(low, digits, signed=signed)}, {number(high, digits, signed=signed)}]"


def usd(value: float | None) -> str:
    """A cost in US dollars: cents for a dollar or more, six decimals below, or `MISSING`."""
    if value is None or value != value:
        return MISSING
    return f"${value:,.2f}" if value >= 1 else f"${value:.6f}"


def cost(value: float | None, model: str | None) -> str:
    """A run's judge cost: `FREE` for the offline judge (one word wherever a cost shows)."""
    return FREE if model and is_offline(model) else usd(value)


def duration(seconds: float | None) -> str:
    """A wall time in the unit that reads best: seconds, minutes or hours."""
    if seconds is None or seconds != seconds:
        return MISSING
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def optional_float(value: object) -> float | None:
    """A number (a Polars or Python scalar) as float; None for null and NaN."""
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def cut(text: str, width: int) -> str:
    """`text` as one terminal-safe line of at most `width` characters ("…" where it was cut)."""
    text = terminal_safe(text)
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True, kw_only=True)
class Column:
    """A text table's column: at least `width` wide (exactly, unless `grow`), cut at `limit`."""

    header: str = ""
    align: Literal["<", ">"] = ">"
    width: int = 0
    limit: int | None = None
    grow: bool = True


class TableLayout(TypedDict, total=False):
    """How a text table is laid out: `indent` before each line (default none), `gap` between
    columns (default two spaces), `markdown` for a Markdown table instead (default false)."""

    indent: str
    gap: str
    markdown: bool


def table(
    columns: Sequence[Column],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    header: bool = True,
    **layout: Unpack[TableLayout],
) -> str:
    """`rows` laid out under `columns` as `layout` says, after `title`."""
    indent = layout.get("indent", "")
    gap = layout.get("gap", "  ")
    markdown = layout.get("markdown", False)

    def cell(value: object, column: Column) -> str:
        return cut(str(value), column.limit) if column.limit else terminal_safe(value)

    body = [
        [cell(value, column) for value, column in zip(row, columns, strict=True)] for row in rows
    ]
    heads = [cell(column.header, column) for column in columns]
    shown = [heads, *body] if header else body
    widths = [
        _width(column, [cells[index] for cells in shown]) for index, column in enumerate(columns)
    ]

    def line(cells: Sequence[str]) -> str:
        padded = [
            f"{text:{column.align}{width}}"
            for text, column, width in zip(cells, columns, widths, strict=True)
        ]
        if markdown:
            return f"{indent}| {' | '.join(padded)} |"
        return (indent + gap.join(padded)).rstrip()

    lines = [title] if title is not None else []
    if header:
        lines.append(line(heads))
        if markdown:
            rule = "|".join("-" * (width + 2) for width in widths)
            lines.append(f"{indent}|{rule}|")
    lines += [line(cells) for cells in body]
    return "\n".join(lines)


def _width(column: Column, texts: Sequence[str]) -> int:
    """A column's width: its own, or (`grow`) at least that of its longest text."""
    if not column.grow:
        return column.width
    return max([column.width, *(len(text) for text in texts)])


class JsonRecord(BaseModel):
    """A command's result as `--json` prints it (`to_json`), field for field, in their order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=2)
