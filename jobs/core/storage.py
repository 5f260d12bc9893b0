"""Typed helpers over fsspec for the job's store: local folders, s3://, gs://, az://.

Every store call goes through `retry_call`, the only retry layer (botocore's and s3fs' are off);
any other failure is one `StorageError` naming the URL and the operation. Writes are
all-or-nothing, and listings are never answered from a cache.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import posixpath
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import split_protocol
from fsspec.implementations.local import LocalFileSystem

from scorer_core.errors import CtxPrecError, StorageError
from scorer_core.retry import backoff_delay

if TYPE_CHECKING:
    import polars as pl

T = TypeVar("T")

#: Protocols that need an optional package, with the extra that installs it.
_OPTIONAL_PROTOCOLS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("gs", "gcs"), ("gcsfs", "gcs")),
    **dict.fromkeys(("az", "abfs", "abfss"), ("adlfs", "azure")),
}
_LOCAL_PROTOCOLS = frozenset({None, "file", "local"})
_S3_PROTOCOLS = frozenset({"s3", "s3a"})
_GCS_PROTOCOLS = frozenset({"gs", "gcs"})
# gcsfs (2026.10+) reads this at import; unset, it asks every bucket's type over gRPC before each
# call, and an endpoint without that service (an emulator, a proxy, a private endpoint) answers
# nothing: each store call waited about 60 s before gcsfs fell back (docs/output.md).
_GCSFS_ZONAL_PROBE = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"

#: Tries per store call (the first one included), and the backoff between them in seconds.
DEFAULT_ATTEMPTS = 5
DEFAULT_BASE_DELAY = 0.2
DEFAULT_MAX_DELAY = 10.0

# One attempt, so that `retry_call` is the only retry layer; the mode is named so that
# AWS_RETRY_MODE=adaptive cannot add botocore's client-side throttling sleeps underneath.
_BOTOCORE_SINGLE_ATTEMPT = {"mode": "standard", "total_max_attempts": 1}

# Exception class names (anywhere in the MRO) of failures a retry may fix, matched by name so
# that botocore, aiohttp and azure need not be importable here.
_TRANSIENT_CLASS_NAMES = frozenset(
    {
        *("EndpointConnectionError", "ConnectionClosedError", "ConnectTimeoutError"),
        *("ReadTimeoutError", "HTTPClientError", "IncompleteRead", "ResponseParserError"),
        *("ClientConnectionError", "ClientPayloadError", "ServerDisconnectedError"),
        *("ServerTimeoutError", "ServiceRequestError", "ServiceResponseError", "FSTimeoutError"),
    }
)
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EBUSY,  # s3fs: 503 SlowDown / ServiceUnavailable, 409 OperationAborted
        getattr(errno, "EREMOTEIO", errno.EIO),  # s3fs: 500 InternalError
        *(errno.EAGAIN, errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED),
        *(errno.ETIMEDOUT, errno.EPIPE),
    }
)
_PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    FileExistsError,
)
# Error codes botocore's and s3fs' own retries (off) treat as transient.
_TRANSIENT_CODES = frozenset(
    {
        *("SlowDown", "Throttling", "ThrottlingException", "ThrottledException"),
        *("RequestThrottled", "RequestThrottledException", "TooManyRequests"),
        *("TooManyRequestsException", "RequestLimitExceeded", "BandwidthLimitExceeded"),
        *("LimitExceededException", "ProvisionedThroughputExceededException"),
        *("TransactionInProgressException", "EC2ThrottledException", "ServiceUnavailable"),
        *("InternalError", "RequestTimeout", "RequestTimeoutException"),
        *("PriorRequestNotComplete", "BadDigest", "XAmzContentSHA256Mismatch"),
    }
)


def _retryable_status(value: object) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (value == 429 or 500 <= value < 600)
    )


def _classify_one(exc: BaseException) -> bool | None:
    """True: transient; False: permanent; None: cannot tell from this exception alone."""
    if isinstance(exc, _PERMANENT_OS_ERRORS):
        return False
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if any(cls.__name__ in _TRANSIENT_CLASS_NAMES for cls in type(exc).__mro__):
        return True
    statuses = [getattr(exc, attr, None) for attr in ("status", "status_code", "code")]
    response = getattr(exc, "response", None)
    if isinstance(response, Mapping):  # botocore ClientError
        if (response.get("Error") or {}).get("Code") in _TRANSIENT_CODES:
            return True
        statuses.append((response.get("ResponseMetadata") or {}).get("HTTPStatusCode"))
    if any(map(_retryable_status, statuses)):
        return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a failure that a retry may fix."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        verdict = _classify_one(current)
        if verdict is not None:
            return verdict
        current = current.__cause__ or current.__context__
    return False


def retry_call(
    fn: Callable[[], T],
    *,
    what: str,
    url: str,
    attempts: int = DEFAULT_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `fn`, retrying transient failures; else a `StorageError` saying `what` failed."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except CtxPrecError:
            raise
        except Exception as exc:
            if not is_transient(exc):
                raise StorageError(f"{what} {url} failed: {_describe(exc)}") from exc
            if attempt >= attempts:
                raise StorageError(
                    f"{what} {url} failed after {attempt} attempts: {_describe(exc)}"
                ) from exc
            sleep(backoff_delay(attempt - 1, base=DEFAULT_BASE_DELAY, cap=DEFAULT_MAX_DELAY))


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def has_glob(path: str) -> bool:
    """Whether `path` contains glob characters (`*`, `?`, `[`)."""
    return any(ch in path for ch in "*?[")


def s3_options(storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """s3fs options with our defaults: no listings cache (a stale listing makes a resume miss
    finished work), `endpoint_url` moved into `client_kwargs`, botocore at one attempt unless
    `config_kwargs` sets its own retries."""
    opts = dict(storage_options)
    opts.setdefault("use_listings_cache", False)
    endpoint = opts.pop("endpoint_url", None)
    if endpoint is not None:
        opts["client_kwargs"] = {"endpoint_url": endpoint, **(opts.get("client_kwargs") or {})}
    config_kwargs = dict(opts.get("config_kwargs") or {})
    retries = config_kwargs.get("retries")
    # A copy: botocore rewrites the dict it is given, which must not reach storage_options.
    config_kwargs["retries"] = dict(retries if retries is not None else _BOTOCORE_SINGLE_ATTEMPT)
    opts["config_kwargs"] = config_kwargs
    return opts


def filesystem(
    url: str, storage_options: Mapping[str, Any] | None = None
) -> tuple[fsspec.AbstractFileSystem, str, str]:
    """(filesystem, path inside it, protocol) for `url`; `StorageError` when it cannot open."""
    protocol, _ = split_protocol(url)
    opts = dict(storage_options or {})
    if protocol in _LOCAL_PROTOCOLS:
        local = LocalFileSystem()
        return local, local._strip_protocol(url), "file"
    if protocol in _S3_PROTOCOLS:
        opts = s3_options(opts)
    try:
        cls = fsspec.get_filesystem_class(protocol)
        if protocol in _GCS_PROTOCOLS and _plain_gcsfs(opts):
            from gcsfs.core import GCSFileSystem

            cls = GCSFileSystem
    except ImportError as exc:
        package, extra = _OPTIONAL_PROTOCOLS.get(protocol, (protocol, protocol))
        raise StorageError(
            f"cannot open {url}: {protocol}:// needs the '{package}' package; install the "
            f"{extra} extra (pip install 'context-precision-at-scale[{extra}]')"
        ) from exc
    except ValueError as exc:
        raise StorageError(f"cannot open {url}: unknown protocol {protocol!r}") from exc
    try:
        fs = cls(**opts)
    except Exception as exc:
        raise StorageError(
            f"cannot open {url}: the {protocol}:// filesystem rejected storage_options "
            f"{sorted(opts)}: {_describe(exc)}"
        ) from exc
    if protocol in _S3_PROTOCOLS:
        # s3fs' own retry loop runs `retries` times: a class attribute, so set here.
        fs.retries = 1
    return fs, cls._strip_protocol(url).rstrip("/"), protocol


def _plain_gcsfs(storage_options: Mapping[str, Any]) -> bool:
    """Whether gs:// gets gcsfs' plain filesystem, without the zonal/HNS bucket probe: the
    endpoint is not Google's (`endpoint_url`, or `STORAGE_EMULATOR_HOST`) and the user has not
    set `GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT` (their choice wins). Chosen here, in every process
    that opens the store, so Ray's workers need no variable of their own."""
    if _GCSFS_ZONAL_PROBE in os.environ:
        return False
    endpoint = storage_options.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    return bool(endpoint) and "googleapis.com" not in str(endpoint)


