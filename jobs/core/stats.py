"""The statistics behind "is the drop real?": intervals, tests and sample sizes, all from
sufficient statistics (`Moments`) that one streaming group-by gives (`moments_by`), so memory
stays bounded per segment. docs/is-the-drop-real.md says why t intervals; the t is scipy's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

LEVEL = 0.95  # the confidence level of every interval; 1 - LEVEL the level of every test


@dataclass(frozen=True, slots=True)
class Moments:
    """Count, sum and sum of squares of some values: all a t interval needs."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def from_counts(cls, counts: Iterable[tuple[float, int]]) -> Moments:
        """From (value, how many times) pairs (the summary's score counts)."""
        return sum(
            (cls(times, value * times, value * value * times) for value, times in counts),
            start=cls(),
        )

    def __add__(self, other: Moments) -> Moments:
        return Moments(self.n + other.n, self.total + other.total, self.total_sq + other.total_sq)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def variance(self) -> float | None:
        """The sample variance (n - 1 in the denominator); None below 2 values."""
        if self.n < 2:
            return None
        # Clamped: float cancellation can make a zero variance slightly negative.
        return max(0.0, (self.total_sq - self.total * self.total / self.n) / (self.n - 1))


def moments_by(
    frame: pl.LazyFrame | pl.DataFrame, value: str, keys: Sequence[pl.Expr] = ()
) -> dict[tuple[Any, ...], Moments]:
    """The `Moments` of the non-null values of `value` per value of `keys`, from one group-by."""
    values = frame.filter(pl.col(value).is_not_null())
    score = pl.col(value).cast(pl.Float64)
    aggs = [pl.len().alias("_n"), score.sum().alias("_total"), (score * score).sum().alias("_sq")]
    rows = values.group_by(*keys).agg(aggs) if keys else values.select(aggs)
    return {
        row[:-3]: Moments(int(row[-3]), float(row[-2] or 0.0), float(row[-1] or 0.0))
        for row in (rows.collect() if isinstance(rows, pl.LazyFrame) else rows).iter_rows()
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    """An estimate with its 95% interval, standard error and degrees of freedom."""

    estimate: float
    low: float
    high: float
    se: float
    df: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @classmethod
    def around(cls, estimate: float, se: float, df: float) -> Interval:
        """The 95% t interval of `estimate` with standard error `se`."""
        half = _critical(df) * se
        return cls(estimate=estimate, low=estimate - half, high=estimate + half, se=se, df=df)


@dataclass(frozen=True, slots=True, kw_only=True)
class TestResult:
    """A difference (B - A) with its 95% interval and two-sided p-value."""

    method: str  # "paired" or "unpaired"
    n: int  # pairs (paired) or the smaller of the two samples (unpaired)
    diff: float
    low: float
    high: float
    p_value: float


# scipy.stats.t's own functions (t.ppf is stdtrit, t.cdf stdtr) from scipy.special, imported on
# first use: scipy.stats takes several times as long to import (docs/design.md).


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile of Student's t with `df` degrees of freedom."""
    from scipy import special

    return float(special.stdtrit(df, p))


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with `df` degrees of freedom."""
    from scipy import special

    return 2.0 * float(special.stdtr(df, -abs(t)))


def _critical(df: float) -> float:
    return t_quantile(1.0 - (1.0 - LEVEL) / 2.0, df)


def t_interval(moments: Moments, fpc: float = 1.0) -> Interval | None:
    """The 95% t interval of the mean (`fpc`: 1 - n / N for a sample); None below 2 values."""
    mean, variance = moments.mean, moments.variance
    if mean is None or variance is None:
        return None
    se = math.sqrt(variance * max(0.0, fpc) / moments.n)
    return Interval.around(mean, se, float(moments.n - 1))


@dataclass(frozen=True, slots=True)
class StratumCell:
    """One stratum seen from a domain: its items (N_h), those judged (n_h), the domain's moments."""

    population: int
    sampled: int
    domain: Moments


def stratified_interval(cells: Sequence[StratumCell]) -> Interval | None:
    """The domain mean of a stratified random sample and its 95% interval.

    Weights w_h = N_h / n_h; mean = sum w_h * sum_d(y) / sum w_h * n_hd. Variance by
    linearisation: z = y - mean on the domain's items, 0 on the stratum's other items;
    Var = sum_h N_h^2 (1 - n_h / N_h) s2_h(z) / n_h / N_d^2, with N_d = sum w_h n_hd. A stratum
    with a single sampled item (and more in the population) cannot estimate its spread and
    counts as 0; a census stratum adds none. Degrees of freedom: sampled items minus strata.
    None without 2 items."""
    used = [cell for cell in cells if cell.sampled > 0 and cell.domain.n > 0]
    n_domain = sum(cell.domain.n for cell in used)
    if n_domain < 2:
        return None
    size = sum(cell.population / cell.sampled * cell.domain.n for cell in used)
    mean = sum(cell.population / cell.sampled * cell.domain.total for cell in used) / size
    variance = 0.0
    for cell in used:
        if cell.sampled < 2 or cell.sampled >= cell.population:
            continue
        domain = cell.domain
        sum_z = domain.total - mean * domain.n
        sum_z2 = domain.total_sq - 2 * mean * domain.total + mean * mean * domain.n
        s2 = max(0.0, (sum_z2 - sum_z * sum_z / cell.sampled) / (cell.sampled - 1))
        fpc = 1.0 - cell.sampled / cell.population
        variance += cell.population**2 * fpc * s2 / cell.sampled
    df = float(max(1, sum(cell.sampled for cell in used) - len(used)))
    return Interval.around(mean, math.sqrt(variance) / size, df)


def _test(method: str, n: int, diff: float, se: float, df: float) -> TestResult:
    if se <= 0.0:
        # No spread: an exact difference. Zero is no change at all; anything else is certain.
        exact = 1.0 if diff == 0 else 0.0
        return TestResult(method=method, n=n, diff=diff, low=diff, high=diff, p_value=exact)
    half = _critical(df) * se
    return TestResult(
        method=method,
        n=n,
        diff=diff,
        low=diff - half,
        high=diff + half,
        p_value=t_sf2(diff / se, df),
    )


def paired_test(differences: Moments) -> TestResult | None:
    """The mean of per-query differences (B - A), one-sample t test against 0; None below 2."""
    interval = t_interval(differences)
    if interval is None:
        return None
    return _test("paired", differences.n, interval.estimate, interval.se, interval.df)


def welch_test(a: Moments, b: Moments) -> TestResult | None:
    """mean(B) - mean(A) of two independent samples by Welch's t test; None below 2 values."""
    if a.mean is None or b.mean is None or a.variance is None or b.variance is None:
        return None
    va, vb = a.variance / a.n, b.variance / b.n
    se = math.sqrt(va + vb)
    denominator = (va * va / (a.n - 1) if va else 0.0) + (vb * vb / (b.n - 1) if vb else 0.0)
    df = (va + vb) ** 2 / denominator if denominator > 0 else float(a.n + b.n - 2)
    return _test("unpaired", min(a.n, b.n), b.mean - a.mean, se, df)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order."""
    tests = len(p_values)
    order = sorted(range(tests), key=lambda index: p_values[index])
    adjusted = [0.0] * tests
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (tests - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def items_for_half_width(sd: float, half_width: float, population: int | None = None) -> int:
    """Items a simple random sample needs for a 95% interval of half-width `half_width`, values
    spread `sd`: n0 = (t * sd / W)^2 with t at n0 - 1 degrees of freedom, then the finite
    population correction n0 / (1 + n0 / N) when `population` is given."""
    if half_width <= 0:
        raise ValueError(f"the half-width must be > 0, got {half_width}")
    if sd <= 0:
        return min(2, population) if population is not None else 2
    items = (1.96 * sd / half_width) ** 2
    for _ in range(20):  # t's quantile depends on the items themselves: fixed-point steps
        items = (_critical(max(1.0, items - 1)) * sd / half_width) ** 2
    if population is not None:
        items = items / (1 + items / population)
        return max(2, min(population, math.ceil(items)))
    return max(2, math.ceil(items))
