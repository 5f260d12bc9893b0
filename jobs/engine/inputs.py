"""Input files: find them, check their columns, plan shards without loading them, read a shard.

Flow: `list_input_files` -> `check_schema` (fail fast, before any judging) -> `plan_shards`
(footers and a 64 KiB sample only) -> on workers `read_shard` (streaming) -> `to_item`.

Formats, chosen by `InputSpec.format` or else by each file's suffix:

- Parquet (`.parquet`): a shard is a row range `[start, end)` of one file, cut at row-group
  boundaries where possible (a row group bigger than `shard_size` is split by row range).
  `RawRow.row` is the 0-based row number within the file.
- JSON Lines (`.jsonl`, `.ndjson`): a shard is a byte range `[start, end)` of one file. A reader
  skips the partial first line (unless `start == 0`) and reads every line that *starts* before
  `end`, to its end (the Hadoop rule): every line is read by exactly one shard. `RawRow.row` is
  the **byte offset of the line's first byte** in the file: stable, unique per file and exact,
  where a line number would need every earlier byte to be scanned. Empty (whitespace-only)
  lines are skipped; `\\r\\n` endings, a UTF-8 BOM and a last line without newline are fine.
- Gzipped JSON Lines (`.jsonl.gz`, `.ndjson.gz`): gzip cannot be entered mid-stream, so the
  whole file is one shard; `RawRow.row` is the byte offset in the *decompressed* stream.

In a folder, files whose names start with `_` or `.` (`_SUCCESS`, `.crc`), files in
sub-folders named so (`_temporary/`) and files of an unknown suffix are skipped; a glob or a
file named explicitly must have a known suffix unless `format` is set. A gzipped JSONL file
is never split: for parallelism prefer many plain (or many small gzipped) files.

Shard ids are `{file index:05d}-{start:012d}-{end:012d}-{8 hex of sha1(path, size)}`: the same
input files planned with the same `shard_size` give the same shards and ids, and a file whose
size changed gets new ids.

Row policies (see `to_item`): duplicate query ids are *not* handled here (the job decides);
contexts must be a list of strings; over-long contexts are truncated and flagged.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import itertools
import json
import math
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.engine.storage import filesystem, full_url, has_glob, is_transient, retry_call
from scorer_core.errors import ConfigError, CtxPrecError, InputError, StorageError
from scorer_core.scorer import validate_item
from scorer_core.types import ScoringItem

InputFormat = Literal["jsonl", "parquet"]
ShardKind = Literal["rows", "bytes"]

SAMPLE_BYTES = 64 * 1024
"""Bytes read from the start of a JSONL file to estimate bytes per row."""
READ_CHUNK = 1 << 20
"""Bytes read per request when streaming a JSONL shard."""
SCHEMA_SAMPLE_ROWS = 20
"""Valid JSON objects read from the first JSONL file to learn its columns."""
SCHEMA_SAMPLE_LINES = 200
"""Lines at most read from the first JSONL file to find `SCHEMA_SAMPLE_ROWS` objects."""
PARQUET_BATCH_ROWS = 1024
DEFAULT_MAX_CONTEXT_CHARS = 200_000
DEFAULT_MAX_CONTEXTS = 1000

_SUFFIXES: tuple[tuple[str, InputFormat, str | None], ...] = (
    (".jsonl.gz", "jsonl", "gzip"),
    (".ndjson.gz", "jsonl", "gzip"),
    (".jsonl", "jsonl", None),
    (".ndjson", "jsonl", None),
    (".parquet", "parquet", None),
)
_FORMATS: frozenset[str] = frozenset({"jsonl", "parquet"})


# -- specification --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Which input column holds each field.

    `query_id=None`: the file has no id column; the id is `f"{source}#{row}"` (stable while
    the file does not change). `expected_output=None`: there is no reference answer column.
    `context` is ignored when a `context_extractor` is set.
    """

    query_id: str | None = "query_id"
    input: str = "input"
    output: str = "output"
    expected_output: str | None = None
    context: str = "context"

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, str | None]) -> ColumnMap:
        """Build from a config mapping; unknown keys are a `ConfigError` naming them."""
        known = {"query_id", "input", "output", "expected_output", "context"}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ConfigError(f"columns: unknown key(s) {unknown}; known keys: {sorted(known)}")
        for key in ("input", "output", "context"):
            if key in mapping and not mapping[key]:
                raise ConfigError(f"columns.{key} must name a column")
        return cls(**dict(mapping))  # type: ignore[arg-type]


