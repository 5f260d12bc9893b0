"""Publishing: a run's staged shard files become its scores, verdicts and summary tables and
its manifest, all or nothing (`scores/` last), in memory that does not grow with the run
(repeats found by partition, tables written a shard at a time to local files, then uploaded)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.run_layout import SEQ_SHIFT, TABLES, RunLocation, StagingArea
from jobs.core.run_manifest import ErrorRateRecord, JudgeRecord, RunManifest
from jobs.core.schema import RunSchema
from jobs.core.storage import Store
from jobs.engine.pairs.repeats import KEYS, RepeatFinder, mark_rows
from jobs.engine.publish import aggregate

_READ_AHEAD = 8  # staged shard files read ahead
# A published table's row groups: about this many bytes (in memory), at most this many rows.
_ROW_GROUP_BYTES = 8 * 2**20
_ROW_GROUP_ROWS = 128 * 1024
_ZSTD_LEVEL = 3  # Polars' level, which the published tables were written with before
# Columns whose values rarely repeat within a table: written without a dictionary.
_UNIQUE_COLUMNS = frozenset({"query_id", "row"})
# Other columns are dictionary-encoded while their dictionary stays under this (pyarrow's
# default, 1 MiB, gave up on the verdicts' reasons: +30% on that column).
_DICTIONARY_BYTES = 8 * 2**20
# "<file> line at byte 123: " or "<file> row 7: ": the position a row's error message starts with
_POSITION = r"^.*? (?:line at byte|row) \d+: "


@dataclass(frozen=True, kw_only=True)
class Published:
    """What a published run reports back to the driver."""

    summary: aggregate.RunSummary
    scores_url: str
    duplicates: int
    judge: JudgeRecord = field(default_factory=JudgeRecord)  # the manifest's "judge"
    error_rate: ErrorRateRecord | None = None  # against run.max_error_rate
    truncated: int = 0  # items whose contexts were cut (input.max_context_chars, max_contexts)


def _read_staged(
    store: Store, paths: Sequence[str], columns: Sequence[str] | None = None
) -> Iterator[pl.DataFrame]:
    """Each staged shard file of `paths` as a frame, in order, `_READ_AHEAD` files read ahead
    in threads (an object store answers one small GET at a time slowly); memory: those files."""

    def read(path: str) -> pl.DataFrame:
        wanted = list(columns) if columns is not None else None
        return pl.read_parquet(io.BytesIO(store.read_bytes(path)), columns=wanted)

    with ThreadPoolExecutor(max_workers=_READ_AHEAD) as pool:
        pending: deque[Future[pl.DataFrame]] = deque()
        for path in paths:
            pending.append(pool.submit(read, path))
            if len(pending) > _READ_AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


class _ParquetFile:
    """A local Parquet file (zstd, Polars' Arrow types) whose frames are buffered up to
    `_ROW_GROUP_BYTES` or `_ROW_GROUP_ROWS`, then written as one row group, uncopied."""

    def __init__(self, path: Path, schema: pl.Schema) -> None:
        self.path = path
        self.rows = 0
        self._schema = pl.DataFrame(schema=schema).to_arrow().schema
        self._writer = pq.ParquetWriter(
            str(path),
            self._schema,
            compression="zstd",
            compression_level=_ZSTD_LEVEL,
            # A dictionary of values that (nearly) never repeat only costs space.
            use_dictionary=[name for name in schema.names() if name not in _UNIQUE_COLUMNS],
            dictionary_pagesize_limit=_DICTIONARY_BYTES,
        )
        self._buffer: list[pa.Table] = []
        self._buffered_rows = 0
        self._buffered_bytes = 0

    def write(self, frame: pl.DataFrame) -> None:
        if frame.is_empty():
            return
        # A column a shard staged by an older version lacks (a run resumed after an upgrade)
        # is published null.
        missing = [pl.lit(None).alias(name) for name in self._schema.names if name not in frame]
        table = frame.with_columns(missing).select(self._schema.names).to_arrow()
        self._buffer.append(table.cast(self._schema))
        self._buffered_rows += table.num_rows
        self._buffered_bytes += table.nbytes
        if self._buffered_rows >= _ROW_GROUP_ROWS or self._buffered_bytes >= _ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            group = pa.concat_tables(self._buffer)
            self._writer.write_table(group, row_group_size=group.num_rows)
            self.rows += group.num_rows
        self._buffer = []
        self._buffered_rows = 0
        self._buffered_bytes = 0

    def close(self) -> None:
        self._flush()
        self._writer.close()


def _write_tables(
    store: Store, location: RunLocation, tables: RunSchema, tmp: Path
) -> tuple[Path, Path, int]:
    """The published scores and verdicts tables as local files, and the duplicates marked: the
    run's repeated query ids found first, then a shard at a time, its items marked and its
    verdicts without those of the later occurrences."""
    staging = StagingArea(store, location.staging)
    items_files = staging.staged_items_files()
    verdict_files = [staging.verdicts_file_of(path) for path in items_files]
    staged_verdicts = [*tables.verdicts.names, "item_seq"]
    scores = _ParquetFile(tmp / "scores.parquet", tables.scores.polars)
    verdicts = _ParquetFile(tmp / "verdicts.parquet", tables.verdicts.polars)
    duplicates = 0
    with RepeatFinder(tmp / "repeats") as finder:
        for keys in _read_staged(store, items_files, KEYS.names()):
            finder.add(keys)
        marks = finder.finish()
        try:
            staged = _read_staged(store, verdict_files, staged_verdicts)
            shards = zip(_read_staged(store, items_files), staged, strict=True)
            for items, judged in shards:
                if items.is_empty():
                    continue
                later = marks.for_shard(int(items["item_seq"][0]) >> SEQ_SHIFT)
                items = mark_rows(items, later)
                if not later.is_empty():
                    judged = judged.filter(~pl.col("item_seq").is_in(later["item_seq"].implode()))
                scores.write(items)
                verdicts.write(judged)
                duplicates += int(items["duplicate_of"].is_not_null().sum())
        finally:
            scores.close()
            verdicts.close()
    return scores.path, verdicts.path, duplicates


@dataclass(frozen=True, kw_only=True)
class PublishSpec:
    """What publishing a run needs besides its staged shards: how its summary is computed (its
    relevance by position per segment where the verdicts carry the column), its tables with the
    carried columns, the flow and canary metrics the summary adds, and run.max_error_rate (None:
    not checked)."""

    summary: aggregate.SummarySpec
    tables: RunSchema = field(default_factory=RunSchema)
    flow: Sequence[tuple[str, float | None]] = ()
    canary: Sequence[tuple[str, float | None]] = ()
    max_error_rate: float | None = None


def publish_run(
    store: Store, location: RunLocation, manifest: RunManifest, spec: PublishSpec
) -> Published:
    """Publish the run's tables and manifest from its staged shards."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ctxprec-publish-") as folder:
        tmp = Path(folder)
        scores, verdicts, duplicates = _write_tables(store, location, spec.tables, tmp)
        summary_spec = replace(spec.summary, verdict_segments=spec.tables.verdict_names)
        summary = aggregate.summarize(
            pl.scan_parquet(scores), pl.scan_parquet(verdicts), summary_spec
        )
        summary = dataclasses.replace(summary, flow=tuple(spec.flow), canary=tuple(spec.canary))
        errors = measure(scores, summary.items, summary.errors, spec.max_error_rate)
        truncated = pl.scan_parquet(scores).select(pl.col("truncated").sum()).collect().item()
        summary.to_frame().write_parquet(tmp / "summary.parquet", compression="zstd")
        # scores last: a reader of scores/ sees a whole run or none of it
        for table in ("verdicts", "summary", "scores"):
            local = str(tmp / f"{table}.parquet")
            store.upload_file_atomic(local, store.join(location.table_file(table)))
    published = Published(
        summary=summary,
        scores_url=store.url(store.join(location.table_file("scores"))),
        duplicates=duplicates,
        error_rate=errors,
        truncated=truncated or 0,
    )
    manifest = _complete(store, location, manifest, published, started)
    store.write_bytes_atomic(store.join(location.manifest), manifest.to_json())
    store.rm(StagingArea(store, location.staging).path(), recursive=True)
    return dataclasses.replace(published, judge=manifest.judge)


def measure(scores: Path | str, items: int, errors: int, limit: float | None) -> ErrorRateRecord:
    """The error rate against `run.max_error_rate` of a run whose scores table (local Parquet)
    is `scores`, and its commonest error (compared without the row position)."""
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


def _complete(
    store: Store, location: RunLocation, manifest: RunManifest, published: Published, started: float
) -> RunManifest:
    """The driver's manifest with what publishing learnt."""
    timings = {**manifest.timings_s, "publish": round(time.monotonic() - started, 3)}
    tables = {table: store.url(store.join(location.table_file(table))) for table in TABLES}
    return manifest.with_changes(
        timings_s=timings,
        status="complete",
        summary=published.summary.to_record(),
        duplicates=published.duplicates,
        error_rate=published.error_rate,
        published_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tables=tables,
    )
