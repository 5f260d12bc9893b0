"""Read one Parquet shard: a row range of one file, decoding only the row groups it overlaps and
the configured columns; `RawRow.row` is the row number within the file."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import IO

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.storage import is_transient
from jobs.inputs.listing import reading
from jobs.inputs.spec import InputSpec, RawRow, Shard, required_columns
from scorer_core.errors import InputError

PARQUET_BATCH_ROWS = 1024


def parquet_file(handle: IO[bytes], url: str) -> pq.ParquetFile:
    """The Parquet file behind `handle`; `InputError` naming `url` when it is not one."""
    try:
        return pq.ParquetFile(handle)
    except pa.ArrowInvalid as exc:
        raise InputError(f"{url} is not a readable Parquet file: {exc}") from exc


def read_parquet_shard(
    spec: InputSpec,
    fs: fsspec.AbstractFileSystem,
    fs_path: str,
    shard: Shard,
    only: Sequence[str] | None = None,
) -> Iterator[RawRow]:
    """The shard's rows in file order (`only`: just these columns, those the file has)."""
    where = f"{shard.path} (shard {shard.shard_id})"
    with reading(fs, fs_path, shard.path, None, where) as handle:
        try:
            parquet = parquet_file(handle, shard.path)
            if only is None and not spec.context_extractor:
                only = [column for _, column in required_columns(spec)]
            names = set(parquet.schema_arrow.names)
            columns = None if only is None else [column for column in only if column in names]
            yield from _rows(parquet, shard, columns)
        except pa.ArrowInvalid as exc:
            raise InputError(f"reading {where} failed: {exc}") from exc
        except OSError as exc:
            if type(exc) is not OSError or is_transient(exc):
                raise
            # pyarrow reports undecodable data (a damaged page) as a plain OSError: retrying
            # the read cannot help, so this is the input's problem, not the store's.
            raise InputError(f"{where} is corrupt and cannot be decoded: {exc}") from exc


def _rows(parquet: pq.ParquetFile, shard: Shard, columns: list[str] | None) -> Iterator[RawRow]:
    """The rows of the shard's range, decoding only the row groups it overlaps."""
    meta = parquet.metadata
    sizes = [meta.row_group(group).num_rows for group in range(meta.num_row_groups)]
    starts = [0, *itertools.accumulate(sizes)]
    groups = [
        group
        for group in range(len(sizes))
        if starts[group] < shard.end and starts[group + 1] > shard.start
    ]
    if not groups:
        return
    row = starts[groups[0]]
    batches = parquet.iter_batches(
        batch_size=PARQUET_BATCH_ROWS, row_groups=groups, columns=columns, use_threads=False
    )
    for batch in batches:
        low = max(shard.start - row, 0)
        high = min(shard.end - row, batch.num_rows)
        if high > low:
            for offset, record in enumerate(batch.slice(low, high - low).to_pylist()):
                yield RawRow(source=shard.path, row=row + low + offset, data=record)
        row += batch.num_rows
        if row >= shard.end:
            break
