"""Check every input file before any judging, cheaply (Parquet footers, the first lines of
JSON Lines, a few files at a time): `InputError` naming the first file whose suffix or magic
bytes say another format than `input.format`, that lacks a configured column (carried ones
too), whose context column is not a list, or whose name is not UTF-8."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from jobs.core.storage import filesystem, retry_call
from jobs.core.text_safety import encodable, escaped
from jobs.inputs.columns import check_columns, file_columns
from jobs.inputs.listing import FileInfo
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
    if info.format != "parquet" and info.compression is None:
        fs, fs_path, _ = filesystem(info.path, spec.storage_options)
        magic = len(_PARQUET_MAGIC)
        head = retry_call(
            lambda: fs.cat_file(fs_path, start=0, end=magic), what="read", url=info.path
        )
        if bytes(head).startswith(_PARQUET_MAGIC):
            raise InputError(
                f"{info.path} is a Parquet file, but it is read as {info.format} "
                "(input.format); move it out of the input or set input.format to null"
            )
    available, context_type, _ = file_columns(spec, info, ())
    check_columns(spec, info.path, available, context_type)
