"""The run summary from the published scores and verdicts tables, in Polars, in memory that
does not grow with the run: `summarize` -> `RunSummary` (`to_frame`: the published summary
table), per `summary.by` segment too, each mean with its 95% interval (a stratified estimate
for a sampled run). Collect the plans with Polars' default (streaming) engine.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl

from jobs.core.formatting import optional_float
from jobs.core.pricing import estimate_cost_usd
from jobs.core.schema import PUBLISHED_SUMMARY
from jobs.core.stats import Moments, StratumCell, stratified_interval, t_interval
from jobs.inputs.sampling import SamplePlan, Stratum, stratum_text
from scorer_core import precision

TableSource = pl.LazyFrame | pl.DataFrame | str | Path | Sequence[str | Path]
"""A table given as a LazyFrame, a DataFrame, or Parquet path(s) / glob(s) to scan."""


def _summary_bands() -> tuple[tuple[str, float, float], ...]:
    """The library's bands (`scorer_core.precision.BANDS`, best first, lower bounds only) as
    (name, lower, upper) rows, worst first, with "none" (exactly 0) in front."""
    ascending = tuple(reversed(precision.BANDS))
    uppers = (*(lower for _, lower in ascending[1:]), math.inf)
    return (
        ("none", 0.0, 0.0),
        *((name, lower, upper) for (name, lower), upper in zip(ascending, uppers, strict=True)),
    )


BANDS: tuple[tuple[str, float, float], ...] = _summary_bands()
"""Score bands over score / scale, worst first: (name, lower, upper), derived from
`scorer_core.precision.BANDS` so a run's band counts use the names and edges of each item's
`score_band`: none (exactly 0), low (above 0, below 0.35), moderate, good, excellent (0.85 and
up).  A band is lower <= s < upper, except that "low" excludes 0 itself."""


def band_range(name: str) -> str:
    """The values of score / scale band `name` holds, for people: "0", "> 0, < 0.35",
    "0.35-0.65", ">= 0.85"; "" for a name that is not a band."""
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


# --------------------------------------------------------------------------------------------
# inputs


def as_lazy(source: TableSource) -> pl.LazyFrame:
    """A LazyFrame over `source`: LazyFrames pass through, Parquet paths and globs are scanned."""
    if isinstance(source, pl.LazyFrame):
        return source
    if isinstance(source, pl.DataFrame):
        return source.lazy()
    if isinstance(source, str | Path):
        return pl.scan_parquet(source)
    return pl.scan_parquet([str(path) for path in source])


def _judged(verdicts: pl.LazyFrame) -> pl.LazyFrame:
    """The verdict rows that carry a verdict (relevant not null), only the columns scoring needs."""
    return verdicts.select("query_id", "position", "relevant").filter(
        pl.col("relevant").is_not_null()
    )


# --------------------------------------------------------------------------------------------
# summary


@dataclass(frozen=True, slots=True)
class PositionRate:
    """How often the judge found the context at one position relevant."""

    position: int
    judged: int
    relevant: int
    rate: float


CANARY_METRICS: tuple[str, ...] = (
    "canary_items",
    "canary_kappa",
    "canary_precision",
    "canary_recall",
)
"""Summary metrics of the judge canary (`canary:`): labelled items judged fresh, and Cohen's
kappa, precision and recall of the judge's verdicts against the labels (`jobs.run.canary`)."""

FLOW_METRICS: tuple[str, ...] = (
    "in_flight_budget",
    "max_in_flight",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p99_s",
)
"""Summary metrics about the run's request flow, from the governor
    (`jobs.engine.control.governor`)."""


