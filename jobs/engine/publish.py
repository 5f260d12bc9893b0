"""Turning a run's staged shard files into the published tables, atomically.

Layout under the output root (hive partitions, zstd Parquet):

    scores/run_date=YYYY-MM-DD/run_id=<id>/part-00000.parquet     one row per input item
    verdicts/run_date=YYYY-MM-DD/run_id=<id>/part-00000.parquet   one row per context
    summary/run_date=YYYY-MM-DD/run_id=<id>/part-00000.parquet    one row per metric
    manifests/run_date=YYYY-MM-DD/run_id=<id>/manifest.json       config (no secrets), counts
    _staging/run_id=<id>/...                                      work in progress (hidden)

Each table of a run is one object, uploaded whole (a local rename, or one object-store PUT /
multipart upload that becomes visible only when complete), and `scores/` is written last: a
reader of `scores/` sees all of a run or none of it. The staging area is removed only after
everything is published, so a failure at any point leaves a rerun able to finish the job.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import polars as pl

from jobs.engine import aggregate
from jobs.engine.storage import Store

TABLES = ("verdicts", "summary", "scores")  # publication order: scores last


@dataclass(frozen=True)
class RunLocation:
    run_id: str
    run_date: dt.date

    @property
    def partition(self) -> str:
        return f"run_date={self.run_date.isoformat()}/run_id={self.run_id}"

    @property
    def staging(self) -> str:
        return f"_staging/run_id={self.run_id}"

    def table_file(self, table: str) -> str:
        return f"{table}/{self.partition}/part-00000.parquet"

    @property
    def manifest(self) -> str:
        return f"manifests/{self.partition}/manifest.json"


def scan(store: Store, paths: list[str]) -> pl.LazyFrame:
    """A lazy scan over Parquet files in `store` (local paths directly, others via fsspec)."""
    if store.is_local:
        return pl.scan_parquet(paths)
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    dataset = ds.dataset(paths, format="parquet", filesystem=PyFileSystem(FSSpecHandler(store.fs)))
    return pl.scan_pyarrow_dataset(dataset)


def duplicate_messages(items: pl.LazyFrame) -> dict[int, str]:
    """`item_seq` -> error message for every occurrence of a query_id after its first one
    (in input order). Duplicates are rare: this table is small even when `items` is not."""
    repeated = (
        items.group_by("query_id")
        .agg(pl.len().alias("occurrences"))
        .filter(pl.col("occurrences") > 1)
        .select("query_id")
    )
    occurrences = (
        items.select("query_id", "item_seq", "source", "row")
        .join(repeated, on="query_id", how="semi")
        .sort("item_seq")
        .collect()
    )
    messages: dict[int, str] = {}
    first: dict[str, str] = {}
    for query_id, seq, source, row in occurrences.iter_rows():
        # JSONL rows are identified by the byte offset of their line (jobs.engine.inputs).
        where = f"{source} {'row' if source.endswith('.parquet') else 'line at byte'} {row}"
        if query_id in first:
            messages[seq] = (
                f"duplicate query_id {query_id}: only its first occurrence "
                f"({first[query_id]}) is scored"
            )
        else:
            first[query_id] = where
    return messages


def dedupe(items: pl.LazyFrame, verdicts: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Apply the duplicate policy: the first occurrence of a query_id (in input order) is
    scored; later ones become status "error" rows that name the first, and their verdicts are
    dropped so they cannot mix into the first one's score.

    Only element-wise expressions touch the (large) items and verdicts, so both stream: a
    join there made Polars hold every verdict in memory.
    """
    messages = duplicate_messages(items)
    if not messages:
        return items, verdicts
    later = pl.Series(list(messages), dtype=pl.Int64)
    message = pl.col("item_seq").replace_strict(messages, default=None, return_dtype=pl.String)
    is_duplicate = pl.col("item_seq").is_in(later)
    items_out = items.with_columns(
        pl.when(is_duplicate).then(pl.lit("error")).otherwise(pl.col("status")).alias("status"),
        pl.when(is_duplicate).then(message).otherwise(pl.col("error")).alias("error"),
        pl.when(is_duplicate).then(None).otherwise(pl.col("score")).alias("score"),
    )
    return items_out, verdicts.filter(~pl.col("item_seq").is_in(later))


