"""The job survives broken processes: a Ray worker SIGKILLed mid-task, the driver SIGKILLed
mid-run (then rerun), a writer killed mid-write, and two drivers at once (different run ids
into one output; the same run id twice).

Real parts only: the session's local Ray (or, for the driver test, the driver's own Ray in a
subprocess), the fake judge over real HTTP on 127.0.0.1, Parquet read back with Polars.
Inputs come from `generate(markers=True)`, so every item's true score is known.

Each kill lands at a precise point of the run without sleeping or polling: the fake judge
holds requests (`tests.support.hooks.HoldRequests`), so the run is certainly mid-way, and the
process to kill is the one at the other end of a held request's connection.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest
import yaml

from jobs.core.config import load_config
from jobs.core.run_layout import RunLocation
from jobs.core.storage import open_store
from jobs.engine.driver import RunOutcome
from jobs.engine.fanout import SHARDS_PER_WORKER
from jobs.engine.run_lock import RunLocked
from jobs.inputs import Shard, list_input_files, plan_shards
from jobs.inputs.spec import input_spec_of
from jobs.run.job import run_job
from tests.fake_judge import Arrival, FakeJudgeServer
from tests.support.fakes import JudgeFactory
from tests.support.hooks import HoldRequests
from tests.support.job import (
    assert_all_true,
    assert_complete,
    config_for,
    line_offsets,
    raw_config,
    run_shard,
    sample_job,
    scores_frame,
    shard_context,
    shard_files,
    verdict_requests,
    verdicts_frame,
)
from tests.support.processes import (
    Outcome,
    kill_group_and_ray,
    kill_sender,
    lean_judge,
    process_on_port,
    ray_left_after,
    ray_processes,
    run_in_thread,
    start_driver,
)

pytestmark = [pytest.mark.timeout(240)]

# -- helpers -------------------------------------------------------------------------------


def shard_item_counts(source: Path, shards: list[Shard]) -> dict[str, int]:
    """Items per shard: the non-empty lines that start inside each shard's byte range."""
    starts = line_offsets(source)
    return {s.shard_id: sum(1 for o in starts if s.start <= o < s.end) for s in shards}


def items_done(out: Path, location: RunLocation) -> set[str]:
    folder = out / location.staging / "items"
    if not folder.exists():
        return set()
    return {p.name.removesuffix(".parquet") for p in folder.glob("*.parquet")}


def client_processes(held: list[Arrival]) -> set[int]:
    """The pids of the processes that sent `held`."""
    return {process_on_port(arrival.peer[1]).pid for arrival in held if arrival.peer}


# -- a Ray worker killed mid-task ---------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_ray_worker_sigkilled_mid_task_is_retried_and_its_shard_written_once(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 24, seed=31)
    gate = HoldRequests()  # from the first request on: the shards have all their work left
    server = fake_judge(on_request=gate)
    config = config_for(
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 2},
        cache={"enabled": False},
        ray={"shard_size": 6, "workers": 2, "max_task_retries": 2},
        run={"id": "kill-worker", "date": "2026-11-30"},
    )
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
    largest = max(shard_item_counts(source, shards).values())
    assert len(shards) >= 3

    run = run_in_thread(lambda: run_job(config))
    try:
        (first, *_) = gate.wait_held(1)
        worker = kill_sender(first)
    finally:
        gate.release()
    outcome = run.result()
    requests = verdict_requests(server)

    assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    # Ray retried the killed worker: the shards it held (one per lane) were judged again (at
    # least the request held at the kill), and nothing else was.
    assert len(rows) < requests <= len(rows) + SHARDS_PER_WORKER * largest
    assert outcome.shards_total == len(shards) and outcome.shards_skipped == 0
    assert_all_true(out, rows, outcome)
    assert outcome.published.duplicates == 0
    # Staging (every shard's items and verdicts files) is gone after publication.
    assert not (out / "_staging" / "run_id=kill-worker").exists()


# -- a writer killed mid-write ----------------------------------------------------------------


