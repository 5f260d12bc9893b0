"""The score computed exactly, with Fractions: the reference the float implementations (the
scorer's, the Polars aggregation's, Mastra's rounding) are checked against."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction


def exact_average_precision(flags: Sequence[bool | int] | Mapping[int, bool]) -> Fraction:
    """Each relevant context's precision at its rank (position + 1), averaged; 0 when none is
    relevant. `flags`: relevance in ranked order, or {position: relevance} for stored
    positions that may have gaps."""
    ranked = sorted(flags.items()) if isinstance(flags, Mapping) else enumerate(flags)
    hits = 0
    total = Fraction(0)
    for position, flag in ranked:
        if flag:
            hits += 1
            total += Fraction(hits, position + 1)
    return total / hits if hits else Fraction(0)