@dataclass(frozen=True)
class InputSpec:
    """Where the items are and how to read them (validated config lives elsewhere).

    path: a file, a folder (every file under it, recursively) or a glob; local or a URL.
    format: "jsonl" | "parquet" | None (from each file's suffix).
    context_extractor: "package.module:function", called with the raw row dict, returning the
    list of context strings; imported once per process.
    """

    path: str
    format: InputFormat | None = None
    columns: ColumnMap = field(default_factory=ColumnMap)
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    context_extractor: str | None = None

    def __post_init__(self) -> None:
        if self.format is not None and self.format not in _FORMATS:
            raise ConfigError(f"input format must be 'jsonl' or 'parquet', not {self.format!r}")
        if not self.path:
            raise ConfigError("input path is empty")


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One input file: its URL (absolute path when local), size in bytes, format."""

    path: str
    size: int
    format: InputFormat
    compression: str | None = None


@dataclass(frozen=True, slots=True)
class Shard:
    """A piece of one input file: rows `[start, end)` (Parquet) or bytes `[start, end)` (JSONL).

    For gzipped JSONL the shard is the whole file (`start == 0`, `end == compressed size`).
    """

    shard_id: str
    file_index: int
    path: str
    format: InputFormat
    kind: ShardKind
    start: int
    end: int
    compression: str | None = None


@dataclass(frozen=True, slots=True)
class RawRow:
    """One input row as read, before validation: `data` or else `error` is set.

    `row` is the 0-based row number within the file (Parquet, `unit == "row"`) or the byte
    offset of the line within the (decompressed) file (JSONL, `unit == "offset"`).
    """

    source: str
    row: int
    data: dict[str, Any] | None = None
    error: str | None = None
    unit: Literal["row", "offset"] = "row"

    @property
    def where(self) -> str:
        """Position for messages: "s3://b/f.parquet row 12" or "f.jsonl line at byte 345"."""
        if self.unit == "offset":
            return f"{self.source} line at byte {self.row}"
        return f"{self.source} row {self.row}"


@dataclass(frozen=True, slots=True)
class ItemRecord:
    """A validated item, normalized, with where it came from.

    truncated: some context was cut to `max_context_chars` or contexts beyond `max_contexts`
    were dropped; `contexts_cut` and `contexts_dropped` say how many of each.
    """

    query_id: str
    input: str
    output: str
    expected_output: str | None
    contexts: tuple[str, ...]
    source: str
    row: int
    truncated: bool = False
    contexts_cut: int = 0
    contexts_dropped: int = 0
    where: str = ""  # position for messages, as RawRow.where

    def to_scoring_item(self) -> ScoringItem:
        return ScoringItem(
            input=self.input,
            output=self.output,
            contexts=self.contexts,
            expected_output=self.expected_output,
        )


@dataclass(frozen=True, slots=True)
class RowError:
    """A row that cannot be scored; `message` names the position and the field."""

    source: str
    row: int
    message: str
    query_id: str | None = None


# -- listing --------------------------------------------------------------------------------


def _format_of(name: str, forced: InputFormat | None) -> tuple[InputFormat, str | None] | None:
    lower = name.lower()
    for suffix, fmt, compression in _SUFFIXES:
        if lower.endswith(suffix):
            if forced is not None and forced != fmt:
                return forced, None
            return fmt, compression
    if forced is not None:
        return forced, "gzip" if forced == "jsonl" and lower.endswith(".gz") else None
    return None


def _is_hidden(name: str, root: str | None) -> bool:
    """A name starting with `_` or `.`; under a listed folder, also any folder below it."""
    if root is not None and name.startswith(root.rstrip("/") + "/"):
        parts = name[len(root.rstrip("/")) + 1 :].split("/")
    else:
        parts = [name.rstrip("/").rsplit("/", 1)[-1]]
    return any(part.startswith(("_", ".")) for part in parts)


def list_input_files(spec: InputSpec) -> list[FileInfo]:
    """The input files, sorted by path. `InputError` naming the path when nothing matches or a
    file's format is unknown; `StorageError` when the store cannot be read."""
    fs, path, protocol = filesystem(spec.path, spec.storage_options)

    def listing() -> tuple[bool, dict[str, dict[str, Any]]]:
        if has_glob(path):
            return True, dict(fs.glob(path, detail=True))
        if fs.isdir(path):
            return False, dict(fs.find(path, detail=True))
        try:
            return True, {path: dict(fs.info(path))}
        except FileNotFoundError:
            return True, {}

    explicit, entries = retry_call(listing, what="list", url=spec.path)
    files: list[FileInfo] = []
    for name in sorted(entries):
        info = entries[name]
        if info.get("type") == "directory" or _is_hidden(name, None if explicit else path):
            continue
        found = _format_of(name, spec.format)
        if found is None:
            if explicit:
                raise InputError(
                    f"cannot tell the format of {full_url(protocol, name)} from its suffix "
                    "(.jsonl, .jsonl.gz, .ndjson, .parquet); set the input format"
                )
            continue
        fmt, compression = found
        files.append(
            FileInfo(full_url(protocol, name), int(info.get("size") or 0), fmt, compression)
        )
    if not files:
        raise InputError(
            f"no input files at {spec.path} (looked for .jsonl, .jsonl.gz, .ndjson, .parquet"
            f"{'' if spec.format is None else f' or any {spec.format} file'})"
        )
    return files


