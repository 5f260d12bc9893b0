"""The content-addressed verdict store: every verdict ever judged, and the journal workers fill
it through. Under `<cache>/<fingerprint>/`, verdicts sit in `p=<NNN>/` by the first two hex
digits of their pair key and in `journal/` until folded there. Files are written once, under
names no other writer uses: a key in several files is read as its newest row, and a lost file
costs calls, never a wrong verdict.
"""

from __future__ import annotations

import io
import posixpath
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.core.run_layout import parquet_files
from jobs.core.schema import VERDICT_CACHE, VERDICT_STORE
from jobs.core.storage import Store
from scorer_core.errors import StorageError

PARTITIONS = 256  # the first two hex digits of a pair key
FOLD_FILES = 64  # journal files folded at a time (memory: their verdicts)
SECONDS_PER_DAY = 86_400

Clock = Callable[[], float]


def partition_expr() -> pl.Expr:
    """The store partition of the `pair_key` column (its first two hex digits), as `_partition`."""
    return pl.col("pair_key").str.slice(0, 2).str.to_integer(base=16).alias("_partition")


def _empty() -> pl.DataFrame:
    return pl.DataFrame(schema=VERDICT_STORE.polars)


@dataclass(frozen=True, kw_only=True)
class VerdictStore:
    """The store's files for one judge fingerprint: `folder` is relative to `store`'s root."""

    store: Store
    folder: str
    max_age_days: float | None = None
    clock: Clock = field(default=time.time, repr=False, compare=False)

    def partition_folder(self, partition: int) -> str:
        return self.store.join(self.folder, f"p={partition:03d}")

    @property
    def journal_folder(self) -> str:
        return self.store.join(self.folder, "journal")

    def files_by_partition(self) -> dict[int, list[str]]:
        """Every partition's files, from one listing of the store."""
        found: dict[int, list[str]] = {}
        for path in parquet_files(self.store, self.store.join(self.folder)):
            folder = path.rsplit("/", 2)[-2]
            if folder.startswith("p=") and folder[2:].isdigit():
                found.setdefault(int(folder[2:]), []).append(path)
        return found

    def partition_files(self, partition: int) -> list[str]:
        return parquet_files(self.store, self.partition_folder(partition))

    def journal_files(self, prefix: str = "") -> list[str]:
        """Journal files, those of writers whose name starts with `prefix` when given."""
        files = parquet_files(self.store, self.journal_folder)
        return [path for path in files if path.rsplit("/", 1)[-1].startswith(prefix)]

    def write(self, folder: str, writer: str, frame: pl.DataFrame) -> str:
        """Write `frame` (`VERDICT_STORE` columns) as a new file in `folder`, atomically."""
        # a name no other write uses: the writer, the time and a random part
        name = f"{writer}-{int(self.clock() * 1000):013d}-{uuid.uuid4().hex[:12]}.parquet"
        path = posixpath.join(folder, name)
        table = frame.select(VERDICT_STORE.names).cast(VERDICT_STORE.polars).to_arrow()
        self.store.write_parquet_atomic(path, table.cast(VERDICT_STORE.arrow))
        return path

    def rows(self, entries: Iterable[tuple[str, bool, str]]) -> pl.DataFrame:
        """(pair key, relevant, reason) as store rows written now."""
        frame = pl.DataFrame(list(entries), schema=VERDICT_CACHE.polars, orient="row")
        return frame.with_columns(written_at=pl.lit(int(self.clock()), dtype=pl.Int64))

    def read_file(self, path: str, keys: pl.Series | None = None) -> pl.DataFrame:
        """A store file's rows (of `keys` only when given); none when it is gone or damaged."""
        table = self.read_table(path)
        return _empty() if table is None else self.rows_of(table, keys)

    def read_table(self, path: str) -> pa.Table | None:
        """A store file, whole; None when it is gone or damaged."""
        try:
            data = self.store.read_bytes(path)
            return pq.read_table(io.BytesIO(data), columns=list(VERDICT_STORE.names))
        except (StorageError, pa.ArrowInvalid, OSError, KeyError):
            return None

    @staticmethod
    def rows_of(table: pa.Table, keys: pl.Series | None = None) -> pl.DataFrame:
        """A store file's rows (`read_table`), only those of `keys` when given."""
        if keys is not None:
            # Filtered by Arrow, which copies the rows kept: a Polars filter would keep views
            # into the whole file's strings (design notes).
            text = pa.large_string()  # is_in has no kernel for the string views Polars writes
            wanted = pc.is_in(table["pair_key"].cast(text), value_set=keys.to_arrow().cast(text))
            table = table.filter(wanted)
        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)
        return frame.cast(VERDICT_STORE.polars)

    def newest(self, frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
        """The rows of `frames` within retention, one per key (its newest)."""
        if not frames:
            return _empty()
        rows = pl.concat(frames)
        if self.max_age_days is not None:
            cutoff = int(self.clock() - self.max_age_days * SECONDS_PER_DAY)
            rows = rows.filter(pl.col("written_at") >= cutoff)
        return rows.sort("written_at", descending=True).unique("pair_key", keep="first")

    def lookup(self, partition: int, keys: pl.Series) -> pl.DataFrame:
        """The stored verdicts of `keys` (all in `partition`), one row per key found."""
        return self.newest([self.read_file(path, keys) for path in self.partition_files(partition)])

    def lookup_batches(
        self, batches: Iterable[pl.Series], files: Sequence[str]
    ) -> Iterator[pl.DataFrame]:
        """`lookup` for each batch of keys of one partition, its `files` read once."""
        tables = [table for table in map(self.read_table, files) if table is not None]
        for keys in batches:
            yield self.newest([self.rows_of(table, keys) for table in tables])

    def fold_journal(self, writer: str = "fold") -> int:
        """Move the journal's verdicts into their partitions (a crash leaves duplicates): rows."""
        folded = 0
        files = self.journal_files()
        for start in range(0, len(files), FOLD_FILES):
            batch = files[start : start + FOLD_FILES]
            rows = pl.concat([self.read_file(path) for path in batch])
            for (partition,), piece in (
                rows.with_columns(partition_expr())
                .partition_by("_partition", as_dict=True, include_key=False)
                .items()
            ):
                self.write(self.partition_folder(int(partition)), writer, piece)  # type: ignore[call-overload]
            folded += rows.height
            for path in batch:
                self.store.rm(path)
        return folded

    def compact(self, partition: int, files: Sequence[str] | None = None) -> tuple[int, int]:
        """Merge a partition's files into one without expired or repeated keys: (kept, dropped)."""
        files = self.partition_files(partition) if files is None else files
        if not files:
            return 0, 0
        frames = [self.read_file(path) for path in files]
        total = sum(frame.height for frame in frames)
        kept = self.newest(frames)
        if len(files) == 1 and kept.height == total:
            return kept.height, 0
        if kept.height:
            self.write(self.partition_folder(partition), "compact", kept)
        for path in files:
            self.store.rm(path)
        return kept.height, total - kept.height

    def compact_all(self) -> tuple[int, int]:
        """Fold the journal, then compact every partition: (rows kept, rows dropped)."""
        self.fold_journal()
        counts = [
            self.compact(partition, files=files)
            for partition, files in sorted(self.files_by_partition().items())
        ]
        return sum(kept for kept, _ in counts), sum(dropped for _, dropped in counts)


class Journal:
    """A worker's verdicts, written to the store's journal as small files every `interval_s`;
    the last `memory` of them answer its later items with the same pair. Not thread-safe."""

    def __init__(
        self, verdicts: VerdictStore, writer: str, *, interval_s: float = 2.0, memory: int = 200_000
    ) -> None:
        self.verdicts = verdicts
        self.writer = writer
        self.interval_s = interval_s
        self._memory = memory
        self._buffer: list[tuple[str, bool, str]] = []
        self.recent: dict[str, tuple[bool, str]] = {}
        self.flushed = 0

    def add(self, key: str, relevant: bool, reason: str) -> None:
        self._buffer.append((key, relevant, reason))
        self.remember({key: (relevant, reason)})

    def remember(self, entries: dict[str, tuple[bool, str]]) -> None:
        """Keep `entries` in `recent`, forgetting the oldest beyond `memory`."""
        self.recent.update(entries)
        while len(self.recent) > self._memory:
            del self.recent[next(iter(self.recent))]

    def get(self, key: str) -> tuple[bool, str] | None:
        return self.recent.get(key)

    def take_over(self) -> int:
        """Remember what this writer's earlier (dead) attempts flushed; how many verdicts."""
        files = self.verdicts.journal_files(f"{self.writer}-")
        rows = self.verdicts.newest([self.verdicts.read_file(path) for path in files])
        found = rows.select("pair_key", "relevant", "judge_reason").iter_rows()
        self.remember({key: (bool(relevant), reason or "") for key, relevant, reason in found})
        return rows.height

    @property
    def pending(self) -> int:
        return len(self._buffer)

    def take(self) -> list[tuple[str, bool, str]]:
        """The buffered verdicts, handed to `write` (the buffer starts again empty)."""
        taken, self._buffer = self._buffer, []
        return taken

    def write(self, taken: list[tuple[str, bool, str]]) -> None:
        """Write verdicts taken from the buffer as one journal file (blocking)."""
        if taken:
            verdicts = self.verdicts
            verdicts.write(verdicts.journal_folder, self.writer, verdicts.rows(taken))
            self.flushed += len(taken)

    def flush(self) -> None:
        """Write the buffer now (blocking)."""
        self.write(self.take())
