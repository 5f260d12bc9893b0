"""The job survives broken processes: a Ray worker SIGKILLed mid-task, the driver SIGKILLed
mid-run (then rerun), a writer killed mid-write, and two drivers at once (different run ids
into one output; the same run id twice).

Real parts only: the session's local Ray (or, for the driver test, the driver's own Ray in a
subprocess), the fake judge over real HTTP on 127.0.0.1, Parquet read back with Polars.
Inputs come from `generate(markers=True)`, so every item's true score is known.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import psutil  # type: ignore[import-untyped]
import pytest
import yaml

from jobs.config import load_config
from jobs.engine.driver import RunOutcome, run_job
from jobs.engine.inputs import Shard, list_input_files, plan_shards
from jobs.engine.lease import RunLocked
from jobs.engine.publish import RunLocation
from jobs.engine.storage import open_store
from jobs.engine.worker import ShardContext, run_shard, shard_paths
from jobs.factory import input_spec
from scorer_core.testing import FakeJudgeServer, FaultPlan
from tests.conftest import RAY_TEST_ENV
from tests.test_job import (
    KEY_ENV,
    KEY_VALUE,
    assert_complete,
    config_for,
    llm_judge,
    raw_config,
    scores_frame,
    truth,
    verdict_requests,
    verdicts_frame,
    write_items,
)

pytestmark = [pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[1]
RUN_SHARD_TITLE = "ray::run_shard"  # Ray 2.60 sets the worker's process title to ray::<task>


# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def judge_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY_VALUE)
    return KEY_VALUE


def slow_judge(server: FakeJudgeServer) -> dict[str, Any]:
    """The fake judge over the lean HTTP transport (no litellm import in every worker)."""
    return llm_judge(server, transport="http")


def shard_item_counts(source: Path, shards: list[Shard]) -> dict[str, int]:
    """Items per shard: the non-empty lines that start inside each shard's byte range."""
    starts = []
    offset = 0
    for line in source.read_bytes().split(b"\n"):
        if line.strip():
            starts.append(offset)
        offset += len(line) + 1
    return {s.shard_id: sum(1 for o in starts if s.start <= o < s.end) for s in shards}


def items_done(out: Path, location: RunLocation) -> set[str]:
    folder = out / location.staging / "items"
    if not folder.exists():
        return set()
    return {p.name.removesuffix(".parquet") for p in folder.glob("*.parquet")}


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval)


def run_shard_workers() -> list[psutil.Process]:
    """Ray workers of *this* test process's Ray (its descendants) executing `run_shard`.

    Other engineers' Rays on the machine are not our descendants, so they are never touched.
    """
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            title = proc.name() + " " + " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if RUN_SHARD_TITLE in title:
            found.append(proc)
    return found


def talking_to(proc: psutil.Process, port: int) -> bool:
    try:
        connections = proc.net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(
        c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        for c in connections
    )


class Outcome:
    """A run in a thread: its outcome or its exception."""

    def __init__(self, target: Callable[[], RunOutcome]) -> None:
        self.value: RunOutcome | None = None
        self.error: BaseException | None = None
        self._target = target
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.value = self._target()
        except BaseException as exc:  # reported to the test
            self.error = exc

    def start(self) -> Outcome:
        self.thread.start()
        return self

    def join(self, timeout_s: float = 180) -> Outcome:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the run did not finish in time"
        return self


def check_scores(out: Path, rows: list[dict[str, Any]], outcome: RunOutcome) -> pl.DataFrame:
    """Every item exactly once, every score the true one, every verdict row once."""
    scores = assert_complete(out, rows, outcome)
    expected = truth(rows)
    assert scores["status"].to_list() == ["ok"] * len(rows)
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == {
        r["id"]: expected[r["id"]] for r in rows
    }
    verdicts = verdicts_frame(out).filter(pl.col("run_id") == outcome.run_id)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert verdicts.select("query_id", "position").n_unique() == verdicts.height
    location = RunLocation(outcome.run_id, outcome.run_date)
    data = json.loads((out / location.manifest).read_text())
    assert data["status"] == "complete"
    assert data["summary"]["items"] == len(rows)
    return scores


