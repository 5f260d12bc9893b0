"""Publishing: a run's staged shard files become its scores, verdicts and summary tables and
its manifest, all or nothing (`scores/` last), in memory that does not grow with the run
(repeats found by partition, tables written a shard at a time to local files, then uploaded)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import os
import tempfile
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.error_rate import ErrorRate, measure
from jobs.core.run_layout import SEQ_SHIFT, TABLES, RunLocation, StagingArea
from jobs.core.run_manifest import ErrorRateRecord, JudgeRecord, RunManifest
from jobs.core.schema import RunSchema
from jobs.core.storage import Store
from jobs.engine.pairs.repeats import KEYS, RepeatFinder, RepeatMarks, mark_rows
from jobs.engine.publish import aggregate
from jobs.inputs.sampling import SamplePlan

# Staged shard files read ahead while publishing.
_READ_AHEAD = 8
# A published table's row groups: about this many bytes (in memory), at most this many rows.
_ROW_GROUP_BYTES = 8 * 2**20
_ROW_GROUP_ROWS = 128 * 1024
# Polars' level, which the published tables were written with before.
_ZSTD_LEVEL = 3
# Columns whose values rarely repeat within a table: written without a dictionary.
_UNIQUE_COLUMNS = frozenset({"query_id", "row"})
# Other columns are dictionary-encoded while their dictionary stays under this (pyarrow's
# default, 1 MiB, gave up on the verdicts' reasons: +30% on that column).
_DICTIONARY_BYTES = 8 * 2**20


@dataclass(frozen=True)
class Published:
    """What a published run reports back to the driver."""

    summary: aggregate.RunSummary
    scores_url: str
    duplicates: int
    # What the run's judge settled on (the manifest's "judge": transport, response format).
    judge: JudgeRecord = field(default_factory=JudgeRecord)
    # The share of error items against run.max_error_rate (jobs.core.error_rate).
    error_rate: ErrorRate | None = None


def _upload_frame(store: Store, frame: pl.DataFrame | Path, path: str, tmp: str) -> None:
    """Upload a table to `path` under the store's root, all or nothing: a frame (written to a
    local Parquet file in `tmp` first) or a local Parquet file already written."""
    if isinstance(frame, Path):
        store.upload_file_atomic(str(frame), store.join(path))
        return
    local = os.path.join(tmp, path.replace("/", "_"))
    frame.write_parquet(local, compression="zstd")
    store.upload_file_atomic(local, store.join(path))
    os.unlink(local)


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
    """A local Parquet file written a row group at a time (zstd, with Polars' Arrow types):
    frames are buffered up to `_ROW_GROUP_BYTES` (or `_ROW_GROUP_ROWS`), then written as one
    row group, without copying them into one block first."""

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
        table = frame.to_arrow()
        self._buffer.append(table)
        self._buffered_rows += table.num_rows
        self._buffered_bytes += table.nbytes
        if self._buffered_rows >= _ROW_GROUP_ROWS or self._buffered_bytes >= _ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            group = pa.concat_tables(self._buffer).cast(self._schema)
            self._writer.write_table(group, row_group_size=group.num_rows)
            self.rows += group.num_rows
        self._buffer, self._buffered_rows, self._buffered_bytes = [], 0, 0

    def close(self) -> None:
        self._flush()
        self._writer.close()


@dataclass(frozen=True)
class _Written:
    """The run's tables as local Parquet files, and what writing them counted."""

    scores: Path
    verdicts: Path
    duplicates: int


def _write_tables(
    store: Store,
    location: RunLocation,
    items_files: Sequence[str],
    marks: RepeatMarks,
    tables: RunSchema,
    tmp: Path,
) -> _Written:
    """The published scores and verdicts tables as local files, a shard at a time in run order:
    each shard's items with the run's duplicate marks applied, its verdicts without those of
    the later occurrences."""
    staging = StagingArea(store, location.staging)
    verdict_files = [staging.verdicts_file_of(path) for path in items_files]
    staged_verdicts = [*tables.verdicts.names, "item_seq"]
    scores = _ParquetFile(tmp / "scores.parquet", tables.scores.polars)
    verdicts = _ParquetFile(tmp / "verdicts.parquet", tables.verdicts.polars)
    duplicates = 0
    try:
        shards = zip(
            _read_staged(store, items_files),
            _read_staged(store, verdict_files, staged_verdicts),
            strict=True,
        )
        for items, judged in shards:
            if items.is_empty():
                continue
            number = int(items["item_seq"][0]) >> SEQ_SHIFT
            later = marks.for_shard(number)
            items = mark_rows(items, later)
            if not later.is_empty():
                judged = judged.filter(~pl.col("item_seq").is_in(later["item_seq"].implode()))
            scores.write(items.select(tables.scores.names))
            verdicts.write(judged.select(tables.verdicts.names))
            duplicates += int(items["duplicate_of"].is_not_null().sum())
    finally:
        scores.close()
        verdicts.close()
    return _Written(scores.path, verdicts.path, duplicates)


def publish_run(
    store: Store,
    location: RunLocation,
    *,
    model: str,
    scale: float,
    manifest: RunManifest,
    flow: Sequence[tuple[str, float | None]] = (),
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
    segment_by: Sequence[str] = (),
    batch_price: bool = False,
    sample: SamplePlan | None = None,
    canary: Sequence[tuple[str, float | None]] = (),
    max_error_rate: float | None = None,
) -> Published:
    """Publish the run's tables (the workers' scores) and manifest from its staged shards.

    `tables`: the run's tables with its carried columns (as the workers wrote them);
    `segment_by`: the carried columns the summary is also computed by (`summary.by`);
    `batch_price`: the cost at the model's batch price (judge.mode batch); `sample`: a sampled
    run's plan; `canary`: the judge canary's metrics; `max_error_rate`: what the manifest's
    `error_rate` is measured against (jobs.core.error_rate)."""
    started = time.monotonic()
    staging = StagingArea(store, location.staging)
    items_files = staging.staged_items_files()
    with tempfile.TemporaryDirectory(prefix="ctxprec-publish-") as tmp:
        written = _write_local_tables(store, location, items_files, tables, Path(tmp))
        summary = dataclasses.replace(
            aggregate.summarize(
                pl.scan_parquet(written.scores),
                pl.scan_parquet(written.verdicts),
                model=model,
                scale=scale,
                segment_by=segment_by,
                verdict_segments=tables.verdict_names,
                batch_price=batch_price,
                sample=sample,
            ),
            flow=tuple(flow),
            canary=tuple(canary),
        )
        errors = measure(written.scores, summary.items, summary.errors, max_error_rate)
        # scores last: a reader of scores/ sees a whole run or none of it
        _upload_frame(store, written.verdicts, location.table_file("verdicts"), tmp)
        _upload_frame(store, summary.to_frame(), location.table_file("summary"), tmp)
        store.upload_file_atomic(str(written.scores), store.join(location.table_file("scores")))
    manifest = _complete(store, location, manifest, summary, written.duplicates, errors, started)
    store.write_bytes_atomic(store.join(location.manifest), manifest.to_json())
    store.rm(staging.path(), recursive=True)
    return Published(
        summary=summary,
        scores_url=store.url(store.join(location.table_file("scores"))),
        duplicates=written.duplicates,
        judge=manifest.judge,
        error_rate=errors,
    )


def _write_local_tables(
    store: Store,
    location: RunLocation,
    items_files: list[str],
    tables: RunSchema,
    tmp: Path,
) -> _Written:
    """Find the run's repeated query ids, then write its tables to local files."""
    with RepeatFinder(tmp / "repeats") as finder:
        for keys in _read_staged(store, items_files, KEYS.names()):
            finder.add(keys)
        marks = finder.finish()
        return _write_tables(store, location, items_files, marks, tables, tmp)


def _complete(
    store: Store,
    location: RunLocation,
    manifest: RunManifest,
    summary: aggregate.RunSummary,
    duplicates: int,
    errors: ErrorRate,
    started: float,
) -> RunManifest:
    """The driver's manifest with what publishing learnt."""
    timings = {**manifest.timings_s, "publish": round(time.monotonic() - started, 3)}
    return manifest.model_copy(
        update={
            "timings_s": timings,
            "status": "complete",
            "summary": summary.to_dict(),
            "duplicates": duplicates,
            "error_rate": ErrorRateRecord.model_validate(errors.to_dict()),
            "published_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "tables": {t: store.url(store.join(location.table_file(t))) for t in TABLES},
        }
    )
