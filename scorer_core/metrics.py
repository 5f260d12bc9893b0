"""Agreement metrics between a judge and human labels, for `ctxprec calibrate`, the canary and
the benchmarks: binary agreement of verdicts (precision, recall, F1, Cohen's kappa) and
correlation of scores (Pearson, Spearman, Kendall's tau-b; the last two from scipy).

Two sequences of one length in, a `ValueError` for a length mismatch or a NaN; `None` where a
statistic is undefined (empty input, a constant series, kappa with perfect chance agreement,
precision with no predicted positive, ...); correlations clamped to [-1, 1].
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import NamedTuple


class Confusion(NamedTuple):
    """Counts of a binary prediction against gold labels."""

    tp: int
    fp: int
    fn: int
    tn: int


class PRF(NamedTuple):
    """Precision, recall and F1 of the positive class; None where undefined."""

    precision: float | None
    recall: float | None
    f1: float | None


def _check_lengths(first: Sequence[object], second: Sequence[object]) -> None:
    if len(first) != len(second):
        raise ValueError(f"the two sequences differ in length: {len(first)} != {len(second)}")


def _check_numbers(values: Sequence[float], name: str) -> None:
    if any(math.isnan(value) for value in values):
        raise ValueError(f"{name} contains NaN")


def confusion(pred: Sequence[bool], gold: Sequence[bool]) -> Confusion:
    """The confusion counts of `pred` against `gold` (truthy = positive)."""
    _check_lengths(pred, gold)
    pairs = zip(pred, gold, strict=True)
    counts = Counter((bool(predicted), bool(label)) for predicted, label in pairs)
    return Confusion(
        tp=counts[True, True],
        fp=counts[True, False],
        fn=counts[False, True],
        tn=counts[False, False],
    )


def precision_recall_f1(pred: Sequence[bool], gold: Sequence[bool]) -> PRF:
    """Precision, recall and F1 of the positive class. F1 (2tp / (2tp + fp + fn)) is None only
    when precision and recall both are: a judge that says "no" to everything while positives
    exist gets 0.0."""
    counts = confusion(pred, gold)
    predicted = counts.tp + counts.fp
    actual = counts.tp + counts.fn
    precision = counts.tp / predicted if predicted else None
    recall = counts.tp / actual if actual else None
    denominator = 2 * counts.tp + counts.fp + counts.fn
    f1 = 2 * counts.tp / denominator if denominator else None
    return PRF(precision, recall, f1)


def cohen_kappa(pred: Sequence[bool], gold: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary raters: (observed - chance agreement) / (1 - chance)."""
    counts = confusion(pred, gold)
    total = sum(counts)
    if total == 0:
        return None
    observed = (counts.tp + counts.tn) / total
    pred_pos = (counts.tp + counts.fp) / total
    gold_pos = (counts.tp + counts.fn) / total
    chance = pred_pos * gold_pos + (1.0 - pred_pos) * (1.0 - gold_pos)
    return None if chance >= 1.0 else _clamp((observed - chance) / (1.0 - chance))


def _correlatable(x: Sequence[float], y: Sequence[float]) -> bool:
    """Whether a correlation is defined: two values or more, neither series constant."""
    _check_lengths(x, y)
    _check_numbers(x, "x")
    _check_numbers(y, "y")
    return len(x) >= 2 and min(x) != max(x) and min(y) != max(y)


def _clamp(value: float) -> float:
    return max(-1.0, min(1.0, value))


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's linear correlation."""
    if not _correlatable(x, y):
        return None
    try:
        return _clamp(statistics.correlation(x, y))
    except statistics.StatisticsError:  # a variance that underflows to 0
        return None


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's r of the average ranks (ties handled)."""
    # scipy.stats takes a second to import: only when used
    from scipy.stats import spearmanr  # type: ignore[import-untyped]

    return _clamp(float(spearmanr(x, y).statistic)) if _correlatable(x, y) else None


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b, which corrects for ties in either series (scipy's, O(n log n))."""
    from scipy.stats import kendalltau

    return _clamp(float(kendalltau(x, y, variant="b").statistic)) if _correlatable(x, y) else None
