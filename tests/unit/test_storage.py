"""jobs.core.storage: local and S3 (moto) stores, atomic writes, fresh listings, retries.

Retries on s3:// are counted where they happen: at the server (`FaultyS3` records every
request it answers) and, when the endpoint is down and nothing reaches a server, at the
client (a botocore `before-send` hook fires once per HTTP request botocore sends).
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from botocore.exceptions import (  # type: ignore[import-untyped]
    ClientError,
    EndpointConnectionError,
)
from fsspec.registry import _registry as fsspec_registry
from s3fs.errors import translate_boto_error

from jobs.core.storage import (
    DEFAULT_ATTEMPTS,
    DEFAULT_BASE_DELAY,
    Store,
    filesystem,
    is_transient,
    open_store,
    retry_call,
    s3_options,
)
from scorer_core.errors import CtxPrecError, InputError, StorageError
from scorer_core.retry import backoff_delay
from tests.support.fakes import SleepLog
from tests.support.moto import MotoS3, moto_storage_options, start_moto_server
from tests.support.s3_faults import FaultyS3


def _client_error(status: int, code: str) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


def _count_sends(store: Store) -> list[str]:
    """Every HTTP request botocore sends for `store` from now on, by operation name."""
    sent: list[str] = []

    def record(event_name: str, **_: Any) -> None:
        sent.append(event_name.rsplit(".", 1)[-1])

    store.fs.s3.meta.events.register("before-send.s3", record)
    return sent


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


# -- opening ---------------------------------------------------------------------------------


def test_open_local_relative_creates_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_store("out/run1", {})
    assert store.root == str(tmp_path / "out" / "run1")
    assert (tmp_path / "out" / "run1").is_dir()
    assert store.join("a", "b.parquet") == str(tmp_path / "out" / "run1" / "a" / "b.parquet")
    assert store.url(store.join("x")) == str(tmp_path / "out" / "run1" / "x")
    assert store.is_local


def test_open_local_file_url(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}/o", None)
    assert store.root == f"{tmp_path}/o"
    assert (tmp_path / "o").is_dir()


def test_s3_options_defaults_and_endpoint_mapping() -> None:
    opts = s3_options({"endpoint_url": "http://h:1", "client_kwargs": {"region_name": "r"}})
    assert opts == {
        "use_listings_cache": False,
        "client_kwargs": {"region_name": "r", "endpoint_url": "http://h:1"},
        "config_kwargs": {"retries": {"mode": "standard", "total_max_attempts": 1}},
    }
    assert s3_options({"use_listings_cache": True})["use_listings_cache"] is True
    explicit = s3_options({"endpoint_url": "a", "client_kwargs": {"endpoint_url": "b"}})
    assert explicit["client_kwargs"] == {"endpoint_url": "b"}


def test_s3_options_keep_the_callers_botocore_settings() -> None:
    given = {"config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 3}}}
    assert s3_options(given)["config_kwargs"] == {
        "connect_timeout": 2,
        "retries": {"max_attempts": 3},
    }
    other = s3_options({"config_kwargs": {"connect_timeout": 2}})["config_kwargs"]
    assert other == {
        "connect_timeout": 2,
        "retries": {"mode": "standard", "total_max_attempts": 1},
    }
    assert given == {"config_kwargs": {"connect_timeout": 2, "retries": {"max_attempts": 3}}}


def test_s3_clients_make_one_attempt_whatever_the_environment_says(
    moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What reaches botocore and s3fs: one attempt each, so `retry_call` alone retries. The
    AWS_* variables would otherwise set botocore's attempts and mode (adaptive mode also
    sleeps before requests on its own)."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "7")
    monkeypatch.setenv("AWS_RETRY_MODE", "adaptive")
    options = {**moto_s3.storage_options, "skip_instance_cache": True}
    fs, _, _ = filesystem(f"s3://{moto_s3.bucket}/p", options)
    assert fs.retries == 1
    assert fs.s3.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}

    retries = {"mode": "legacy", "max_attempts": 2}
    fs, _, _ = filesystem(
        f"s3://{moto_s3.bucket}/p", {**options, "config_kwargs": {"retries": retries}}
    )
    assert fs.s3.meta.config.retries == {"mode": "legacy", "total_max_attempts": 3}
    assert retries == {"mode": "legacy", "max_attempts": 2}  # botocore rewrote a copy


def test_open_s3_store_uses_fresh_listings(moto_s3: MotoS3) -> None:
    store = open_store(f"s3://{moto_s3.bucket}/some/prefix/", moto_s3.storage_options)
    assert store.protocol == "s3"
    assert store.root == f"{moto_s3.bucket}/some/prefix"
    assert store.fs.dircache.use_listings_cache is False
    assert store.url(store.join("x.parquet")) == f"s3://{moto_s3.bucket}/some/prefix/x.parquet"
    assert "endpoint_url" not in moto_s3.storage_options["client_kwargs"]  # input not mutated


def test_open_gs_without_network() -> None:
    store = open_store("gs://bucket/prefix", {"token": "anon"})
    assert store.protocol == "gs"
    assert store.url(store.join("a")) == "gs://bucket/prefix/a"


@pytest.mark.parametrize(
    ("options", "environment", "plain"),
    [
        ({"endpoint_url": "http://127.0.0.1:4443"}, {}, True),
        ({}, {"STORAGE_EMULATOR_HOST": "127.0.0.1:4443"}, True),
        ({"endpoint_url": "https://storage.googleapis.com"}, {}, False),
        ({}, {}, False),
        (
            {"endpoint_url": "http://127.0.0.1:4443"},
            {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "1"},
            False,
        ),
    ],
    ids=["endpoint-url", "emulator-host", "google-endpoint", "google", "user-kept-the-probe"],
)
def test_gs_on_an_endpoint_not_googles_skips_the_zonal_bucket_probe(
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, str],
    environment: dict[str, str],
    plain: bool,
) -> None:
    """gcsfs' default filesystem asks each bucket's type over gRPC before every call, which an
    emulator or a private endpoint never answers (60 s per call); on such an endpoint the store
    gets gcsfs' plain filesystem, unless the user set GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT."""
    import fsspec
    import gcsfs.core

    for name in ("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "STORAGE_EMULATOR_HOST"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    registered = fsspec.get_filesystem_class("gs")  # what gcsfs chose when it was imported
    if registered is gcsfs.core.GCSFileSystem:
        pytest.skip("gcsfs was imported with its zonal bucket probe off: nothing to choose")
    given = {"token": "anon", "skip_instance_cache": True, **options}
    fs, root, protocol = filesystem("gs://bucket/prefix", given)
    assert (root, protocol) == ("bucket/prefix", "gs")
    assert type(fs) is (gcsfs.core.GCSFileSystem if plain else registered)


@pytest.mark.parametrize(
    ("url", "module", "protocol", "extra"),
    [("gs://b/p", "gcsfs", "gs", "gcs"), ("az://c/p", "adlfs", "az", "azure")],
)
def test_missing_optional_package(
    monkeypatch: pytest.MonkeyPatch, url: str, module: str, protocol: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    monkeypatch.delitem(fsspec_registry, protocol, raising=False)
    with pytest.raises(StorageError, match=rf"install the {extra} extra") as info:
        open_store(url, {})
    assert url in str(info.value)
    assert module in str(info.value)


def test_unknown_protocol() -> None:
    with pytest.raises(StorageError, match=r"nosuchproto://x.*unknown protocol"):
        open_store("nosuchproto://x/y", {})


def test_bad_storage_options_named() -> None:
    with pytest.raises(StorageError, match=r"s3://b/p.*rejected storage_options"):
        open_store("s3://b/p", {"key": "a", "username": "b", "skip_instance_cache": True})


# -- local writes ----------------------------------------------------------------------------


def test_local_write_read_overwrite(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), {})
    path = store.join("deep", "er", "f.bin")
    store.write_bytes_atomic(path, b"one")
    assert store.read_bytes(path) == b"one"
    store.write_bytes_atomic(path, b"two!")
    assert store.read_bytes(path) == b"two!"
    assert _leftovers(tmp_path / "deep" / "er") == []


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_local_write_failure_leaves_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    store = open_store(str(tmp_path), {}, sleep=SleepLog())
    path = store.join("f.bin")
    store.write_bytes_atomic(path, b"old")

    def boom(*args: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(StorageError, match=rf"write {path} failed: OSError.*No space") as info:
        store.write_bytes_atomic(path, b"new content that must never be seen")
    monkeypatch.undo()
    assert isinstance(info.value.__cause__, OSError)
    assert Path(path).read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_local_write_failure_new_file_never_appears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(str(tmp_path), {})
    path = store.join("new.bin")

    def boom(*args: Any) -> None:
        raise OSError(errno.EIO, "disk error")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(StorageError):
        store.write_bytes_atomic(path, b"x" * 100_000)
    monkeypatch.undo()
    assert not os.path.exists(path)
    assert list(tmp_path.iterdir()) == []


def test_local_upload_file_atomic(tmp_path: Path) -> None:
    source = tmp_path / "src.bin"
    source.write_bytes(b"payload" * 1000)
    store = open_store(str(tmp_path / "store"), {})
    target = store.join("sub", "dst.bin")
    store.upload_file_atomic(str(source), target)
    assert store.read_bytes(target) == b"payload" * 1000
    assert _leftovers(tmp_path / "store" / "sub") == []
    with pytest.raises(StorageError, match=r"missing\.bin"):
        store.upload_file_atomic(str(tmp_path / "missing.bin"), store.join("other.bin"))
    assert not store.exists(store.join("other.bin"))
    assert _leftovers(tmp_path / "store") == []


def test_local_parquet_roundtrip(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), {})
    table = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    path = store.join("t.parquet")
    store.write_parquet_atomic(path, table)
    assert pq.read_table(path).equals(table)
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_local_read_missing_names_path(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), {})
    with pytest.raises(StorageError, match=rf"read {tmp_path}/nope.bin failed: FileNotFound"):
        store.read_bytes(store.join("nope.bin"))


