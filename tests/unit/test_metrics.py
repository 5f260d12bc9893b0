"""Agreement metrics: hand-computed cases, degenerate inputs and hypothesis properties."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorer_core.metrics import (
    PRF,
    Confusion,
    cohen_kappa,
    confusion,
    kendall_tau_b,
    pearson,
    precision_recall_f1,
    spearman,
)


def _brute_tau_b(x: list[float], y: list[float]) -> float | None:
    """Kendall's tau-b straight from the definition, O(n^2), for cross-checking."""
    c = d = tx = ty = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        sx = (x[i] > x[j]) - (x[i] < x[j])
        sy = (y[i] > y[j]) - (y[i] < y[j])
        if sx == 0 and sy == 0:
            continue
        if sx == 0:
            tx += 1
        elif sy == 0:
            ty += 1
        elif sx == sy:
            c += 1
        else:
            d += 1
    denominator = math.sqrt((c + d + tx) * (c + d + ty))
    return None if denominator == 0 else (c - d) / denominator


# -- binary agreement ------------------------------------------------------------------------


def test_confusion_counts() -> None:
    pred = [True, True, False, False, True]
    gold = [True, False, True, False, True]
    assert confusion(pred, gold) == Confusion(tp=2, fp=1, fn=1, tn=1)
    assert sum(confusion(pred, gold)) == 5


def test_precision_recall_f1_hand_computed() -> None:
    pred = [1, 1, 0, 0, 1]
    gold = [1, 0, 1, 0, 1]
    p, r, f = precision_recall_f1([bool(v) for v in pred], [bool(v) for v in gold])
    assert p == pytest.approx(2 / 3)
    assert r == pytest.approx(2 / 3)
    assert f == pytest.approx(2 / 3)
    p, r, f = precision_recall_f1([True, True, True, False], [True, False, False, False])
    assert p == pytest.approx(1 / 3)
    assert r == 1.0
    assert f == pytest.approx(2 * (1 / 3) * 1.0 / (1 / 3 + 1.0))


def test_precision_recall_f1_degenerate() -> None:
    assert precision_recall_f1([], []) == PRF(None, None, None)
    # Nothing predicted positive: precision undefined, recall 0, F1 0.
    assert precision_recall_f1([False, False], [True, False]) == PRF(None, 0.0, 0.0)
    # No gold positives: recall undefined.
    assert precision_recall_f1([True, False], [False, False]) == PRF(0.0, None, 0.0)
    assert precision_recall_f1([False, False], [False, False]) == PRF(None, None, None)


def test_cohen_kappa_textbook_example() -> None:
    # 50 items: both yes 20, A yes / B no 5, A no / B yes 10, both no 15.
    # observed 0.70, chance 0.5 * 0.6 + 0.5 * 0.4 = 0.50, kappa = 0.2 / 0.5 = 0.4.
    a = [True] * 20 + [True] * 5 + [False] * 10 + [False] * 15
    b = [True] * 20 + [False] * 5 + [True] * 10 + [False] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_cohen_kappa_perfect_inverse_and_degenerate() -> None:
    assert cohen_kappa([True, False, True], [True, False, True]) == pytest.approx(1.0)
    assert cohen_kappa([True, False], [False, True]) == pytest.approx(-1.0)
    assert cohen_kappa([], []) is None
    assert cohen_kappa([True, True], [True, True]) is None  # chance agreement is 1
    # One rater constant, the other not: defined, and 0 (no agreement beyond chance).
    assert cohen_kappa([True, True, True, True], [True, False, True, False]) == 0.0


