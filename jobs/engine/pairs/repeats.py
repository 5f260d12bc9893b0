"""Repeated query ids across a whole run, found in bounded memory: keys hash-partitioned by
query id on local disk (split again while a partition is large), each partition's later
occurrences (after the smallest `item_seq`) filed by block of shards and read back by shard.
Used by the look-ahead (over the input) and by publishing (over the staged items)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from jobs.core.run_layout import SEQ_SHIFT
from jobs.core.schema import duplicate_error
from jobs.engine.pairs.spill import Spill

KEYS = pl.Schema(
    {"query_id": pl.String(), "item_seq": pl.Int64(), "source": pl.String(), "row": pl.Int64()}
)
"""The columns that identify an occurrence of a query_id (as in the staged items table)."""

MARKS = pl.Schema({"item_seq": pl.Int64(), "query_id": pl.String(), "duplicate_of": pl.String()})
"""A later occurrence: its `item_seq`, its query_id and where the first occurrence is."""


FAN = 32
"""Partitions per split."""
PARTITION_ROWS = 400_000
"""A partition with more keys than this is split again (about 30 MiB of keys in memory)."""
BLOCK_SHARDS = 64
"""Marks are filed and read back by blocks of this many consecutive shards."""
_MAX_LEVEL = 3
"""Splits at most this deep (FAN ** 3 partitions: billions of keys)."""


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
    """Staged items rows with every row in `marks` an "error" row without a score, whose
    `duplicate_of` and `error` name the run's first occurrence; other columns as staged."""
    if marks.is_empty():
        return items
    seqs = marks["item_seq"]
    firsts = dict(zip(seqs, marks["duplicate_of"], strict=True))
    rows = marks.select(MARKS.names()).iter_rows()
    messages = {seq: duplicate_error(query_id, first) for seq, query_id, first in rows}
    marked = pl.col("item_seq").is_in(seqs.implode())
    first = pl.col("item_seq").replace_strict(firsts, default=None, return_dtype=pl.String)
    message = pl.col("item_seq").replace_strict(messages, default=None, return_dtype=pl.String)
    return items.with_columns(
        pl.when(marked).then(pl.lit("error")).otherwise(pl.col("status")).alias("status"),
        pl.when(marked).then(message).otherwise(pl.col("error")).alias("error"),
        pl.when(marked).then(None).otherwise(pl.col("score")).alias("score"),
        pl.when(marked).then(first).otherwise(pl.col("duplicate_of")).alias("duplicate_of"),
    )


def _partition(level: int) -> pl.Expr:
    """The partition of a key at split `level`: a hash of its query_id seeded by the level,
    so every occurrence of an id lands in one partition at every level."""
    return pl.col("query_id").hash(seed=level) % FAN


class RepeatFinder:
    """Collects a run's keys (`add`), then finds its later occurrences (`finish`); `folder` is
    scratch space, removed by `close` (a context manager)."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._keys = Spill(folder / "keys", _partition(0), KEYS)
        block = pl.col("item_seq") // (BLOCK_SHARDS << SEQ_SHIFT)
        self._marks = Spill(folder / "marks", block, MARKS)
        self.keys = 0

    def __enter__(self) -> RepeatFinder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)

    def add(self, keys: pl.DataFrame) -> None:
        """Some of the run's keys (`KEYS` columns), in any order."""
        self.keys += keys.height
        self._keys.add(keys)

    def finish(self) -> RepeatMarks:
        """Deduplicate partition by partition; the marks stay under `folder` until `close`."""
        self._find(self._keys, level=0)
        self._marks.close()
        return RepeatMarks(self._marks)

    def _find(self, keys: Spill, level: int) -> None:
        for part in keys.close():
            if keys.counts[part] > PARTITION_ROWS and level + 1 < _MAX_LEVEL:
                # Split once more, by another hash: every occurrence of an id still lands in
                # one (smaller) partition.
                finer = Spill(keys.folder / f"{part:03d}", _partition(level + 1), KEYS)
                for batch in keys.batches(part):
                    finer.add(batch)
                self._find(finer, level + 1)
                shutil.rmtree(finer.folder, ignore_errors=True)
            else:
                self._marks.add(later_occurrences(keys.read(part)))


class RepeatMarks:
    """The later occurrences of a run's query ids (`MARKS`, `count` of them), read back by
    shard; `for_shard` keeps one block in memory, so call it in increasing shard order."""

    def __init__(self, marks: Spill) -> None:
        self._marks = marks
        self.count = marks.rows
        self._block: int | None = None
        self._loaded = pl.DataFrame(schema=MARKS)

    def for_shard(self, number: int) -> pl.DataFrame:
        """The marks of shard `number` (by item_seq), possibly empty."""
        block = number // BLOCK_SHARDS
        if block != self._block:
            self._block, self._loaded = block, self._marks.read(block).sort("item_seq")
        return self._loaded.filter(_shard_of_seq() == number)

    def by_shard(self) -> Iterator[tuple[int, pl.DataFrame]]:
        """(shard number, its marks) for every shard with marks, in shard order."""
        for block in self._marks.close():
            marks = self._marks.read(block).sort("item_seq")
            for (number,), piece in (
                marks.with_columns(_shard_of_seq().alias("_shard"))
                .partition_by("_shard", as_dict=True, include_key=False, maintain_order=True)
                .items()
            ):
                yield int(number), piece  # type: ignore[call-overload]
