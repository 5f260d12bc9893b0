"""A run's error rate against `run.max_error_rate`, and its commonest error (compared without
the row position): what the manifest records and what makes `ctxprec run` exit 1."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from jobs.core.run_manifest import ErrorRateRecord

# "<file> line at byte 123: " or "<file> row 7: ": the position a row's error message starts with
_POSITION = r"^.*? (?:line at byte|row) \d+: "


def measure(scores: Path | str, items: int, errors: int, limit: float | None) -> ErrorRateRecord:
    """The error rate of a run whose scores table (local Parquet) is `scores`."""
    if not errors:
        return ErrorRateRecord.of(items, errors, limit)
    top = (
        pl.scan_parquet(scores)
        .filter(pl.col("status") == "error")
        .select(pl.col("error").fill_null("").str.replace(_POSITION, ""))
        .group_by("error")
        .len()
        .sort(["len", "error"], descending=[True, False])
        .head(1)
        .collect()
    )
    if top.height == 0:
        return ErrorRateRecord.of(items, errors, limit)
    return ErrorRateRecord.of(items, errors, limit, str(top["error"][0]), int(top["len"][0]))
