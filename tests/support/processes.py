"""The job's processes as the fault tests drive them: a run in a thread, a driver in a process of
its own (its own local Ray, recognisable for cleanup), the process behind a held request."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import yaml

from jobs.engine.driver import RunOutcome
from jobs.engine.ray_runtime import RAY_ENV
from tests.fake_judge import Arrival, FakeJudgeServer
from tests.support.hooks import HoldRequests
from tests.support.job import KEY_ENV, KEY_VALUE, llm_judge, raw_config
from tests.support.paths import REPO

# How long a held request may wait: as long as the test needs, never retried meanwhile.
HOLD_TIMEOUT_S = 120.0


def lean_judge(server: FakeJudgeServer) -> dict[str, Any]:
    """The fake judge over the lean HTTP transport (no litellm import in every worker). The
    timeout is long: a held request waits as long as the test needs (a Ray worker's start on
    a busy machine, say), and must not be retried meanwhile."""
    return llm_judge(server, transport="http", timeout_s=HOLD_TIMEOUT_S)


def held_run_config(
    tmp_path: Path, source: Path, out: Path, server: FakeJudgeServer, **run: str
) -> Path:
    """The YAML config of a driver to stop mid-run: the lean judge held by `server`, two
    requests in flight, no cache (resume alone decides what is judged again), shards of 4 over
    2 workers; `run` is its run section (id, date)."""
    raw = raw_config(
        source,
        out,
        judge=lean_judge(server),
        rate_limit={"max_concurrency": 2},
        cache={"enabled": False},
        ray={"shard_size": 4, "workers": 2},
        run=run,
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def driver_command(config_path: Path, run_id: str) -> list[str]:
    """The job's entrypoint on the YAML config at `config_path`, its run id set as a user
    sets it (`--set run.id=...`)."""
    entrypoint = [sys.executable, "-m", "jobs.context_precision", "--config", str(config_path)]
    return [*entrypoint, "--set", f"run.id={run_id}"]


def process_on_port(port: int) -> psutil.Process:
    """The process of this test's Ray (one of its descendants) whose connection has local
    port `port`: the client end of a request the fake judge holds."""
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(c.laddr and c.laddr.port == port for c in proc.net_connections(kind="tcp")):
                return proc
    raise AssertionError(f"no process of this test has a connection from port {port}")


def kill_sender(arrival: Arrival) -> psutil.Process:
    """SIGKILL the process (a Ray worker) that sent the held request `arrival`."""
    assert arrival.peer is not None
    process = process_on_port(arrival.peer[1])
    process.kill()
    return process


class Outcome:
    """A run in a thread: its outcome or its exception; `finished` is set when it ends."""

    def __init__(self, target: Callable[[], RunOutcome], finished: threading.Event) -> None:
        self.value: RunOutcome | None = None
        self.error: BaseException | None = None
        self.finished = finished
        self._target = target
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.value = self._target()
        except BaseException as exc:  # reported to the test
            self.error = exc
        finally:
            self.finished.set()

    def start(self) -> Outcome:
        self.thread.start()
        return self

    def join(self, timeout_s: float = 180) -> Outcome:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the run did not finish in time"
        return self

    def result(self, timeout_s: float = 180) -> RunOutcome:
        """The run's outcome once it finished, which it must have without an exception."""
        self.join(timeout_s)
        assert self.error is None, repr(self.error)
        assert self.value is not None
        return self.value


def run_in_thread(target: Callable[[], RunOutcome]) -> Outcome:
    return Outcome(target, threading.Event()).start()


def driver_env(ray_tmp: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_ENV)
    # A private Ray temp dir: the driver's own local Ray can neither find nor join a cluster
    # someone else started with `ray start` (/tmp/ray/ray_current_cluster), and every process
    # of it is recognisable by this path for cleanup.
    env["RAY_TMPDIR"] = ray_tmp
    env[KEY_ENV] = KEY_VALUE
    env["PYTHONPATH"] = str(REPO)
    return env


def kill_group_and_ray(proc: subprocess.Popen[bytes], ray_tmp: str) -> None:
    """SIGKILL the driver's process group, reap it, then any process of its Ray left over."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    for _attempt in range(3):  # a dying raylet may still start a worker: look again
        leftovers = ray_processes(ray_tmp)
        if not leftovers:
            return
        for other in leftovers:
            with contextlib.suppress(psutil.Error):
                other.kill()
        psutil.wait_procs(leftovers, timeout=10)


def ray_left_after(ray_tmp: str, seconds: float = 10) -> list[tuple[int, list[str]]]:
    """Processes of the driver's Ray (pid, command line) still alive after waiting up to
    `seconds` for them to go: the reaper sweeps in its own time once the driver has ended."""
    deadline = time.monotonic() + seconds
    while ray_processes(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = []
    for process in ray_processes(ray_tmp):
        with contextlib.suppress(psutil.Error):
            left.append((process.pid, process.cmdline()[:3]))
    return left


def ray_processes(ray_tmp: str) -> list[psutil.Process]:
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


def start_driver(
    command: Sequence[str], log: Path, ray_tmp: str, gate: HoldRequests
) -> subprocess.Popen[bytes]:
    """`command` (a driver) in a session of its own with its own local Ray (`driver_env`),
    its output in `log`; a driver that ends on its own (it should not) wakes `gate`'s wait at
    once instead of letting it time out."""
    with log.open("wb") as sink:
        driver = subprocess.Popen(
            list(command),
            cwd=REPO,
            env=driver_env(ray_tmp),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    threading.Thread(target=lambda: (driver.wait(), gate.give_up()), daemon=True).start()
    return driver
