"""The context-precision maths: average precision over the retrieved order, and score bands.

For each relevant context at 0-based position i, precision@i = relevant_so_far / (i + 1).
The score is the mean of those precisions over the relevant contexts, times `scale`, rounded to
2 decimals exactly as Mastra rounds (`Math.round((x + Number.EPSILON) * 100) / 100`); a list
with no relevant context, or no verdict at all, scores 0.

The float operations are the ones Mastra's scorer performs, in the same order, so the two agree
bit for bit (tests/unit/test_rounding_node.py checks it against node). The Polars aggregation in
`jobs` must apply the same arithmetic: see `round_score` for the exact steps.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

from scorer_core.errors import ConfigError
from scorer_core.types import Band

# JavaScript's Number.EPSILON: the gap between 1 and the next double.
_JS_EPSILON = sys.float_info.epsilon

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
    """`value` rounded to 2 decimals exactly as Mastra's `roundToTwoDecimals` does.

    Steps, each an IEEE double operation: y = (value + 2**-52) * 100; n = the integer nearest
    to y, ties towards +infinity (JavaScript's Math.round); result = n / 100. The epsilon lifts
    sums such as 0.835 (stored as 0.83499999...) onto the tie; above about 2 it is smaller than
    the spacing of doubles and changes nothing, so 5.325 stored as 5.32499999... rounds down.
    """
    scaled = (value + _JS_EPSILON) * 100.0
    floor = math.floor(scaled)
    # `scaled - floor` is exact for doubles, so this is Math.round, not floor(scaled + 0.5)
    # (which rounds 0.49999999999999994 up).
    nearest = floor + 1 if scaled - floor >= 0.5 else floor
    return nearest / 100.0


def round_half_up(value: float, digits: int = 2) -> float:
    """Round half up; at 2 digits this is `round_score` (Mastra's rounding).

    Other digit counts use the same steps with 10**digits in place of 100.
    """
    if digits == 2:
        return round_score(value)
    factor = 10.0**digits
    scaled = (value + _JS_EPSILON) * factor
    floor = math.floor(scaled)
    return (floor + 1 if scaled - floor >= 0.5 else floor) / factor


def average_precision(verdicts: Sequence[bool | int]) -> float:
    """Unrounded average precision of relevance flags in ranked order (0 when none relevant)."""
    relevant_so_far = 0
    precision_sum = 0.0
    for position, verdict in enumerate(verdicts):
        if verdict:
            relevant_so_far += 1
            precision_sum += relevant_so_far / (position + 1)
    if relevant_so_far == 0:
        return 0.0
    return precision_sum / relevant_so_far


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
    """Context precision of relevance flags in ranked order, times `scale`, 2 decimals.

    >>> context_precision([True, False, True, False])
    0.83
    >>> context_precision([0, 1, 1])
    0.58
    >>> context_precision([])
    0.0
    """
    if not verdicts:
        return 0.0
    return round_score(average_precision(verdicts) * (1.0 if scale is None else scale))


def score_band(score: float, scale: float | None = 1) -> Band:
    """The named band of a score on a 0..scale scale. With scale 0 every score is 0: "none"."""
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
