"""Handing shards to workers: the run's shard queue, who holds which shard, what came back.

A worker is one long Ray task (`jobs.engine.worker.run_worker`) with a few lanes; whenever a
lane is free it asks the board for the next shard. So a worker reads its next shard while its
current shard's last replies are outstanding, and the driver never waits for a task to start
between shards. The board records each lease; when Ray retries a worker whose process died,
the new attempt `rejoin`s first and gets its unfinished shards back (each shard is staged all
or nothing, so a shard run twice is written once).

The first fatal judge report or failed shard stops the board: no more shards are handed out,
and the driver cancels the workers. Pure logic (tested without Ray), held by the run's
coordinator actor (`jobs.engine.coordinator`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from jobs.engine.messages import ShardReport
from jobs.inputs import Shard

Lease = tuple[int, Shard, int]
"""What a worker gets: (the shard's number in the run, the shard, its slot in its file)."""


@dataclass(frozen=True)
class BoardNews:
    """What the driver learns at each poll."""

    reports: list[ShardReport]
    failure: str | None
    waiting: int
    leased: int


@dataclass
class ShardBoard:
    """The shards of a run not yet handed out, the leases, and the reports that came back."""

    todo: deque[Lease]
    _leases: dict[str, dict[str, Lease]] = field(default_factory=dict)
    _new_reports: list[ShardReport] = field(default_factory=list)
    failure: str | None = None
    stopped: bool = False

    def rejoin(self, worker: str) -> int:
        """A (re)started worker: its unfinished shards go back to the front of the queue."""
        held = self._leases.pop(worker, {})
        for lease in sorted(held.values(), key=lambda lease: lease[0], reverse=True):
            self.todo.appendleft(lease)
        return len(held)

    def next_shard(self, worker: str) -> Lease | None:
        """The next shard for `worker`, or None when there is none (or the run stopped)."""
        if self.stopped or not self.todo:
            return None
        lease = self.todo.popleft()
        self._leases.setdefault(worker, {})[lease[1].shard_id] = lease
        return lease

    def done(self, worker: str, report: ShardReport) -> None:
        """A shard came back (staged, skipped, or stopped by a fatal judge error)."""
        self._leases.get(worker, {}).pop(report.shard_id, None)
        self._new_reports.append(report)
        if report.fatal:
            self.stopped = True

    def failed(self, worker: str, shard_id: str, message: str) -> None:
        """A shard failed for good: the run stops; the first failure is the one reported."""
        self._leases.get(worker, {}).pop(shard_id, None)
        self.failure = self.failure or message
        self.stopped = True

    def held_by(self, worker: str) -> list[str]:
        """The shards `worker` holds, in run order."""
        return [lease[1].shard_id for lease in sorted(self._leases.get(worker, {}).values())]

    def poll(self) -> BoardNews:
        """The reports since the last poll, the failure if any, and how much is left."""
        reports, self._new_reports = self._new_reports, []
        leased = sum(len(held) for held in self._leases.values())
        return BoardNews(reports, self.failure, len(self.todo), leased)