def test_local_list_exists_rm(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), {})
    for name in ["b/2.parquet", "a/1.parquet", "a/x/3.parquet", "a/_SUCCESS"]:
        store.write_bytes_atomic(store.join(name), b"1")
    root = store.root
    assert store.list(store.join("a")) == [
        f"{root}/a/1.parquet",
        f"{root}/a/_SUCCESS",
        f"{root}/a/x/3.parquet",
    ]
    assert store.list(store.join("*", "*.parquet")) == [
        f"{root}/a/1.parquet",
        f"{root}/b/2.parquet",
    ]
    assert store.list(store.join("a/1.parquet")) == [f"{root}/a/1.parquet"]
    assert store.list(store.join("nothing-here")) == []
    assert store.exists(store.join("a/1.parquet"))
    assert not store.exists(store.join("a/9.parquet"))
    store.rm(store.join("a/1.parquet"))
    assert not store.exists(store.join("a/1.parquet"))
    store.rm(store.join("a/1.parquet"))  # deleting nothing is fine
    with pytest.raises(StorageError, match=rf"delete {root}/a failed"):
        store.rm(store.join("a"))
    store.rm(store.join("a"), recursive=True)
    assert store.list(store.join("a")) == []
    assert store.list(store.root) == [f"{root}/b/2.parquet"]


