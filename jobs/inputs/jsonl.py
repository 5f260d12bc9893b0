"""Read one JSON Lines shard: a byte range of a plain file, or a whole gzipped file. A line
belongs to the shard its first byte falls in, and `RawRow.row` is that byte's offset; a line
that is not UTF-8, JSON or an object becomes a `RawRow` with an error naming the file and offset.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import IO, cast

import fsspec

from jobs.inputs.listing import reading
from jobs.inputs.spec import RawRow, Shard

READ_CHUNK = 1 << 20
"""Bytes read per request when streaming a JSONL shard."""

_BOM = b"\xef\xbb\xbf"
_JSON_KINDS = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}


def read_jsonl_shard(fs: fsspec.AbstractFileSystem, fs_path: str, shard: Shard) -> Iterator[RawRow]:
    """The shard's rows in file order (errors as `reading` raises them)."""
    end = None if shard.compression else shard.end
    start = 0 if shard.compression else shard.start
    # a small shard asks for little more than its range (a long line grows the reads)
    chunk = READ_CHUNK if end is None else min(READ_CHUNK, max(end - start, 0) + 64 * 1024)
    where = f"{shard.path} (shard {shard.shard_id})"
    with reading(fs, fs_path, shard.path, shard.compression, where) as handle:
        for offset, line in lines_in_range(handle, start, end, chunk):
            raw = parse_line(shard.path, offset, line)
            if raw is not None:
                yield raw


def lines_in_range(
    handle: IO[bytes], start: int, end: int | None, chunk: int = READ_CHUNK
) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) for every line starting in `[start, end)`."""
    position = max(start - 1, 0)
    if start > 0:
        handle.seek(position)
    reader = io.BufferedReader(cast(io.RawIOBase, handle), chunk)
    if start > 0:
        position += len(reader.readline())
    while end is None or position < end:
        line = reader.readline()
        if not line:
            return
        yield position, line.removesuffix(b"\n")
        position += len(line)


def parse_line(source: str, offset: int, line: bytes) -> RawRow | None:
    """A RawRow for one line, or None for an empty line."""
    if offset == 0 and line.startswith(_BOM):
        line = line[len(_BOM) :]
    line = line.removesuffix(b"\r")
    if not line.strip():
        return None
    try:
        value = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        error = (
            f"not valid UTF-8 (byte 0x{line[exc.start]:02x} at position {exc.start} of the line; "
            "is the file Latin-1 or another encoding? The input must be UTF-8)"
        )
    except json.JSONDecodeError as exc:
        error = f"invalid JSON: {exc.msg} at column {exc.colno}"
    except RecursionError:
        error = "JSON nested too deeply"
    else:
        if isinstance(value, dict):
            return RawRow(source=source, row=offset, data=value, unit="offset")
        kind = _JSON_KINDS.get(type(value), "null")  # JSON has no other kind
        error = f"a JSON {kind}, expected an object"
    message = f"{source} line at byte {offset}: {error}"
    return RawRow(source=source, row=offset, error=message, unit="offset")
