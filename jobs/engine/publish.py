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
The tables' columns are `jobs.schema.PUBLISHED_SCORES`, `PUBLISHED_VERDICTS` and
`PUBLISHED_SUMMARY`, the first two with the run's carried columns after ours (`RunSchema`);
the scores are the ones the workers computed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from jobs.engine import aggregate
from jobs.engine.storage import Store
from jobs.schema import RunSchema, duplicate_error
from scorer_core.errors import CtxPrecError

TABLES = ("verdicts", "summary", "scores")  # publication order: scores last
# Mismatching items a `ScoresDisagree` message names (the count covers all of them).
_SHOWN_MISMATCHES = 5


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


def _where(source: str, row: int) -> str:
    """A staged row's position in the words of the input reader's messages (JSONL rows are
    identified by the byte offset of their line, see jobs.engine.inputs)."""
    return f"{source} {'row' if source.endswith('.parquet') else 'line at byte'} {row}"


def repeats(items: pl.LazyFrame) -> dict[int, tuple[str, str]]:
    """`item_seq` -> (query_id, where its first occurrence is) for every occurrence of a
    query_id after its first one (in input order) across the whole run. Duplicates are rare:
    this table is small even when `items` is not."""
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
    later: dict[int, tuple[str, str]] = {}
    first: dict[str, str] = {}
    for query_id, seq, source, row in occurrences.iter_rows():
        if query_id in first:
            later[seq] = (query_id, first[query_id])
        else:
            first[query_id] = _where(source, row)
    return later


def dedupe(items: pl.LazyFrame, verdicts: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame]:
    """Apply the duplicate policy: the first occurrence of a query_id (in input order) is
    scored; later ones become status "error" rows whose `duplicate_of` and `error` name the
    first, and their verdicts are dropped so they cannot mix into the first one's score.

    A worker marks the repeats within its shard; only here, seeing every shard, is the first
    occurrence in the run known, so every later occurrence is (re)marked.
    Only element-wise expressions touch the (large) items and verdicts, so both stream: a
    join there made Polars hold every verdict in memory.
    """
    later = repeats(items)
    if not later:
        return items, verdicts
    firsts = {seq: where for seq, (_, where) in later.items()}
    messages = {seq: duplicate_error(query_id, where) for seq, (query_id, where) in later.items()}
    is_duplicate = pl.col("item_seq").is_in(list(later))
    first = pl.col("item_seq").replace_strict(firsts, default=None, return_dtype=pl.String)
    message = pl.col("item_seq").replace_strict(messages, default=None, return_dtype=pl.String)
    items_out = items.with_columns(
        pl.when(is_duplicate).then(pl.lit("error")).otherwise(pl.col("status")).alias("status"),
        pl.when(is_duplicate).then(message).otherwise(pl.col("error")).alias("error"),
        pl.when(is_duplicate).then(None).otherwise(pl.col("score")).alias("score"),
        pl.when(is_duplicate).then(first).otherwise(pl.col("duplicate_of")).alias("duplicate_of"),
    )
    return items_out, verdicts.filter(~is_duplicate)


class ScoresDisagree(CtxPrecError):
    """`publish_run(verify_scores=True)` found items whose verdicts imply another score."""


@dataclass(frozen=True)
class Published:
    """What a published run reports back to the driver."""

    summary: aggregate.RunSummary
    scores_url: str
    duplicates: int
    # What the run's judge settled on (the manifest's "judge": transport, response format).
    judge: dict[str, Any] = field(default_factory=dict)


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


def published_scores(
    items: pl.LazyFrame,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> pl.LazyFrame:
    """The published scores table from the deduplicated staged items: the workers' scores as
    they computed them, and the run's carried columns."""
    return items.select(tables.scores.names)


def _check_scores(scores: pl.LazyFrame, verdicts: pl.LazyFrame, scale: float) -> None:
    """Raise `ScoresDisagree` naming the items whose verdicts imply another score."""
    mismatches = aggregate.score_mismatches(scores, verdicts, scale).collect()
    if mismatches.is_empty():
        return
    shown = "; ".join(
        f"{row['query_id']} ({_where(row['source'], row['row'])}): worker "
        f"{row['worker_score']} / {row['worker_relevant_count']} relevant, verdicts "
        f"{row['polars_score']} / {row['polars_relevant_count']} relevant"
        for row in mismatches.head(_SHOWN_MISMATCHES).iter_rows(named=True)
    )
    more = mismatches.height - _SHOWN_MISMATCHES
    raise ScoresDisagree(
        f"{mismatches.height} item(s) scored differently by the worker and by Polars: {shown}"
        + (f"; and {more} more" if more > 0 else "")
    )


def publish_run(
    store: Store,
    location: RunLocation,
    *,
    model: str,
    scale: float,
    manifest: dict[str, Any],
    verify_scores: bool = False,
    flow: Sequence[tuple[str, float | None]] = (),
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
    segment_by: Sequence[str] = (),
) -> Published:
    """Publish the run's tables and manifest from its staged shards.

    `tables`: the run's tables with its carried columns (as the workers wrote them);
    `segment_by`: the carried columns the summary is also computed by (`summary.by`).
    The scores are the workers' own. `verify_scores` also recomputes every ok item's score from
    its verdicts with Polars and raises `ScoresDisagree` before publishing anything if one
    differs (a bug in the worker or in the aggregation); it costs a group-by over the verdicts.
    """
    items_files = _shard_files(store, store.join(location.staging, "items"))
    verdict_files = _shard_files(store, store.join(location.staging, "verdicts"))
    items, verdicts = dedupe(scan(store, items_files), scan(store, verdict_files))
    with tempfile.TemporaryDirectory(prefix="ctxprec-publish-") as tmp:
        # Materialise both tables once, locally: every later step scans them.
        scores_local = os.path.join(tmp, "scores.parquet")
        verdicts_local = os.path.join(tmp, "verdicts.parquet")
        published_scores(items, tables).sink_parquet(scores_local, compression="zstd")
        verdicts.select(tables.verdicts.names).sink_parquet(verdicts_local)
        scores = pl.scan_parquet(scores_local)
        verdicts = pl.scan_parquet(verdicts_local)
        if verify_scores:
            _check_scores(scores, verdicts, scale)
        summary = aggregate.summarize(
            scores,
            verdicts,
            model=model,
            scale=scale,
            segment_by=segment_by,
            verdict_segments=tables.verdict_names,
        )
        summary = dataclasses.replace(summary, flow=tuple(flow))
        duplicates = int(scores.select(pl.col("duplicate_of").is_not_null().sum()).collect().item())
        _upload_frame(store, verdicts, location.table_file("verdicts"), tmp)
        _upload_frame(store, summary.to_frame(), location.table_file("summary"), tmp)
        store.upload_file_atomic(scores_local, store.join(location.table_file("scores")))
    manifest = {
        **manifest,
        "status": "complete",
        "summary": summary.to_dict(),
        "duplicates": duplicates,
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
        scores_url=store.url(store.join(location.table_file("scores"))),
        duplicates=duplicates,
        judge=dict(manifest.get("judge") or {}),
    )


def read_manifest(store: Store, location: RunLocation) -> dict[str, Any] | None:
    path = store.join(location.manifest)
    if not store.exists(path):
        return None
    data: dict[str, Any] = json.loads(store.read_bytes(path))
    return data