# -- retries ---------------------------------------------------------------------------------


def test_is_transient_classification() -> None:
    assert is_transient(ConnectionResetError())
    assert is_transient(TimeoutError())
    assert is_transient(EndpointConnectionError(endpoint_url="http://x"))
    assert is_transient(_client_error(500, "InternalError"))
    assert is_transient(_client_error(503, "SlowDown"))
    assert is_transient(_client_error(400, "Throttling"))
    assert not is_transient(_client_error(404, "NoSuchKey"))
    assert not is_transient(_client_error(403, "AccessDenied"))
    assert not is_transient(_client_error(400, "InvalidArgument"))
    # as s3fs raises them: translated to OSError subclasses, the ClientError as cause
    assert is_transient(translate_boto_error(_client_error(500, "InternalError")))
    assert is_transient(translate_boto_error(_client_error(503, "SlowDown")))
    assert is_transient(translate_boto_error(_client_error(502, "BadGateway")))
    assert not is_transient(translate_boto_error(_client_error(404, "NoSuchBucket")))
    # What botocore's and s3fs' own retries treated as transient, now that they are off: a
    # payload damaged on the way, a request the service timed out, throttling by any name.
    assert is_transient(translate_boto_error(_client_error(400, "BadDigest")))
    assert is_transient(translate_boto_error(_client_error(400, "XAmzContentSHA256Mismatch")))
    assert is_transient(translate_boto_error(_client_error(400, "RequestTimeout")))
    assert is_transient(translate_boto_error(_client_error(400, "RequestThrottledException")))
    assert is_transient(translate_boto_error(_client_error(400, "PriorRequestNotComplete")))
    assert not is_transient(translate_boto_error(_client_error(400, "InvalidDigest")))
    assert not is_transient(translate_boto_error(_client_error(403, "ExpiredToken")))
    assert not is_transient(translate_boto_error(_client_error(403, "AccessDenied")))
    assert not is_transient(ValueError("bad"))
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = ConnectionRefusedError()
    assert is_transient(wrapped)

    class HttpError(Exception):
        def __init__(self, code: int) -> None:
            super().__init__(f"HTTP {code}")
            self.code = code

    assert is_transient(HttpError(429))
    assert is_transient(HttpError(503))
    assert not is_transient(HttpError(404))


