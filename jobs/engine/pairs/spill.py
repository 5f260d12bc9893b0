"""Rows filed by bucket on local disk and read back a bucket at a time, in memory that does
not grow with the rows spilled (an external sort by bucket: buffered rows written as sorted
runs, one writer at a time; a bucket read from every run, memory-mapped)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

SHARDS_A_BLOCK = 8
"""Rows filed by shard go in buckets of this many consecutive shards (`shard_blocks`): reading
a bucket holds one block's rows (the lookup's hits: 80,000 at 2,000 items a shard and 5
contexts an item)."""
FLUSH_BYTES = 8 * 2**20
"""Rows buffered (by Polars' estimate of their size) before they are written as a run."""


def shard_blocks() -> pl.Expr:
    """The bucket of rows filed by their `shard` column: its block of `SHARDS_A_BLOCK`."""
    return pl.col("shard") // SHARDS_A_BLOCK


class Spill:
    """Rows (of `schema`) filed by the integer bucket that `bucket` computes: `add` in any
    order, `close`, then `read` or `chunks` a bucket at a time (`folder`: the caller's)."""

    def __init__(
        self, folder: Path, bucket: pl.Expr, schema: pl.Schema, flush_bytes: int = FLUSH_BYTES
    ) -> None:
        self.folder = folder
        self.schema = schema
        self.rows = 0
        self._bucket = bucket.alias("_bucket")
        self._flush_bytes = flush_bytes
        self._buffer: list[pl.DataFrame] = []
        self._buffered_bytes = 0
        # the written runs: each file and, per bucket, its record batches [start, stop)
        self._runs: list[tuple[Path, dict[int, tuple[int, int]]]] = []
        self.counts: dict[int, int] = {}  # rows by bucket
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, rows: pl.DataFrame) -> None:
        if rows.is_empty():
            return
        self._buffer.append(rows.select(self.schema.names()).cast(self.schema))
        self._buffered_bytes += int(rows.estimated_size())
        self.rows += rows.height
        if self._buffered_bytes >= self._flush_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        rows = pl.concat(self._buffer).with_columns(self._bucket)
        self._buffer, self._buffered_bytes = [], 0
        pieces = rows.sort("_bucket").partition_by(
            "_bucket", as_dict=True, include_key=False, maintain_order=True
        )
        del rows
        path = self.folder / f"{len(self._runs):06d}.arrow"
        batches: dict[int, tuple[int, int]] = {}
        written = 0
        with pa.OSFile(str(path), "wb") as sink:
            writer: pa.ipc.RecordBatchFileWriter | None = None
            for (bucket,), piece in pieces.items():
                index = int(bucket)  # type: ignore[call-overload]
                table = piece.to_arrow()
                if writer is None:
                    options = pa.ipc.IpcWriteOptions(compression="zstd")
                    writer = pa.ipc.new_file(sink, table.schema, options=options)
                start = written
                for batch in table.to_batches():
                    writer.write_batch(batch)
                    written += 1
                batches[index] = (start, written)
                self.counts[index] = self.counts.get(index, 0) + piece.height
            if writer is not None:
                writer.close()
        self._runs.append((path, batches))

    def close(self) -> list[int]:
        """Stop adding; the buckets that hold rows, in order."""
        self._flush()
        return sorted(self.counts)

    def batches(self, bucket: int) -> Iterator[pl.DataFrame]:
        """The rows of `bucket`, one run's share at a time (after `close`)."""
        for path, batches in self._runs:
            if bucket not in batches:
                continue
            start, stop = batches[bucket]
            with pa.memory_map(str(path)) as source:
                reader = pa.ipc.open_file(source)
                table = pa.Table.from_batches(
                    [reader.get_batch(number) for number in range(start, stop)]
                )
                frame = pl.from_arrow(table)
            assert isinstance(frame, pl.DataFrame)
            yield frame.cast(self.schema)

    def chunks(self, bucket: int, max_rows: int) -> Iterator[pl.DataFrame]:
        """The rows of `bucket` in frames of about `max_rows` (one run's share may exceed it)."""
        held: list[pl.DataFrame] = []
        count = 0
        for frame in self.batches(bucket):
            if held and count + frame.height > max_rows:
                yield pl.concat(held)
                held, count = [], 0
            held.append(frame)
            count += frame.height
        if held:
            yield pl.concat(held)

    def groups(self, column: str) -> Iterator[tuple[int, pl.DataFrame]]:
        """Stop adding; (value, its rows without `column`) for every value of the integer
        `column`, a bucket at a time (each value's rows must share a bucket)."""
        for bucket in self.close():
            for (value,), rows in (
                self.read(bucket).partition_by(column, as_dict=True, include_key=False).items()
            ):
                yield int(value), rows  # type: ignore[call-overload]

    def read(self, bucket: int) -> pl.DataFrame:
        """The rows of `bucket`, whole."""
        frames = list(self.batches(bucket))
        return pl.concat(frames) if frames else pl.DataFrame(schema=self.schema)
