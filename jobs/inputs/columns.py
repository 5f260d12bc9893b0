"""Fail fast, before any judging, when the input lacks a configured column, and decide the
types of the carried columns; then check every file cheaply (`check_every_file`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec
import pyarrow as pa

from jobs.core.schema import CarriedColumn
from jobs.core.storage import filesystem, retry_call
from jobs.core.text_safety import encodable, escaped
from jobs.inputs.carry import carried_columns, decide_type, infer_json_type
from jobs.inputs.jsonl import lines_in_range, parse_line
from jobs.inputs.listing import FileInfo, open_input
from jobs.inputs.parquet import parquet_file
from jobs.inputs.spec import InputSpec, RawRow, load_extractor, required_columns
from scorer_core.errors import InputError

_PARQUET_MAGIC = b"PAR1"
_SUFFIX_FORMATS = ((".parquet", "parquet"), (".jsonl", "jsonl"), (".ndjson", "jsonl"))
MAX_THREADS = 16  # files checked at once (each costs one or two small reads)
SCHEMA_SAMPLE_ROWS = 20  # JSON objects read from the first JSONL file to learn its columns
SCHEMA_SAMPLE_LINES = 200  # lines at most read to find them


@dataclass(frozen=True)
class InputSchema:
    """What `inspect_input` learned: the first file's columns and the run's carried columns."""

    columns: tuple[str, ...]
    carried: tuple[CarriedColumn, ...]


def inspect_input(spec: InputSpec, files: Sequence[FileInfo]) -> InputSchema:
    """The first non-empty file's columns (a Parquet footer, or the first JSONL objects, which
    must spell out every configured column) and the carried columns' types; `InputError` naming
    the file when a column is missing or the context column is not a list."""
    if spec.context_extractor:
        load_extractor(spec.context_extractor)
    candidates = [file for file in files if file.size > 0] or list(files)
    if not candidates:
        raise InputError(f"no input files at {spec.path}")
    available, context_type, types = file_columns(spec, candidates[0], spec.carry)
    check_columns(spec, candidates[0].path, available, context_type)
    return InputSchema(available, carried_columns(spec.carry, spec.carry_to_verdicts, types))


def file_columns(
    spec: InputSpec, info: FileInfo, carry: Sequence[str]
) -> tuple[tuple[str, ...], pa.DataType | None, dict[str, pa.DataType]]:
    """A file's columns, its context column's type (Parquet only) and its `carry` columns' types."""
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)
    if info.format != "parquet":
        available, values = retry_call(
            lambda: _sample_jsonl(fs, fs_path, info, carry), what="read", url=info.path
        )
        types = {
            name: infer_json_type(name, values[name], info.path)
            for name in carry
            if name in available
        }
        return available, None, types

    def read_schema() -> pa.Schema:
        with open_input(fs, fs_path) as handle:
            return parquet_file(handle, info.path).schema_arrow

    schema = retry_call(read_schema, what="read", url=info.path)
    context = spec.columns.context
    has_context = not spec.context_extractor and context in schema.names
    types = {
        name: decide_type(name, schema.field(name).type, info.path)
        for name in carry
        if name in schema.names
    }
    return tuple(schema.names), schema.field(context).type if has_context else None, types


def _sample_jsonl(
    fs: fsspec.AbstractFileSystem, fs_path: str, info: FileInfo, carry: Sequence[str]
) -> tuple[tuple[str, ...], dict[str, list[Any]]]:
    """The keys of the sampled objects, and the sampled values of each carried column."""
    keys: dict[str, None] = {}
    values: dict[str, list[Any]] = {name: [] for name in carry}
    objects = lines = 0
    first: RawRow | None = None
    with open_input(fs, fs_path, info.compression) as handle:
        for offset, line in lines_in_range(handle, 0, None):
            if offset == 0 and line.startswith(_PARQUET_MAGIC):
                raise InputError(_parquet_read_as_jsonl(info))
            raw = parse_line(info.path, offset, line)
            if raw is None:
                continue
            lines += 1
            first = first or raw
            if raw.data is not None:
                keys.update(dict.fromkeys(raw.data))
                for name, found in values.items():
                    found.append(raw.data.get(name))
                objects += 1
            if objects >= SCHEMA_SAMPLE_ROWS or lines >= SCHEMA_SAMPLE_LINES:
                break
    if first is None:
        raise InputError(f"{info.path} is empty: it has no JSON Lines (one item per line)")
    if objects == 0:
        raise InputError(
            f"no valid JSON object in the first {lines} line(s) of {info.path}; is it JSON "
            f"Lines? The first: {first.error}"
        )
    return tuple(keys), values


def check_columns(
    spec: InputSpec, path: str, available: Collection[str], context_type: pa.DataType | None
) -> None:
    """`InputError` naming `path` when a column is missing or the context column not a list."""
    missing = [f"{col!r} ({fld})" for fld, col in required_columns(spec) if col not in available]
    if missing:
        raise InputError(
            f"input column(s) {', '.join(missing)} missing in {path}; "
            f"available columns: {sorted(available)}"
        )
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if context_type is not None and not any(is_list(context_type) for is_list in lists):
        raise InputError(
            f"column {spec.columns.context!r} (context) in {path} is {context_type}, "
            "expected a list of strings; set a context_extractor to convert it"
        )


def check_every_file(spec: InputSpec, files: Sequence[FileInfo]) -> None:
    """`InputError` naming the first file of another format or lacking a configured column."""
    for info in files:
        if not encodable(info.path):  # bytes that are not UTF-8 in a file name
            raise InputError(
                f"{escaped(info.path)}: the file name is not valid UTF-8 and cannot be written "
                "into the results; rename the file"
            )
        if not (spec.format == "parquet" and _is_parquet(spec, info)):
            _check_suffix(spec, info)  # a Parquet file of any name may be read as Parquet
    with ThreadPoolExecutor(max_workers=MAX_THREADS) as pool:  # threads made as needed
        todo = [info for info in files if info.size > 0]
        first = next(filter(None, pool.map(lambda info: _problem_of(spec, info), todo)), None)
    if first is not None:
        raise first


def _parquet_read_as_jsonl(info: FileInfo) -> str:
    return (
        f"{info.path} is a Parquet file (it starts with PAR1), but it is read as JSON Lines "
        "(its name or input.format): rename it to .parquet, or set input.format: parquet"
    )


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


def _is_parquet(spec: InputSpec, info: FileInfo) -> bool:
    """Whether the file starts as Parquet files do (the suffix aside)."""
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)
    end = len(_PARQUET_MAGIC)
    head = retry_call(lambda: fs.cat_file(fs_path, start=0, end=end), what="read", url=info.path)
    return bytes(head).startswith(_PARQUET_MAGIC)


def _problem_of(spec: InputSpec, info: FileInfo) -> InputError | None:
    try:
        if info.format != "parquet" and info.compression is None and _is_parquet(spec, info):
            raise InputError(_parquet_read_as_jsonl(info))
        available, context_type, _ = file_columns(spec, info, ())
        check_columns(spec, info.path, available, context_type)
    except InputError as exc:
        return exc
    return None
