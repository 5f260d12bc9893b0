"""The job on an object store (tests.support.stores.ObjectStore: S3, GCS, Azure alike): its input
uploaded there, its config pointing there, and what it published read back from there, with
DuckDB and with Polars, each through a filesystem of its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from jobs.core.config import JobConfig, parse_config
from jobs.core.run_layout import RunLocation
from jobs.engine.driver import RunOutcome
from jobs.tools.sample_data import write_jsonl
from tests.support.job import raw_config
from tests.support.stores import ObjectStore

# What a run's scores rows say of the run itself rather than of the item: left out when a run on
# a store is compared with a local run of the same input.
RUN_COLUMNS = ("run_id", "run_date", "source")


def upload_rows(store: ObjectStore, rows: list[dict[str, Any]], url: str, folder: Path) -> None:
    """`rows` as JSON Lines at `url` on the store (written locally in `folder` first)."""
    local = folder / f"upload-{url.rsplit('/', 1)[-1]}"
    write_jsonl(local, iter(rows))
    store.fs().put_file(str(local), store.path(url))


def store_raw_config(store: ObjectStore, source: str, out: str, **sections: Any) -> dict[str, Any]:
    """`tests.support.job.raw_config` with the input at `source` and the output (its staging
    area and verdict store inside) at `out`, both on the store with its storage_options."""
    options = store.storage_options
    raw = raw_config(source, out, **sections)
    raw["input"]["storage_options"] = options
    raw["output"]["storage_options"] = options
    return raw


def store_config(store: ObjectStore, source: str, out: str, **sections: Any) -> JobConfig:
    return parse_config(store_raw_config(store, source, out, **sections))


def table_url(out: str, outcome: RunOutcome, table: str) -> str:
    location = RunLocation(outcome.run_id, outcome.run_date)
    return f"{out}/{location.table_file(table)}"


def read_table(store: ObjectStore, out: str, outcome: RunOutcome, table: str) -> pl.DataFrame:
    """One published table of the run, read by Polars from the store."""
    with store.fs().open(store.path(table_url(out, outcome, table)), "rb") as handle:
        return pl.read_parquet(handle)


def duckdb_scores(store: ObjectStore, out: str) -> pl.DataFrame:
    """Every published score under `out`, read by DuckDB (hive partitions, `*.parquet` glob)."""
    connection = duckdb.connect()
    connection.register_filesystem(store.fs())
    query = f"select * from read_parquet('{out}/scores/**/*.parquet', hive_partitioning=true)"
    return connection.sql(query).pl()


def read_manifest(store: ObjectStore, out: str, outcome: RunOutcome) -> dict[str, Any]:
    location = RunLocation(outcome.run_id, outcome.run_date)
    data: dict[str, Any] = json.loads(store.fs().cat_file(store.path(f"{out}/{location.manifest}")))
    return data


def files_under(store: ObjectStore, url: str) -> list[str]:
    """Every object under `url`, as URLs."""
    fs = store.fs()
    return sorted(f"{store.scheme}://{path}" for path in fs.find(store.path(url)))
