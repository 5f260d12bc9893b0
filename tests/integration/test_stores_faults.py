"""The job on Google Cloud Storage (the GCS emulator) and Azure Blob (Azurite) when a process
dies: the driver, SIGKILLed half-way and resumed; the store itself, stopped mid-run and started
again. Each emulator is a real server on 127.0.0.1, started once for this module, keeping its
objects on disk so a restart keeps them. (S3's outages are tests/integration/
test_faults_storage.py's, on an endpoint that can fail precisely request by request.)

Every item is one verdict request, so the fake judge's request count is the bill; the input,
the output, its staging area and the verdict store are all on the store.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.core.config import load_config
from jobs.core.run_layout import RunLocation
from jobs.core.storage import open_store
from jobs.run.job import run_job
from jobs.tools.sample_data import generate
from tests.fake_judge import FakeJudgeServer
from tests.support.fakes import JudgeFactory
from tests.support.hooks import HoldRequests
from tests.support.job import truth, verdict_requests, wait_journaled
from tests.support.processes import (
    driver_command,
    kill_group_and_ray,
    lean_judge,
    run_in_thread,
    start_driver,
)
from tests.support.store_runs import (
    files_under,
    read_manifest,
    read_table,
    store_config,
    store_raw_config,
    upload_rows,
)
from tests.support.stores import Emulator, ObjectStore

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]


@pytest.fixture(scope="module", params=["gs", "az"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    fixture = {"gs": "gcs_store", "az": "azure_store"}[request.param]
    found: ObjectStore = request.getfixturevalue(fixture)
    return found


def emulator_of(store: ObjectStore) -> Emulator:
    assert store.emulator is not None
    return store.emulator


def upload(store: ObjectStore, count: int, seed: int, folder: Path) -> tuple[str, str, list[Any]]:
    """(input URL, output URL, rows): `count` sample items uploaded to a fresh prefix."""
    prefix = store.fresh_prefix()
    source, out = f"{prefix}/in/items.jsonl", f"{prefix}/out"
    rows = list(generate(count, seed=seed, markers=True))
    upload_rows(store, rows, source, folder)
    return source, out, rows


def assert_published_true(
    store: ObjectStore, out: str, rows: list[dict[str, Any]], outcome: Any
) -> None:
    """Every item once, with its true score, every verdict once, staging gone."""
    scores = read_table(store, out, outcome, "scores")
    assert scores.height == len(rows) and scores["query_id"].n_unique() == len(rows)
    assert scores["status"].to_list() == ["ok"] * len(rows)
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == truth(rows)
    verdicts = read_table(store, out, outcome, "verdicts")
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert verdicts.select("query_id", "position").n_unique() == verdicts.height
    assert read_manifest(store, out, outcome)["status"] == "complete"
    location = RunLocation(outcome.run_id, outcome.run_date)
    assert files_under(store, f"{out}/{location.staging}") == []


def test_the_emulators_listen_on_loopback_only(store: ObjectStore) -> None:
    assert emulator_of(store).listening() == {"127.0.0.1"}


# -- the driver killed half-way ------------------------------------------------------------------


def test_a_driver_killed_half_way_resumes_from_the_store_paying_nothing_twice(
    store: ObjectStore, tmp_path: Path, ray_tmp: str, judge_key: str, fake_judge: JudgeFactory
) -> None:
    """The driver (its own process and Ray) is SIGKILLed once `half` items are answered and
    journaled to the verdict store on the store; the rest are held unanswered. The rerun (the
    same config, in this process) takes over the dead driver's run lock and asks the judge for
    exactly the items not journaled."""
    items, half = 80, 40
    source, out, rows = upload(store, items, 61, tmp_path)
    run_id = "kill-the-driver"
    gate = HoldRequests(when=lambda arrival: arrival.number > half)
    server = fake_judge(on_request=gate)
    raw = store_raw_config(
        store,
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 4},
        ray={"shard_size": 40, "workers": 2},  # every shard in flight at the kill
        run={"date": "2026-12-06"},
    )
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    config = load_config(config_path, [f"run.id={run_id}"])
    command = driver_command(config_path, run_id)
    output = open_store(out, store.storage_options)
    first = start_driver(command, tmp_path / "run1.log", ray_tmp, gate)
    try:
        gate.wait_held(1, timeout_s=150)
        assert first.poll() is None, (tmp_path / "run1.log").read_text()[-3000:]
        wait_journaled(output, config, rows, half)
        os.killpg(first.pid, signal.SIGKILL)
        kill_group_and_ray(first, ray_tmp)  # no process of that run is left to ask more
        held = gate.wait_held(1)
        calls_first = verdict_requests(server)
    finally:
        kill_group_and_ray(first, ray_tmp)
        gate.release()
    assert first.returncode == -signal.SIGKILL
    # Answered: the first `half`; the held requests' answers died with the driver.
    assert calls_first - len(held) == half

    outcome = run_job(config)
    calls_second = verdict_requests(server) - calls_first
    assert calls_second == items - half  # every answered verdict came from the store
    assert outcome.published.summary.cache_hits > 0
    assert_published_true(store, out, rows, outcome)


# -- the store stopped mid-run and started again ---------------------------------------------


def committed_shards(store: ObjectStore, out: str, location: RunLocation) -> int:
    """The shards the run has committed (an items file each in its staging area)."""
    fs = store.fs()
    folder = store.path(f"{out}/{location.staging}/items")
    try:
        return len(fs.find(folder))
    except OSError:
        return 0


OUTAGE_S = 5.0


def test_the_store_stopped_mid_run_and_started_again_is_ridden_out(
    store: ObjectStore,
    tmp_path: Path,
    judge_key: str,
    fake_judge: JudgeFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two shards committed, requests in flight: the emulator stops (SIGTERM), the judge
    answers everything held, and the emulator starts again OUTAGE_S later on the same port
    with the same data. The store calls made meanwhile wait in the store client's retries
    (gcsfs: 6 tries over about 30 s; azure-core: 4 over about 80 s, then the job's own): the
    run finishes, every item judged once, nothing lost."""
    items = 40
    source, out, rows = upload(store, items, 67, tmp_path)
    emulator = emulator_of(store)
    location = RunLocation("outage", dt.date(2026, 12, 6))
    gate = HoldRequests(when=lambda arrival: committed_shards(store, out, location) >= 2)
    server: FakeJudgeServer = fake_judge(on_request=gate)
    config = store_config(
        store,
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 2},
        ray={"shard_size": 5, "workers": 2},
        run={"id": "outage", "date": "2026-12-06"},
    )
    caplog.set_level(logging.INFO, logger="jobs")
    started = time.monotonic()
    run = run_in_thread(lambda: run_job(config))
    try:
        gate.wait_held(1)
        emulator.stop()
        assert not emulator.reachable()
        stopped_at = time.monotonic()
    finally:
        gate.release()
    time.sleep(OUTAGE_S)
    emulator.start()
    outcome = run.result(timeout_s=280)
    finished = time.monotonic()

    assert verdict_requests(server) == items  # nothing judged twice
    assert outcome.shards_skipped == 0
    assert_published_true(store, out, rows, outcome)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    print(
        f"\n{store.scheme}: outage {OUTAGE_S:.0f} s after {stopped_at - started:.1f} s; run "
        f"{finished - started:.1f} s; {verdict_requests(server)} calls for {items} items; "
        f"warnings: {warnings}"
    )
