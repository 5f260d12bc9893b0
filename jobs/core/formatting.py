"""How every command prints numbers: one formatter, one way to show a missing value.

The summary table, `estimate`, `compare`, `calibrate` and the HTML report all print through
these functions, so a value that is undefined (no scored items, a correlation of a constant
series, a model without a price) reads the same everywhere: `MISSING`.
"""

from __future__ import annotations

import math

MISSING = "n/a"


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


def usd(value: float | None) -> str:
    """A cost in US dollars: cents for a dollar or more, six decimals below, or `MISSING`."""
    if value is None or value != value:
        return MISSING
    return f"${value:,.2f}" if value >= 1 else f"${value:.6f}"


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