# -- a Ray worker killed mid-task ---------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_ray_worker_sigkilled_mid_task_is_retried_and_its_shard_written_once(
    tmp_path: Path, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 24, seed=31)
    out = tmp_path / "out"
    # One request at a time per task, 0.3 s each: a shard of ~6 items takes ~2 s to judge.
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.3)) as server:
        config = config_for(
            source,
            out,
            judge=slow_judge(server),
            rate_limit={"max_concurrency": 2},
            cache={"enabled": False},
            ray={"shard_size": 6, "workers": 2, "max_task_retries": 2},
            run={"id": "kill-worker", "date": "2026-11-30"},
        )
        spec = input_spec(config)
        shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
        largest = max(shard_item_counts(source, shards).values())
        assert len(shards) >= 3

        killed: list[int] = []
        stop = threading.Event()

        def killer() -> None:
            deadline = time.monotonic() + 120
            while not stop.is_set() and time.monotonic() < deadline:
                for proc in run_shard_workers():
                    if talking_to(proc, server.port):
                        # Its first request is out; the shard has seconds of work left.
                        time.sleep(0.15)
                        if RUN_SHARD_TITLE in proc.name():
                            proc.kill()
                            killed.append(proc.pid)
                            return
                time.sleep(0.02)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        try:
            outcome = run_job(config, out=io.StringIO())
        finally:
            stop.set()
            thread.join(10)
        requests = verdict_requests(server)

    assert len(killed) == 1, "no run_shard worker was caught mid-task"
    assert not psutil.pid_exists(killed[0]) or (
        psutil.Process(killed[0]).status() == psutil.STATUS_ZOMBIE
    )
    # Ray retried the killed task: its shard was judged again (at least the request in flight
    # at the kill), and nothing else was: at most one shard's items twice.
    assert len(rows) < requests <= len(rows) + largest
    assert outcome.shards_total == len(shards) and outcome.shards_skipped == 0
    check_scores(out, rows, outcome)
    assert outcome.published.duplicates == 0
    # Staging (every shard's items and verdicts files) is gone after publication.
    assert not (out / "_staging" / "run_id=kill-worker").exists()


# -- a writer killed mid-write ----------------------------------------------------------------