def test_length_mismatch_raises() -> None:
    with pytest.raises(ValueError):
        confusion([True], [True, False])
    with pytest.raises(ValueError):
        pearson([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        kendall_tau_b([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        spearman([1.0], [])


def test_nan_raises() -> None:
    with pytest.raises(ValueError):
        pearson([1.0, math.nan], [1.0, 2.0])
    with pytest.raises(ValueError):
        kendall_tau_b([1.0, 2.0], [math.nan, 2.0])


# -- correlations ----------------------------------------------------------------------------


def test_pearson_hand_computed() -> None:
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)
    # means 2.5; sxy = 4, sxx = syy = 5  ->  0.8
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)


def test_correlations_degenerate_none() -> None:
    for f in (pearson, spearman, kendall_tau_b):
        assert f([], []) is None
        assert f([1.0], [2.0]) is None
        assert f([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
        assert f([1.0, 2.0, 3.0], [0.5, 0.5, 0.5]) is None
    # A constant series of a value that is not exactly representable is still constant.
    assert pearson([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]) is None


def test_spearman_with_ties_hand_computed() -> None:
    # ranks x = [1, 2, 3.5, 5, 3.5] for [5, 6, 7, 8, 7]: sxy = 8, sxx = 10, syy = 9.5
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    # ranks [1, 2.5, 2.5, 4] vs [1, 2, 3, 4]: sxy = 4.5, sxx = 4.5, syy = 5
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))
    assert spearman([1, 2, 3], [1, 10, 100]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [100, 10, 1]) == pytest.approx(-1.0)


def test_kendall_tau_b_with_ties_hand_computed() -> None:
    # Pairs: 4 concordant, 0 discordant, one tied in x only, one tied in y only, n0 = 6:
    # tau_b = 4 / sqrt((6 - 1) * (6 - 1)) = 0.8
    assert kendall_tau_b([1, 2, 2, 3], [1, 2, 3, 3]) == pytest.approx(0.8)
    # C = 2, D = 6, x ties 2, y ties 1, joint ties 1, n0 = 10:
    # tau_b = -4 / sqrt((10 - 2) * (10 - 1)) = -1 / sqrt(4.5)
    assert kendall_tau_b([12, 2, 1, 12, 2], [1, 4, 7, 1, 0]) == pytest.approx(-1 / math.sqrt(4.5))
    assert kendall_tau_b([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau_b([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)


# -- properties ------------------------------------------------------------------------------

_small_numbers = st.integers(min_value=-5, max_value=5).map(float)  # many ties on purpose
_floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def _paired(draw: st.DrawFn, elements: st.SearchStrategy[float]) -> tuple[list[float], list[float]]:
    n = draw(st.integers(min_value=0, max_value=40))
    x = draw(st.lists(elements, min_size=n, max_size=n))
    y = draw(st.lists(elements, min_size=n, max_size=n))
    return x, y


@settings(max_examples=300, deadline=None)
@given(_paired(_small_numbers))
def test_kendall_matches_brute_force(xy: tuple[list[float], list[float]]) -> None:
    x, y = xy
    expected = _brute_tau_b(x, y)
    got = kendall_tau_b(x, y)
    if expected is None or len(x) < 2:
        assert got is None
    else:
        assert got == pytest.approx(expected, abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_paired(_small_numbers), _paired(_floats)))
def test_correlations_symmetric_and_bounded(xy: tuple[list[float], list[float]]) -> None:
    x, y = xy
    for f in (pearson, spearman, kendall_tau_b):
        a, b = f(x, y), f(y, x)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert -1.0 <= a <= 1.0
            assert a == pytest.approx(b, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(_paired(_small_numbers))
def test_correlation_with_itself_is_one(xy: tuple[list[float], list[float]]) -> None:
    x, _ = xy
    for f in (pearson, spearman, kendall_tau_b):
        r = f(x, x)
        if len(x) < 2 or len(set(x)) == 1:
            assert r is None
        else:
            assert r == pytest.approx(1.0)
            neg = f(x, [-v for v in x])
            assert neg == pytest.approx(-1.0)


@settings(max_examples=200, deadline=None)
@given(_paired(_small_numbers))
def test_rank_correlations_invariant_under_monotone_maps(
    xy: tuple[list[float], list[float]],
) -> None:
    x, y = xy
    x_mapped = [v**3 + 7.0 for v in x]  # strictly increasing
    s0, s1 = spearman(x, y), spearman(x_mapped, y)
    k0, k1 = kendall_tau_b(x, y), kendall_tau_b(x_mapped, y)
    assert (s0 is None) == (s1 is None) and (k0 is None) == (k1 is None)
    if s0 is not None:
        assert s1 == pytest.approx(s0, abs=1e-9)
    if k0 is not None:
        assert k1 == pytest.approx(k0, abs=1e-12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=60))
def test_binary_metrics_bounds_and_symmetry(pairs: list[tuple[bool, bool]]) -> None:
    pred = [p for p, _ in pairs]
    gold = [g for _, g in pairs]
    k = cohen_kappa(pred, gold)
    assert k == cohen_kappa(gold, pred) or (
        k is not None and k == pytest.approx(cohen_kappa(gold, pred))
    )
    if k is not None:
        assert -1.0 <= k <= 1.0
    prf = precision_recall_f1(pred, gold)
    for value in prf:
        assert value is None or 0.0 <= value <= 1.0
    # Swapping the raters swaps precision and recall; F1 is symmetric.
    swapped = precision_recall_f1(gold, pred)
    assert swapped.precision == prf.recall and swapped.recall == prf.precision
    assert swapped.f1 == prf.f1
    if pred == gold and pairs:
        assert k is None or k == pytest.approx(1.0)
