"""Ctrl-C and a scheduler's SIGTERM stop a run cleanly, whenever they come: the driver, a
process of its own with its own local Ray, exits 130 (SIGINT) or 143 (SIGTERM) with one line
saying how to resume and no traceback; its Ray is gone, the staged shards are kept, and a rerun
with the same run id finishes the run.

Mid fan-out, the fake judge holds requests once two shards are staged, so the signal lands
mid-run for certain; during Ray's start, it follows the driver's first log line at once.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from jobs.core.config import load_config
from jobs.core.run_layout import RunLocation
from jobs.run.job import run_job
from tests.support.fakes import JudgeFactory
from tests.support.hooks import HoldRequests
from tests.support.job import assert_complete, raw_config, sample_job
from tests.support.processes import (
    held_run_config,
    kill_group_and_ray,
    ray_left_after,
    start_driver,
)

pytestmark = [pytest.mark.timeout(240)]

RUN_DATE = "2026-11-30"


def items_staged(out: Path, run_id: str) -> set[str]:
    folder = out / RunLocation(run_id, dt.date.fromisoformat(RUN_DATE)).staging / "items"
    return {p.stem for p in folder.glob("*.parquet")} if folder.exists() else set()


def driver_command(config_path: Path, run_id: str) -> list[str]:
    return [
        *(sys.executable, "-m", "jobs.context_precision", "--config", str(config_path)),
        *("--set", f"run.id={run_id}"),
    ]


def assert_stopped_cleanly(
    driver_exit: int, log: Path, run_id: str, signum: int, ray_tmp: str
) -> None:
    text = log.read_text()
    assert driver_exit == 128 + signum, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    stopped = [line for line in text.splitlines() if line.startswith("stopped: ")]
    assert stopped == [
        f"stopped: run {run_id} stopped by {signal.Signals(signum).name}; the shards staged so "
        f"far are kept: rerun with --set run.id={run_id} to resume"
    ], text[-3000:]
    assert ray_left_after(ray_tmp) == []


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-to-the-terminal-group", "sigterm-to-the-driver"],
)
def test_a_signal_mid_fan_out_keeps_staged_shards_and_the_rerun_finishes(
    tmp_path: Path,
    ray_tmp: str,
    judge_key: str,
    fake_judge: JudgeFactory,
    signum: int,
    to_group: bool,
) -> None:
    source, rows, out = sample_job(tmp_path, 24, seed=41)
    run_id = f"stop-{signal.Signals(signum).name.lower()}"
    gate = HoldRequests(when=lambda arrival: len(items_staged(out, run_id)) >= 2)
    server = fake_judge(on_request=gate)
    config_path = held_run_config(tmp_path, source, out, server, date=RUN_DATE)
    log = tmp_path / "driver.log"
    driver = start_driver(driver_command(config_path, run_id), log, ray_tmp, gate)
    try:
        gate.wait_held(1, timeout_s=150)
        assert driver.poll() is None, log.read_text()[-3000:]
        # A terminal's Ctrl-C reaches the driver's whole process group; a scheduler signals it
        (os.killpg if to_group else os.kill)(driver.pid, signum)
        driver.wait(60)
    finally:
        kill_group_and_ray(driver, ray_tmp)
        gate.release()
    assert_stopped_cleanly(driver.returncode, log, run_id, signum, ray_tmp)
    staged = items_staged(out, run_id)
    assert len(staged) >= 2 and not (out / "scores").exists()

    outcome = run_job(load_config(config_path, [f"run.id={run_id}"]))
    assert outcome.shards_skipped >= 2 and outcome.shards_total == 6
    assert_complete(out, rows, outcome)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_ray_starts_stops_cleanly(tmp_path: Path, ray_tmp: str, signum: int) -> None:
    source, _rows, out = sample_job(tmp_path, 12, seed=43)
    config_path = tmp_path / "job.yaml"
    config_path.write_text(yaml.safe_dump(raw_config(source, out, run={"date": RUN_DATE})))
    log = tmp_path / "driver.log"
    gate = HoldRequests()
    driver = start_driver(driver_command(config_path, "early"), log, ray_tmp, gate)
    try:
        deadline = time.monotonic() + 120
        # the driver logs its plan, then starts Ray: the signal lands in Ray's start
        while "run early: 1 file(s)" not in log.read_text() and driver.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.01)
        driver.send_signal(signum)
        driver.wait(60)
    finally:
        kill_group_and_ray(driver, ray_tmp)
    assert_stopped_cleanly(driver.returncode, log, "early", signum, ray_tmp)
    assert not (out / "scores").exists()