# -- schema check ---------------------------------------------------------------------------


def _required_columns(spec: InputSpec) -> list[tuple[str, str]]:
    cols = spec.columns
    wanted: list[tuple[str, str | None]] = [
        ("query_id", cols.query_id),
        ("input", cols.input),
        ("output", cols.output),
        ("expected_output", cols.expected_output),
        ("context", None if spec.context_extractor else cols.context),
    ]
    return [(fld, col) for fld, col in wanted if col is not None]


def check_schema(spec: InputSpec, files: Sequence[FileInfo]) -> tuple[str, ...]:
    """Fail fast, before any judging, when a configured column is missing.

    Opens the first non-empty file: Parquet reads only the schema (footer); JSONL reads up to
    `SCHEMA_SAMPLE_ROWS` valid objects and takes the union of their keys (so a JSONL file must
    spell out a configured optional column, even as null, in its first rows). Also imports the
    `context_extractor` and, for Parquet, checks that the context column is a list.
    Returns the columns found. Raises `InputError` naming the missing column(s), the file and the
    available columns.
    """
    if spec.context_extractor:
        load_extractor(spec.context_extractor)
    candidates = [f for f in files if f.size > 0] or list(files)
    if not candidates:
        raise InputError(f"no input files at {spec.path}")
    first = candidates[0]
    fs, fs_path, _ = filesystem(first.path, spec.storage_options)
    context_type: pa.DataType | None = None
    if first.format == "parquet":
        schema = retry_call(
            lambda: _read_parquet_schema(fs, fs_path, first.path), what="read", url=first.path
        )
        available = tuple(schema.names)
        if not spec.context_extractor and spec.columns.context in available:
            context_type = schema.field(spec.columns.context).type
    else:
        available = retry_call(
            lambda: _sample_jsonl_keys(fs, fs_path, first), what="read", url=first.path
        )
    missing = [f"{col!r} ({fld})" for fld, col in _required_columns(spec) if col not in available]
    if missing:
        raise InputError(
            f"input column(s) {', '.join(missing)} missing in {first.path}; "
            f"available columns: {sorted(available)}"
        )
    if context_type is not None and not (
        pa.types.is_list(context_type)
        or pa.types.is_large_list(context_type)
        or pa.types.is_fixed_size_list(context_type)
    ):
        raise InputError(
            f"column {spec.columns.context!r} (context) in {first.path} is {context_type}, "
            "expected a list of strings; set a context_extractor to convert it"
        )
    return available


def _read_parquet_schema(fs: fsspec.AbstractFileSystem, fs_path: str, url: str) -> pa.Schema:
    with _open(fs, fs_path) as handle:
        try:
            return pq.read_schema(handle)
        except pa.ArrowInvalid as exc:
            raise InputError(f"{url} is not a readable Parquet file: {exc}") from exc


def _sample_jsonl_keys(
    fs: fsspec.AbstractFileSystem, fs_path: str, info: FileInfo
) -> tuple[str, ...]:
    keys: dict[str, None] = {}
    objects = 0
    lines = 0
    with _open(fs, fs_path, info.compression) as handle:
        for offset, line in _lines_in_range(handle, 0, None):
            raw = _parse_line(info.path, offset, line)
            if raw is None:
                continue
            lines += 1
            if raw.data is not None:
                keys.update(dict.fromkeys(raw.data))
                objects += 1
            if objects >= SCHEMA_SAMPLE_ROWS or lines >= SCHEMA_SAMPLE_LINES:
                break
    if objects == 0:
        raise InputError(
            f"no valid JSON object in the first {lines} line(s) of {info.path}; is it JSON Lines?"
        )
    return tuple(keys)


