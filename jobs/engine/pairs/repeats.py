"""Repeated query ids across a whole run, found in bounded memory: keys hash-partitioned by
query id on local disk (split again while a partition is large), each partition's later
occurrences (after the smallest `item_seq`) filed by block of shards and read back by shard.
Used by the look-ahead (over the input) and by publishing (over the staged items)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa

from jobs.core.run_layout import SEQ_SHIFT
from jobs.core.schema import duplicate_error

KEYS = pl.Schema(
    {"query_id": pl.String(), "item_seq": pl.Int64(), "source": pl.String(), "row": pl.Int64()}
)
"""The columns that identify an occurrence of a query_id (as in the staged items table)."""

MARKS = pl.Schema({"item_seq": pl.Int64(), "query_id": pl.String(), "duplicate_of": pl.String()})
"""A later occurrence: its `item_seq`, its query_id and where the first occurrence is."""


FAN = 32
"""Partitions per split (open files while partitioning)."""
PARTITION_ROWS = 400_000
"""A partition with more keys than this is split again (about 30 MiB of keys in memory)."""
BLOCK_SHARDS = 64
"""Marks are filed and read back by blocks of this many consecutive shards."""
_MAX_LEVEL = 3
"""Splits at most this deep (FAN ** 3 partitions: billions of keys)."""
_BATCH_ROWS = 65_536
"""Keys buffered before they are spread over the partition files."""
_IPC = pa.ipc.IpcWriteOptions(compression="zstd")


def _where_expr() -> pl.Expr:
    """A row's position as the input reader's messages name it, from `source` and `row`:
    "<file> row <n>" in Parquet, "<file> line at byte <offset>" in JSONL."""
    unit = (
        pl.when(pl.col("source").str.ends_with(".parquet"))
        .then(pl.lit(" row "))
        .otherwise(pl.lit(" line at byte "))
    )
    return pl.concat_str(pl.col("source"), unit, pl.col("row").cast(pl.String))


def _shard_of_seq() -> pl.Expr:
    """The shard number of each row's `item_seq`."""
    return pl.col("item_seq") // (1 << SEQ_SHIFT)


def later_occurrences(keys: pl.DataFrame) -> pl.DataFrame:
    """`MARKS` of every occurrence of a query_id after its first (smallest `item_seq`), for
    keys that hold every occurrence of their ids; sorted by `item_seq`."""
    repeated = keys.filter(pl.len().over("query_id") > 1)
    if repeated.is_empty():
        return pl.DataFrame(schema=MARKS)
    return (
        repeated.sort("item_seq")
        .with_columns(
            duplicate_of=_where_expr().first().over("query_id"),
            nth=pl.int_range(pl.len()).over("query_id"),
        )
        .filter(pl.col("nth") > 0)
        .select(MARKS.names())
    )


def mark_rows(items: pl.DataFrame, marks: pl.DataFrame) -> pl.DataFrame:
    """Apply the duplicate policy to staged items rows: every row in `marks` becomes a status
    "error" row whose `duplicate_of` and `error` name the first occurrence, without a score.
    Other columns are kept as staged (a repeat within a shard was already marked by its
    worker, naming the first occurrence in that shard; the run's first one wins here)."""
    if marks.is_empty():
        return items
    seqs = marks["item_seq"]
    firsts = dict(zip(seqs, marks["duplicate_of"], strict=True))
    messages = {
        seq: duplicate_error(query_id, first)
        for seq, query_id, first in marks.select(MARKS.names()).iter_rows()
    }
    marked = pl.col("item_seq").is_in(seqs.implode())
    first = pl.col("item_seq").replace_strict(firsts, default=None, return_dtype=pl.String)
    message = pl.col("item_seq").replace_strict(messages, default=None, return_dtype=pl.String)
    return items.with_columns(
        pl.when(marked).then(pl.lit("error")).otherwise(pl.col("status")).alias("status"),
        pl.when(marked).then(message).otherwise(pl.col("error")).alias("error"),
        pl.when(marked).then(None).otherwise(pl.col("score")).alias("score"),
        pl.when(marked).then(first).otherwise(pl.col("duplicate_of")).alias("duplicate_of"),
    )


