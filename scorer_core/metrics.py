"""Agreement metrics between a judge and human labels, in pure Python.

Used to calibrate a judge (``ctxprec calibrate``) and by the benchmarks: binary agreement of
per-context verdicts (precision, recall, F1, Cohen's kappa) and correlation of per-item scores or
per-system means (Pearson, Spearman, Kendall's tau-b).

Conventions
-----------
- Inputs are two sequences of the same length; a length mismatch raises `ValueError`, and so
  does a NaN in a numeric series.
- When a statistic is undefined for the input, the function returns ``None`` instead of raising
  or returning NaN: an empty input, a correlation with a constant series (zero variance, or all
  ties for the rank correlations), kappa when chance agreement is already perfect (both raters
  gave one and the same label to everything), precision with no predicted positives, recall with
  no gold positives, F1 with neither. Callers print ``None`` as "n/a".
- Correlations are clamped to [-1, 1] against floating-point drift.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

__all__ = [
    "PRF",
    "Confusion",
    "average_ranks",
    "cohen_kappa",
    "confusion",
    "kendall_tau_b",
    "pearson",
    "precision_recall_f1",
    "spearman",
]


class Confusion(NamedTuple):
    """Counts of a binary prediction against gold labels."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.fn + self.tn


class PRF(NamedTuple):
    """Precision, recall and F1 of the positive class; ``None`` where undefined."""

    precision: float | None
    recall: float | None
    f1: float | None


def _check_lengths(a: Sequence[object], b: Sequence[object]) -> None:
    if len(a) != len(b):
        raise ValueError(f"the two sequences differ in length: {len(a)} != {len(b)}")


def _check_numbers(values: Sequence[float], name: str) -> None:
    for v in values:
        if v != v:  # NaN is the only value not equal to itself
            raise ValueError(f"{name} contains NaN")


def confusion(pred: Sequence[bool], gold: Sequence[bool]) -> Confusion:
    """The confusion counts of `pred` against `gold` (truthy = positive)."""
    _check_lengths(pred, gold)
    tp = fp = fn = tn = 0
    for p, g in zip(pred, gold, strict=True):
        if p:
            if g:
                tp += 1
            else:
                fp += 1
        elif g:
            fn += 1
        else:
            tn += 1
    return Confusion(tp, fp, fn, tn)


def precision_recall_f1(pred: Sequence[bool], gold: Sequence[bool]) -> PRF:
    """Precision, recall and F1 of the positive class.

    precision is ``None`` when nothing is predicted positive, recall is ``None`` when nothing is
    gold positive, and F1 (= 2tp / (2tp + fp + fn)) is ``None`` only when both are empty, so a
    judge that says "no" to everything while positives exist gets F1 0.0.
    """
    c = confusion(pred, gold)
    precision = c.tp / (c.tp + c.fp) if c.tp + c.fp else None
    recall = c.tp / (c.tp + c.fn) if c.tp + c.fn else None
    denominator = 2 * c.tp + c.fp + c.fn
    f1 = 2 * c.tp / denominator if denominator else None
    return PRF(precision, recall, f1)


def cohen_kappa(pred: Sequence[bool], gold: Sequence[bool]) -> float | None:
    """Cohen's kappa of two binary raters: (observed - chance agreement) / (1 - chance).

    ``None`` for empty input and when chance agreement is 1 (both raters used a single, identical
    label throughout), where kappa is 0/0.
    """
    c = confusion(pred, gold)
    n = c.n
    if n == 0:
        return None
    observed = (c.tp + c.tn) / n
    pred_pos = (c.tp + c.fp) / n
    gold_pos = (c.tp + c.fn) / n
    chance = pred_pos * gold_pos + (1.0 - pred_pos) * (1.0 - gold_pos)
    if chance >= 1.0:
        return None
    return _clamp((observed - chance) / (1.0 - chance))


def _clamp(r: float) -> float:
    return max(-1.0, min(1.0, r))


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's linear correlation. ``None`` for fewer than 2 points or a constant series."""
    _check_lengths(x, y)
    _check_numbers(x, "x")
    _check_numbers(y, "y")
    n = len(x)
    if n < 2 or min(x) == max(x) or min(y) == max(y):
        return None
    mx = math.fsum(x) / n
    my = math.fsum(y) / n
    dx = [v - mx for v in x]
    dy = [v - my for v in y]
    sxy = math.fsum(a * b for a, b in zip(dx, dy, strict=True))
    sxx = math.fsum(a * a for a in dx)
    syy = math.fsum(b * b for b in dy)
    if sxx <= 0.0 or syy <= 0.0:
        return None
    return _clamp(sxy / math.sqrt(sxx * syy))


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of `values`, ties sharing the average of the ranks they span."""
    _check_numbers(values, "values")
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        rank = (i + j) / 2.0 + 1.0
        for k in range(i, j + 1):
            ranks[order[k]] = rank
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's r of the average ranks (ties handled).

    ``None`` for fewer than 2 points or a series whose values are all equal.
    """
    _check_lengths(x, y)
    return pearson(average_ranks(x), average_ranks(y))


def _tie_pairs(sorted_values: Sequence[object]) -> int:
    """Pairs of equal values in a sorted sequence: sum of t(t-1)/2 over runs of length t."""
    pairs = 0
    run = 1
    for a, b in itertools.pairwise(sorted_values):
        if a == b:
            run += 1
        else:
            pairs += run * (run - 1) // 2
            run = 1
    return pairs + run * (run - 1) // 2


def _sort_counting_inversions(values: list[float]) -> tuple[list[float], int]:
    """Stable bottom-up merge sort; also counts pairs i < j with values[i] > values[j]."""
    n = len(values)
    src = list(values)
    inversions = 0
    width = 1
    while width < n:
        dst: list[float] = []
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j = lo, mid
            while i < mid and j < hi:
                if src[i] <= src[j]:
                    dst.append(src[i])
                    i += 1
                else:
                    dst.append(src[j])
                    inversions += mid - i
                    j += 1
            dst.extend(src[i:mid])
            dst.extend(src[j:hi])
        src = dst
        width *= 2
    return src, inversions


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b, which corrects for ties in either series, in O(n log n) (Knight 1966).

    tau_b = (concordant - discordant) / sqrt((n0 - ties_x) * (n0 - ties_y)), n0 = n(n-1)/2.
    ``None`` for fewer than 2 points or a series whose values are all equal.
    """
    _check_lengths(x, y)
    _check_numbers(x, "x")
    _check_numbers(y, "y")
    n = len(x)
    if n < 2:
        return None
    pairs = sorted(zip(x, y, strict=True))
    n0 = n * (n - 1) // 2
    ties_x = _tie_pairs([p[0] for p in pairs])
    ties_xy = _tie_pairs(pairs)
    ys_sorted, discordant = _sort_counting_inversions([p[1] for p in pairs])
    ties_y = _tie_pairs(ys_sorted)
    if n0 in (ties_x, ties_y):
        return None
    # Pairs tied in x are sorted by y, so they add no inversions; `discordant` counts exactly
    # the pairs ordered one way by x and the other way by y.
    concordant_minus_discordant = n0 - ties_x - ties_y + ties_xy - 2 * discordant
    return _clamp(concordant_minus_discordant / math.sqrt((n0 - ties_x) * (n0 - ties_y)))
