"""What the report shows of a published run, read with Polars: plain values (rows as dicts) for
the page and its template, which never touch a DataFrame."""

from __future__ import annotations

from typing import Any

import polars as pl

from jobs.tools.published_runs import PublishedRun

WORST_QUERIES = 20
FAILED_ITEMS = 10
HISTOGRAM_BINS = 10


def histogram(scores: pl.LazyFrame, scale: float, bins: int = HISTOGRAM_BINS) -> list[int]:
    """Counts of ok scores / scale in `bins` equal bins over [0, 1] (1.0 in the last bin)."""
    normalized = pl.col("score") / scale if scale > 0 else pl.col("score") * 0.0
    index = (normalized * bins + 1e-9).floor().clip(0, bins - 1).cast(pl.Int32).alias("bin")
    counts = (
        scores.filter((pl.col("status") == "ok") & pl.col("score").is_not_null())
        .group_by(index)
        .agg(pl.len())
        .collect()
    )
    found = dict(counts.iter_rows())
    return [int(found.get(index, 0)) for index in range(bins)]


def worst_queries(run: PublishedRun, limit: int = WORST_QUERIES) -> dict[str, Any]:
    """`rows`: the `limit` lowest-scored ok queries (ties: most contexts first, then query_id) with
    their `verdicts` by position; `lowest_tied`: how many ok queries share the lowest score."""
    ok = run.scores().filter(pl.col("status") == "ok")
    worst = (
        ok.select("query_id", "score", "relevant_count", "context_count", "reason")
        .sort(["score", "context_count", "query_id"], descending=[False, True, False])
        .head(limit)
    )
    verdicts = (
        run.verdicts()
        .join(worst, on="query_id", how="semi")
        .sort(["query_id", "position"])
        .group_by("query_id", maintain_order=True)
        .agg(pl.struct("position", "relevant", reason="judge_reason").alias("verdicts"))
    )
    rows = worst.join(verdicts, on="query_id", how="left", maintain_order="left").collect()
    if rows.is_empty():
        return {"rows": [], "lowest_tied": 0}
    tied = ok.filter(pl.col("score") == rows["score"][0]).select(pl.len()).collect().item()
    listed = [{**row, "verdicts": row["verdicts"] or []} for row in rows.iter_rows(named=True)]
    return {"rows": listed, "lowest_tied": tied}


def failed_items(run: PublishedRun, limit: int = FAILED_ITEMS) -> list[dict[str, Any]]:
    """The first `limit` items not scored ok, by status then query_id, with the error or reason."""
    return (
        run.scores()
        .filter(pl.col("status") != "ok")
        .select("query_id", "status", pl.coalesce("error", "reason").alias("why"))
        .sort(["status", "query_id"])
        .head(limit)
        .collect()
        .to_dicts()
    )
