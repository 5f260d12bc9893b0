"""Open an input file for reading, local or on an object store, plain or gzipped: every step
that reads input bytes opens through `open_input`."""

from __future__ import annotations

from typing import IO

import fsspec


def open_input(
    fs: fsspec.AbstractFileSystem, fs_path: str, compression: str | None = None
) -> IO[bytes]:
    """Open for reading. On object stores reads are exact ranged GETs (`cache_type="none"`):
    the default read-ahead fetches up to a 50 MiB block per miss, several times the bytes a
    JSONL shard or a Parquet row-group slice needs (measured on moto: 58 MB vs 12 MB for two
    row groups of four columns)."""
    if compression:
        handle: IO[bytes] = fs.open(fs_path, "rb", compression=compression)
    elif _is_local(fs):
        handle = fs.open(fs_path, "rb")
    else:
        handle = fs.open(fs_path, "rb", cache_type="none")
    return handle


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol
    names = (protocol,) if isinstance(protocol, str) else tuple(protocol)
    return "file" in names or "local" in names