def test_backoff_is_jittered_and_capped() -> None:
    assert backoff_delay(0, base=0.5, cap=4, rng=lambda: 1.0) == 0.5
    assert backoff_delay(3, base=0.5, cap=4, rng=lambda: 1.0) == 4.0
    assert backoff_delay(10, base=0.5, cap=4, rng=lambda: 0.25) == 1.0
    assert backoff_delay(2, base=0.5, cap=4, rng=lambda: 0.0) == 0.0


def test_retry_transient_then_success() -> None:
    sleeps = SleepLog()
    outcomes: list[Exception | str] = [ConnectionResetError("reset"), TimeoutError(), "ok"]

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert retry_call(call, what="read", url="s3://b/k", attempts=5, sleep=sleeps) == "ok"
    assert len(sleeps.calls) == 2
    assert all(0 <= s <= 10 for s in sleeps.calls)


def test_retry_gives_up_after_attempts_naming_url() -> None:
    sleeps = SleepLog()
    calls = 0

    def call() -> None:
        nonlocal calls
        calls += 1
        raise translate_boto_error(_client_error(503, "SlowDown"))

    with pytest.raises(StorageError, match=r"write s3://b/k failed after 4 attempts") as info:
        retry_call(call, what="write", url="s3://b/k", attempts=4, sleep=sleeps)
    assert calls == 4
    assert len(sleeps.calls) == 3
    assert info.value.__cause__ is not None


def test_retry_permanent_fails_at_once() -> None:
    sleeps = SleepLog()
    with pytest.raises(StorageError, match=r"read s3://b/k failed: PermissionError"):
        retry_call(
            lambda: (_ for _ in ()).throw(PermissionError("denied")),
            what="read",
            url="s3://b/k",
            sleep=sleeps,
        )
    assert sleeps.calls == []


def test_retry_lets_project_errors_through() -> None:
    def call() -> None:
        raise InputError("bad file")

    with pytest.raises(InputError, match="bad file"):
        retry_call(call, what="read", url="x", sleep=SleepLog())
    assert issubclass(StorageError, CtxPrecError)