def test_temp_files_of_a_writer_killed_mid_write_are_ignored_on_resume(tmp_path: Path) -> None:
    """A worker killed inside a local atomic write leaves `.<name>.tmp-*` next to the shard
    files (the rename never happened). The resumed run must publish from the real shard files
    only. (Before the fix, publish scanned the partial temp file and failed for good.)"""
    source, rows, out = sample_job(tmp_path, 30, seed=41)
    config = config_for(
        source, out, run={"id": "torn-write", "date": "2026-11-30"}, ray={"shard_size": 10}
    )
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), 10)
    location = RunLocation("torn-write", config.run.date)  # type: ignore[arg-type]
    store = open_store(config.output.path)
    context = shard_context(config, location.staging)
    for number, shard in enumerate(shards):
        run_shard(shard, number, context)
    # Torn writes of shard 0's verdicts and shard 1's items, as a SIGKILL would leave them.
    verdicts_path, _ = shard_files(store, location.staging, shards[0].shard_id)
    _, items_path = shard_files(store, location.staging, shards[1].shard_id)
    for path in (verdicts_path, items_path):
        whole = Path(path).read_bytes()
        torn = Path(path).with_name(f".{Path(path).name}.tmp-k1ll3d")
        torn.write_bytes(whole[: len(whole) // 2])

    outcome = run_job(config)  # no shard left to run: no Ray needed
    assert outcome.shards_skipped == outcome.shards_total == len(shards)
    scores = assert_complete(out, rows, outcome)
    assert scores["status"].to_list() == ["ok"] * 30
    verdicts = verdicts_frame(out)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)


# -- the driver killed mid-run ------------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_a_sigkilled_driver_leaves_no_ray_and_its_rerun_judges_only_unfinished_shards(
    tmp_path: Path,
    ray_tmp: str,
    judge_key: str,
    fake_judge: JudgeFactory,
    run_log: pytest.LogCaptureFixture,
) -> None:
    """SIGKILL the driver alone, as an OOM killer does, while the run is held with two shards
    committed: within seconds no process of the Ray it started is left (workers, raylet, GCS,
    agents), none goes on staging unseen though the judge then answers every held request
    (jobs.engine.reaper), and a rerun judges exactly the items of the unfinished shards. The
    judge answers only once they are gone: a reply in the moment between the kill and the
    reaper's sweep could be staged by a worker about to die, which is harmless."""
    source, rows, out = sample_job(tmp_path, 32, seed=37)
    run_id = "driver-kill"
    workers = 2
    raw = raw_config(
        source,
        out,
        rate_limit={"max_concurrency": workers},  # one request at a time per task
        cache={"enabled": False},  # resume alone decides what is judged again
        ray={"shard_size": 4, "workers": workers},
        run={"date": "2026-11-30"},
    )
    config = config_for(source, out, **{k: v for k, v in raw.items() if k != "input"})
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
    per_shard = shard_item_counts(source, shards)
    assert sum(per_shard.values()) == 32 and len(shards) >= 6
    location = RunLocation(run_id, config.run.date)  # type: ignore[arg-type]
    # Requests pass until two shards are committed, then the run is held where it is.
    gate = HoldRequests(when=lambda arrival: len(items_done(out, location)) >= 2)
    server = fake_judge(on_request=gate)
    raw["judge"] = lean_judge(server)
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump(raw))
    command = [
        sys.executable,
        "-m",
        "jobs.context_precision",
        "--config",
        str(config_path),
        "--set",
        f"run.id={run_id}",
    ]

    # First run, in its own process with its own local Ray.
    log1 = tmp_path / "run1.log"
    first = start_driver(command, log1, ray_tmp, gate)
    try:
        gate.wait_held(1, timeout_s=150)
        assert first.poll() is None, f"driver ended early:\n{log1.read_text()[-3000:]}"
        assert ray_processes(ray_tmp), "the driver's Ray is running"
        driver_pid = first.pid
        os.kill(driver_pid, signal.SIGKILL)
        first.wait(30)
        left = ray_left_after(ray_tmp)
        assert left == [], f"processes of the dead driver's Ray still alive: {left}"
        done = items_done(out, location)
        gate.release()  # the judge answers: a worker still alive would go on staging
        time.sleep(2)
        assert items_done(out, location) == done
    finally:
        kill_group_and_ray(first, ray_tmp)
        gate.release()
    assert first.returncode == -signal.SIGKILL
    requests_first = verdict_requests(server)
    judged_done = sum(per_shard[s] for s in done)
    assert 2 <= len(done) < len(shards), "the kill must land mid-run"
    # Shards in flight at the kill were judged partly: at most a shard per lane of each worker
    # (a worker reads its next shard, and asks for it, while its current one's last replies
    # are outstanding; on a busy machine both lanes of both workers were mid-shard).
    in_flight = workers * SHARDS_PER_WORKER * max(per_shard.values())
    assert 0 <= requests_first - judged_done <= in_flight

    # The dead driver's lock file is still there, naming it.
    lock = json.loads((out / location.staging / "LEASE.json").read_text())
    assert lock["pid"] == driver_pid and lock["host"] == socket.gethostname()
    assert not psutil.pid_exists(driver_pid)
    assert not (out / "scores").exists()

    # Second run: the same config file and --set, as `main` reads them (in this process,
    # on the session's Ray, to spare a second Ray start). It takes the lock over (same
    # host, dead pid) and judges exactly the items of the shards without an items file.
    outcome = run_job(load_config(config_path, [f"run.id={run_id}"]))
    text = run_log.text
    requests_second = verdict_requests(server) - requests_first

    assert requests_second == 32 - judged_done
    assert 32 <= requests_first + requests_second <= 32 + in_flight
    assert f"{len(done)} already done (resuming)" in text
    assert f"run {run_id}" in text
    assert_all_true(out, rows, outcome)
    data = json.loads((out / location.manifest).read_text())
    assert data["shards_reused"] == len(done)
    assert outcome.shards_skipped == len(done) and outcome.shards_total == len(shards)