@dataclass(frozen=True, slots=True)
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
    # How the run's requests flowed (`FLOW_METRICS`: the in-flight budget it settled on, the
    # most in flight, reply latency percentiles); empty for the offline judge.
    flow: tuple[tuple[str, float | None], ...] = ()
    segments: tuple[Segment, ...] = ()
    # The 95% interval of the mean (`interval_of`): a t interval over the scored items, or for
    # a sampled run the stratified estimator's; None below 2 scored items.
    mean_ci_low: float | None = None
    mean_ci_high: float | None = None
    # Items in the input (a sampled run judges some of them: `items`); None when unknown.
    population: int | None = None
    # The judge canary (`CANARY_METRICS`, the whole run only); empty without one.
    canary: tuple[tuple[str, float | None], ...] = ()

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

    def segments_by(self, by: str) -> tuple[Segment, ...]:
        """The segments of column `by`, in the summary's order."""
        return tuple(segment for segment in self.segments if segment.by == by)

    @property
    def segment_columns(self) -> tuple[str, ...]:
        """The columns the run is segmented by, in order."""
        return tuple(dict.fromkeys(segment.by for segment in self.segments))

    def metric_rows(self) -> list[tuple[str, str | None, int | None, float | None]]:
        """(metric, band, position, value) for every value of this summary, segments aside."""
        scalars: dict[str, float | None] = {
            "scale": self.scale,
            "items": self.items,
            "population": self.population,
            "scored": self.scored,
            "unscored": self.unscored,
            "errors": self.errors,
            "mean": self.mean,
            "median": self.median,
            "p10": self.p10,
            "p90": self.p90,
            "mean_ci_low": self.mean_ci_low,
            "mean_ci_high": self.mean_ci_high,
            "judge_calls": self.judge_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cache_hits": self.cache_hits,
            "cost_usd": self.cost_usd,
            **dict(self.flow),
            **dict(self.canary),
        }
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
        """The published summary table (`jobs.core.schema.PUBLISHED_SUMMARY`), one row per value.

        The whole run's rows first (segment_by and segment null), then each segment's rows.
        band is set on band_count rows only, position on position_* rows only; value is null
        when undefined.
        """
        model = self.model
        rows: list[tuple[str, str | None, str | None, str, str | None, int | None, float | None]]
        rows = [(model, None, None, *row) for row in self.metric_rows()]
        for segment in self.segments:
            rows.extend(
                (model, segment.by, segment.value, *row) for row in segment.summary.metric_rows()
            )
        return pl.DataFrame(rows, schema=PUBLISHED_SUMMARY.polars, orient="row")


@dataclass(frozen=True, slots=True)
class Segment:
    """The summary of the items whose column `by` holds `value` (as text; None: null)."""

    by: str
    value: str | None
    summary: RunSummary


def _band_expr(normalized: pl.Expr, lower: float, upper: float) -> pl.Expr:
    """True where `normalized` falls in the band [lower, upper) (the "none" band: == 0)."""
    if upper == lower:
        return normalized == lower
    above = normalized > lower if lower == 0 else normalized >= lower - precision.BAND_EPSILON
    return above & (normalized < upper - precision.BAND_EPSILON)


def _stat_columns(scale: float) -> list[pl.Expr]:
    """Row-wise columns the statistics reduce: the ok item's score (null otherwise), one 0/1
    column per status and per band, the usage counts."""
    is_ok = pl.col("status") == "ok"
    ok_score = pl.when(is_ok).then(pl.col("score"))
    # With scale 0 every score is 0: it belongs to the "none" band.
    normalized = ok_score / scale if scale > 0 else ok_score * 0.0
    return [
        ok_score.alias("ok_score"),
        is_ok.alias("scored"),
        (pl.col("status") == "unscored").alias("unscored"),
        (pl.col("status") == "error").alias("errors"),
        *(
            _band_expr(normalized, lower, upper).fill_null(False).alias(f"band:{label}")
            for label, lower, upper in BANDS
        ),
        pl.col("calls").alias("judge_calls"),
        pl.col("prompt_tokens"),
        pl.col("completion_tokens"),
        pl.col("cache_hits"),
    ]


def _stat_aggs() -> list[pl.Expr]:
    """Status counts, band counts, usage sums, as plain reductions of `_stat_columns`: one
    value each, over the whole frame or per group. (A filter inside a group-by's aggregation
    made Polars hold every group's rows.) The mean and percentiles come from `_score_counts`
    (`score_statistics`)."""
    return [
        pl.len().alias("items"),
        pl.col("scored").sum(),
        pl.col("unscored").sum(),
        pl.col("errors").sum(),
        *(pl.col(f"band:{label}").sum() for label, _, _ in BANDS),
        pl.col("judge_calls").sum(),
        pl.col("prompt_tokens").sum(),
        pl.col("completion_tokens").sum(),
        pl.col("cache_hits").sum(),
    ]


