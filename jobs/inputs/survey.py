"""Check every input file before any judging: its format and its columns, cheaply.

`columns.inspect_input` learns the run's columns from the first file; a later file missing a
column used to surface only as error rows, with exit 0. `check_every_file` reads what
planning reads anyway (Parquet footers, the first lines of JSON Lines), a few files at a time,
and raises `InputError` naming the file when:

- the file's suffix names another format than the configured `input.format` (a `.parquet`
  in a folder read as jsonl), or a file read as JSON Lines starts with Parquet's magic bytes;
- a configured column (carried ones too) is missing: a Parquet file's schema, or the keys of
  a JSON Lines file's first `SCHEMA_SAMPLE_ROWS` objects (the rule of the first file);
- a Parquet file's context column is not a list;
- a file's name is not valid UTF-8 (it is written into every row's `source`).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import fsspec
import pyarrow as pa

from jobs.core.storage import filesystem, retry_call
from jobs.core.text_safety import encodable, escaped
from jobs.inputs.columns import _read_parquet_schema, _sample_jsonl, check_columns
from jobs.inputs.listing import FileInfo
from jobs.inputs.opening import open_input
from jobs.inputs.spec import InputSpec
from scorer_core.errors import InputError

_PARQUET_MAGIC = b"PAR1"
_SUFFIX_FORMATS = ((".parquet", "parquet"), (".jsonl", "jsonl"), (".ndjson", "jsonl"))
MAX_THREADS = 16
"""Files surveyed at once (each costs one or two small reads)."""


def check_every_file(spec: InputSpec, files: Sequence[FileInfo]) -> None:
    """`InputError` naming the first file (in listing order) of another format than the
    configured one or lacking a configured column. Empty files are skipped."""
    for info in files:
        if not encodable(info.path):  # bytes that are not UTF-8 in a file name
            raise InputError(
                f"{escaped(info.path)}: the file name is not valid UTF-8 and cannot be written "
                "into the results; rename the file"
            )
        _check_suffix(spec, info)
    todo = [info for info in files if info.size > 0]
    if not todo:
        return
    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(todo))) as pool:
        problems = list(pool.map(lambda info: _problem_of(spec, info), todo))
    first = next((problem for problem in problems if problem is not None), None)
    if first is not None:
        raise first


def _check_suffix(spec: InputSpec, info: FileInfo) -> None:
    if spec.format is None:
        return
    name = info.path.lower().removesuffix(".gz")
    for suffix, fmt in _SUFFIX_FORMATS:
        if name.endswith(suffix) and fmt != spec.format:
            raise InputError(
                f"{info.path} is a {fmt} file by its suffix, but input.format is {spec.format}: "
                "move it out of the input or set input.format to null (each file's format "
                "from its suffix)"
            )


def _problem_of(spec: InputSpec, info: FileInfo) -> InputError | None:
    try:
        _check_file(spec, info)
    except InputError as exc:
        return exc
    return None


def _check_file(spec: InputSpec, info: FileInfo) -> None:
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)
    context_type: pa.DataType | None = None
    if info.format == "parquet":
        schema = retry_call(
            lambda: _read_parquet_schema(fs, fs_path, info.path), what="read", url=info.path
        )
        available = tuple(schema.names)
        if not spec.context_extractor and spec.columns.context in available:
            context_type = schema.field(spec.columns.context).type
    else:
        if info.compression is None:
            head = retry_call(lambda: _head(fs, fs_path), what="read", url=info.path)
            if head.startswith(_PARQUET_MAGIC):
                raise InputError(
                    f"{info.path} is a Parquet file, but it is read as {info.format} "
                    "(input.format); move it out of the input or set input.format to null"
                )
        available, _ = retry_call(
            lambda: _sample_jsonl(fs, fs_path, info, ()), what="read", url=info.path
        )
    check_columns(spec, info.path, available, context_type)


def _head(fs: fsspec.AbstractFileSystem, fs_path: str) -> bytes:
    with open_input(fs, fs_path) as handle:
        return bytes(handle.read(len(_PARQUET_MAGIC)))
