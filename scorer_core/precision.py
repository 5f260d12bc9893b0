"""The context-precision maths: average precision over the retrieved order.

For each relevant context at 0-based position i, precision@i = relevant_so_far / (i + 1).
The score is the mean of those precisions over the relevant contexts, times `scale`, rounded
half up to 2 decimals; a list with no relevant context scores 0.

The Polars aggregation in `jobs` applies exactly the same arithmetic (float, then
`round_half_up`), and a test proves the two agree on random data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scorer_core.errors import ConfigError

# Float sums of fractions land a hair below an exact tie (0.835 is stored as 0.83499999...),
# so ties are nudged up by far less than any real difference between two scores.
_TIE_EPSILON = 1e-9


def round_half_up(value: float, digits: int = 2) -> float:
    """Round half up (0.835 -> 0.84, 0.125 -> 0.13), unlike Python's round-half-even."""
    factor = 10.0**digits
    return round(math.floor(value * factor + 0.5 + _TIE_EPSILON) / factor, digits)


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


def check_scale(scale: float) -> float:
    """Validate a score scale: a finite number >= 0."""
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise ConfigError(f"scale must be a number, got {type(scale).__name__}")
    if not math.isfinite(scale) or scale < 0:
        raise ConfigError(f"scale must be a finite number >= 0, got {scale!r}")
    return float(scale)


def context_precision(verdicts: Sequence[bool | int], scale: float = 1) -> float:
    """Context precision of relevance flags in ranked order, times `scale`, 2 decimals.

    >>> context_precision([True, False, True, False])
    0.83
    >>> context_precision([0, 1, 1])
    0.58
    >>> context_precision([])
    0.0
    """
    return round_half_up(average_precision(verdicts) * check_scale(scale))
