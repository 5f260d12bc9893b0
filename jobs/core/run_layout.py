"""Where a run's files are, and how its items are numbered: the one module that knows.
Published tables are hive-partitioned, one object per run and table, with a manifest beside
them (docs/output.md); work in progress is under `_staging/run_id=<id>/`, hidden from readers.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from jobs.core.storage import Store

Table = Literal["scores", "verdicts", "summary"]
# Every published table. Publishing writes `scores/` last, so a reader of scores sees a run
# whole or not at all (`jobs.engine.publish.publisher`).
TABLES: tuple[Table, ...] = ("scores", "verdicts", "summary")
SEQ_SHIFT = 32


def item_seq(shard_number: int, index: int) -> int:
    """The run-wide number of the `index`-th row of shard `shard_number`."""
    return (shard_number << SEQ_SHIFT) | index


def index_in_shard(seq: int) -> int:
    """Item `seq`'s row index within its shard."""
    return seq & ((1 << SEQ_SHIFT) - 1)


_PUBLISHED_FILE = re.compile(
    r"run_date=(\d{4}-\d{2}-\d{2})/run_id=([^/]+)/(?:[^/]+\.parquet|manifest\.json)$"
)


def published_glob(table: Table, run_id: str = "*", run_date: str = "*") -> str:
    """A glob of `table`'s published files (of one run, one day, or all), under the root."""
    return f"{table}/run_date={run_date}/run_id={run_id}/*.parquet"


def manifests_glob(run_id: str) -> str:
    """A glob of run `run_id`'s manifests, on any date, under the root."""
    return f"manifests/run_date=*/run_id={run_id}/manifest.json"


def run_of(path: str) -> RunLocation | None:
    """The run a published table file or manifest belongs to (None for any other path)."""
    match = _PUBLISHED_FILE.search(path)
    if match is None:
        return None
    try:
        return RunLocation(run_id=match.group(2), run_date=dt.date.fromisoformat(match.group(1)))
    except ValueError:
        return None


def parquet_files(store: Store, folder: str) -> list[str]:
    """The Parquet files under `folder`, sorted, without hidden ones (killed writes' leftovers)."""
    return [
        path
        for path in store.list(folder)
        if path.endswith(".parquet") and not path.rsplit("/", 1)[-1].startswith((".", "_"))
    ]


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
        """The run's staging folder, relative to the output root."""
        return f"_staging/run_id={self.run_id}"

    def table_file(self, table: str) -> str:
        """The published object of `table`, relative to the output root."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}; expected one of {', '.join(TABLES)}")
        return f"{table}/{self.partition}/part-00000.parquet"

    @property
    def manifest(self) -> str:
        return f"manifests/{self.partition}/manifest.json"

    @property
    def traces(self) -> str:
        """Where the run's traces are assembled into items (input.format otlp, phoenix),
        relative to the output root."""
        return f"{self.staging}/traces"


@dataclass(frozen=True)
class StagingArea:
    """A run's staging folder in a store: the shards' files and what is staged so far."""

    store: Store
    folder: str  # relative to the store's root (`RunLocation.staging`)

    @classmethod
    def of_run(cls, store: Store, run_id: str) -> StagingArea:
        return cls(store, f"_staging/run_id={run_id}")

    def path(self, *parts: str) -> str:
        return self.store.join(self.folder, *parts)

    @property
    def lock_file(self) -> str:
        """The run's lock (`jobs.engine.run_lock`), under the name it has always had."""
        return self.path("LEASE.json")

    @property
    def date_file(self) -> str:
        """The run's date, written when it first starts: a resumed run keeps it."""
        return self.path("RUN_DATE")

    def items_file(self, shard_id: str) -> str:
        """A shard's items file: written last, its presence marks the shard done."""
        return self.path("items", f"{shard_id}.parquet")

    def verdicts_file(self, shard_id: str) -> str:
        return self.path("verdicts", f"{shard_id}.parquet")

    def staged_items_files(self) -> list[str]:
        """The staged shards' items files in run order (shard ids sort as the shards run)."""
        return parquet_files(self.store, self.path("items"))

    def staged_shards(self) -> set[str]:
        """The ids of the shards whose results are complete in staging."""
        files = self.staged_items_files()
        return {path.rsplit("/", 1)[-1].removesuffix(".parquet") for path in files}

    def verdicts_file_of(self, items_file: str) -> str:
        """The verdicts file staged with the items file `items_file`."""
        return self.path("verdicts", items_file.rsplit("/", 1)[-1])