def full_url(protocol: str, path: str) -> str:
    """The URL of `path` for messages and records: plain absolute path when local."""
    return path if protocol == "file" else f"{protocol}://{path}"


@dataclass(kw_only=True)
class Store:
    """A filesystem and a root folder in it; methods take filesystem paths (`join`, `list`)."""

    fs: fsspec.AbstractFileSystem
    root: str
    protocol: str
    attempts: int = DEFAULT_ATTEMPTS
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    def join(self, *parts: str) -> str:
        """The filesystem path of `parts` under the root."""
        return posixpath.join(self.root, *(part.strip("/") for part in parts if part))

    def url(self, path: str) -> str:
        """Full URL of `path` for messages (s3://bucket/key; absolute path when local)."""
        return full_url(self.protocol, path)

    def _call(self, what: str, path: str, fn: Callable[[], T]) -> T:
        return retry_call(
            fn, what=what, url=self.url(path), attempts=self.attempts, sleep=self.sleep
        )

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        """Write `data` to `path` all-or-nothing."""
        if self.is_local:
            self._call("write", path, lambda: _local_atomic(path, data=data))
        else:
            self._call("write", path, lambda: self.fs.pipe_file(path, data))

    def upload_file_atomic(self, local_path: str, path: str) -> None:
        """Copy the local file `local_path` to `path` all-or-nothing."""
        if self.is_local:
            self._call("write", path, lambda: _local_atomic(path, source=local_path))
        else:
            self._call("write", path, lambda: self.fs.put_file(local_path, path))

    def write_parquet_atomic(self, path: str, table: pa.Table, compression: str = "zstd") -> None:
        """Write a shard-sized `table` all-or-nothing (serialized in memory)."""
        sink = io.BytesIO()
        pq.write_table(table, sink, compression=compression)
        self.write_bytes_atomic(path, sink.getvalue())

    def rm(self, path: str, recursive: bool = False) -> None:
        """Delete `path`, if it is there (a folder needs `recursive=True`)."""

        def remove() -> None:
            try:
                self.fs.rm(path, recursive=recursive)
            except FileNotFoundError:
                pass
            finally:
                self.fs.invalidate_cache(path)

        self._call("delete", path, remove)

    def read_bytes(self, path: str) -> bytes:
        """The whole content of `path`; a missing file is a `StorageError`."""
        return bytes(self._call("read", path, lambda: self.fs.cat_file(path)))

    def exists(self, path: str) -> bool:
        """Whether `path` exists, asked of the store itself (never answered from a cache)."""

        def ask() -> bool:
            self.fs.invalidate_cache(path)
            return bool(self.fs.exists(path))

        return self._call("check", path, ask)

    def list(self, prefix_or_glob: str) -> builtins.list[str]:
        """Files matching a glob, under a folder (recursively), or the one file, sorted."""

        def ask() -> builtins.list[str]:
            base = prefix_or_glob
            if has_glob(base):
                self.fs.invalidate_cache(re.split(r"[*?\[]", base, maxsplit=1)[0])
                found = self.fs.glob(base, detail=True)
                names = [name for name, info in found.items() if info.get("type") != "directory"]
            else:
                self.fs.invalidate_cache(base)
                if self.fs.isdir(base):
                    names = builtins.list(self.fs.find(base))
                else:
                    names = [base] if self.fs.exists(base) else []
            return sorted(str(name) for name in names)

        return self._call("list", prefix_or_glob, ask)