def _segment(column: str) -> pl.Expr:
    """A segment's value as text (how the summary table stores it)."""
    return pl.col(column).cast(pl.String).alias("segment")


def _score_stats(scores: pl.LazyFrame, scale: float) -> pl.LazyFrame:
    """One row: `_stat_aggs` over every item."""
    return scores.select(_stat_columns(scale)).select(_stat_aggs())


def _segment_stats(scores: pl.LazyFrame, column: str, scale: float) -> pl.LazyFrame:
    """One row per value of `column` ("segment", as text): `_stat_aggs` over its items."""
    return (
        scores.select(_segment(column), *_stat_columns(scale))
        .group_by("segment")
        .agg(_stat_aggs())
        .sort("segment", nulls_last=True)
    )


def _score_counts(scores: pl.LazyFrame, column: str | None) -> pl.LazyFrame:
    """How many ok items have each score (per value of `column`, "segment", when given).

    Scores have 2 decimals, so this is at most 100 * scale + 1 rows (per segment): the
    percentiles are computed from it (`quantiles`) instead of by a group-by quantile, which
    holds every score of every group (+60 MiB per percentile at 1M items, 100 segments).
    """
    keys = [_segment(column)] if column is not None else []
    ok_score = pl.when(pl.col("status") == "ok").then(pl.col("score")).alias("ok_score")
    return (
        scores.select(*keys, ok_score)
        .drop_nulls("ok_score")
        .group_by(*(["segment"] if column is not None else []), "ok_score")
        .agg(pl.len().alias("count"))
    )


QUANTILES = (("median", 0.5), ("p10", 0.1), ("p90", 0.9))


def score_statistics(counts: Sequence[tuple[float, int]]) -> dict[str, float | None]:
    """mean, median, p10 and p90 of the values given as (value, how many times).

    The mean is exact: the sum of the values as the rationals their doubles are, over their
    number, rounded once to the nearest double. (A float sum, Polars' or anyone's, depends
    on the order and the chunks it adds in: the same scores gave means 1 ulp apart when the
    file they were read from had other row groups.) Percentiles: `quantiles`."""
    total = sum(count for _, count in counts)
    mean = None
    if total:
        mean = float(sum(Fraction(value) * count for value, count in counts) / total)
    interval = t_interval(Moments.from_counts(counts))
    return {
        "mean": mean,
        "mean_ci_low": interval.low if interval else None,
        "mean_ci_high": interval.high if interval else None,
        **quantiles(counts),
    }


def quantiles(counts: Sequence[tuple[float, int]]) -> dict[str, float | None]:
    """median, p10 and p90 of the values given as (value, how many times), with linear
    interpolation between the closest ranks: at q, the values v_lo and v_hi at ranks
    floor(q * (n - 1)) and ceil(q * (n - 1)) of the n sorted values give
    v_lo + (q * (n - 1) - floor(q * (n - 1))) * (v_hi - v_lo). None when there is no value."""
    ordered = sorted(counts)
    total = sum(count for _, count in ordered)
    if total == 0:
        return {name: None for name, _ in QUANTILES}
    ends = list(itertools.accumulate(count for _, count in ordered))

    def at(rank: int) -> float:
        return float(ordered[bisect.bisect_right(ends, rank)][0])

    out: dict[str, float | None] = {}
    for name, q in QUANTILES:
        position = q * (total - 1)
        low = math.floor(position)
        low_value, high_value = at(low), at(math.ceil(position))
        out[name] = low_value + (position - low) * (high_value - low_value)
    return out


def _segment_positions(verdicts: pl.LazyFrame, column: str) -> pl.LazyFrame:
    """Per value of `column` and position: judged, relevant (verdicts carrying `column`)."""
    return (
        _judged_with(verdicts, column)
        .group_by(_segment(column), "position")
        .agg(
            judged=pl.len().cast(pl.Int64),
            relevant=pl.col("relevant").sum().cast(pl.Int64),
        )
        .sort("segment", "position", nulls_last=True)
    )


