"""Reading a shard for judging: its rows checked and numbered (`item_seq`), repeats of a query
id set aside as errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jobs.core.run_layout import item_seq
from jobs.core.schema import RunSchema, duplicate_error
from jobs.inputs import ItemRecord, RowError, Shard
from jobs.inputs.records import ItemReader
from jobs.inputs.sampling import SamplePlan, judged


@dataclass
class ShardRead:
    """A shard's rows after reading: the records to judge and the rows that are errors."""

    records: list[tuple[int, ItemRecord]]
    # (item_seq, the error, where the first occurrence is when the row repeats a query_id)
    errors: list[tuple[int, RowError, str | None]]


def _repeat(record: ItemRecord, first: str) -> RowError:
    """The error row of a repeat of a query id whose first occurrence is at `first`."""
    message = duplicate_error(record.query_id, first)
    return RowError(
        source=record.source,
        row=record.row,
        message=message,
        query_id=record.query_id,
        carried=record.carried,
    )


@dataclass(frozen=True, kw_only=True)
class RunRows:
    """How a run reads a shard's rows for judging: its reader, its tables (the carried
    columns), and a sampled run's plan (None: every row is judged)."""

    reader: ItemReader
    tables: RunSchema
    sample: SamplePlan | None = None


def read_shard_records(
    rows: RunRows, shard: Shard, number: int, later: Mapping[int, str] | None = None
) -> ShardRead:
    """Read and validate a shard's rows; repeats of a query_id become errors, within the shard
    and those in `later` (item_seq -> where the first occurrence is, in another shard)."""
    read = ShardRead(records=[], errors=[])
    first_seen: dict[str, str] = {}  # query_id -> where its first occurrence is
    later = later or {}
    tables = rows.tables
    for index, record in enumerate(rows.reader.read(shard, tables.carried)):
        seq = item_seq(number, index)
        if not judged(rows.sample, record, tables.names):
            continue  # a sampled run (jobs.inputs.sampling): not chosen, not judged, not published
        if isinstance(record, RowError):
            read.errors.append((seq, record, None))
            continue
        first = later.get(seq) or first_seen.get(record.query_id)
        if first is None:
            first_seen[record.query_id] = record.where
            read.records.append((seq, record))
        else:
            read.errors.append((seq, _repeat(record, first), first))
    return read
