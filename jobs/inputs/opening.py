"""Open an input file for reading, local or on an object store, plain or gzipped: every step
that reads input bytes opens through `open_input`."""

from __future__ import annotations

from typing import IO

import fsspec


def open_input(
    fs: fsspec.AbstractFileSystem, fs_path: str, compression: str | None = None
) -> IO[bytes]:
    """Open for reading; on object stores with exact ranged GETs (`cache_type="none"`), not
    fsspec's read-ahead blocks (design notes)."""
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