def _judged_with(verdicts: pl.LazyFrame, column: str) -> pl.LazyFrame:
    return verdicts.select("position", "relevant", column).filter(pl.col("relevant").is_not_null())


def relevance_by_position(verdicts: TableSource) -> pl.LazyFrame:
    """Per position: judged (non-null verdicts), relevant, rate = relevant / judged."""
    return (
        _judged(as_lazy(verdicts))
        .group_by("position")
        .agg(
            judged=pl.len().cast(pl.Int64),
            relevant=pl.col("relevant").sum().cast(pl.Int64),
        )
        .with_columns(rate=pl.col("relevant") / pl.col("judged"))
        .sort("position")
    )


def _summary_of(
    stats: dict[str, Any],
    positions: Sequence[dict[str, Any]],
    *,
    model: str,
    scale: float,
    batch_price: bool = False,
) -> RunSummary:
    """A RunSummary from one row of `_stat_exprs` and its rows of judged / relevant by
    position; the cost at the model's batch price when `batch_price` (judge.mode batch)."""
    prompt_tokens = int(stats["prompt_tokens"] or 0)
    completion_tokens = int(stats["completion_tokens"] or 0)
    return RunSummary(
        model=model,
        scale=scale,
        items=int(stats["items"]),
        scored=int(stats["scored"] or 0),
        unscored=int(stats["unscored"] or 0),
        errors=int(stats["errors"] or 0),
        mean=optional_float(stats["mean"]),
        median=optional_float(stats["median"]),
        p10=optional_float(stats["p10"]),
        p90=optional_float(stats["p90"]),
        mean_ci_low=optional_float(stats.get("mean_ci_low")),
        mean_ci_high=optional_float(stats.get("mean_ci_high")),
        population=int(stats["items"]),
        bands=tuple((label, int(stats[f"band:{label}"] or 0)) for label, _, _ in BANDS),
        position_rates=tuple(
            PositionRate(
                position=int(row["position"]),
                judged=int(row["judged"]),
                relevant=int(row["relevant"]),
                rate=int(row["relevant"]) / int(row["judged"]),
            )
            for row in positions
        ),
        judge_calls=int(stats["judge_calls"] or 0),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cache_hits=int(stats["cache_hits"] or 0),
        cost_usd=estimate_cost_usd(model, prompt_tokens, completion_tokens, batch=batch_price),
    )


def summarize(
    scores: pl.DataFrame | pl.LazyFrame,
    verdicts: TableSource,
    *,
    model: str,
    scale: float,
    segment_by: Sequence[str] = (),
    verdict_segments: Collection[str] = (),
    batch_price: bool = False,
    sample: SamplePlan | None = None,
) -> RunSummary:
    """The run summary from the published scores and verdicts tables (`jobs.core.schema`); the
    cost at the model's batch price when `batch_price` (judge.mode batch).

    The mean is exact (`score_statistics`); percentiles use linear interpolation between
    closest ranks (`quantiles`); bands are over score / scale.
    `segment_by`: columns of `scores` to summarise by as well (`RunSummary.segments`, in this
    order, each column's values sorted as text, null last); those also in `verdict_segments`
    are columns of `verdicts` too and get their relevance by position per segment.
    `sample`: a sampled run's plan (`jobs.inputs.sampling`): the mean and its interval, of the whole
    run and of each segment, are then the stratified estimator's (`sampled_estimates`), and
    `population` the plan's counts of the input.
    """
    scores = as_lazy(scores)
    verdicts = as_lazy(verdicts)
    plans = [
        _score_stats(scores, scale),
        _score_counts(scores, None),
        relevance_by_position(verdicts),
    ]
    for column in segment_by:
        plans += [_segment_stats(scores, column, scale), _score_counts(scores, column)]
        if column in verdict_segments:
            plans.append(_segment_positions(verdicts, column))
    # One plan at a time: run together, their buffers add up (+50 MiB at 1M items).
    frames = (plan.collect() for plan in plans)
    stats, counts, positions = next(frames), next(frames), next(frames)
    segments: list[Segment] = []
    for column in segment_by:
        segments += _segments_of(
            column, frames, column in verdict_segments, model, scale, batch_price
        )
    overall = _summary_of(
        {**stats.row(0, named=True), **score_statistics(list(counts.iter_rows()))},
        list(positions.iter_rows(named=True)),
        model=model,
        scale=scale,
        batch_price=batch_price,
    )
    summary = replace(overall, segments=tuple(segments))
    if sample is not None:
        summary = sampled_estimates(summary, scores, sample)
    return summary


