"""Read one Parquet shard: a row range of one file, decoding only the row groups it overlaps and
the configured columns; `RawRow.row` is the row number within the file."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import IO

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.storage import is_transient, retry_call
from jobs.inputs.listing import open_input
from jobs.inputs.spec import InputSpec, RawRow, Shard, required_columns
from scorer_core.errors import CtxPrecError, InputError, StorageError

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
    handle = retry_call(lambda: open_input(fs, fs_path), what="open", url=shard.path)
    try:
        with handle:
            parquet = parquet_file(handle, shard.path)
            meta = parquet.metadata
            sizes = [meta.row_group(n).num_rows for n in range(meta.num_row_groups)]
            starts = [0, *itertools.accumulate(sizes)]
            overlap = [
                starts[n] < shard.end and starts[n + 1] > shard.start for n in range(len(sizes))
            ]
            groups = [n for n, holds_rows in enumerate(overlap) if holds_rows]
            if not groups:
                return
            columns = None
            names = set(parquet.schema_arrow.names)
            if only is not None:
                columns = [c for c in only if c in names]
            elif not spec.context_extractor:
                columns = [c for _, c in required_columns(spec) if c in names]
            row = starts[groups[0]]
            batches = parquet.iter_batches(
                batch_size=PARQUET_BATCH_ROWS, row_groups=groups, columns=columns, use_threads=False
            )
            for batch in batches:
                low = max(shard.start - row, 0)
                high = min(shard.end - row, batch.num_rows)
                if high > low:
                    for k, record in enumerate(batch.slice(low, high - low).to_pylist()):
                        yield RawRow(shard.path, row + low + k, data=record)
                row += batch.num_rows
                if row >= shard.end:
                    break
    except CtxPrecError:
        raise
    except pa.ArrowInvalid as exc:
        raise InputError(f"reading {shard.path} (shard {shard.shard_id}) failed: {exc}") from exc
    except OSError as exc:
        if type(exc) is OSError and not is_transient(exc):
            # pyarrow reports undecodable data (a damaged page) as a plain OSError: retrying
            # the read cannot help, so this is the input's problem, not the store's.
            raise InputError(
                f"{shard.path} (shard {shard.shard_id}) is corrupt and cannot be decoded: {exc}"
            ) from exc
        raise StorageError(
            f"reading {shard.path} (shard {shard.shard_id}) failed: {type(exc).__name__}: {exc}"
        ) from exc