@dataclass(frozen=True)
class Published:
    summary: aggregate.RunSummary
    mismatches: int
    scores_url: str
    duplicates: int


def _upload_frame(store: Store, frame: pl.LazyFrame | pl.DataFrame, path: str, tmp: str) -> None:
    local = os.path.join(tmp, path.replace("/", "_"))
    if isinstance(frame, pl.LazyFrame):
        frame.sink_parquet(local, compression="zstd")
    else:
        frame.write_parquet(local, compression="zstd")
    store.upload_file_atomic(local, store.join(path))
    os.unlink(local)


def _shard_files(store: Store, folder: str) -> list[str]:
    """The staged shard files in `folder`, without the `.<name>.tmp-*` file a local atomic
    write leaves behind when its writer is killed before the rename."""
    return [
        path
        for path in store.list(folder)
        if path.endswith(".parquet") and not path.rsplit("/", 1)[-1].startswith(".")
    ]


def publish_run(
    store: Store,
    location: RunLocation,
    *,
    model: str,
    scale: float,
    manifest: dict[str, Any],
) -> Published:
    """Aggregate the staged shards with Polars and publish the run's tables and manifest."""
    items_files = _shard_files(store, store.join(location.staging, "items"))
    verdict_files = _shard_files(store, store.join(location.staging, "verdicts"))
    items = scan(store, items_files)
    verdicts = scan(store, verdict_files)
    items, verdicts = dedupe(items, verdicts)
    with tempfile.TemporaryDirectory(prefix="ctxprec-publish-") as tmp:
        # Materialise the deduplicated inputs once, locally: every later step scans them.
        items_local = os.path.join(tmp, "items.parquet")
        verdicts_local = os.path.join(tmp, "verdicts.parquet")
        items.sink_parquet(items_local)
        verdicts.sink_parquet(verdicts_local)
        items_lf = pl.scan_parquet(items_local)
        verdicts_lf = pl.scan_parquet(verdicts_local)
        mismatches = aggregate.score_mismatches(items_lf, verdicts_lf, scale).collect()
        final = aggregate.final_scores(items_lf, verdicts_lf, scale, keep=["truncated"])
        scores_local = os.path.join(tmp, "scores.parquet")
        final.sink_parquet(scores_local, compression="zstd")
        scores = pl.scan_parquet(scores_local)
        summary = aggregate.summarize(scores, verdicts_lf, model=model, scale=scale)
        duplicates = int(
            items_lf.filter(pl.col("error").str.starts_with("duplicate query_id"))
            .select(pl.len())
            .collect()
            .item()
        )
        _upload_frame(
            store,
            verdicts_lf.select("query_id", "position", "relevant", "judge_reason", "cached"),
            location.table_file("verdicts"),
            tmp,
        )
        _upload_frame(store, summary.to_frame(), location.table_file("summary"), tmp)
        store.upload_file_atomic(scores_local, store.join(location.table_file("scores")))
    manifest = {
        **manifest,
        "status": "complete",
        "summary": summary.to_dict(),
        "duplicates": duplicates,
        "score_mismatches": len(mismatches),
        "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "tables": {t: store.url(store.join(location.table_file(t))) for t in TABLES},
    }
    store.write_bytes_atomic(
        store.join(location.manifest),
        json.dumps(manifest, indent=2, sort_keys=True, default=str).encode(),
    )
    store.rm(store.join(location.staging), recursive=True)
    return Published(
        summary=summary,
        mismatches=len(mismatches),
        scores_url=store.url(store.join(location.table_file("scores"))),
        duplicates=duplicates,
    )


def read_manifest(store: Store, location: RunLocation) -> dict[str, Any] | None:
    path = store.join(location.manifest)
    if not store.exists(path):
        return None
    data: dict[str, Any] = json.loads(store.read_bytes(path))
    return data