# -- planning -------------------------------------------------------------------------------


def _shard_id(file_index: int, info: FileInfo, start: int, end: int) -> str:
    digest = hashlib.sha1(f"{info.path}\0{info.size}".encode()).hexdigest()[:8]
    return f"{file_index:05d}-{start:012d}-{end:012d}-{digest}"


def _make_shard(index: int, info: FileInfo, start: int, end: int) -> Shard:
    return Shard(
        shard_id=_shard_id(index, info, start, end),
        file_index=index,
        path=info.path,
        format=info.format,
        kind="rows" if info.format == "parquet" else "bytes",
        start=start,
        end=end,
        compression=info.compression,
    )


def plan_shards(spec: InputSpec, files: Sequence[FileInfo], shard_size: int) -> list[Shard]:
    """Shards of about `shard_size` rows each, in file order, reading only Parquet footers and
    the first `SAMPLE_BYTES` of each JSONL file. Deterministic for the same files."""
    if shard_size < 1:
        raise ConfigError(f"shard_size must be at least 1, not {shard_size}")
    shards: list[Shard] = []
    for index, info in enumerate(files):
        if info.format == "parquet":
            sizes = _row_group_sizes(spec, info)
            ranges = parquet_row_ranges(sizes, shard_size)
        elif info.compression is not None:
            ranges = [(0, info.size)] if info.size > 0 else []
        else:
            ranges = jsonl_byte_ranges(info.size, _jsonl_sample(spec, info), shard_size)
        shards.extend(_make_shard(index, info, start, end) for start, end in ranges)
    return shards


def parquet_row_ranges(row_group_sizes: Sequence[int], shard_size: int) -> list[tuple[int, int]]:
    """Row ranges covering every row once: consecutive small row groups are packed together
    up to `shard_size` rows; a row group larger than `shard_size` is split evenly."""
    ranges: list[tuple[int, int]] = []
    pack_start = 0
    pack_rows = 0
    offset = 0
    for rows in row_group_sizes:
        if rows == 0:
            continue
        if rows >= shard_size:
            if pack_rows:
                ranges.append((pack_start, pack_start + pack_rows))
            pieces = math.ceil(rows / shard_size)
            bounds = [offset + (rows * k) // pieces for k in range(pieces + 1)]
            ranges.extend(itertools.pairwise(bounds))
            offset += rows
            pack_start, pack_rows = offset, 0
            continue
        if pack_rows and pack_rows + rows > shard_size:
            ranges.append((pack_start, pack_start + pack_rows))
            pack_start, pack_rows = offset, 0
        pack_rows += rows
        offset += rows
    if pack_rows:
        ranges.append((pack_start, pack_start + pack_rows))
    return ranges


def jsonl_byte_ranges(size: int, sample: bytes, shard_size: int) -> list[tuple[int, int]]:
    """Byte ranges of about `shard_size` lines each, from the bytes per line in `sample` (the
    start of the file). Without a newline in the sample, lines are at least that long."""
    if size <= 0:
        return []
    newlines = sample.count(b"\n")
    bytes_per_row = len(sample) / newlines if newlines else max(len(sample), 1)
    step = max(1, math.ceil(bytes_per_row * shard_size))
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def _row_group_sizes(spec: InputSpec, info: FileInfo) -> list[int]:
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)

    def read() -> list[int]:
        with _open(fs, fs_path) as handle:
            try:
                meta = pq.read_metadata(handle)
            except pa.ArrowInvalid as exc:
                raise InputError(f"{info.path} is not a readable Parquet file: {exc}") from exc
        return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]

    return retry_call(read, what="read Parquet footer of", url=info.path)


def _jsonl_sample(spec: InputSpec, info: FileInfo) -> bytes:
    if info.size <= 0:
        return b""
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)
    end = min(info.size, SAMPLE_BYTES)
    data = retry_call(lambda: fs.cat_file(fs_path, start=0, end=end), what="read", url=info.path)
    return bytes(data)


# -- reading --------------------------------------------------------------------------------