# -- S3 through the moto server ----------------------------------------------------------------


def test_s3_roundtrip(moto_s3: MotoS3, s3_prefix: str) -> None:
    store = open_store(s3_prefix, moto_s3.storage_options)
    path = store.join("shards", "00001.parquet")
    table = pa.table({"q": ["a", "b"], "score": [0.5, 1.0]})
    store.write_parquet_atomic(path, table)
    assert store.exists(path)
    assert pq.read_table(pa.BufferReader(store.read_bytes(path))).equals(table)
    store.write_bytes_atomic(store.join("shards", "_SUCCESS"), b"")
    store.write_bytes_atomic(store.join("other", "x.json"), b"{}")
    assert store.list(store.join("shards")) == [
        store.join("shards", "00001.parquet"),
        store.join("shards", "_SUCCESS"),
    ]
    assert store.list(store.join("*", "*.parquet")) == [path]
    assert store.list(store.root) == sorted(
        [path, store.join("shards", "_SUCCESS"), store.join("other", "x.json")]
    )
    store.rm(store.join("shards"), recursive=True)
    assert store.list(store.join("shards")) == []
    assert not store.exists(path)
    with pytest.raises(StorageError, match=rf"read {s3_prefix}/shards/00001.parquet failed"):
        store.read_bytes(path)


@pytest.mark.parametrize("listings_cache", [None, True])
def test_s3_sees_other_writer_at_once(
    moto_s3: MotoS3, s3_prefix: str, listings_cache: bool | None
) -> None:
    options = dict(moto_s3.storage_options)
    if listings_cache is not None:  # even a user who turns the listings cache on
        options["use_listings_cache"] = listings_cache
        options["skip_instance_cache"] = True
    store = open_store(s3_prefix, options)
    store.write_bytes_atomic(store.join("a.txt"), b"a")
    assert store.list(store.root) == [store.join("a.txt")]  # fills a listings cache, if any
    assert not store.exists(store.join("b.txt"))

    other = s3fs.S3FileSystem(
        key="testing",
        secret="testing",
        client_kwargs={"endpoint_url": moto_s3.endpoint_url},
        skip_instance_cache=True,
    )
    other.pipe_file(store.join("b.txt"), b"b")
    assert store.exists(store.join("b.txt"))
    assert store.list(store.root) == [store.join("a.txt"), store.join("b.txt")]
    assert store.list(store.join("*.txt")) == [store.join("a.txt"), store.join("b.txt")]


def test_s3_bad_bucket_write_fails_and_leaves_nothing(moto_s3: MotoS3) -> None:
    sleeps = SleepLog()
    store = open_store("s3://no-such-bucket-xyz/p", moto_s3.storage_options, sleep=sleeps)
    with pytest.raises(StorageError, match=r"write s3://no-such-bucket-xyz/p/f.bin failed"):
        store.write_bytes_atomic(store.join("f.bin"), b"data")
    assert sleeps.calls == []  # not transient: no retry
    assert not store.exists(store.join("f.bin"))


def _faulty_store(endpoint: FaultyS3, prefix: str, sleeps: SleepLog, **kwargs: Any) -> Store:
    """A store on `prefix` (s3://bucket/...) served by `endpoint`, its own s3fs instance."""
    options = moto_storage_options(endpoint.url, skip_instance_cache=True)
    return open_store(prefix, options, sleep=sleeps, **kwargs)


