"""The run lock (`with RunLock(...)`) is given back on every way out of a run, without Ray.

The lock-level tests use a real local store; the driver-level ones run `run_job` on a run whose
shards are all staged already (judged in this process with `run_shard`), so the driver goes
straight from the lock to publishing and never starts Ray.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobs.core.config import JobConfig, parse_config
from jobs.core.storage import Store, open_store
from jobs.engine.driver import resolve_location
from jobs.engine.run_lock import CONFIRM_AFTER_S, RunLock, RunLocked
from jobs.inputs import list_input_files, plan_shards
from jobs.inputs.spec import input_spec_of
from jobs.run.job import run_job
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core.errors import FatalJudgeError, StorageError
from tests.support.job import run_shard, shard_context, shard_files


def lock_at(store: Store, run_id: str = "r1") -> RunLock:
    return RunLock(store=store, path=store.join(f"_staging/run_id={run_id}", "LEASE.json"))


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(str(tmp_path / "out"))


def test_released_after_success(store: Store) -> None:
    with lock_at(store) as lock:
        held = json.loads(store.read_bytes(lock.path))
        assert held["token"] == lock.token
    assert not store.exists(lock.path)
    with lock_at(store):  # another driver takes the run id at once
        pass


def test_of_two_drivers_taking_a_run_id_at_once_the_earlier_writer_stops(store: Store) -> None:
    """Both found no lock and both wrote theirs; the later write won. The earlier driver reads
    the winner's token back at `confirm`, once both writes have landed, and stops; the winner's
    lock stays."""
    waits: list[float] = []
    earlier = lock_at(store)
    earlier.sleep = waits.append
    with pytest.raises(RunLocked, match="at the same moment"), earlier:
        winner = {"token": "winner", "host": "elsewhere", "pid": 1, "heartbeat": 1e12}
        store.write_bytes_atomic(earlier.path, json.dumps(winner).encode())
        earlier.confirm()
    assert len(waits) == 1 and 0 < waits[0] <= CONFIRM_AFTER_S
    assert json.loads(store.read_bytes(earlier.path))["token"] == "winner"
    store.rm(earlier.path)
    with lock_at(store) as unchallenged:  # a lock nobody else wrote is confirmed
        unchallenged.confirm()
    assert not store.exists(unchallenged.path)


def test_released_after_an_exception(store: Store) -> None:
    with pytest.raises(ValueError, match="boom"), lock_at(store) as lock:
        raise ValueError("boom")
    assert not store.exists(lock.path)


def test_released_after_a_fatal_judge_error(store: Store) -> None:
    with pytest.raises(FatalJudgeError), lock_at(store) as lock:
        raise FatalJudgeError("the judge cannot work, run stopped: 401")
    assert not store.exists(lock.path)


def test_a_held_run_id_is_refused_and_stays_with_its_holder(store: Store) -> None:
    with lock_at(store) as first:
        with pytest.raises(RunLocked, match="this run id is being run by pid"), lock_at(store):
            pass
        assert json.loads(store.read_bytes(first.path))["token"] == first.token
        with lock_at(store, "r2"):  # another run id is free
            pass
    assert not store.exists(first.path)


@dataclass
class DeletesFail(Store):
    """A store that reads and writes, but whose deletes fail (the store went down)."""

    def rm(self, path: str, recursive: bool = False) -> None:
        raise StorageError(f"delete {self.url(path)} failed: the store is down")


def test_a_failing_release_does_not_hide_the_runs_own_error(store: Store) -> None:
    broken = DeletesFail(fs=store.fs, root=store.root, protocol=store.protocol)
    with pytest.raises(FatalJudgeError), lock_at(broken) as lock:
        raise FatalJudgeError("the judge cannot work")
    assert store.exists(lock.path)  # left behind...
    with lock_at(store) as rerun:  # ...and taken over at once by a rerun in this process
        assert json.loads(store.read_bytes(rerun.path))["token"] == rerun.token
    with pytest.raises(StorageError, match="the store is down"), lock_at(broken):
        pass  # with no error of the run's own, a failing release is reported


# -- the driver ----------------------------------------------------------------------------------


def staged_run(tmp_path: Path, **inputs: Any) -> tuple[JobConfig, Store, list[str]]:
    """A config (`inputs`: more of its input section) whose 3 shards are all judged and staged
    already; returns (config, store, items files of the staged shards)."""
    data = tmp_path / "items.jsonl"
    write_jsonl(data, generate(30))
    columns = {"query_id": "id", "input": "question", "output": "answer", "context": "contexts"}
    config = parse_config(
        {
            "input": {"path": str(data), "columns": columns, **inputs},
            "output": {"path": str(tmp_path / "out")},
            "judge": {"model": "lexical"},
            "run": {"id": "staged", "date": "2026-11-30"},
            "ray": {"shard_size": 10},
        }
    )
    spec = input_spec_of(config)
    shards = plan_shards(spec, list_input_files(spec), config.ray.shard_size)
    assert len(shards) == 3
    location = resolve_location(config)
    store = open_store(config.output.path)
    context = shard_context(config, location.staging)
    items_files = []
    for number, shard in enumerate(shards):
        assert run_shard(shard, number, context).items > 0
        items_files.append(shard_files(store, location.staging, shard.shard_id)[1])
    return config, store, items_files


def test_the_driver_gives_the_lock_back_after_publishing(tmp_path: Path) -> None:
    config, store, _ = staged_run(tmp_path)
    outcome = run_job(config)
    assert (outcome.shards_total, outcome.shards_skipped) == (3, 3)
    assert outcome.published.summary.items == 30
    location = resolve_location(config)
    assert store.list(store.join(location.staging)) == []
    with lock_at(store, "staged"):
        pass


def test_the_driver_gives_the_lock_back_when_publishing_fails(tmp_path: Path) -> None:
    config, store, items_files = staged_run(tmp_path)
    Path(items_files[1]).write_bytes(b"not parquet")
    # Which error a corrupt staged file raises is publish's business; here only the lock is.
    with pytest.raises(Exception) as failed:
        run_job(config)
    assert not isinstance(failed.value, RunLocked)
    lock = lock_at(store, "staged")
    assert not store.exists(lock.path)
    assert all(store.exists(path) for path in items_files)  # staged shards are kept
