"""Which files are the input (a file, a folder or a glob, each file's format from
`InputSpec.format` or its suffix), and how every step opens one (`open_input`).
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from jobs.core.storage import filesystem, full_url, has_glob, retry_call
from jobs.inputs.spec import InputFormat, InputSpec
from scorer_core.errors import CtxPrecError, InputError, StorageError


@dataclass(frozen=True, slots=True, kw_only=True)
class FileInfo:
    """One input file: its URL (absolute path when local), size in bytes, format."""

    path: str
    size: int
    format: InputFormat
    compression: str | None = None


_SUFFIXES: tuple[tuple[str, InputFormat, str | None], ...] = (
    (".jsonl.gz", "jsonl", "gzip"),
    (".ndjson.gz", "jsonl", "gzip"),
    (".jsonl", "jsonl", None),
    (".ndjson", "jsonl", None),
    (".parquet", "parquet", None),
)


def list_input_files(spec: InputSpec) -> list[FileInfo]:
    """The input files, sorted by path; `InputError` when none matches or a format is unknown."""
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
        size = int(info.get("size") or 0)
        url = full_url(protocol, name)
        files.append(FileInfo(path=url, size=size, format=fmt, compression=compression))
    if not files:
        looked = ".jsonl, .jsonl.gz, .ndjson, .parquet"
        if spec.format is not None:
            looked += f" or any {spec.format} file"
        raise InputError(f"no input files at {spec.path} (looked for {looked})")
    return files


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


def open_input(
    fs: fsspec.AbstractFileSystem, fs_path: str, compression: str | None = None
) -> IO[bytes]:
    """Open for reading (on object stores with exact ranged GETs, not read-ahead blocks)."""
    if compression:
        handle: IO[bytes] = fs.open(fs_path, "rb", compression=compression)
    elif isinstance(fs, LocalFileSystem):
        handle = fs.open(fs_path, "rb")
    else:
        handle = fs.open(fs_path, "rb", cache_type="none")
    return handle


@contextlib.contextmanager
def reading(
    fs: fsspec.AbstractFileSystem, fs_path: str, url: str, compression: str | None, where: str
) -> Iterator[IO[bytes]]:
    """The file at `url` opened (retried), its read errors named after `where`."""
    handle = retry_call(lambda: open_input(fs, fs_path, compression), what="open", url=url)
    try:
        with handle:
            yield handle
    except CtxPrecError:
        raise
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise InputError(f"{url} is not a readable gzip file: {type(exc).__name__}: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"reading {where} failed: {type(exc).__name__}: {exc}") from exc