def test_temp_files_of_a_writer_killed_mid_write_are_ignored_on_resume(tmp_path: Path) -> None:
    """A worker killed inside a local atomic write leaves `.<name>.tmp-*` next to the shard
    files (the rename never happened). The resumed run must publish from the real shard files
    only. (Before the fix, publish scanned the partial temp file and failed for good.)"""
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 30, seed=41)
    out = tmp_path / "out"
    config = config_for(
        source, out, run={"id": "torn-write", "date": "2026-11-30"}, ray={"shard_size": 10}
    )
    spec = input_spec(config)
    shards = plan_shards(spec, list_input_files(spec), 10)
    location = RunLocation("torn-write", config.run.date)  # type: ignore[arg-type]
    store = open_store(config.output.path)
    context = ShardContext(config=config, staging=location.staging)
    for number, shard in enumerate(shards):
        run_shard(shard, number, number, context)
    # Torn writes of shard 0's verdicts and shard 1's items, as a SIGKILL would leave them.
    verdicts_path, _ = shard_paths(store, location.staging, shards[0].shard_id)
    _, items_path = shard_paths(store, location.staging, shards[1].shard_id)
    for path in (verdicts_path, items_path):
        whole = Path(path).read_bytes()
        torn = Path(path).with_name(f".{Path(path).name}.tmp-k1ll3d")
        torn.write_bytes(whole[: len(whole) // 2])

    outcome = run_job(config, out=io.StringIO())  # no shard left to run: no Ray needed
    assert outcome.shards_skipped == outcome.shards_total == len(shards)
    scores = assert_complete(out, rows, outcome)
    assert scores["status"].to_list() == ["ok"] * 30
    verdicts = verdicts_frame(out)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)


# -- the driver killed mid-run ------------------------------------------------------------------


def _driver_env(ray_tmp: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TEST_ENV)
    # A private Ray temp dir: the driver's own local Ray can neither find nor join a cluster
    # someone else started with `ray start` (/tmp/ray/ray_current_cluster), and every process
    # of it is recognisable by this path for cleanup.
    env["RAY_TMPDIR"] = ray_tmp
    env[KEY_ENV] = KEY_VALUE
    env["PYTHONPATH"] = str(REPO)
    return env


def _kill_group_and_ray(proc: subprocess.Popen[bytes], ray_tmp: str) -> None:
    """SIGKILL the driver's process group, reap it, then any process of its Ray left over."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        leftovers = _ray_processes(ray_tmp)
        if not leftovers:
            return
        for other in leftovers:
            with contextlib.suppress(psutil.Error):
                other.kill()
        time.sleep(0.2)


def _ray_processes(ray_tmp: str) -> list[psutil.Process]:
    """Processes of the driver's Ray: they inherited its private RAY_TMPDIR (their command
    lines do not say so: Ray workers rename themselves `ray::...`)."""
    found = []
    for other in psutil.process_iter():
        try:
            if other.environ().get("RAY_TMPDIR") == ray_tmp:
                found.append(other)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def ray_tmp() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="ctxf-", dir="/tmp")  # short: Ray's socket paths must fit
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.usefixtures("ray_local")
def test_driver_sigkilled_mid_run_then_rerun_judges_only_unfinished_shards(
    tmp_path: Path, ray_tmp: str, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 32, seed=37)
    out = tmp_path / "out"
    run_id = "driver-kill"
    workers = 2
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.25)) as server:
        raw = raw_config(
            source,
            out,
            judge=slow_judge(server),
            rate_limit={"max_concurrency": workers},  # one request at a time per task
            cache={"enabled": False},  # resume alone decides what is judged again
            ray={"shard_size": 4, "workers": workers},
            run={"date": "2026-11-30"},
        )
        config_path = tmp_path / "job.yaml"
        config_path.write_text(yaml.safe_dump(raw))
        config = config_for(source, out, **{k: v for k, v in raw.items() if k != "input"})
        spec = input_spec(config)
        shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
        per_shard = shard_item_counts(source, shards)
        assert sum(per_shard.values()) == 32 and len(shards) >= 6
        location = RunLocation(run_id, config.run.date)  # type: ignore[arg-type]
        command = [
            sys.executable,
            "-m",
            "jobs.context_precision",
            "--config",
            str(config_path),
            "--set",
            f"run.id={run_id}",
        ]
        env = _driver_env(ray_tmp)

        # First run, in its own process with its own local Ray: SIGKILL the driver's process
        # group once two shards are committed.
        log1 = tmp_path / "run1.log"
        with log1.open("wb") as sink:
            first = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            wait_for(
                lambda: len(items_done(out, location)) >= 2 or first.poll() is not None,
                150,
                "two committed shards",
                interval=0.02,
            )
            assert first.poll() is None, f"driver ended early:\n{log1.read_text()[-3000:]}"
            driver_pid = first.pid
            os.killpg(first.pid, signal.SIGKILL)
        finally:
            _kill_group_and_ray(first, ray_tmp)
        # (SIGKILL of the driver's group does not reach its Ray workers: Ray starts them in
        # other process groups. `_kill_group_and_ray` finds them by their environment.)
        assert first.returncode == -signal.SIGKILL
        requests_first = verdict_requests(server)
        done = items_done(out, location)  # final: nothing of run 1 is alive any more
        judged_done = sum(per_shard[s] for s in done)
        assert 2 <= len(done) < len(shards), "the kill must land mid-run"
        # Shards in flight at the kill were judged partly: at most `workers` shards.
        assert 0 <= requests_first - judged_done <= workers * max(per_shard.values())

        # The dead driver's lease is still there, naming it.
        lease = json.loads((out / location.staging / "LEASE.json").read_text())
        assert lease["pid"] == driver_pid and lease["host"] == socket.gethostname()
        assert not psutil.pid_exists(driver_pid)
        assert not (out / "scores").exists()

        # Second run: the same config file and --set, as `main` reads them (in this process,
        # on the session's Ray, to spare a second Ray start). It takes the lease over (same
        # host, dead pid) and judges exactly the items of the shards without an items file.
        log = io.StringIO()
        outcome = run_job(load_config(config_path, [f"run.id={run_id}"]), out=log)
        text = log.getvalue()
        requests_second = verdict_requests(server) - requests_first

    assert requests_second == 32 - judged_done
    assert 32 <= requests_first + requests_second <= 32 + workers * max(per_shard.values())
    assert f"{len(done)} already done (resuming)" in text
    assert f"run {run_id}" in text
    scores = scores_frame(out).filter(pl.col("run_id") == run_id)
    assert scores.height == 32 and scores["query_id"].n_unique() == 32
    expected = truth(rows)
    assert all(r["score"] == expected[r["query_id"]] for r in scores.iter_rows(named=True))
    assert scores["status"].to_list() == ["ok"] * 32
    verdicts = verdicts_frame(out)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert verdicts.select("query_id", "position").n_unique() == verdicts.height
    data = json.loads((out / location.manifest).read_text())
    assert data["status"] == "complete" and data["shards_reused"] == len(done)
    assert outcome.shards_skipped == len(done) and outcome.shards_total == len(shards)
    assert not (out / location.staging).exists()


# -- two drivers at once ----------------------------------------------------------------------


@pytest.mark.usefixtures("ray_local")
def test_two_run_ids_at_once_into_one_output_both_publish_complete_partitions(
    tmp_path: Path, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 16, seed=43)
    out = tmp_path / "out"
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.15)) as server:

        def config(run_id: str) -> Any:
            return config_for(
                source,
                out,
                judge=slow_judge(server),
                rate_limit={"max_concurrency": 2},
                cache={"enabled": False},
                ray={"shard_size": 4, "workers": 1},
                run={"id": run_id, "date": "2026-11-30"},
            )

        configs = {run_id: config(run_id) for run_id in ("twin-a", "twin-b")}
        leases = [out / f"_staging/run_id={run_id}/LEASE.json" for run_id in configs]
        overlapped = threading.Event()
        barrier = threading.Barrier(2)

        def start(run_id: str) -> Callable[[], RunOutcome]:
            def go() -> RunOutcome:
                barrier.wait(30)
                return run_job(configs[run_id], out=io.StringIO())

            return go

        runs = [Outcome(start(run_id)).start() for run_id in configs]
        while any(r.thread.is_alive() for r in runs):
            if all(lease.exists() for lease in leases):
                overlapped.set()
            time.sleep(0.02)
        for run in runs:
            run.join()
            assert run.error is None, repr(run.error)
        requests = verdict_requests(server)

    assert overlapped.is_set(), "the two runs never held their leases at the same time"
    assert requests == 2 * len(rows)
    outcomes = [r.value for r in runs]
    assert [o.run_id for o in outcomes if o] == ["twin-a", "twin-b"]
    scores = scores_frame(out)
    assert scores.height == 2 * len(rows)
    assert sorted(scores["run_id"].unique().to_list()) == ["twin-a", "twin-b"]
    for outcome in outcomes:
        assert outcome is not None
        check_scores(out, rows, outcome)
    # Two separate partitions, one file each.
    files = sorted(p.relative_to(out).as_posix() for p in (out / "scores").rglob("*.parquet"))
    assert files == [
        "scores/run_date=2026-11-30/run_id=twin-a/part-00000.parquet",
        "scores/run_date=2026-11-30/run_id=twin-b/part-00000.parquet",
    ]
    assert list((out / "_staging").iterdir()) == []


@pytest.mark.usefixtures("ray_local")
def test_same_run_id_started_twice_at_once_exactly_one_runs(tmp_path: Path, judge_key: str) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 12, seed=47)
    out = tmp_path / "out"
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.15)) as server:
        config = config_for(
            source,
            out,
            judge=slow_judge(server),
            rate_limit={"max_concurrency": 2},
            cache={"enabled": False},
            ray={"shard_size": 4, "workers": 2},
            run={"id": "same-twice", "date": "2026-11-30"},
        )
        barrier = threading.Barrier(2)

        def go() -> RunOutcome:
            barrier.wait(30)
            return run_job(config, out=io.StringIO())

        runs = [Outcome(go).start() for _ in range(2)]
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
    check_scores(out, rows, outcome)
    assert outcome.shards_skipped == 0


@pytest.mark.usefixtures("ray_local")
def test_same_run_id_started_while_it_runs_is_refused_naming_the_holder(
    tmp_path: Path, judge_key: str
) -> None:
    source = tmp_path / "items.jsonl"
    rows = write_items(source, 12, seed=53)
    out = tmp_path / "out"
    with FakeJudgeServer(fault_plan=FaultPlan(latency_s=0.2)) as server:
        config = config_for(
            source,
            out,
            judge=slow_judge(server),
            rate_limit={"max_concurrency": 2},
            cache={"enabled": False},
            ray={"shard_size": 4, "workers": 2},
            run={"id": "busy", "date": "2026-11-30"},
        )
        location = RunLocation("busy", config.run.date)  # type: ignore[arg-type]
        first = Outcome(lambda: run_job(config, out=io.StringIO())).start()
        wait_for(lambda: verdict_requests(server) > 0, 60, "the first run's judge requests")
        with pytest.raises(RunLocked) as caught:
            run_job(config, out=io.StringIO())
        first.join()
        requests = verdict_requests(server)

    message = str(caught.value)
    assert f"pid {os.getpid()} on {socket.gethostname()}" in message
    assert str(out / location.staging / "LEASE.json") in message
    assert first.error is None, repr(first.error)
    assert first.value is not None
    check_scores(out, rows, first.value)
    assert requests == len(rows)
