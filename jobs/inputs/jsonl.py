"""Read one JSON Lines shard: a byte range of a plain file, or a whole gzipped file.

Every line is read by exactly one shard, the one its first byte falls in (the Hadoop rule), and
`RawRow.row` is that byte's offset (in the decompressed stream for gzip). A line that is not
UTF-8, JSON or an object becomes a `RawRow` with an error naming the file and offset.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from typing import IO

import fsspec

from jobs.core.storage import retry_call
from jobs.inputs.listing import open_input
from jobs.inputs.rows import RawRow
from jobs.inputs.shard import Shard
from scorer_core.errors import CtxPrecError, InputError, StorageError

READ_CHUNK = 1 << 20
"""Bytes read per request when streaming a JSONL shard."""

_BOM = b"\xef\xbb\xbf"


def read_jsonl_shard(fs: fsspec.AbstractFileSystem, fs_path: str, shard: Shard) -> Iterator[RawRow]:
    """The shard's rows in file order. Opening is retried; a store failure mid-stream raises
    `StorageError` naming the file, a damaged gzip stream `InputError`."""
    end = None if shard.compression else shard.end
    start = 0 if shard.compression else shard.start
    # a small shard asks for little more than its range (a long line grows the reads)
    chunk = READ_CHUNK if end is None else min(READ_CHUNK, max(end - start, 0) + 64 * 1024)
    handle = retry_call(
        lambda: open_input(fs, fs_path, shard.compression), what="open", url=shard.path
    )
    try:
        with handle:
            for offset, line in lines_in_range(handle, start, end, chunk):
                raw = parse_line(shard.path, offset, line)
                if raw is not None:
                    yield raw
    except CtxPrecError:
        raise
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(
            f"{shard.path} is not a readable gzip file: {type(exc).__name__}: {exc}"
        ) from exc
    except OSError as exc:
        raise StorageError(
            f"reading {shard.path} (shard {shard.shard_id}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def lines_in_range(
    handle: IO[bytes], start: int, end: int | None, chunk: int = READ_CHUNK
) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) for every line starting in `[start, end)`.

    With `start > 0` the reader starts one byte early and skips through the first newline: a
    line starting exactly at `start` is kept, a line that started before belongs to the
    previous range. A line starting before `end` is read to its end, past `end` if needed.
    `end=None` reads to the end of the stream.
    """
    skip = start > 0
    position = start - 1 if skip else 0
    if skip:
        handle.seek(position)
    buffer = b""
    base = position  # file offset of buffer[0]
    cursor = 0  # next unread byte in buffer
    scan = 0  # where to resume looking for a newline
    eof = False
    while True:
        newline = buffer.find(b"\n", scan)
        if newline < 0:
            if not skip and end is not None and base + cursor >= end:
                return
            if eof:
                if not skip and cursor < len(buffer):
                    yield base + cursor, buffer[cursor:]
                return
            pending = len(buffer) - cursor
            data = handle.read(max(chunk, pending))  # grows with a long line: linear overall
            if not data:
                eof = True
            buffer = buffer[cursor:] + data
            base += cursor
            cursor = 0
            scan = pending
            continue
        line_start = base + cursor
        line = buffer[cursor:newline]
        cursor = scan = newline + 1
        if skip:
            skip = False
            continue
        if end is not None and line_start >= end:
            return
        yield line_start, line


def parse_line(source: str, offset: int, line: bytes) -> RawRow | None:
    """A RawRow for one line, or None for an empty line."""
    if offset == 0 and line.startswith(_BOM):
        line = line[len(_BOM) :]
    if line.endswith(b"\r"):
        line = line[:-1]
    if not line.strip():
        return None
    where = f"{source} line at byte {offset}"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return RawRow(
            source,
            offset,
            error=f"{where}: not valid UTF-8 (byte 0x{line[exc.start]:02x} at position "
            f"{exc.start} of the line)",
            unit="offset",
        )
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return RawRow(
            source,
            offset,
            error=f"{where}: invalid JSON: {exc.msg} at column {exc.colno}",
            unit="offset",
        )
    except RecursionError:
        return RawRow(source, offset, error=f"{where}: JSON nested too deeply", unit="offset")
    if not isinstance(value, dict):
        return RawRow(
            source,
            offset,
            error=f"{where}: a JSON {_json_kind(value)}, expected an object",
            unit="offset",
        )
    return RawRow(source, offset, data=value, unit="offset")


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__
