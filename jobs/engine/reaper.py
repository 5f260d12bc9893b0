"""No process of a driver's local Ray outlives the driver, however it ends: a watcher process
in a session of its own holds a pipe only the driver writes to, and when the driver's end
closes, SIGKILLs every process whose environment carries the driver's token (Linux /proc):
those started inside `reaped()`, Ray's. Run as `python -m jobs.engine.reaper TOKEN`; imports
only the standard library."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import IO

RUN_TOKEN_ENV = "CTXPREC_RAY_OWNER"
SWEEPS = 4
"""Sweeps after the driver's end; a raylet being killed may still be starting a worker."""
SWEEP_GAP_S = 0.5

# The watcher's pipe, kept open for the driver's life: closing it (or losing the last
# reference, which closes it) would tell the watcher the driver has ended.
_watcher: subprocess.Popen[bytes] | None = None
_pipe: IO[bytes] | None = None
_token: str | None = None


@contextlib.contextmanager
def reaped(environ: MutableMapping[str, str] = os.environ) -> Iterator[None]:
    """Processes started inside carry this driver's token (where /proc can find them), so none
    outlives the driver; those started after (a library user's own) do not. The watcher starts
    once per process."""
    global _watcher, _pipe, _token
    if (_watcher is None or _watcher.poll() is not None) and Path("/proc/self/environ").exists():
        _token = f"{os.getpid()}-{uuid.uuid4().hex}"
        _watcher = subprocess.Popen(
            [sys.executable, "-m", "jobs.engine.reaper", _token],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={name: value for name, value in environ.items() if name != RUN_TOKEN_ENV},
            cwd="/",
        )
        _pipe = _watcher.stdin
    if _token is not None:
        environ[RUN_TOKEN_ENV] = _token
    try:
        yield
    finally:
        environ.pop(RUN_TOKEN_ENV, None)


def marked_processes(token: str) -> list[int]:
    """The pids whose environment holds `RUN_TOKEN_ENV=token` (this process aside)."""
    needle = f"{RUN_TOKEN_ENV}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def watch(token: str, pipe: IO[bytes]) -> None:
    """Block until the driver's end of `pipe` closes, then SIGKILL its marked processes."""
    with contextlib.suppress(OSError):
        while pipe.read(4096):
            pass
    for attempt in range(SWEEPS):
        time.sleep(SWEEP_GAP_S if attempt else 0)
        for pid in marked_processes(token):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m jobs.engine.reaper TOKEN", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C for the driver is not for us
    watch(argv[0], sys.stdin.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