def _segments_of(
    column: str,
    frames: Iterator[pl.DataFrame],
    with_positions: bool,
    model: str,
    scale: float,
    batch_price: bool,
) -> list[Segment]:
    """The segments of `column` from its collected plans, in `summarize`'s order: its
    statistics, its score counts and (`with_positions`) its relevance by position."""
    per_value, per_value_counts = next(frames), next(frames)
    by_value: dict[str | None, list[dict[str, Any]]] = {}
    if with_positions:
        for row in next(frames).iter_rows(named=True):
            by_value.setdefault(row["segment"], []).append(row)
    value_counts: dict[str | None, list[tuple[float, int]]] = {}
    for value, score, count in per_value_counts.iter_rows():
        value_counts.setdefault(value, []).append((score, count))
    return [
        Segment(
            by=column,
            value=row["segment"],
            summary=_summary_of(
                {**row, **score_statistics(value_counts.get(row["segment"], []))},
                by_value.get(row["segment"], []),
                model=model,
                scale=scale,
                batch_price=batch_price,
            ),
        )
        for row in per_value.iter_rows(named=True)
    ]


def _strata_moments(
    scores: pl.LazyFrame, by: Sequence[str], column: str | None
) -> dict[tuple[str | None, Stratum], Moments]:
    """(segment text of `column`, or None for the whole run; stratum) -> the Moments of the
    ok scores there: one small group-by (strata times segments rows)."""
    keys = [pl.col(name).alias(f"_stratum_{i}") for i, name in enumerate(by)]
    segment = _segment(column) if column is not None else pl.lit(None, pl.String).alias("segment")
    frame = (
        scores.filter(pl.col("status") == "ok")
        .select(segment, *keys, pl.col("score").cast(pl.Float64))
        .group_by("segment", *(f"_stratum_{i}" for i in range(len(by))))
        .agg(
            n=pl.len(),
            total=pl.col("score").sum(),
            total_sq=(pl.col("score") * pl.col("score")).sum(),
        )
        .collect()
    )
    out: dict[tuple[str | None, Stratum], Moments] = {}
    for row in frame.iter_rows():
        stratum = tuple(stratum_text(value) for value in row[1 : 1 + len(by)])
        out[(row[0], stratum)] = Moments(int(row[-3]), float(row[-2]), float(row[-1]))
    return out


def _stratified(
    plan: SamplePlan,
    sampled: Mapping[Stratum, int],
    domain: Mapping[Stratum, Moments],
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
    by = plan.config.by
    whole = {stratum: m for (_, stratum), m in _strata_moments(scores, by, None).items()}
    sampled = {stratum: m.n for stratum, m in whole.items()}
    mean, low, high = _stratified(plan, sampled, whole)
    per_column = {column: _strata_moments(scores, by, column) for column in summary.segment_columns}
    segments = []
    for segment in summary.segments:
        domain = {
            stratum: m
            for (value, stratum), m in per_column[segment.by].items()
            if value == segment.value
        }
        s_mean, s_low, s_high = _stratified(plan, sampled, domain)
        population = plan.segments.get((segment.by, segment.value))
        segments.append(
            replace(
                segment,
                summary=replace(
                    segment.summary,
                    mean=s_mean,
                    mean_ci_low=s_low,
                    mean_ci_high=s_high,
                    population=population,
                ),
            )
        )
    return replace(
        summary,
        mean=mean,
        mean_ci_low=low,
        mean_ci_high=high,
        population=plan.items,
        segments=tuple(segments),
    )
