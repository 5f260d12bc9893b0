"""Deterministic, human-readable explanations of a score, built from the verdicts alone."""

from __future__ import annotations

from collections.abc import Sequence

from scorer_core.precision import format_score
from scorer_core.prompt import reason_start
from scorer_core.types import ContextVerdict


def _positions(indices: Sequence[int]) -> str:
    labels = [f"[{index}]" for index in indices]
    if len(labels) <= 1:
        return "".join(labels)
    if len(labels) > 12:
        return ", ".join(labels[:10]) + f" and {len(labels) - 10} more"
    return ", ".join(labels[:-1]) + " and " + labels[-1]


def template_reason(verdicts: Sequence[ContextVerdict], score: float, scale: float = 1.0) -> str:
    """A reason for the `score` the `verdicts` gave (on `scale`), without a judge call: which
    contexts were relevant, where they sat and how that moved the score, begun "The score is
    <score> because" as an LLM-written reason is."""
    ordered = sorted(verdicts, key=lambda verdict: verdict.index)
    total = len(ordered)
    relevant = [verdict.index for verdict in ordered if verdict.relevant]
    start = reason_start(score)
    scale_note = "" if scale == 1 else f" (on a 0-{format_score(scale)} scale)"
    if total == 0:
        return f"{start} no contexts were judged{scale_note}."
    if not relevant:
        if total == 1:
            return f"{start} the only context was judged not relevant{scale_note}."
        return f"{start} none of the {total} contexts was judged relevant{scale_note}."
    if len(relevant) == total:
        return f"{start} all {total} contexts were judged relevant{scale_note}."
    several = len(relevant) > 1
    at_positions = "at positions" if several else "at position"
    where = (
        f"{len(relevant)} of {total} contexts were judged relevant, {at_positions} "
        f"{_positions(relevant)} (0-based)"
    )
    if relevant == list(range(len(relevant))):
        return (
            f"{start} {where}, ranked ahead of every irrelevant context: the ranking is "
            f"ideal{scale_note}."
        )
    terms = [f"{rank}/{index + 1} at [{index}]" for rank, index in enumerate(relevant, 1)]
    shown = "; ".join(terms[:6]) + ("; ..." if len(terms) > 6 else "")
    first_irrelevant = next(verdict.index for verdict in ordered if not verdict.relevant)
    pushed = [index for index in relevant if index > first_irrelevant]
    pushed_ones = "ones" if len(pushed) > 1 else "one"
    relevant_contexts = "relevant contexts" if several else "relevant context"
    return (
        f"{start} {where}, and irrelevant context is ranked above the relevant {pushed_ones} "
        f"at {_positions(pushed)}. The precision at each relevant position ({shown}) averages "
        f"to the score{scale_note}; putting the {len(relevant)} {relevant_contexts} first "
        f"would score {format_score(scale)}."
    )
