"""Polars over the run's tables: context precision from verdict rows, and the run summary.

The published score of an item is the one its worker computed (`scorer_core.precision`); this
module scores the verdict rows a second, independent way, for `publish_run(verify_scores=True)`
(`score_mismatches`) and for the aggregation benchmark.  `scores_from_verdicts` uses exactly the
arithmetic of ``scorer_core.precision.context_precision``: for each relevant context at stored
position i, precision_i = (relevant contexts at positions <= i) / (i + 1); the average precision
is the mean of those, times ``scale``, rounded half up to 2 decimals; no relevant context scores
0.  Ranks always come from the stored ``position`` column, never from a row counter, so a
missing row cannot shift the ranks of the rows after it.

Two formulations are implemented (``bench/aggregate_bench.py`` measures them and others):

* ``"window"``: a running count of relevant rows per query ordered by position
  (``cum_sum().over("query_id", order_by="position")``), then a group-by.  General and short.
* ``"bitmask"`` (default): a single hash group-by that ORs ``2**position`` into a 64-bit mask per
  query, then average precision from popcounts of mask prefixes.  No sort and no window: 2-3x
  faster than ``"window"`` at half its memory on 10M rows (docs/benchmarks.md).  Queries it
  cannot represent exactly (a position outside 0..63, or the same position twice) are routed to
  ``"window"`` inside the same plan, so both methods return the same scores on every input.

The summary (`summarize` -> `RunSummary`) reads the published scores and verdicts tables
(`jobs.schema`); `RunSummary.to_frame` is the published summary table.

Collect the returned LazyFrames with Polars' default engine (streaming since Polars 2): the
bitmask plan is several times slower and uses about 3x the memory on the in-memory engine.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import polars as pl

from jobs.engine.response_formats import RunResponseFormat
from jobs.pricing import estimate_cost_usd
from jobs.schema import PUBLISHED_SUMMARY
from scorer_core import precision
from scorer_core.errors import ConfigError
from scorer_core.precision import check_scale

TableSource = pl.LazyFrame | pl.DataFrame | str | Path | Sequence[str | Path]
"""A table given as a LazyFrame, a DataFrame, or Parquet path(s) / glob(s) to scan."""

ScoreMethod = Literal["bitmask", "window"]


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


LEGACY_BAND_LABELS: dict[str, str] = {
    "0": "none",
    "0.1-0.3": "low",
    "0.4-0.6": "moderate",
    "0.7-0.8": "good",
    "0.9-1.0": "excellent",
}
"""The labels of the same bands in summaries published before they had names."""

# JavaScript's Number.EPSILON, which Mastra's rounding adds before it rounds (as
# scorer_core.precision.round_score does).
_JS_EPSILON = sys.float_info.epsilon
# Positions the bitmask path can hold in one UInt64.
_MASK_BITS = 64
# Two different 2-decimal scores differ by 0.01; anything below this is float noise.
_SCORE_TOLERANCE = 1e-9


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


def round_half_up_expr(expr: pl.Expr, digits: int = 2) -> pl.Expr:
    """`expr` rounded as scorer_core.precision.round_half_up (Mastra's rounding), step by step:
    y = (x + 2**-52) * 10**digits; the nearest integer to y, ties up; divided back."""
    factor = 10.0**digits
    scaled = (expr + _JS_EPSILON) * factor
    floor = scaled.floor()
    nearest = pl.when(scaled - floor >= 0.5).then(floor + 1.0).otherwise(floor)
    # Polars divides by a scalar as a multiplication by its reciprocal (83 * 0.01 is
    # 0.8300000000000001); rounding that to `digits` gives back the double nearest n / 10**d.
    return (nearest / factor).round(digits)


def _judged(verdicts: pl.LazyFrame) -> pl.LazyFrame:
    """The verdict rows that carry a verdict (relevant not null), only the columns scoring needs."""
    return verdicts.select("query_id", "position", "relevant").filter(
        pl.col("relevant").is_not_null()
    )


def _finish_score(precision_sum: pl.Expr, relevant_count: pl.Expr, scale: float) -> pl.Expr:
    """Average precision times `scale`, rounded half up; 0 when nothing is relevant."""
    average = precision_sum / relevant_count
    return round_half_up_expr(
        pl.when(relevant_count > 0).then(average * scale).otherwise(pl.lit(0.0))
    ).alias("score")


# --------------------------------------------------------------------------------------------
# scores


def _scores_by_window(judged: pl.LazyFrame, scale: float) -> pl.LazyFrame:
    """Scores from a running relevant count per query in position order (any positions)."""
    running = pl.col("relevant").cast(pl.Int32).cum_sum().over("query_id", order_by="position")
    precision = running / (pl.col("position").cast(pl.Float64) + 1.0)
    return (
        judged.with_columns(precision=pl.when("relevant").then(precision).otherwise(0.0))
        .group_by("query_id")
        .agg(
            precision_sum=pl.col("precision").sum(),
            relevant_count=pl.col("relevant").sum().cast(pl.Int32),
            judged_count=pl.len().cast(pl.Int32),
        )
        .select(
            "query_id",
            _finish_score(pl.col("precision_sum"), pl.col("relevant_count"), scale),
            "relevant_count",
            "judged_count",
        )
    )


def _bit(position: pl.Expr) -> pl.Expr:
    """2**position as UInt64 (position clipped into 0..63 so the cast can never fail)."""
    exponent = position.clip(0, _MASK_BITS - 1).cast(pl.UInt32)
    return pl.lit(2, dtype=pl.UInt64).pow(exponent)


def _precision_sum_from_mask(mask: pl.Expr) -> pl.Expr:
    """Sum of precision_i over the set bits i of `mask`, added in position order."""
    terms = []
    for i in range(_MASK_BITS):
        bit = pl.lit(1 << i, dtype=pl.UInt64)
        prefix = pl.lit((2 << i) - 1, dtype=pl.UInt64)
        relevant_so_far = (mask & prefix).bitwise_count_ones().cast(pl.Float64)
        terms.append(pl.when((mask & bit) != 0).then(relevant_so_far / (i + 1)).otherwise(0.0))
    return pl.sum_horizontal(terms)


def _scores_by_bitmask(judged: pl.LazyFrame, scale: float) -> pl.LazyFrame:
    """Scores from one hash group-by into 64-bit masks; other queries go through the window."""
    in_range = pl.col("position").is_between(0, _MASK_BITS - 1)
    zero = pl.lit(0, dtype=pl.UInt64)
    bit = _bit(pl.col("position"))
    # Bits are computed row-wise before the group-by so the aggregations stay plain column
    # reductions, which both engines run without per-group expression evaluation.
    masks = (
        judged.select(
            "query_id",
            relevant_bit=pl.when(in_range & pl.col("relevant")).then(bit).otherwise(zero),
            judged_bit=pl.when(in_range).then(bit).otherwise(zero),
        )
        .group_by("query_id")
        .agg(
            relevant_mask=pl.col("relevant_bit").bitwise_or(),
            judged_mask=pl.col("judged_bit").bitwise_or(),
            judged_count=pl.len().cast(pl.Int32),
        )
    )
    # Every row set its own bit exactly when all positions are in range and distinct.
    exact = pl.col("judged_mask").bitwise_count_ones().cast(pl.Int32) == pl.col("judged_count")
    relevant_count = pl.col("relevant_mask").bitwise_count_ones().cast(pl.Int32)
    fast = masks.filter(exact).select(
        "query_id",
        _finish_score(_precision_sum_from_mask(pl.col("relevant_mask")), relevant_count, scale),
        relevant_count.alias("relevant_count"),
        "judged_count",
    )
    odd_ids = masks.filter(~exact).select("query_id")
    slow = _scores_by_window(judged.join(odd_ids, on="query_id", how="semi"), scale)
    return pl.concat([fast, slow], how="vertical")


def scores_from_verdicts(
    verdicts: TableSource, scale: float, *, method: ScoreMethod = "bitmask"
) -> pl.LazyFrame:
    """Context precision per query from the verdict rows.

    Returns columns query_id (str), score (f64), relevant_count (i32), judged_count (i32), one
    row per query_id that has at least one non-null verdict, in no particular order.  Rows with
    a null `relevant` (unscored items) are ignored.  Positions must be >= 0; a query that has
    the same position twice (a data error the job never writes) is scored from all its rows.
    `method` picks the formulation; both give identical scores.
    """
    scale = check_scale(scale)
    judged = _judged(as_lazy(verdicts))
    if method == "bitmask":
        return _scores_by_bitmask(judged, scale)
    if method == "window":
        return _scores_by_window(judged, scale)
    raise ConfigError(f"method must be 'bitmask' or 'window', got {method!r}")


def score_mismatches(
    scores: TableSource, verdicts: TableSource, scale: float, *, method: ScoreMethod = "bitmask"
) -> pl.LazyFrame:
    """Status "ok" items whose worker score or relevant count disagrees with their verdicts.

    `scores` is a table with the columns query_id, status, score, relevant_count, source and row
    (staged items or published scores).  Any row here is a bug in the worker, the writer or
    this module.  Columns: query_id, source, row, worker_score, polars_score,
    worker_relevant_count, polars_relevant_count; sorted by source and row.
    """
    recomputed = scores_from_verdicts(verdicts, scale, method=method).select(
        "query_id",
        pl.col("score").alias("score_polars"),
        pl.col("relevant_count").alias("relevant_polars"),
    )
    # An ok item without verdict rows scores 0, as context_precision([]) does.
    polars_score = pl.col("score_polars").fill_null(0.0)
    polars_relevant = pl.col("relevant_polars").fill_null(0)
    score_differs = (pl.col("score") - polars_score).abs() > _SCORE_TOLERANCE
    disagree = (
        pl.col("score").is_null() | score_differs | (pl.col("relevant_count") != polars_relevant)
    )
    return (
        as_lazy(scores)
        .filter(pl.col("status") == "ok")
        .join(recomputed, on="query_id", how="left")
        .filter(disagree)
        .select(
            "query_id",
            "source",
            "row",
            pl.col("score").alias("worker_score"),
            polars_score.alias("polars_score"),
            pl.col("relevant_count").cast(pl.Int32).alias("worker_relevant_count"),
            polars_relevant.cast(pl.Int32).alias("polars_relevant_count"),
        )
        .sort("source", "row")
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


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Everything the run reports about itself.  Score statistics cover status "ok" items."""

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
    # The structured-output form the judge's requests settled on (None: nothing negotiated,
    # e.g. the offline judge); set by publishing from the workers' reports, not by the tables.
    response_format: RunResponseFormat | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (bands as an ordered {label: count}, positions as a list of dicts)."""
        out = asdict(self)
        out["bands"] = dict(self.bands)
        out["position_rates"] = [asdict(rate) for rate in self.position_rates]
        out["response_format"] = self.response_format.to_dict() if self.response_format else None
        return out

    def to_frame(self) -> pl.DataFrame:
        """The published summary table (`jobs.schema.PUBLISHED_SUMMARY`), one row per value.

        band is set on band_count rows only, position on position_* rows only; value is null
        when undefined.  `response_format` is not in it: a form's name and a server's answer
        are text in a table of numbers; the manifest's summary carries them.
        """
        rows: list[tuple[str, str, str | None, int | None, float | None]] = []
        scalars: dict[str, float | None] = {
            "scale": self.scale,
            "items": self.items,
            "scored": self.scored,
            "unscored": self.unscored,
            "errors": self.errors,
            "mean": self.mean,
            "median": self.median,
            "p10": self.p10,
            "p90": self.p90,
            "judge_calls": self.judge_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cache_hits": self.cache_hits,
            "cost_usd": self.cost_usd,
        }
        model = self.model
        rows.extend((model, name, None, None, value) for name, value in scalars.items())
        rows.extend((model, "band_count", label, None, count) for label, count in self.bands)
        for rate in self.position_rates:
            rows.append((model, "position_judged", None, rate.position, rate.judged))
            rows.append((model, "position_relevant", None, rate.position, rate.relevant))
            rows.append((model, "position_rate", None, rate.position, rate.rate))
        return pl.DataFrame(rows, schema=PUBLISHED_SUMMARY.polars, orient="row")


def _band_expr(normalized: pl.Expr, lower: float, upper: float) -> pl.Expr:
    """True where `normalized` falls in the band [lower, upper) (the "none" band: == 0)."""
    if upper == lower:
        return normalized == lower
    above = normalized > lower if lower == 0 else normalized >= lower - precision.BAND_EPSILON
    return above & (normalized < upper - precision.BAND_EPSILON)


def _score_stats(scores: pl.LazyFrame, scale: float) -> pl.LazyFrame:
    """One row: status counts, score statistics over ok items, band counts, usage sums."""
    ok_score = pl.col("score").filter(pl.col("status") == "ok").drop_nulls()
    # With scale 0 every score is 0: it belongs to the "none" band.
    normalized = ok_score / scale if scale > 0 else ok_score * 0.0
    bands = [
        _band_expr(normalized, lower, upper).sum().alias(f"band:{label}")
        for label, lower, upper in BANDS
    ]
    return scores.select(
        pl.len().alias("items"),
        (pl.col("status") == "ok").sum().alias("scored"),
        (pl.col("status") == "unscored").sum().alias("unscored"),
        (pl.col("status") == "error").sum().alias("errors"),
        ok_score.mean().alias("mean"),
        ok_score.median().alias("median"),
        ok_score.quantile(0.1, interpolation="linear").alias("p10"),
        ok_score.quantile(0.9, interpolation="linear").alias("p90"),
        *bands,
        pl.col("calls").sum().alias("judge_calls"),
        pl.col("prompt_tokens").sum(),
        pl.col("completion_tokens").sum(),
        pl.col("cache_hits").sum(),
    )


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


def _optional_float(value: object) -> float | None:
    """A Polars scalar as float, or None for null/NaN."""
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def summarize(
    scores: pl.DataFrame | pl.LazyFrame,
    verdicts: TableSource,
    *,
    model: str,
    scale: float,
) -> RunSummary:
    """The run summary from the published scores and verdicts tables (`jobs.schema`).

    Percentiles use linear interpolation between closest ranks; bands are over score / scale.
    """
    scale = check_scale(scale)
    stats_frame, positions = pl.collect_all(
        [_score_stats(as_lazy(scores), scale), relevance_by_position(verdicts)]
    )
    stats = stats_frame.row(0, named=True)
    prompt_tokens = int(stats["prompt_tokens"] or 0)
    completion_tokens = int(stats["completion_tokens"] or 0)
    return RunSummary(
        model=model,
        scale=scale,
        items=int(stats["items"]),
        scored=int(stats["scored"] or 0),
        unscored=int(stats["unscored"] or 0),
        errors=int(stats["errors"] or 0),
        mean=_optional_float(stats["mean"]),
        median=_optional_float(stats["median"]),
        p10=_optional_float(stats["p10"]),
        p90=_optional_float(stats["p90"]),
        bands=tuple((label, int(stats[f"band:{label}"] or 0)) for label, _, _ in BANDS),
        position_rates=tuple(
            PositionRate(
                position=int(row["position"]),
                judged=int(row["judged"]),
                relevant=int(row["relevant"]),
                rate=float(row["rate"]),
            )
            for row in positions.iter_rows(named=True)
        ),
        judge_calls=int(stats["judge_calls"] or 0),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cache_hits=int(stats["cache_hits"] or 0),
        cost_usd=estimate_cost_usd(model, prompt_tokens, completion_tokens),
    )