def test_s3_slowdown_outage_is_retried_by_one_layer_and_recovers(
    moto_s3: MotoS3, s3_prefix: str, faulty_s3: FaultyS3
) -> None:
    sleeps = SleepLog()
    store = _faulty_store(faulty_s3, s3_prefix, sleeps)
    path = store.join("f.bin")
    key = "/" + path
    faulty_s3.fail_next(DEFAULT_ATTEMPTS - 1)  # 503 SlowDown: S3 asking for a slower pace
    store.write_bytes_atomic(path, b"data")
    # One request per try: neither botocore nor s3fs retried underneath (before the layering
    # was deliberate, each try was 5 botocore x 5 s3fs = 25 requests).
    assert [r.status for r in faulty_s3.requests("PUT", under=key)] == [503] * 4 + [200]
    assert len(sleeps.calls) == DEFAULT_ATTEMPTS - 1
    for attempt, slept in enumerate(sleeps.calls):
        assert 0 <= slept <= DEFAULT_BASE_DELAY * 2**attempt
    before = len(faulty_s3.seen)
    faulty_s3.fail_next(1, status=500, code="InternalError")
    assert store.read_bytes(path) == b"data"
    # s3fs' cat_file asks for the size, then the bytes; the failed size request is the one
    # try that failed, and the whole call was tried again.
    assert [(r.method, r.status) for r in faulty_s3.seen[before:]] == [
        ("HEAD", 500),
        ("HEAD", 200),
        ("GET", 200),
    ]


def test_s3_outage_longer_than_the_budget_fails_after_one_request_per_try(
    moto_s3: MotoS3, s3_prefix: str, faulty_s3: FaultyS3
) -> None:
    sleeps = SleepLog()
    store = _faulty_store(faulty_s3, s3_prefix, sleeps, attempts=3)
    path = store.join("f.bin")
    faulty_s3.fail_next(3)
    with pytest.raises(StorageError, match=rf"write {s3_prefix}/f.bin failed after 3 attempts"):
        store.write_bytes_atomic(path, b"data")
    assert len(faulty_s3.requests("PUT", under="/" + path)) == 3
    assert len(sleeps.calls) == 2


@pytest.mark.parametrize("operation", ["write", "read"])
def test_s3_permanent_errors_fail_after_one_request(
    moto_s3: MotoS3, s3_prefix: str, faulty_s3: FaultyS3, operation: str
) -> None:
    """A missing bucket or a denied key is not retried by any layer: no request is sent
    twice, and there is no wait. (Reading a missing key, s3fs also lists the bucket to see
    whether the key is a folder: a second question, not a retry.)"""
    sleeps = SleepLog()
    missing = _faulty_store(faulty_s3, "s3://no-such-bucket-xyz/p", sleeps)
    denied = _faulty_store(faulty_s3, s3_prefix, sleeps)
    faulty_s3.deny("/" + denied.join("secret"))
    for store, reason in ((missing, "FileNotFoundError"), (denied, "PermissionError")):
        path = store.join("secret", "f.bin")
        before = len(faulty_s3.seen)
        with pytest.raises(StorageError, match=rf"{operation} s3://.*/f.bin failed: {reason}"):
            if operation == "write":
                store.write_bytes_atomic(path, b"data")
            else:
                store.read_bytes(path)
        sent = [(r.method, r.path, r.status) for r in faulty_s3.seen[before:]]
        status = 404 if store is missing else 403
        assert sent[0] == ("PUT" if operation == "write" else "HEAD", "/" + path, status)
        assert len(set(sent)) == len(sent)
    assert sleeps.calls == []


