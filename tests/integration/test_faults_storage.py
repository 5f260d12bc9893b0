"""The job survives a broken object store: the S3 endpoint goes away during the run, or during
publication, and comes back.

Each test runs its own S3 endpoint (`tests.support.s3_faults.FaultyS3`: moto on 127.0.0.1 at a
fixed free port) so it can break it and bring it back on the same port without touching the
session's moto fixture. moto keeps its buckets in memory per process, shared by every server in
the process, so the endpoint serves the same objects after it is back. While it is stopped the
port refuses connections: the endpoint is truly unreachable. The endpoint breaks at a precise
point of the run (a server-side hook on the request that commits a shard), not after polling
or sleeping.

The store's storage_options are plain: botocore and s3fs make one attempt per request by
default (`jobs.core.storage.s3_options`), so a store call against a dead endpoint gives up
after the job's own retries alone.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import s3fs

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.core.storage import Store, filesystem
from jobs.engine.driver import RunFailed
from jobs.run.job import run_job
from scorer_core.errors import StorageError
from tests.fake_judge import FakeJudgeServer, FaultPlan
from tests.support.job import (
    config_for,
    llm_judge,
    truth,
    verdict_requests,
    write_items,
)
from tests.support.moto import create_bucket, moto_storage_options
from tests.support.s3_faults import FaultyS3, Request

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]


class Endpoint(FaultyS3):
    """The test's S3 endpoint, with one bucket for the run's output."""

    def __init__(self) -> None:
        super().__init__()
        self.bucket = f"ctxprec-outage-{uuid.uuid4().hex[:10]}"

    def storage_options(self) -> dict[str, Any]:
        return moto_storage_options(self.url)

    def fs(self) -> s3fs.S3FileSystem:
        return filesystem(f"s3://{self.bucket}", self.storage_options())[0]

    def committed_shards(self, location: RunLocation) -> list[Request]:
        """The answered writes of staged items files: one per shard the run committed."""
        items = f"/{self.bucket}/out/{location.staging}/items/"
        return [r for r in self.requests("PUT", under=items) if r.status == 200]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    point = Endpoint()
    point.start()
    create_bucket(point.url, point.bucket)
    try:
        yield point
    finally:
        point.stop()


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
        pulled: list[int] = []

        def pull_the_plug(request: Request) -> None:
            shards = len(endpoint.committed_shards(location))
            if shards and not pulled:  # once, right after the first shard is committed
                pulled.append(shards)
                endpoint.stop()

        endpoint.after(pull_the_plug)
        with pytest.raises((RunFailed, StorageError)) as caught:
            run_job(config)
        assert pulled and not endpoint.reachable()
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
        outcome = run_job(config)
        rerun_requests = verdict_requests(server) - before

    assert outcome.run_id == run_id and outcome.shards_skipped >= 1
    assert outcome.shards_skipped < outcome.shards_total
    assert rerun_requests < len(rows)  # the shards committed before the outage were reused
    assert_published_complete(endpoint, location, rows)


# Connections the short outage resets. Each is one failed try of a store call, or half of
# one when aiohttp retries a dropped idempotent request by itself (see tests.support.s3_faults): a
# call that met them all, and a request in flight that the outage cut, still has a try left of
# `jobs.core.storage.DEFAULT_ATTEMPTS`.
OUTAGE = 3


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
        committed: list[int] = []

        def blip(request: Request) -> None:
            shards = len(endpoint.committed_shards(location))
            if shards and not committed:  # once, right after the first shard is committed
                committed.append(shards)
                # Every open connection is dropped and the next ones are reset: the store
                # calls that follow fail until OUTAGE connections have met the outage.
                endpoint.reset_next(OUTAGE)

        endpoint.after(blip)
        outcome = run_job(config)
        met_the_outage = endpoint.resets_done

    assert committed, "the outage never happened"
    # It came mid-run (shards were left to commit), store calls met it (every reset
    # connection was one of the run's requests failing) and they were retried: the run
    # finished with every shard judged once and everything published.
    assert committed[0] < outcome.shards_total
    assert met_the_outage == OUTAGE
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

        real_upload = Store.upload_file_atomic
        uploads: list[str] = []

        def upload_then_pull_the_plug(store: Store, local_path: str, path: str) -> None:
            uploads.append(path.split("/out/", 1)[-1])  # the path in the output folder
            real_upload(store, local_path, path)
            endpoint.stop()  # right after the first table (verdicts) is up

        monkeypatch.setattr(Store, "upload_file_atomic", upload_then_pull_the_plug)
        with pytest.raises(StorageError) as caught:
            run_job(config)
        assert uploads == [location.table_file("verdicts"), location.table_file("summary")]
        message = str(caught.value)
        assert f"s3://{endpoint.bucket}/out/{location.table_file('summary')}" in message
        judged = verdict_requests(server)
        assert judged == len(rows)

        monkeypatch.setattr(Store, "upload_file_atomic", real_upload)
        endpoint.start()
        assert_nothing_published(endpoint, location)
        staged = endpoint.fs().find(f"{endpoint.bucket}/out/{location.staging}/items")
        assert len(staged) >= 3

        outcome = run_job(config)
        assert verdict_requests(server) == judged  # the rerun judged nothing

    assert outcome.shards_skipped == outcome.shards_total == len(staged)
    assert_published_complete(endpoint, location, rows)
