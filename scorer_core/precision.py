"""The context-precision maths: average precision over the retrieved order, and score bands.

Each relevant context at 0-based position i adds precision@i = relevant so far / (i + 1); the
score is their mean times `scale`, rounded to 2 decimals with Mastra's operations in Mastra's
order (bit for bit: tests/unit/test_rounding_node.py runs node). No relevant context, or no
verdict, scores 0. The job's Polars aggregation applies the same steps (`round_score`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from scorer_core.errors import ConfigError
from scorer_core.types import Band

_JS_EPSILON = sys.float_info.epsilon  # JavaScript's Number.EPSILON

BANDS: tuple[tuple[Band, float], ...] = (
    ("excellent", 0.85),
    ("good", 0.65),
    ("moderate", 0.35),
    ("low", 0.0),
)
"""Score bands over score / scale, best first: (name, lower bound). A band holds the values at
or above its bound and below the next band's; "low" excludes 0 itself, which is "none".

The names and ranges are the seed's (0.9-1.0 excellent, 0.7-0.8 good, 0.4-0.6 moderate, 0.1-0.3
low, 0 none). Its ranges leave gaps between 2-decimal scores (0.85, 0.62, ...); the bounds
here close them at the midpoints, the same edges as the job's summary table."""

BAND_EPSILON = 1e-9
"""A score / scale that should sit exactly on a band edge may come out 1 ulp below it: band
edges are compared with this slack (here and in the job's Polars summary)."""


def round_score(value: float) -> float:
    """`value` rounded to 2 decimals exactly as Mastra's `roundToTwoDecimals` does."""
    return round_half_up(value, 2)


def round_half_up(value: float, digits: int = 2) -> float:
    """Mastra's rounding to `digits` decimals, each step an IEEE double operation:
    y = (value + 2**-52) * 10**digits, ties towards +infinity (JavaScript's Math.round)."""
    factor = 10.0**digits
    scaled = (value + _JS_EPSILON) * factor
    floor = math.floor(scaled)
    # `scaled - floor` is exact: Math.round, not floor(scaled + 0.5) (wrong for 0.4999...94).
    return (floor + 1 if scaled - floor >= 0.5 else floor) / factor


def average_precision(verdicts: Sequence[bool | int]) -> float:
    """Unrounded average precision of relevance flags in ranked order (0 when none relevant)."""
    ranks = [position + 1 for position, verdict in enumerate(verdicts) if verdict]
    if not ranks:
        return 0.0
    return sum(relevant / rank for relevant, rank in enumerate(ranks, 1)) / len(ranks)


def check_scale(scale: float | None) -> float:
    """Validate a score scale: a finite number >= 0; None means 1."""
    if scale is None:
        return 1.0
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise ConfigError(f"scale must be a number, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale < 0:
        raise ConfigError(f"scale must be a finite number >= 0, got {scale!r}")
    return float(scale)


def context_precision(verdicts: Sequence[bool | int], scale: float | None = 1) -> float:
    """Context precision, as Mastra's scorer computes and rounds it.

    Args:
        verdicts: relevance flags in retrieved order.
        scale: scores run from 0 to this (None means 1); checked where options come in.

    Returns:
        Average precision times `scale`, rounded to 2 decimals (0 without a relevant context):
        [True, False, True, False] scores 0.83.
    """
    return round_score(average_precision(verdicts) * (1.0 if scale is None else scale))


def score_band(score: float, scale: float | None = 1) -> Band:
    """The named band (`BANDS`) of a `context_precision` score on `scale` (None means 1):
    "none" for 0 and for any score on scale 0, else "low", "moderate", "good" or "excellent"."""
    factor = 1.0 if scale is None else scale
    normalized = score / factor if factor > 0 else 0.0
    if normalized <= 0:
        return "none"
    for name, lower in BANDS:
        if normalized >= lower - BAND_EPSILON:
            return name
    return "low"


def format_score(score: float) -> str:
    """A score as JavaScript prints a number, as Mastra's reasons show it: 1, 0.5, 0.83, 8.33."""
    if math.isfinite(score) and score == int(score) and abs(score) < 1e21:
        return str(int(score))
    return repr(float(score))
