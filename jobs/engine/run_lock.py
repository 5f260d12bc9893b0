"""A run's lock: one driver at a time per run id. The lock file in the run's staging area
(`LEASE.json`, its name since the first version) holds the driver's token, host, pid and
heartbeat; a fresh lock refuses a second driver, a stale one (or a dead process's on this host)
is taken over. A context manager; `confirm` before the run writes anything else."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from jobs.core.storage import Store
from jobs.engine.failures import RunLocked
from scorer_core.errors import StorageError

__all__ = ["CONFIRM_AFTER_S", "RunLock", "RunLocked"]

# Tokens of the locks this process holds right now. A lock naming this process with a token
# not in here was left by an earlier attempt in this process that has ended but could not
# remove it (say the store was down when the failed run released it): like a dead pid's lock,
# it is taken over, so a retry in the same process need not wait out the TTL.
_HELD: set[str] = set()

# Two drivers that start in the same instant both write the lock, and the later write wins:
# this long after its own write a driver reads the lock back, once both writes have landed.
CONFIRM_AFTER_S = 0.2


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(kw_only=True)
class RunLock:
    """The lock of the run whose lock file is `path`; `ttl_s`: a heartbeat older than this is
    stale."""

    store: Store
    path: str
    ttl_s: float = 60.0
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    _last_beat: float = 0.0
    _written: float = 0.0  # time.monotonic() of acquire's write

    def _record(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "heartbeat": self.clock(),
        }

    def _read(self) -> dict[str, Any] | None:
        try:
            if not self.store.exists(self.path):
                return None
            data: dict[str, Any] = json.loads(self.store.read_bytes(self.path))
            return data
        except (StorageError, ValueError):
            return None

    def _holder_is_gone(self, holder: dict[str, Any]) -> bool:
        age = self.clock() - float(holder.get("heartbeat", 0))
        if age > self.ttl_s:
            return True
        same_host = holder.get("host") == socket.gethostname()
        pid = int(holder.get("pid", -1))
        if same_host and pid == os.getpid():
            return holder.get("token") not in _HELD
        return same_host and not _pid_alive(pid)

    def acquire(self) -> None:
        """Take the lock or raise `RunLocked` naming the driver that holds it."""
        holder = self._read()
        if holder and holder.get("token") != self.token and not self._holder_is_gone(holder):
            age = self.clock() - float(holder.get("heartbeat", 0))
            raise RunLocked(
                f"this run id is being run by pid {holder.get('pid')} on {holder.get('host')} "
                f"(heartbeat {age:.0f}s ago, lock file {self.store.url(self.path)}); wait for it, "
                f"or use another run.id"
            )
        self.heartbeat(force=True)
        _HELD.add(self.token)  # after the write: a thread taking it meanwhile meets `confirm`
        self._written = time.monotonic()

    def confirm(self) -> None:
        """Raise `RunLocked` if another driver took the lock in the same instant as `acquire`;
        waits out `CONFIRM_AFTER_S` since acquire's write (the driver calls it while Ray starts)."""
        left = self._written + CONFIRM_AFTER_S - time.monotonic()
        if left > 0:
            self.sleep(left)
        current = self._read()
        if current is not None and current.get("token") != self.token:
            raise RunLocked(
                f"another driver (pid {current.get('pid')} on {current.get('host')}) took "
                "this run id at the same moment; use another run.id"
            )

    def heartbeat(self, force: bool = False) -> None:
        now = self.clock()
        if force or now - self._last_beat >= self.ttl_s / 4:
            self.store.write_bytes_atomic(self.path, json.dumps(self._record()).encode())
            self._last_beat = now

    def release(self) -> None:
        """Remove the lock file if still ours (publishing removes it with the staging area)."""
        _HELD.discard(self.token)
        current = self._read()
        if current is not None and current.get("token") == self.token:
            self.store.rm(self.path)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.release()
            return
        # The run's own error is the one to report, not a store too broken to delete the lock.
        # The lock left behind is no longer in _HELD, so a rerun takes it over (in this
        # process at once, elsewhere once its heartbeat is older than the TTL).
        with contextlib.suppress(StorageError):
            self.release()
