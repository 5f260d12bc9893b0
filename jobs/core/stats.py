"""The statistics behind "is the drop real?": intervals, tests and sample sizes, pure Python.

No Polars, no Ray: every function takes small sufficient statistics (counts, sums, sums of
squares) so the callers can compute them in bounded memory (a streaming group-by) and the
tests can check the maths on seeded simulations in milliseconds.

* `Moments`: n, sum, sum of squares of a set of values; mean and sample variance from them.
* `t_interval`: the 95% Student t interval of a mean from its `Moments` (with an optional
  finite-population correction). Why t and not a bootstrap: a t interval needs only count,
  sum and sum of squares, which a streaming group-by gives in constant memory per segment, and
  the mean of a few hundred bounded scores is close enough to normal that the bootstrap would
  give the same interval at a hundred times the cost.
* `stratified_interval`: the mean of a domain (the whole run, or a `summary.by` segment) of a
  stratified random sample, each stratum weighted by population / sampled, with the
  linearised (Taylor) variance and the finite-population correction (1 - n_h / N_h) per
  stratum. A census stratum (every item judged) adds no variance.
* `paired_test` (one-sample t test on per-query differences) and `welch_test` (two independent
  samples, Welch's unequal variances), both two-sided, with a 95% interval of the difference.
* `holm`: Holm's step-down adjustment of p-values (family-wise error control across segments).
* `items_for_half_width`: how many items a 95% half-width needs, given a spread.
* Cohen's kappa comes from `scorer_core.metrics.cohen_kappa` (the canary reuses calibrate).

The t distribution's CDF is the regularized incomplete beta function (Numerical Recipes'
continued fraction); its quantile is found by bisection on the CDF.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LEVEL = 0.95
"""The confidence level of every interval and the significance level 1 - LEVEL of every test."""

_BETA_ITERATIONS = 300
_BETA_EPS = 3e-15
_TINY = 1e-300


@dataclass(frozen=True, slots=True)
class Moments:
    """Count, sum and sum of squares of some values: all a t interval needs."""

    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0

    @classmethod
    def of(cls, values: Iterable[float]) -> Moments:
        n, total, total_sq = 0, 0.0, 0.0
        for value in values:
            n += 1
            total += value
            total_sq += value * value
        return cls(n, total, total_sq)

    @classmethod
    def from_counts(cls, counts: Iterable[tuple[float, int]]) -> Moments:
        """From (value, how many times) pairs (the summary's score counts)."""
        n, total, total_sq = 0, 0.0, 0.0
        for value, count in counts:
            n += count
            total += value * count
            total_sq += value * value * count
        return cls(n, total, total_sq)

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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class TestResult:
    """A difference (B - A) with its 95% interval and two-sided p-value."""

    method: str  # "paired" or "unpaired"
    n: int  # pairs (paired) or the smaller of the two samples (unpaired)
    diff: float
    low: float
    high: float
    p_value: float


# -- the t distribution ----------------------------------------------------------------------


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _BETA_ITERATIONS + 1):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _BETA_EPS:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with `df` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The `p` quantile (p in (0.5, 1)) of Student's t with `df` degrees of freedom."""
    if not 0.5 < p < 1.0:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    tail = 2.0 * (1.0 - p)
    low, high = 0.0, 1.0
    while t_sf2(high, df) > tail:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_sf2(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return (low + high) / 2.0


def _critical(df: float) -> float:
    return t_quantile(1.0 - (1.0 - LEVEL) / 2.0, df)


# -- intervals ---------------------------------------------------------------------------------


def t_interval(moments: Moments, fpc: float = 1.0) -> Interval | None:
    """The 95% t interval of the mean of `moments`; `fpc` multiplies the variance of the mean
    (1 - n / N for a simple random sample of n out of N). None below 2 values."""
    mean, variance = moments.mean, moments.variance
    if mean is None or variance is None:
        return None
    se = math.sqrt(variance * max(0.0, fpc) / moments.n)
    df = float(moments.n - 1)
    half = _critical(df) * se
    return Interval(mean, mean - half, mean + half, se, df)


@dataclass(frozen=True, slots=True)
class StratumCell:
    """One stratum of a stratified sample, seen from one domain (the run, or a segment).

    `population`: the stratum's items in the input (N_h); `sampled`: its items judged and
    scored (n_h, every domain); `domain`: the moments of those of them in the domain."""

    population: int
    sampled: int
    domain: Moments


def stratified_interval(cells: Sequence[StratumCell]) -> Interval | None:
    """The domain mean of a stratified random sample and its 95% interval.

    Weights w_h = N_h / n_h; mean = sum w_h * sum_d(y) / sum w_h * n_hd. Variance by
    linearisation: z = y - mean on the domain's items, 0 on the stratum's other items;
    Var = sum_h N_h^2 (1 - n_h / N_h) s2_h(z) / n_h / N_d^2, with N_d = sum w_h n_hd. A stratum
    with a single sampled item (and more in the population) cannot estimate its spread and
    counts as 0. Degrees of freedom: sampled items minus strata. None without 2 items."""
    used = [c for c in cells if c.sampled > 0 and c.domain.n > 0]
    n_domain = sum(c.domain.n for c in used)
    if n_domain < 2:
        return None
    size = sum(c.population / c.sampled * c.domain.n for c in used)
    mean = sum(c.population / c.sampled * c.domain.total for c in used) / size
    variance = 0.0
    for cell in used:
        if cell.sampled < 2 or cell.sampled >= cell.population:
            continue
        d = cell.domain
        sum_z = d.total - mean * d.n
        sum_z2 = d.total_sq - 2 * mean * d.total + mean * mean * d.n
        s2 = max(0.0, (sum_z2 - sum_z * sum_z / cell.sampled) / (cell.sampled - 1))
        fpc = 1.0 - cell.sampled / cell.population
        variance += cell.population**2 * fpc * s2 / cell.sampled
    se = math.sqrt(variance) / size
    df = float(max(1, sum(c.sampled for c in used) - len(used)))
    half = _critical(df) * se
    return Interval(mean, mean - half, mean + half, se, df)


# -- tests -------------------------------------------------------------------------------------


def _test(method: str, n: int, diff: float, se: float, df: float) -> TestResult:
    if se <= 0.0:
        # No spread: an exact difference. Zero is no change at all; anything else is certain.
        p = 1.0 if diff == 0 else 0.0
        return TestResult(method, n, diff, diff, diff, p)
    half = _critical(df) * se
    return TestResult(method, n, diff, diff - half, diff + half, t_sf2(diff / se, df))


def paired_test(differences: Moments) -> TestResult | None:
    """The mean of per-query differences (B - A), its 95% interval and the two-sided p-value of
    a one-sample t test against 0. None below 2 pairs."""
    interval = t_interval(differences)
    if interval is None:
        return None
    return _test("paired", differences.n, interval.estimate, interval.se, interval.df)


def welch_test(a: Moments, b: Moments) -> TestResult | None:
    """mean(B) - mean(A) of two independent samples, Welch's t test (two-sided) with the
    Welch-Satterthwaite degrees of freedom. None when either has fewer than 2 values."""
    if a.mean is None or b.mean is None or a.variance is None or b.variance is None:
        return None
    va, vb = a.variance / a.n, b.variance / b.n
    se = math.sqrt(va + vb)
    denominator = (va * va / (a.n - 1) if va else 0.0) + (vb * vb / (b.n - 1) if vb else 0.0)
    df = (va + vb) ** 2 / denominator if denominator > 0 else float(a.n + b.n - 2)
    return _test("unpaired", min(a.n, b.n), b.mean - a.mean, se, df)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the given order: the k-th smallest p of m is
    multiplied by (m - k + 1), made non-decreasing, capped at 1."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


# -- sample sizes ------------------------------------------------------------------------------


def items_for_half_width(sd: float, half_width: float, population: int | None = None) -> int:
    """Items a simple random sample needs for a 95% interval of half-width `half_width`, values
    spread `sd`: n0 = (t * sd / W)^2 with t at n0 - 1 degrees of freedom, then the finite
    population correction n0 / (1 + n0 / N) when `population` is given."""
    if half_width <= 0:
        raise ValueError(f"the half-width must be > 0, got {half_width}")
    if sd <= 0:
        return min(2, population) if population is not None else 2
    n = (1.96 * sd / half_width) ** 2
    for _ in range(20):  # t's quantile depends on n itself: a few fixed-point steps
        n = (_critical(max(1.0, n - 1)) * sd / half_width) ** 2
    if population is not None:
        n = n / (1 + n / population)
        return max(2, min(population, math.ceil(n)))
    return max(2, math.ceil(n))