def read_shard(spec: InputSpec, shard: Shard) -> Iterator[RawRow]:
    """Stream the rows of `shard`. A broken row becomes a `RawRow` with `error` (naming the
    file and position) and reading goes on. Opening is retried; a store failure mid-stream
    raises `StorageError` naming the file (the caller retries the whole shard)."""
    fs, fs_path, _ = filesystem(shard.path, spec.storage_options)
    if shard.format == "parquet":
        return _read_parquet_shard(spec, fs, fs_path, shard)
    return _read_jsonl_shard(fs, fs_path, shard)


def _read_jsonl_shard(
    fs: fsspec.AbstractFileSystem, fs_path: str, shard: Shard
) -> Iterator[RawRow]:
    end = None if shard.compression else shard.end
    start = 0 if shard.compression else shard.start
    # a small shard asks for little more than its range (a long line grows the reads)
    chunk = READ_CHUNK if end is None else min(READ_CHUNK, max(end - start, 0) + 64 * 1024)
    handle = retry_call(lambda: _open(fs, fs_path, shard.compression), what="open", url=shard.path)
    try:
        with handle:
            for offset, line in _lines_in_range(handle, start, end, chunk):
                raw = _parse_line(shard.path, offset, line)
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


def _open(fs: fsspec.AbstractFileSystem, fs_path: str, compression: str | None = None) -> IO[bytes]:
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


