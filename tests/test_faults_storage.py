"""The job survives a broken object store: the S3 endpoint goes away during the run, or during
publication, and comes back.

Each test runs its own moto server (`ThreadedMotoServer` on 127.0.0.1, a fixed free port) so it
can stop it and start it again on the same port without touching the session's moto fixture.
moto keeps its buckets in memory per process, shared by every server in the process, so a
restarted server serves the same objects. While it is stopped the port refuses connections:
the endpoint is truly unreachable.

`config_kwargs={"retries": {"max_attempts": 1}}` (a plain s3fs storage option) turns off
botocore's own retries, so one store call against a dead endpoint gives up in seconds instead
of about 40 (botocore x s3fs x the job's retries); the job's own retries are unchanged.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import s3fs

from jobs.config import JobConfig
from jobs.engine import publish
from jobs.engine.driver import RunFailed, run_job
from jobs.engine.publish import RunLocation
from jobs.engine.storage import s3_options
from scorer_core.errors import StorageError
from scorer_core.testing import FakeJudgeServer, FaultPlan
from tests.conftest import moto_storage_options
from tests.test_job import (
    KEY_ENV,
    KEY_VALUE,
    config_for,
    llm_judge,
    truth,
    verdict_requests,
    write_items,
)

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]


class Endpoint:
    """A moto S3 server this test owns: stop() makes the port refuse, start() serves again."""

    def __init__(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.bucket = f"ctxprec-outage-{uuid.uuid4().hex[:10]}"
        self._server: Any = None
        self._lock = threading.Lock()

    def start(self) -> None:
        from moto.server import ThreadedMotoServer

        with self._lock:
            if self._server is None:
                logging.getLogger("werkzeug").setLevel(logging.ERROR)
                server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
                server.start()
                self._server = server

    def stop(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None

    def reachable(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def storage_options(self) -> dict[str, Any]:
        return moto_storage_options(self.url, config_kwargs={"retries": {"max_attempts": 1}})

    def fs(self) -> s3fs.S3FileSystem:
        return s3fs.S3FileSystem(**s3_options(self.storage_options()))


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    import boto3  # type: ignore[import-untyped]

    point = Endpoint()
    point.start()
    boto3.client(
        "s3",
        endpoint_url=point.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=point.bucket)
    try:
        yield point
    finally:
        point.stop()


@pytest.fixture
def judge_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY_VALUE)
    return KEY_VALUE


def s3_job(
    endpoint: Endpoint, source: Path, server: FakeJudgeServer, run_id: str, **sections: Any
) -> JobConfig:
    """Input local, output (staging included) on the endpoint's bucket."""
    return config_for(
        source,
        f"s3://{endpoint.bucket}/out",
        output={"storage_options": endpoint.storage_options()},
        judge=llm_judge(server, transport="http"),
        cache={"enabled": False},  # what is judged again depends on resume alone
        run={"id": run_id, "date": "2026-11-30"},
        **sections,
    )


def wait_for_a_committed_shard(endpoint: Endpoint, items_dir: str, timeout_s: float = 120) -> None:
    """Return once the run has committed a shard (an items file is staged) on the endpoint."""
    fs = endpoint.fs()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if fs.find(items_dir):
                return
        time.sleep(0.05)
    raise AssertionError(f"no shard was committed under {items_dir} in {timeout_s}s")


def published_scores(endpoint: Endpoint, location: RunLocation) -> pl.DataFrame:
    fs = endpoint.fs()
    with fs.open(f"{endpoint.bucket}/out/{location.table_file('scores')}", "rb") as handle:
        return pl.read_parquet(handle)


def assert_nothing_published(endpoint: Endpoint, location: RunLocation) -> None:
    fs = endpoint.fs()
    root = f"{endpoint.bucket}/out"
    assert fs.find(f"{root}/scores") == []
    assert not fs.exists(f"{root}/{location.manifest}")


def assert_published_complete(
    endpoint: Endpoint, location: RunLocation, rows: list[dict[str, Any]]
) -> None:
    scores = published_scores(endpoint, location)
    assert scores.height == len(rows) and scores["query_id"].n_unique() == len(rows)
    assert scores["status"].to_list() == ["ok"] * len(rows)
    expected = truth(rows)
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == expected
    fs = endpoint.fs()
    root = f"{endpoint.bucket}/out"
    assert fs.find(f"{root}/scores") == [f"{root}/{location.table_file('scores')}"]
    with fs.open(f"{root}/{location.table_file('verdicts')}", "rb") as handle:
        verdicts = pl.read_parquet(handle)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert verdicts.select("query_id", "position").n_unique() == verdicts.height
    manifest = json.loads(fs.cat_file(f"{root}/{location.manifest}"))
    assert manifest["status"] == "complete" and manifest["summary"]["items"] == len(rows)
    assert fs.find(f"{root}/{location.staging}") == []


# -- the endpoint goes away during the run ----------------------------------------------------


