"""The run summary from the published scores and verdicts tables, in Polars, in memory that
does not grow with the run: `summarize` -> `RunSummary` (`to_frame`: the published summary
table), per `summary.by` segment too, each mean with its 95% interval (a stratified estimate
for a sampled run). Collect the plans with Polars' default (streaming) engine.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl

from jobs.core.formatting import optional_float
from jobs.core.pricing import estimate_cost_usd
from jobs.core.run_manifest import SummaryRecord
from jobs.core.schema import PUBLISHED_SUMMARY
from jobs.core.stats import Moments, StratumCell, moments_by, stratified_interval, t_interval
from jobs.inputs.sampling import SamplePlan, Stratum, stratum_text
from scorer_core import precision

TableSource = pl.LazyFrame | pl.DataFrame | str | Path | Sequence[str | Path]
"""A table given as a LazyFrame, a DataFrame, or Parquet path(s) / glob(s) to scan."""


def _summary_bands() -> tuple[tuple[str, float, float], ...]:
    ascending = tuple(reversed(precision.BANDS))
    uppers = (*(lower for _, lower in ascending[1:]), math.inf)
    return (
        ("none", 0.0, 0.0),
        *((name, lower, upper) for (name, lower), upper in zip(ascending, uppers, strict=True)),
    )


BANDS: tuple[tuple[str, float, float], ...] = _summary_bands()
"""Score bands over score / scale, worst first, as (name, lower, upper): "none" (exactly 0),
then `scorer_core.precision.BANDS` (the names and edges of each item's `score_band`). A band is
lower <= s < upper, except that "low" excludes 0 itself."""


def band_range(name: str) -> str:
    """The values band `name` holds, for people: "0", "> 0, < 0.35", "0.35-0.65", ">= 0.85";
    "" for a name that is not a band."""
    for label, lower, upper in BANDS:
        if label != name:
            continue
        if lower == upper:
            return f"{lower:g}"
        if math.isinf(upper):
            return f">= {lower:g}"
        if lower == 0:
            return f"> 0, < {upper:g}"
        return f"{lower:g}-{upper:g}"
    return ""


def as_lazy(source: TableSource) -> pl.LazyFrame:
    """A LazyFrame over `source`: LazyFrames pass through, Parquet paths and globs are scanned."""
    if isinstance(source, pl.LazyFrame | pl.DataFrame):
        return source.lazy()
    if isinstance(source, str | Path):
        return pl.scan_parquet(source)
    return pl.scan_parquet([str(path) for path in source])


@dataclass(frozen=True, slots=True, kw_only=True)
class PositionRate:
    """How often the judge found the context at one position relevant."""

    position: int
    judged: int
    relevant: int
    rate: float


CANARY_METRICS = ("canary_items", "canary_kappa", "canary_precision", "canary_recall")
"""The judge canary's metrics (`jobs.run.canary`): labelled items judged fresh, and Cohen's
kappa, precision and recall of the judge's verdicts against the labels."""

FLOW_METRICS: tuple[str, ...] = (
    *("in_flight_budget", "max_in_flight"),
    *("latency_p50_s", "latency_p90_s", "latency_p99_s"),
)
"""The run's request flow, from the governor (`jobs.engine.control.governor`)."""

_COUNTS = (
    *("items", "scored", "unscored", "errors"),
    *("judge_calls", "prompt_tokens", "completion_tokens", "cache_hits"),
    *("cached_prompt_tokens", "cache_creation_tokens"),
)
_STATISTICS = ("mean", "median", "p10", "p90", "mean_ci_low", "mean_ci_high")
# The summary table's metrics before the flow and canary ones, in the table's order.
_METRICS = (
    *("scale", "items", "population", "scored", "unscored", "errors"),
    *_STATISTICS,
    *_COUNTS[4:],
    "cost_usd",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """Everything the run reports about itself.  Score statistics cover status "ok" items.

    `segments`: the same summary for the items of each value of each `summary.by` column (their
    own `segments` are empty; their position rates too unless the column is in the verdicts).
    """

    model: str
    scale: float
    items: int
    scored: int
    unscored: int
    errors: int
    mean: float | None
    median: float | None
    p10: float | None
    p90: float | None
    bands: tuple[tuple[str, int], ...]
    position_rates: tuple[PositionRate, ...]
    judge_calls: int
    prompt_tokens: int
    completion_tokens: int
    cache_hits: int
    cost_usd: float | None
    # `FLOW_METRICS`; empty for the offline judge.
    flow: tuple[tuple[str, float | None], ...] = ()
    segments: tuple[Segment, ...] = ()
    # The 95% interval of the mean: a t interval, or for a sampled run the stratified
    # estimator's; None below 2 scored items.
    mean_ci_low: float | None = None
    mean_ci_high: float | None = None
    # Items in the input (a sampled run judges some of them: `items`); None when unknown.
    population: int | None = None
    # `CANARY_METRICS` (the whole run only); empty without a canary.
    canary: tuple[tuple[str, float | None], ...] = ()
    # Of prompt_tokens: read from the provider's prompt cache, and written to it (Anthropic).
    cached_prompt_tokens: int = 0
    cache_creation_tokens: int = 0

    @property
    def cost_per_1000_items(self) -> float | None:
        return None if self.cost_usd is None or not self.items else self.cost_usd / self.items * 1e3

    @property
    def tokens_per_item(self) -> float | None:
        """The judge's prompt and completion tokens per item."""
        return (self.prompt_tokens + self.completion_tokens) / self.items if self.items else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (bands as an ordered {label: count}, positions as a list of dicts,
        segments as a list of {by, value, summary})."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["bands"] = dict(self.bands)
        out["position_rates"] = [asdict(rate) for rate in self.position_rates]
        out["flow"] = dict(self.flow)
        out["canary"] = dict(self.canary)
        out["segments"] = [
            {"by": segment.by, "value": segment.value, "summary": segment.summary.to_dict()}
            for segment in self.segments
        ]
        return out

    def to_record(self) -> SummaryRecord:
        """The summary as the run's manifest keeps it."""
        return SummaryRecord.model_validate(self.to_dict())

    def segments_by(self, by: str) -> tuple[Segment, ...]:
        """The segments of column `by`, in the summary's order."""
        return tuple(segment for segment in self.segments if segment.by == by)

    @property
    def segment_columns(self) -> tuple[str, ...]:
        """The columns the run is segmented by, in order."""
        return tuple(dict.fromkeys(segment.by for segment in self.segments))

    def metric_rows(self) -> list[tuple[str, str | None, int | None, float | None]]:
        """(metric, band, position, value) for every value of this summary, segments aside."""
        scalars = {name: getattr(self, name) for name in _METRICS}
        scalars.update({**dict(self.flow), **dict(self.canary)})
        rows: list[tuple[str, str | None, int | None, float | None]] = [
            (name, None, None, value) for name, value in scalars.items()
        ]
        rows.extend(("band_count", label, None, count) for label, count in self.bands)
        for rate in self.position_rates:
            rows.append(("position_judged", None, rate.position, rate.judged))
            rows.append(("position_relevant", None, rate.position, rate.relevant))
            rows.append(("position_rate", None, rate.position, rate.rate))
        return rows

    def to_frame(self) -> pl.DataFrame:
        """The published summary table (`jobs.core.schema.PUBLISHED_SUMMARY`), one row per value:
        the whole run's rows first (segment_by and segment null), then each segment's."""
        rows: list[tuple[str, str | None, str | None, str, str | None, int | None, float | None]]
        rows = [(self.model, None, None, *row) for row in self.metric_rows()]
        for segment in self.segments:
            for row in segment.summary.metric_rows():
                rows.append((self.model, segment.by, segment.value, *row))
        return pl.DataFrame(rows, schema=PUBLISHED_SUMMARY.polars, orient="row")


@dataclass(frozen=True, slots=True)
class Segment:
    """The summary of the items whose column `by` holds `value` (as text; None: null)."""

    by: str
    value: str | None
    summary: RunSummary


def _segment(column: str | None) -> pl.Expr:
    """A segment's value as text (as the summary table stores it); null for the whole run."""
    value = pl.lit(None, pl.String) if column is None else pl.col(column).cast(pl.String)
    return value.alias("segment")


def _band_expr(normalized: pl.Expr, lower: float, upper: float) -> pl.Expr:
    if upper == lower:
        return normalized == lower
    above = normalized > lower if lower == 0 else normalized >= lower - precision.BAND_EPSILON
    return above & (normalized < upper - precision.BAND_EPSILON)


_STATUSES = (("unscored", "unscored"), ("errors", "error"))


def _stats(scores: pl.LazyFrame, column: str | None, scale: float) -> pl.LazyFrame:
    """Per segment of `column` (one row for the whole run): item, status, band and usage
    counts, as plain reductions of row-wise columns (a filter inside a group-by's aggregation
    made Polars hold every group's rows)."""
    is_ok = pl.col("status") == "ok"
    ok_score = pl.when(is_ok).then(pl.col("score"))
    # With scale 0 every score is 0: it belongs to the "none" band.
    normalized = ok_score / scale if scale > 0 else ok_score * 0.0
    rows = scores.select(
        _segment(column),
        is_ok.alias("scored"),
        *((pl.col("status") == status).alias(name) for name, status in _STATUSES),
        *(
            _band_expr(normalized, lower, upper).fill_null(False).alias(f"band:{label}")
            for label, lower, upper in BANDS
        ),
        pl.col("calls").alias("judge_calls"),
        *(pl.col(name) for name in _COUNTS[5:]),
    )
    sums = [pl.len().alias("items"), pl.exclude("segment").sum()]
    if column is None:
        return rows.select(pl.first("segment"), *sums)
    return rows.group_by("segment").agg(sums).sort("segment", nulls_last=True)


def _score_counts(scores: pl.LazyFrame, column: str | None) -> pl.LazyFrame:
    """How many ok items have each score, per segment: at most 100 x scale + 1 rows a segment,
    which the percentiles come from (a group-by quantile holds every score of every group)."""
    ok_score = pl.when(pl.col("status") == "ok").then(pl.col("score")).alias("ok_score")
    return (
        scores.select(_segment(column), ok_score)
        .drop_nulls("ok_score")
        .group_by("segment", "ok_score")
        .agg(pl.len().alias("count"))
    )


def _positions(verdicts: pl.LazyFrame, column: str | None) -> pl.LazyFrame:
    """Per segment and position: judged (non-null verdicts) and relevant."""
    return (
        verdicts.select(_segment(column), "position", "relevant")
        .filter(pl.col("relevant").is_not_null())
        .group_by("segment", "position")
        .agg(judged=pl.len().cast(pl.Int64), relevant=pl.col("relevant").sum().cast(pl.Int64))
        .sort("segment", "position", nulls_last=True)
    )


def relevance_by_position(verdicts: TableSource) -> pl.LazyFrame:
    """Per position: judged (non-null verdicts), relevant, rate = relevant / judged."""
    return (
        _positions(as_lazy(verdicts), None)
        .drop("segment")
        .with_columns(rate=pl.col("relevant") / pl.col("judged"))
    )


QUANTILES = (("median", 0.5), ("p10", 0.1), ("p90", 0.9))


def score_statistics(counts: Sequence[tuple[float, int]]) -> dict[str, float | None]:
    """mean (with its t interval), median, p10 and p90 of values given as (value, how many).

    The mean is exact: the sum of the values as the rationals their doubles are, rounded once
    (a float sum depends on the order and chunks it adds in)."""
    total = sum(count for _, count in counts)
    mean = float(sum(Fraction(value) * count for value, count in counts) / total) if total else None
    interval = t_interval(Moments.from_counts(counts))
    return {
        "mean": mean,
        "mean_ci_low": interval.low if interval else None,
        "mean_ci_high": interval.high if interval else None,
        **quantiles(counts),
    }


def quantiles(counts: Sequence[tuple[float, int]]) -> dict[str, float | None]:
    """median, p10 and p90 of values given as (value, how many), interpolated linearly between
    the closest ranks floor(q * (n - 1)) and ceil(q * (n - 1)); None when there is no value."""
    ordered = sorted(counts)
    total = sum(count for _, count in ordered)
    if total == 0:
        return {name: None for name, _ in QUANTILES}
    ends = list(itertools.accumulate(count for _, count in ordered))

    def at(rank: int) -> float:
        return float(ordered[bisect.bisect_right(ends, rank)][0])

    out: dict[str, float | None] = {}
    for name, share in QUANTILES:
        position = share * (total - 1)
        low = math.floor(position)
        low_value, high_value = at(low), at(math.ceil(position))
        out[name] = low_value + (position - low) * (high_value - low_value)
    return out


def _summary_of(
    stats: dict[str, Any], positions: Sequence[tuple[int, int, int]], spec: SummarySpec
) -> RunSummary:
    """A RunSummary from a row of `_stats` and `score_statistics` and its (position, judged,
    relevant) rows; the cost at the model's batch price when `spec.batch_price`."""
    values: dict[str, Any] = {name: int(stats[name] or 0) for name in _COUNTS}
    values.update({name: optional_float(stats[name]) for name in _STATISTICS})
    rates = [
        PositionRate(position=position, judged=judged, relevant=relevant, rate=relevant / judged)
        for position, judged, relevant in positions
    ]
    return RunSummary(
        model=spec.model,
        scale=spec.scale,
        **values,
        population=values["items"],
        bands=tuple((label, int(stats[f"band:{label}"] or 0)) for label, _, _ in BANDS),
        position_rates=tuple(rates),
        cost_usd=estimate_cost_usd(
            spec.model,
            values["prompt_tokens"],
            values["completion_tokens"],
            batch=spec.batch_price,
            cached=(values["cached_prompt_tokens"], values["cache_creation_tokens"]),
        ),
    )


@dataclass(frozen=True, kw_only=True)
class SummarySpec:
    """What a run's summary is computed with.

    `model`, `scale`: the judge model (for the cost) and the scorer's scale (for the bands).
    `segment_by`: columns of the scores to summarise by as well (`RunSummary.segments`, in this
    order, each column's values sorted as text, null last); those also in `verdict_segments`
    are columns of the verdicts too and get their relevance by position. `batch_price`: the
    cost at the model's batch price (judge.mode batch). `sample`: a sampled run's plan: the
    means and intervals are then the stratified estimator's (`sampled_estimates`), and
    `population` the plan's counts.
    """

    model: str
    scale: float
    segment_by: Sequence[str] = ()
    verdict_segments: Collection[str] = ()
    batch_price: bool = False
    sample: SamplePlan | None = None


def summarize(
    scores: pl.DataFrame | pl.LazyFrame, verdicts: TableSource, spec: SummarySpec
) -> RunSummary:
    """The run summary from the published scores and verdicts tables (`jobs.core.schema`)."""
    scores = as_lazy(scores)
    verdicts = as_lazy(verdicts)
    ((_, whole),) = _summaries(scores, verdicts, None, True, spec)
    segments: list[Segment] = []
    for column in spec.segment_by:
        with_positions = column in spec.verdict_segments
        for value, summary in _summaries(scores, verdicts, column, with_positions, spec):
            segments.append(Segment(by=column, value=value, summary=summary))
    summary = replace(whole, segments=tuple(segments))
    if spec.sample is None:
        return summary
    return sampled_estimates(summary, scores, spec.sample)


def _summaries(
    scores: pl.LazyFrame,
    verdicts: pl.LazyFrame,
    column: str | None,
    with_positions: bool,
    spec: SummarySpec,
) -> list[tuple[str | None, RunSummary]]:
    """(value, its summary) per segment of `column` (None: the whole run, one summary)."""
    # One plan at a time: collected together, their buffers add up (+50 MiB at 1M items).
    stats = _stats(scores, column, spec.scale).collect()
    counts = _by_segment(_score_counts(scores, column).collect())
    positions = _by_segment(_positions(verdicts, column).collect()) if with_positions else {}
    out = []
    for row in stats.iter_rows(named=True):
        value = row["segment"]
        row.update(score_statistics(counts.get(value, [])))
        out.append((value, _summary_of(row, positions.get(value, []), spec)))
    return out


def _by_segment(frame: pl.DataFrame) -> dict[str | None, list[tuple[Any, ...]]]:
    """The rows of `frame` without their first column ("segment"), by its value."""
    out: dict[str | None, list[tuple[Any, ...]]] = {}
    for value, *rest in frame.iter_rows():
        out.setdefault(value, []).append(tuple(rest))
    return out


def _stratified(
    plan: SamplePlan, sampled: Mapping[Stratum, int], domain: Mapping[Stratum, Moments]
) -> tuple[float | None, float | None, float | None]:
    """(mean, low, high) of one domain; None where there are too few items."""
    cells = [
        StratumCell(population, sampled.get(stratum, 0), domain.get(stratum, Moments()))
        for stratum, population in plan.population.items()
    ]
    interval = stratified_interval(cells)
    if interval is None:
        return sum(domain.values(), Moments()).mean, None, None
    return interval.estimate, interval.low, interval.high


def sampled_estimates(summary: RunSummary, scores: pl.LazyFrame, plan: SamplePlan) -> RunSummary:
    """`summary` of a sampled run with the stratified estimator's mean and 95% interval (the
    whole run's and each segment's, `jobs.core.stats.stratified_interval`) and the population."""
    strata = [
        pl.col(name).alias(f"_stratum_{number}") for number, name in enumerate(plan.config.by)
    ]
    ok = scores.filter(pl.col("status") == "ok")

    def domains(column: str | None) -> dict[str | None, dict[Stratum, Moments]]:
        """Per segment of `column`, the Moments of its ok scores in each stratum."""
        out: dict[str | None, dict[Stratum, Moments]] = {}
        for (value, *stratum), moments in moments_by(
            ok, "score", [_segment(column), *strata]
        ).items():
            out.setdefault(value, {})[tuple(map(stratum_text, stratum))] = moments
        return out

    whole = domains(None).get(None, {})
    sampled = {stratum: moments.n for stratum, moments in whole.items()}

    def estimated(
        part: RunSummary, domain: Mapping[Stratum, Moments], population: int | None
    ) -> RunSummary:
        mean, low, high = _stratified(plan, sampled, domain)
        return replace(part, mean=mean, mean_ci_low=low, mean_ci_high=high, population=population)

    per_column = {column: domains(column) for column in summary.segment_columns}
    segments = []
    for segment in summary.segments:
        domain = per_column[segment.by].get(segment.value, {})
        population = plan.segments.get((segment.by, segment.value))
        estimate = estimated(segment.summary, domain, population)
        segments.append(replace(segment, summary=estimate))
    return replace(estimated(summary, whole, plan.items), segments=tuple(segments))
