"""The reaper marks the processes a driver starts inside `reaped()` (its local Ray's) and only
those: a library user's own subprocesses, started after a run in the same process, outlive it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs.engine.reaper import RUN_TOKEN_ENV, marked_processes, reaped

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_only_what_starts_inside_reaped_carries_the_drivers_token() -> None:
    environ = dict(os.environ)
    started = []
    try:
        with reaped(environ):
            token = environ[RUN_TOKEN_ENV]
            started.append(subprocess.Popen(["sleep", "60"], env=environ))
        assert RUN_TOKEN_ENV not in environ
        started.append(subprocess.Popen(["sleep", "60"], env=environ))
        with reaped(environ):  # a second run in the same process: the same watcher and token
            assert environ[RUN_TOKEN_ENV] == token
        assert marked_processes(token) == [started[0].pid]
    finally:
        for process in started:
            process.kill()
            process.wait()