class _Partitions:
    """Keys spread over `FAN` IPC files by a hash of query_id (seeded by `level`)."""

    def __init__(self, folder: Path, level: int) -> None:
        self.folder = folder
        self.level = level
        self.rows = [0] * FAN
        self._writers: dict[int, tuple[pa.ipc.RecordBatchStreamWriter, pa.NativeFile]] = {}
        self._buffer: list[pl.DataFrame] = []
        self._buffered = 0
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, part: int) -> Path:
        return self.folder / f"{part:03d}.arrow"

    def add(self, keys: pl.DataFrame) -> None:
        self._buffer.append(keys.select(KEYS.names()).cast(KEYS))
        self._buffered += keys.height
        if self._buffered >= _BATCH_ROWS:
            self._spill()

    def _spill(self) -> None:
        if not self._buffered:
            return
        keys = pl.concat(self._buffer)
        self._buffer, self._buffered = [], 0
        part = (pl.col("query_id").hash(seed=self.level) % FAN).alias("_part")
        for (number,), piece in (
            keys.with_columns(part).partition_by("_part", as_dict=True, include_key=False).items()
        ):
            index = int(number)  # type: ignore[call-overload]
            batch = piece.to_arrow()
            if index not in self._writers:
                sink = pa.OSFile(str(self.path(index)), "wb")
                self._writers[index] = (pa.ipc.new_stream(sink, batch.schema, options=_IPC), sink)
            self._writers[index][0].write_table(batch)
            self.rows[index] += piece.height

    def close(self) -> None:
        self._spill()
        for writer, sink in self._writers.values():
            writer.close()
            sink.close()
        self._writers = {}

    def batches(self, part: int) -> Iterator[pl.DataFrame]:
        """The keys of partition `part`, a batch at a time."""
        if not self.rows[part]:
            return
        with pa.OSFile(str(self.path(part)), "rb") as source:
            for batch in pa.ipc.open_stream(source):
                frame = pl.from_arrow(batch)
                assert isinstance(frame, pl.DataFrame)
                yield frame

    def read(self, part: int) -> pl.DataFrame:
        """The keys of partition `part`, whole."""
        frames = list(self.batches(part))
        return pl.concat(frames) if frames else pl.DataFrame(schema=KEYS)


class RepeatFinder:
    """Collects a run's keys (`add`), then finds its later occurrences (`finish`).

    `folder` is local scratch space (removed by `close`); a context manager."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._top = _Partitions(folder / "keys", level=0)
        self._marks = folder / "marks"
        self._marks.mkdir(parents=True, exist_ok=True)
        self.keys = 0

    def __enter__(self) -> RepeatFinder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._top.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def add(self, keys: pl.DataFrame) -> None:
        """Some of the run's keys (`KEYS` columns), in any order."""
        self.keys += keys.height
        self._top.add(keys)

    def finish(self) -> RepeatMarks:
        """Deduplicate partition by partition; the marks stay under `folder` until `close`."""
        self._top.close()
        found = self._finish(self._top, "p")
        return RepeatMarks(self._marks, found)

    def _finish(self, partitions: _Partitions, name: str) -> int:
        found = 0
        for part in range(FAN):
            rows = partitions.rows[part]
            label = f"{name}{part:03d}"
            if rows > PARTITION_ROWS and partitions.level + 1 < _MAX_LEVEL:
                # Split once more, by another hash of query_id: every occurrence of an id
                # still lands in one (smaller) partition.
                finer = _Partitions(partitions.folder / f"{part:03d}", partitions.level + 1)
                for batch in partitions.batches(part):
                    finer.add(batch)
                finer.close()
                partitions.path(part).unlink()
                found += self._finish(finer, label + "-")
                shutil.rmtree(finer.folder, ignore_errors=True)
            elif rows:
                found += self._file(later_occurrences(partitions.read(part)), label)
                partitions.path(part).unlink()
        return found

    def _file(self, marks: pl.DataFrame, label: str) -> int:
        """Write `marks` to one file per block of shards they fall in."""
        if marks.is_empty():
            return 0
        block = (pl.col("item_seq") // (BLOCK_SHARDS << SEQ_SHIFT)).alias("_block")
        for (number,), piece in (
            marks.with_columns(block)
            .partition_by("_block", as_dict=True, include_key=False)
            .items()
        ):
            folder = self._marks / f"{int(number):08d}"  # type: ignore[call-overload]
            folder.mkdir(exist_ok=True)
            piece.write_ipc(folder / f"{label}.arrow", compression="zstd")
        return marks.height


class RepeatMarks:
    """The later occurrences of a run's query ids (`MARKS`), read back by shard.

    `count` is how many there are. `for_shard` is meant to be called with shard numbers in
    increasing order: it keeps one block of marks in memory at a time."""

    def __init__(self, folder: Path, count: int) -> None:
        self._folder = folder
        self.count = count
        self._block: int | None = None
        self._marks = pl.DataFrame(schema=MARKS)

    def _load(self, block: int) -> pl.DataFrame:
        folder = self._folder / f"{block:08d}"
        if not self.count or not folder.is_dir():
            return pl.DataFrame(schema=MARKS)
        frames = [pl.read_ipc(path) for path in sorted(folder.iterdir())]
        return pl.concat(frames).sort("item_seq") if frames else pl.DataFrame(schema=MARKS)

    def for_shard(self, number: int) -> pl.DataFrame:
        """The marks of shard `number` (by item_seq), possibly empty."""
        block = number // BLOCK_SHARDS
        if block != self._block:
            self._block, self._marks = block, self._load(block)
        if self._marks.is_empty():
            return self._marks
        return self._marks.filter(_shard_of_seq() == number)

    def by_shard(self) -> Iterator[tuple[int, pl.DataFrame]]:
        """(shard number, its marks) for every shard with marks, in shard order."""
        if not self.count:
            return
        for folder in sorted(self._folder.iterdir()):
            marks = self._load(int(folder.name))
            for (number,), piece in (
                marks.with_columns(_shard_of_seq().alias("_shard"))
                .partition_by("_shard", as_dict=True, include_key=False, maintain_order=True)
                .items()
            ):
                yield int(number), piece  # type: ignore[call-overload]