def open_store(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    create: bool = True,
) -> Store:
    """The store rooted at `url`: a local folder (created when missing, with `create`; writes
    create their folders) or a bucket prefix."""
    fs, root, protocol = filesystem(url, storage_options)
    store = Store(fs=fs, root=root, protocol=protocol, attempts=attempts, sleep=sleep)
    if store.is_local and create:
        store._call("create folder", root, lambda: os.makedirs(root, exist_ok=True))
    return store


def _local_atomic(path: str, *, data: bytes = b"", source: str | None = None) -> None:
    """Write `data` (or copy `source`) to a hidden temp file, fsync it, rename it to `path`."""
    folder, name = os.path.split(path)
    os.makedirs(folder, exist_ok=True)
    # not tempfile.mkstemp: its 0600 would survive the rename; shared files get the umask's mode
    tmp = os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex}")
    try:
        if source is None:
            Path(tmp).write_bytes(data)
        else:
            shutil.copyfile(source, tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def scan(store: Store, paths: list[str]) -> pl.LazyFrame:
    """A lazy scan over Parquet files in `store` (local paths directly, others via fsspec)."""
    import polars as pl

    if store.is_local:
        return pl.scan_parquet(paths)
    import pyarrow.dataset as ds
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    dataset = ds.dataset(paths, format="parquet", filesystem=PyFileSystem(FSSpecHandler(store.fs)))
    return pl.scan_pyarrow_dataset(dataset)
