"""What the report shows, read with Polars from a published run or a comparison of two runs.

Every function returns plain typed data (dataclasses, tuples, ints): the page code and the
template never touch a DataFrame, and these queries can be tested without rendering a page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from jobs.tools.comparison import Comparison
from jobs.tools.published_runs import PublishedRun

WORST_QUERIES = 20
FAILED_ITEMS = 10
REGRESSIONS = 20
HISTOGRAM_BINS = 10


@dataclass(frozen=True)
class Verdict:
    """The judge's verdict on the context at one position (relevant None: not judged)."""

    position: int
    relevant: bool | None
    reason: str | None


@dataclass(frozen=True)
class WorstQuery:
    query_id: str
    score: float
    relevant_count: int | None
    context_count: int | None
    reason: str | None
    verdicts: tuple[Verdict, ...]  # in position order


@dataclass(frozen=True)
class WorstQueries:
    rows: tuple[WorstQuery, ...]  # lowest score first, ties by query_id
    lowest_tied: int  # scored items that share the lowest score (0 when nothing is scored)


@dataclass(frozen=True)
class FailedItem:
    query_id: str
    status: str
    why: str | None  # the error, or the reason when there is no error


@dataclass(frozen=True)
class Regression:
    query_id: str
    score_a: float
    score_b: float
    delta: float
    relevant_count_a: int | None
    relevant_count_b: int | None


@dataclass(frozen=True)
class PositionChange:
    """Relevance rate by position in both runs (None where a run judged nothing there)."""

    positions: tuple[int, ...]
    rate_a: tuple[float | None, ...]
    rate_b: tuple[float | None, ...]
    delta: tuple[float | None, ...]  # rate_b - rate_a


def histogram(scores: pl.LazyFrame, scale: float, bins: int = HISTOGRAM_BINS) -> list[int]:
    """Counts of ok scores / scale in `bins` equal bins over [0, 1] (1.0 in the last bin)."""
    normalized = pl.col("score") / scale if scale > 0 else pl.col("score") * 0.0
    index = (normalized * bins + 1e-9).floor().clip(0, bins - 1).cast(pl.Int32).alias("bin")
    counts = (
        scores.filter((pl.col("status") == "ok") & pl.col("score").is_not_null())
        .select(index)
        .group_by("bin")
        .agg(pl.len().alias("n"))
        .collect()
    )
    found = dict(zip(counts["bin"].to_list(), counts["n"].to_list(), strict=True))
    return [int(found.get(i, 0)) for i in range(bins)]


def verdicts_for(run: PublishedRun, query_ids: Sequence[str]) -> dict[str, tuple[Verdict, ...]]:
    """Per query_id, its verdicts in position order."""
    if not query_ids:
        return {}
    wanted = pl.LazyFrame({"query_id": list(query_ids)}, schema={"query_id": pl.String})
    rows = (
        run.verdicts()
        .join(wanted, on="query_id", how="semi")
        .select("query_id", "position", "relevant", "judge_reason")
        .sort(["query_id", "position"])
        .collect()
    )
    out: dict[str, list[Verdict]] = {}
    for row in rows.iter_rows(named=True):
        out.setdefault(str(row["query_id"]), []).append(
            Verdict(int(row["position"]), row["relevant"], row["judge_reason"])
        )
    return {query_id: tuple(verdicts) for query_id, verdicts in out.items()}


def worst_queries(run: PublishedRun, n: int = WORST_QUERIES) -> WorstQueries:
    """The `n` lowest-scored ok queries (ties by query_id) with their verdicts, and how many
    ok queries share the lowest score (the page says so when that is more than it lists)."""
    ok = run.scores().filter(pl.col("status") == "ok")
    worst = (
        ok.select("query_id", "score", "relevant_count", "context_count", "reason")
        .sort(["score", "query_id"])
        .head(n)
        .collect()
    )
    if worst.is_empty():
        return WorstQueries(rows=(), lowest_tied=0)
    verdicts = verdicts_for(run, worst.get_column("query_id").to_list())
    rows = tuple(
        WorstQuery(
            query_id=str(row["query_id"]),
            score=float(row["score"]),
            relevant_count=row["relevant_count"],
            context_count=row["context_count"],
            reason=row["reason"],
            verdicts=verdicts.get(str(row["query_id"]), ()),
        )
        for row in worst.iter_rows(named=True)
    )
    lowest = rows[0].score
    tied = ok.filter(pl.col("score") == lowest).select(pl.len()).collect().item()
    return WorstQueries(rows=rows, lowest_tied=int(tied))


def failed_items(run: PublishedRun, n: int = FAILED_ITEMS) -> list[FailedItem]:
    """The first `n` items not scored ok, by status then query_id."""
    rows = (
        run.scores()
        .filter(pl.col("status") != "ok")
        .select("query_id", "status", pl.coalesce("error", "reason").alias("why"))
        .sort(["status", "query_id"])
        .head(n)
        .collect()
    )
    return [
        FailedItem(query_id=str(row["query_id"]), status=str(row["status"]), why=row["why"])
        for row in rows.iter_rows(named=True)
    ]


def regressions(comparison: Comparison, n: int = REGRESSIONS) -> list[Regression]:
    """The `n` queries whose score fell the most from the baseline (most negative first)."""
    return [
        Regression(
            query_id=str(row["query_id"]),
            score_a=float(row["score_a"]),
            score_b=float(row["score_b"]),
            delta=float(row["delta"]),
            relevant_count_a=row["relevant_count_a"],
            relevant_count_b=row["relevant_count_b"],
        )
        for row in comparison.regressions(n).iter_rows(named=True)
    ]


def position_change(comparison: Comparison, limit: int) -> PositionChange:
    """The first `limit` positions of the comparison's relevance rate by position."""
    rows = comparison.positions.head(limit)
    return PositionChange(
        positions=tuple(int(p) for p in rows.get_column("position").to_list()),
        rate_a=tuple(rows.get_column("rate_a").to_list()),
        rate_b=tuple(rows.get_column("rate_b").to_list()),
        delta=tuple(rows.get_column("delta").to_list()),
    )