def test_endpoint_down_mid_run_fails_naming_the_store_then_rerun_completes(
    endpoint: Endpoint, tmp_path: Path, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 16, seed=59)
    run_id = "s3-outage-run"
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.3)) as server:
        config = s3_job(
            endpoint,
            source,
            server,
            run_id,
            rate_limit={"max_concurrency": 2},  # one request at a time per task: slow shards
            ray={"shard_size": 4, "workers": 2, "max_task_retries": 1},
        )
        location = RunLocation(run_id, config.run.date)  # type: ignore[arg-type]
        items_dir = f"{endpoint.bucket}/out/{location.staging}/items"
        stopped = threading.Event()

        def pull_the_plug() -> None:
            wait_for_a_committed_shard(endpoint, items_dir)
            endpoint.stop()
            stopped.set()

        watcher = threading.Thread(target=pull_the_plug, daemon=True)
        watcher.start()
        with pytest.raises((RunFailed, StorageError)) as caught:
            run_job(config, out=io.StringIO())
        watcher.join(10)
        assert stopped.is_set() and not endpoint.reachable()
        message = str(caught.value)
        # The message names the store (the full s3:// URL) and what went wrong.
        assert f"s3://{endpoint.bucket}/out/" in message
        assert "Could not connect" in message or "EndpointConnectionError" in message

        endpoint.start()
        # Readers of scores/ see no part of the run: no scores object, no manifest.
        assert_nothing_published(endpoint, location)
        staged = endpoint.fs().find(items_dir)
        assert len(staged) >= 1
        before = verdict_requests(server)

        # The same run id again, the store back: it completes.
        outcome = run_job(config, out=io.StringIO())
        rerun_requests = verdict_requests(server) - before

    assert outcome.run_id == run_id and outcome.shards_skipped >= 1
    assert outcome.shards_skipped < outcome.shards_total
    assert rerun_requests < len(rows)  # the shards committed before the outage were reused
    assert_published_complete(endpoint, location, rows)


def test_short_outage_mid_run_is_ridden_out_by_retries(
    endpoint: Endpoint, tmp_path: Path, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 16, seed=61)
    run_id = "s3-blip"
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.2)) as server:
        config = s3_job(
            endpoint,
            source,
            server,
            run_id,
            rate_limit={"max_concurrency": 2},
            ray={"shard_size": 4, "workers": 2, "max_task_retries": 2},
        )
        location = RunLocation(run_id, config.run.date)  # type: ignore[arg-type]
        items_dir = f"{endpoint.bucket}/out/{location.staging}/items"
        outage: list[float] = []
        committed: list[int] = []

        def blip() -> None:
            wait_for_a_committed_shard(endpoint, items_dir)
            committed.append(len(endpoint.fs().find(items_dir)))
            endpoint.stop()
            outage.append(time.monotonic())
            time.sleep(3.0)  # a shard commits about every second: some writes meet the outage
            endpoint.start()
            outage.append(time.monotonic())

        watcher = threading.Thread(target=blip, daemon=True)
        watcher.start()
        outcome = run_job(config, out=io.StringIO())
        watcher.join(10)

    assert len(outage) == 2, "the outage never happened"
    # It came mid-run: shards were left to commit. A shard takes under a second to judge, so
    # the 3 s outage met store calls (a task's first `exists` or its writes) and they waited.
    assert committed[0] < outcome.shards_total
    assert outcome.shards_skipped == 0
    assert_published_complete(endpoint, location, rows)


# -- the endpoint goes away during publication ------------------------------------------------


def test_endpoint_down_during_publish_leaves_no_scores_and_rerun_publishes_without_judging(
    endpoint: Endpoint, tmp_path: Path, judge_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 12, seed=67)
    run_id = "s3-outage-publish"
    with FakeJudgeServer() as server:
        config = s3_job(endpoint, source, server, run_id, ray={"shard_size": 4, "workers": 2})
        location = RunLocation(run_id, config.run.date)  # type: ignore[arg-type]

        real_upload = publish._upload_frame
        uploads: list[str] = []

        def upload_then_pull_the_plug(store: Any, frame: Any, path: str, tmp: str) -> None:
            uploads.append(path)
            real_upload(store, frame, path, tmp)
            endpoint.stop()  # right after the first table (verdicts) is up

        monkeypatch.setattr(publish, "_upload_frame", upload_then_pull_the_plug)
        with pytest.raises(StorageError) as caught:
            run_job(config, out=io.StringIO())
        assert uploads == [location.table_file("verdicts"), location.table_file("summary")]
        message = str(caught.value)
        assert f"s3://{endpoint.bucket}/out/{location.table_file('summary')}" in message
        judged = verdict_requests(server)
        assert judged == len(rows)

        monkeypatch.setattr(publish, "_upload_frame", real_upload)
        endpoint.start()
        assert_nothing_published(endpoint, location)
        staged = endpoint.fs().find(f"{endpoint.bucket}/out/{location.staging}/items")
        assert len(staged) >= 3

        outcome = run_job(config, out=io.StringIO())
        assert verdict_requests(server) == judged  # the rerun judged nothing

    assert outcome.shards_skipped == outcome.shards_total == len(staged)
    assert_published_complete(endpoint, location, rows)