def test_s3_refused_connections_are_tried_once_per_attempt_and_the_outage_recovers(
    moto_s3: MotoS3, s3_prefix: str, faulty_s3: FaultyS3
) -> None:
    """The endpoint is down (connections refused) and comes back during the backoff: the
    injected sleep brings it back, so the outage lasts exactly two tries."""
    slept: list[float] = []

    def sleep_then_restart(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            faulty_s3.start()

    store = open_store(
        s3_prefix,
        moto_storage_options(faulty_s3.url, skip_instance_cache=True),
        sleep=sleep_then_restart,
    )
    sent = _count_sends(store)
    faulty_s3.stop()
    assert not faulty_s3.reachable()
    store.write_bytes_atomic(store.join("f.bin"), b"data")
    assert sent == ["PutObject"] * 3  # two refused, one answered: no hidden retries
    assert len(slept) == 2
    assert [r.status for r in faulty_s3.requests("PUT")] == [200]
    assert store.read_bytes(store.join("f.bin")) == b"data"


def test_s3_write_to_stopped_server_fails_and_leaves_nothing(
    moto_s3: MotoS3, s3_prefix: str
) -> None:
    """A second moto server (same in-process backend) is stopped; the write fails after the
    bounded retries, and the session server shows no object. Only the store's own retries
    run: 3 attempts are 3 requests, with no storage options to turn the other layers off."""
    server, endpoint = start_moto_server()
    sleeps = SleepLog()
    options = moto_storage_options(endpoint, skip_instance_cache=True)
    prefix = s3_prefix.removeprefix("s3://")
    dying = open_store(s3_prefix, options, attempts=3, sleep=sleeps)
    dying.write_bytes_atomic(dying.join("before.bin"), b"ok")
    sent = _count_sends(dying)
    server.stop()
    with pytest.raises(StorageError, match=rf"write {s3_prefix}/after.bin failed after 3") as info:
        dying.write_bytes_atomic(dying.join("after.bin"), b"x" * 1_000_000)
    assert is_transient(info.value.__cause__)  # type: ignore[arg-type]
    assert len(sleeps.calls) == 2
    assert sent == ["PutObject"] * 3

    alive = open_store(s3_prefix, moto_s3.storage_options)
    assert alive.list(alive.root) == [f"{prefix}/before.bin"]
    assert not alive.exists(alive.join("after.bin"))


def test_s3_upload_file_atomic_single_and_multipart(
    moto_s3: MotoS3, s3_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(s3_prefix, moto_s3.storage_options)
    small = tmp_path / "small.bin"
    small.write_bytes(b"s" * 1000)
    store.upload_file_atomic(str(small), store.join("small.bin"))
    assert store.read_bytes(store.join("small.bin")) == b"s" * 1000

    # force s3fs' multipart path with 5 MiB parts (the S3 minimum) on an 11 MiB file
    monkeypatch.setattr(s3fs.core, "calculate_chunksize", lambda size, chunksize=None: 5 * 2**20)
    big = tmp_path / "big.bin"
    payload = os.urandom(1024) * (11 * 1024)
    big.write_bytes(payload)
    store.upload_file_atomic(str(big), store.join("big.bin"))
    assert store.read_bytes(store.join("big.bin")) == payload


def test_s3_failed_multipart_upload_leaves_no_object(
    moto_s3: MotoS3, s3_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(s3_prefix, {**moto_s3.storage_options, "skip_instance_cache": True})
    monkeypatch.setattr(s3fs.core, "calculate_chunksize", lambda size, chunksize=None: 5 * 2**20)
    original = store.fs._upload_file_part_concurrent

    async def upload_then_fail(*args: Any, **kwargs: Any) -> Any:
        await original(*args, **kwargs)  # every part uploaded...
        raise RuntimeError("connection lost before completion")  # ...never completed

    monkeypatch.setattr(store.fs, "_upload_file_part_concurrent", upload_then_fail)
    big = tmp_path / "big.bin"
    big.write_bytes(b"z" * (11 * 2**20))
    target = store.join("big.bin")
    with pytest.raises(StorageError, match=rf"write {s3_prefix}/big.bin failed: RuntimeError"):
        store.upload_file_atomic(str(big), target)
    assert not store.exists(target)
    assert store.list(store.root) == []
    client = boto3.client(
        "s3",
        endpoint_url=moto_s3.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    pending = client.list_multipart_uploads(Bucket=moto_s3.bucket).get("Uploads", [])
    assert [u for u in pending if u["Key"] == target.split("/", 1)[1]] == []


def test_store_is_plain_dataclass(tmp_path: Path) -> None:
    store = open_store(str(tmp_path), {}, attempts=2)
    assert isinstance(store, Store)
    assert store.attempts == 2
