"""Deterministic, human-readable explanations of a score, built from the verdicts alone."""

from __future__ import annotations

from collections.abc import Sequence

from scorer_core.types import ContextVerdict


def _positions(indices: Sequence[int]) -> str:
    labels = [f"[{i}]" for i in indices]
    if len(labels) <= 1:
        return "".join(labels)
    if len(labels) > 12:
        return ", ".join(labels[:10]) + f" and {len(labels) - 10} more"
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def _fmt(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value != int(value) else f"{int(value)}"


def template_reason(verdicts: Sequence[ContextVerdict], score: float, scale: float = 1.0) -> str:
    """Which contexts were relevant, where they sat, and how that moved the score."""
    ordered = sorted(verdicts, key=lambda v: v.index)
    total = len(ordered)
    relevant = [v.index for v in ordered if v.relevant]
    scale_note = "" if scale == 1 else f" (on a 0-{_fmt(scale)} scale)"
    if total == 0:
        return f"No contexts were judged, so the score is {_fmt(score)}{scale_note}."
    if not relevant:
        return (
            f"None of the {total} contexts was judged relevant, so the score is "
            f"{_fmt(score)}{scale_note}."
        )
    head = (
        f"{len(relevant)} of {total} contexts were judged relevant, at position"
        f"{'s' if len(relevant) > 1 else ''} {_positions(relevant)} (0-based)."
    )
    if relevant == list(range(len(relevant))):
        return (
            f"{head} {'They are' if len(relevant) > 1 else 'It is'} ranked ahead of every "
            "irrelevant context, so the ranking is "
            f"ideal and the score is {_fmt(score)}{scale_note}."
            if len(relevant) < total
            else f"All {total} contexts were judged relevant, so the score is "
            f"{_fmt(score)}{scale_note}."
        )
    terms = []
    for rank, index in enumerate(relevant, start=1):
        terms.append(f"{rank}/{index + 1} at [{index}]")
    shown = "; ".join(terms[:6]) + ("; ..." if len(terms) > 6 else "")
    first_irrelevant = next(v.index for v in ordered if not v.relevant)
    pushed = [i for i in relevant if i > first_irrelevant]
    return (
        f"{head} Precision at each relevant position: {shown}; their mean gives "
        f"{_fmt(score)}{scale_note}. Irrelevant context ranked above relevant "
        f"{'ones' if len(pushed) > 1 else 'one'} {_positions(pushed)} lowered the score; "
        f"putting the {len(relevant)} relevant context{'s' if len(relevant) > 1 else ''} first "
        f"would score {_fmt(scale)}."
    )