# -- two drivers at once ----------------------------------------------------------------------


def _two_driver_config(
    source: Path, out: Path, server: FakeJudgeServer, run_id: str, workers: int
) -> Any:
    return config_for(
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 2},  # at most 2 requests of a run in flight
        cache={"enabled": False},
        ray={"shard_size": 4, "workers": workers},
        run={"id": run_id, "date": "2026-11-30"},
    )


@pytest.mark.usefixtures("ray_local")
def test_two_run_ids_at_once_into_one_output_both_publish_complete_partitions(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 16, seed=43)
    gate = HoldRequests()
    server = fake_judge(on_request=gate)
    configs = {
        run_id: _two_driver_config(source, out, server, run_id, workers=1)
        for run_id in ("twin-a", "twin-b")
    }
    locks = [out / f"_staging/run_id={run_id}/LEASE.json" for run_id in configs]
    runs = [run_in_thread(partial(run_job, config)) for config in configs.values()]
    try:
        # Each run judges in one Ray task at a time (one worker): requests held from two
        # processes are both runs' at once, both holding their locks.
        gate.wait_until(lambda held: len(client_processes(held)) == 2, "both runs judging")
        assert all(lock.exists() for lock in locks)
    finally:
        gate.release()
    outcomes = [run.result() for run in runs]
    requests = verdict_requests(server)

    assert requests == 2 * len(rows)
    assert [o.run_id for o in outcomes] == ["twin-a", "twin-b"]
    scores = scores_frame(out)
    assert scores.height == 2 * len(rows)
    assert sorted(scores["run_id"].unique().to_list()) == ["twin-a", "twin-b"]
    for outcome in outcomes:
        assert_all_true(out, rows, outcome)
    # Two separate partitions, one file each.
    files = sorted(p.relative_to(out).as_posix() for p in (out / "scores").rglob("*.parquet"))
    assert files == [
        "scores/run_date=2026-11-30/run_id=twin-a/part-00000.parquet",
        "scores/run_date=2026-11-30/run_id=twin-b/part-00000.parquet",
    ]
    assert list((out / "_staging").iterdir()) == []


@pytest.mark.usefixtures("ray_local")
def test_same_run_id_started_twice_at_once_exactly_one_runs(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 12, seed=47)
    gate = HoldRequests()  # the run that gets the lock cannot finish before the other ends
    server = fake_judge(on_request=gate)
    config = _two_driver_config(source, out, server, "same-twice", workers=2)
    barrier = threading.Barrier(2)

    def go() -> RunOutcome:
        barrier.wait(30)
        return run_job(config)

    one_ended = threading.Event()
    runs = [Outcome(go, one_ended).start() for _ in range(2)]
    try:
        assert one_ended.wait(120), "neither run ended"
    finally:
        gate.release()
    for run in runs:
        run.join()
    requests = verdict_requests(server)

    refused = [r.error for r in runs if r.error is not None]
    finished = [r.value for r in runs if r.value is not None]
    assert len(refused) == 1 and len(finished) == 1, [repr(r.error) for r in runs]
    error = refused[0]
    assert isinstance(error, RunLocked)
    # The message names the holder: this process, on this host.
    assert f"pid {os.getpid()} on {socket.gethostname()}" in str(error)
    assert requests == len(rows)  # the refused driver judged nothing
    outcome = finished[0]
    assert outcome is not None
    assert_all_true(out, rows, outcome)
    assert outcome.shards_skipped == 0


@pytest.mark.usefixtures("ray_local")
def test_same_run_id_started_while_it_runs_is_refused_naming_the_holder(
    tmp_path: Path, judge_key: str, fake_judge: JudgeFactory
) -> None:
    source, rows, out = sample_job(tmp_path, 12, seed=53)
    gate = HoldRequests()
    server = fake_judge(on_request=gate)
    config = _two_driver_config(source, out, server, "busy", workers=2)
    location = RunLocation("busy", config.run.date)
    first = run_in_thread(lambda: run_job(config))
    try:
        gate.wait_held(1)  # the first run is judging
        with pytest.raises(RunLocked) as caught:
            run_job(config)
    finally:
        gate.release()
    first.join()
    requests = verdict_requests(server)

    message = str(caught.value)
    assert f"pid {os.getpid()} on {socket.gethostname()}" in message
    assert str(out / location.staging / "LEASE.json") in message
    assert first.error is None, repr(first.error)
    assert first.value is not None
    assert_all_true(out, rows, first.value)
    assert requests == len(rows)