def _lines_in_range(
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


_BOM = b"\xef\xbb\xbf"


def _parse_line(source: str, offset: int, line: bytes) -> RawRow | None:
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


def _read_parquet_shard(
    spec: InputSpec, fs: fsspec.AbstractFileSystem, fs_path: str, shard: Shard
) -> Iterator[RawRow]:
    handle = retry_call(lambda: _open(fs, fs_path), what="open", url=shard.path)
    try:
        with handle:
            try:
                parquet = pq.ParquetFile(handle)
            except pa.ArrowInvalid as exc:
                raise InputError(f"{shard.path} is not a readable Parquet file: {exc}") from exc
            meta = parquet.metadata
            groups: list[int] = []
            first_row: int | None = None
            offset = 0
            for index in range(meta.num_row_groups):
                rows = meta.row_group(index).num_rows
                if offset < shard.end and offset + rows > shard.start:
                    groups.append(index)
                    if first_row is None:
                        first_row = offset
                offset += rows
            if first_row is None:
                return
            columns = None
            if not spec.context_extractor:
                names = set(parquet.schema_arrow.names)
                columns = [c for _, c in _required_columns(spec) if c in names]
            row = first_row
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


# -- validation -----------------------------------------------------------------------------


@functools.cache
def load_extractor(ref: str) -> Callable[[dict[str, Any]], Any]:
    """Import "package.module:function" once per process; `ConfigError` naming `ref` if not."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"context_extractor {ref!r} must look like 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            f"context_extractor {ref!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigError(
                f"context_extractor {ref!r}: {module_name!r} has no attribute {attr!r}"
            ) from exc
    if not callable(target):
        raise ConfigError(f"context_extractor {ref!r} is not callable")
    extractor: Callable[[dict[str, Any]], Any] = target
    return extractor


class _Invalid(Exception):
    """One field of a row is unusable (internal; becomes a RowError)."""


def to_item(
    spec: InputSpec,
    raw: RawRow,
    *,
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
    max_contexts: int = DEFAULT_MAX_CONTEXTS,
) -> ItemRecord | RowError:
    """Validate and normalize one row. Never raises for bad data: returns a `RowError` naming
    the position and the field.

    Policies:
    - query_id: a string (used as is) or an integer (stringified); null, empty, or any other
      type is an error. With `columns.query_id=None` the id is `f"{source}#{row}"`.
      Duplicate ids are not detected here (the job decides).
    - input: a non-empty string. output: a string, never null; empty only when there is a
      reference answer. expected_output: a string or null; empty/blank counts as no reference.
    - contexts: a list of strings, in retrieved order (positions matter). A string instead of a
      list, null, an empty list, or any non-string element (numbers are *not* stringified:
      that usually means the wrong column) is an error. Empty strings are kept (position).
      With `context_extractor` set, contexts come from calling it with the raw row dict; it
      raising, or returning anything but a list of strings, is an error for that row.
    - A context longer than `max_context_chars` is cut to that length; more than
      `max_contexts` contexts keep the first `max_contexts`; both set `truncated=True`.
    """
    if raw.error is not None or raw.data is None:
        return RowError(raw.source, raw.row, raw.error or f"{raw.where}: no data")
    data = raw.data
    cols = spec.columns
    query_id: str | None = None
    try:
        query_id = _query_id(raw, cols.query_id)
        text_input = _text(data, "input", cols.input, required=True)
        reference = _optional_text(data, cols.expected_output)
        output = _text(data, "output", cols.output, required=reference is None)
        contexts = _contexts(spec, data)
    except _Invalid as exc:
        return RowError(raw.source, raw.row, f"{raw.where}: {exc}", query_id)
    cut = 0
    dropped = 0
    if len(contexts) > max_contexts:
        dropped = len(contexts) - max_contexts
        contexts = contexts[:max_contexts]
    if any(len(c) > max_context_chars for c in contexts):
        cut = sum(1 for c in contexts if len(c) > max_context_chars)
        contexts = [c[:max_context_chars] for c in contexts]
    return ItemRecord(
        query_id=query_id,
        input=text_input,
        output=output,
        expected_output=reference,
        contexts=tuple(contexts),
        source=raw.source,
        row=raw.row,
        truncated=bool(cut or dropped),
        contexts_cut=cut,
        contexts_dropped=dropped,
        where=raw.where,
    )


def _query_id(raw: RawRow, column: str | None) -> str:
    if column is None:
        return f"{raw.source}#{raw.row}"
    assert raw.data is not None
    value = raw.data.get(column)
    label = f"query_id (column {column!r})"
    if value is None:
        raise _Invalid(f"{label} is {'missing' if column not in raw.data else 'null'}")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Invalid(f"{label} is a {type(value).__name__}, expected a string or an integer")
    text = str(value)
    if not text.strip():
        raise _Invalid(f"{label} is empty")
    return text


def _text(data: Mapping[str, Any], name: str, column: str, *, required: bool) -> str:
    label = f"{name} (column {column!r})"
    value = data.get(column)
    if value is None:
        raise _Invalid(f"{label} is {'missing' if column not in data else 'null'}")
    if not isinstance(value, str):
        raise _Invalid(f"{label} is a {type(value).__name__}, expected a string")
    if required and not value.strip():
        hint = "" if name == "input" else " and there is no reference answer"
        raise _Invalid(f"{label} is empty{hint}")
    return value


def _optional_text(data: Mapping[str, Any], column: str | None) -> str | None:
    if column is None:
        return None
    value = data.get(column)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Invalid(
            f"expected_output (column {column!r}) is a {type(value).__name__}, "
            "expected a string or null"
        )
    return value if value.strip() else None


def _contexts(spec: InputSpec, data: dict[str, Any]) -> list[str]:
    if spec.context_extractor:
        label = f"context (from context_extractor {spec.context_extractor!r})"
        extractor = load_extractor(spec.context_extractor)
        try:
            value = extractor(data)
        except Exception as exc:
            raise _Invalid(f"{label} raised {type(exc).__name__}: {exc}") from exc
    else:
        column = spec.columns.context
        label = f"context (column {column!r})"
        if column not in data:
            raise _Invalid(f"{label} is missing")
        value = data[column]
    if value is None:
        raise _Invalid(f"{label} is null, expected a list of strings")
    if isinstance(value, str):
        hint = (
            "; it looks like a JSON-encoded list: decode it with a context_extractor"
            if value.lstrip().startswith("[")
            else ""
        )
        raise _Invalid(f"{label} is a string, expected a list of strings{hint}")
    if not isinstance(value, list | tuple):
        raise _Invalid(f"{label} is a {type(value).__name__}, expected a list of strings")
    if not value:
        raise _Invalid(f"{label} is an empty list")
    for position, element in enumerate(value):
        if not isinstance(element, str):
            raise _Invalid(
                f"{label} element {position} is a {type(element).__name__}, expected a string"
            )
    return list(value)


def validate_record(record: ItemRecord | RowError) -> ItemRecord | RowError:
    """Reject items the scorer cannot take, with the row's position in the message."""
    if isinstance(record, RowError):
        return record
    try:
        validate_item(record.to_scoring_item())
    except InputError as exc:
        where = record.where or f"{record.source} row {record.row}"
        return RowError(record.source, record.row, f"{where}: {exc}", record.query_id)
    return record


def read_items(
    spec: InputSpec,
    shard: Shard,
    *,
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
    max_contexts: int = DEFAULT_MAX_CONTEXTS,
) -> Iterator[ItemRecord | RowError]:
    """A shard's rows, normalised and validated, in input order (streaming)."""
    for raw in read_shard(spec, shard):
        yield validate_record(
            to_item(spec, raw, max_context_chars=max_context_chars, max_contexts=max_contexts)
        )
