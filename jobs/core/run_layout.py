"""Where a run's files are, and how its items are numbered: the one module that knows.

Under the output root (hive partitions; every table one zstd Parquet object per run):

    scores/run_date=YYYY-MM-DD/run_id=<id>/part-00000.parquet     one row per input item
    verdicts/run_date=YYYY-MM-DD/run_id=<id>/part-00000.parquet   one row per context
    summary/run_date=YYYY-MM-DD/run_id=<id>/part-00000.parquet    one row per metric
    manifests/run_date=YYYY-MM-DD/run_id=<id>/manifest.json       config (no secrets), counts
    _staging/run_id=<id>/                                         work in progress (hidden:
        LEASE.json                                                readers skip names that
        items/<shard>.parquet     a shard's items: its commit     start with "_")
        verdicts/<shard>.parquet  a shard's verdicts
        lookahead/...             what each shard needs, found before judging
        (jobs.engine.pairs.lookahead)
        batch/...                 batch mode's rounds (jobs.engine.batch.batch_layout)

The engine writes these, the tools read them; both ask this module for every path, for the
list of tables and for which shards are staged, so a path is spelled once.

Items are numbered across the run by `item_seq = shard number << SEQ_SHIFT | index in the
shard`: unique, in input order, and the shard a row came from is `item_seq >> SEQ_SHIFT`.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal, Protocol

Table = Literal["scores", "verdicts", "summary"]
# Every published table. Publishing writes `scores/` last, so a reader of scores sees a run
# whole or not at all (`jobs.engine.publish.publisher`).
TABLES: tuple[Table, ...] = ("scores", "verdicts", "summary")

STAGING_ROOT = "_staging"
LEASE_FILE = "LEASE.json"

SEQ_SHIFT = 32
_INDEX_MASK = (1 << SEQ_SHIFT) - 1


def item_seq(shard_number: int, index: int) -> int:
    """The run-wide number of the `index`-th row of shard `shard_number`."""
    return (shard_number << SEQ_SHIFT) | index


def shard_number_of(seq: int) -> int:
    """The shard (its number in the run) that item `seq` came from."""
    return seq >> SEQ_SHIFT


def index_in_shard(seq: int) -> int:
    """Item `seq`'s row index within its shard."""
    return seq & _INDEX_MASK


class _Lister(Protocol):
    """The part of `jobs.core.storage.Store` this module needs (kept structural: no import)."""

    def join(self, *parts: str) -> str: ...

    def list(self, path: str) -> list[str]: ...


_PUBLISHED_FILE = re.compile(r"run_date=(\d{4}-\d{2}-\d{2})/run_id=([^/]+)/[^/]+\.parquet$")


def published_glob(table: Table, run_id: str = "*", run_date: str = "*") -> str:
    """A glob of `table`'s published files (of one run, one day, or all), under the root."""
    return f"{table}/run_date={run_date}/run_id={run_id}/*.parquet"


def run_of(path: str) -> RunLocation | None:
    """The run a published table file belongs to (None for any other path)."""
    match = _PUBLISHED_FILE.search(path)
    if match is None:
        return None
    try:
        return RunLocation(run_id=match.group(2), run_date=dt.date.fromisoformat(match.group(1)))
    except ValueError:
        return None


def staging_folder(run_id: str) -> str:
    """A run's staging folder, relative to the output root."""
    return f"{STAGING_ROOT}/run_id={run_id}"


def is_hidden(name: str) -> bool:
    """Whether a file name is hidden from readers and listings (a local atomic write's
    `.<name>.tmp-*` leftover, markers such as `_SUCCESS`)."""
    return name.startswith((".", "_"))


@dataclass(frozen=True)
class RunLocation:
    """A run's place in the output: its published partition and its staging area."""

    run_id: str
    run_date: dt.date

    @property
    def partition(self) -> str:
        return f"run_date={self.run_date.isoformat()}/run_id={self.run_id}"

    @property
    def staging(self) -> str:
        return staging_folder(self.run_id)

    def table_file(self, table: str) -> str:
        """The published object of `table`, relative to the output root."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; expected one of {', '.join(TABLES)}")
        return f"{table}/{self.partition}/part-00000.parquet"

    @property
    def manifest(self) -> str:
        return f"manifests/{self.partition}/manifest.json"


@dataclass(frozen=True)
class StagingArea:
    """A run's staging folder in a store: the shards' files and what is staged so far."""

    store: _Lister
    folder: str  # relative to the store's root (`staging_folder`)

    @classmethod
    def of_run(cls, store: _Lister, run_id: str) -> StagingArea:
        return cls(store, staging_folder(run_id))

    def path(self, *parts: str) -> str:
        return self.store.join(self.folder, *parts)

    @property
    def lease(self) -> str:
        return self.path(LEASE_FILE)

    def items_file(self, shard_id: str) -> str:
        """A shard's items file: written last, its presence marks the shard done."""
        return self.path("items", f"{shard_id}.parquet")

    def verdicts_file(self, shard_id: str) -> str:
        return self.path("verdicts", f"{shard_id}.parquet")

    def staged_items_files(self) -> list[str]:
        """The staged shards' items files in run order (shard ids sort as the shards run),
        without the leftovers of a write that was killed before its rename."""
        return sorted(
            path
            for path in self.store.list(self.path("items"))
            if path.endswith(".parquet") and not is_hidden(path.rsplit("/", 1)[-1])
        )

    def staged_shards(self) -> set[str]:
        """The ids of the shards whose results are complete in staging."""
        return {
            path.rsplit("/", 1)[-1].removesuffix(".parquet") for path in self.staged_items_files()
        }

    def verdicts_file_of(self, items_file: str) -> str:
        """The verdicts file staged with the items file `items_file`."""
        return self.path("verdicts", items_file.rsplit("/", 1)[-1])
