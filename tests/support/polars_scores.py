"""Context precision computed from verdict rows by Polars, independently of the worker's
scorer_core arithmetic: the tests check the published scores against their verdicts with it
(`score_mismatches`), and bench/aggregate_bench.py measures its two formulations.

`scores_from_verdicts` uses the arithmetic of `scorer_core.precision.context_precision`: for
each relevant context at stored position i, precision_i = (relevant contexts at positions <= i)
/ (i + 1); the average precision is their mean, times `scale`, rounded half up to 2 decimals
as Mastra rounds; no relevant context scores 0. Ranks come from the stored `position` column.
"window" keeps a running relevant count per query in position order; "bitmask" (default) ORs
2**position into a 64-bit mask per query in one hash group-by and routes the queries it cannot
represent exactly (positions outside 0..63, a position twice) to "window" in the same plan.
"""

from __future__ import annotations

import sys
from typing import Literal

import polars as pl

from jobs.engine.publish.aggregate import TableSource, as_lazy
from scorer_core.errors import ConfigError
from scorer_core.precision import check_scale

ScoreMethod = Literal["bitmask", "window"]

# JavaScript's Number.EPSILON, which Mastra's rounding adds before it rounds (as
# scorer_core.precision.round_score does).
_JS_EPSILON = sys.float_info.epsilon
# Positions the bitmask path can hold in one UInt64.
_MASK_BITS = 64
# Two different 2-decimal scores differ by 0.01; anything below this is float noise.
_SCORE_TOLERANCE = 1e-9


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
    """The verdict rows that carry a verdict, only the columns scoring needs."""
    return verdicts.select("query_id", "position", "relevant").filter(
        pl.col("relevant").is_not_null()
    )


def _finish_score(precision_sum: pl.Expr, relevant_count: pl.Expr, scale: float) -> pl.Expr:
    """Average precision times `scale`, rounded half up; 0 when nothing is relevant."""
    average = precision_sum / relevant_count
    return round_half_up_expr(
        pl.when(relevant_count > 0).then(average * scale).otherwise(pl.lit(0.0))
    ).alias("score")


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
