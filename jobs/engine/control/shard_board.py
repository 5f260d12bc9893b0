"""Handing shards to workers: the run's queue, who holds which shard, what came back (reports
and the progress counters). A restarted worker takes back the shards its dead attempt held; a
shard awaiting pairs of earlier shards goes out once they are staged (`WAIT` meanwhile); the
first failure or fatal judge report stops the board. The board and the governor make the run's
one coordinator actor (`coordinator_actor_class`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jobs.core.run_manifest import FlowSnapshot
from jobs.engine.control.governor import Completion, RunGovernor
from jobs.engine.control.progress import COUNTERS
from jobs.engine.messages import Lease, ShardReport

WAIT: Literal["wait"] = "wait"
"""`next_shard`'s answer while every shard left awaits an owner not yet staged."""


@dataclass(frozen=True)
class BoardNews:
    """What the driver learns at each poll (`counts`: the progress counters' totals)."""

    reports: list[ShardReport]
    failure: str | None
    waiting: int
    leased: int
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class ShardBoard:
    """The shards of a run not yet handed out, the leases, and the reports that came back."""

    todo: deque[Lease]
    # shard id -> the owners it awaits (jobs.engine.pairs.shared_pairs)
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)
    _leases: dict[str, dict[str, Lease]] = field(default_factory=dict)
    _reserved: dict[str, deque[Lease]] = field(default_factory=dict)
    _unfinished: set[str] = field(init=False)

    def __post_init__(self) -> None:
        # owners outside the board (staged by an earlier attempt of the run) are finished
        self._unfinished = {lease[1].shard_id for lease in self.todo}

    _new_reports: list[ShardReport] = field(default_factory=list)
    failure: str | None = None
    stopped: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def rejoin(self, worker: str) -> int:
        """A (re)started worker: the shards its dead attempts held are kept for it, handed
        out to it before any other. Returns how many it has to take back."""
        held = sorted(self._leases.pop(worker, {}).values(), key=lambda lease: lease[0])
        reserved = self._reserved.setdefault(worker, deque())
        reserved.extendleft(reversed(held))
        return len(reserved)

    def next_shard(self, worker: str) -> Lease | Literal["wait"] | None:
        """The next shard for `worker`; `WAIT` when every shard left awaits an owner not yet
        staged; None when there is none (or the run stopped)."""
        if self.stopped:
            return None
        reserved = self._reserved.get(worker)
        if reserved:
            lease = reserved.popleft()
        elif self.todo:
            ready = next((n for n, lease in enumerate(self.todo) if self._ready(lease)), None)
            if ready is None:
                return WAIT
            lease = self.todo[ready]
            del self.todo[ready]
        else:
            return None
        self._leases.setdefault(worker, {})[lease[1].shard_id] = lease
        return lease

    def _ready(self, lease: Lease) -> bool:
        return self._unfinished.isdisjoint(self.owners.get(lease[1].shard_id, ()))

    def done(self, worker: str, report: ShardReport) -> None:
        """A shard came back (staged, skipped, or stopped by a fatal judge error)."""
        self._leases.get(worker, {}).pop(report.shard_id, None)
        if not report.pending:
            self._unfinished.discard(report.shard_id)
        self._new_reports.append(report)
        if report.fatal:
            self.stopped = True

    def failed(self, worker: str, shard_id: str, message: str) -> None:
        """A shard failed for good: the run stops; the first failure is the one reported."""
        self._leases.get(worker, {}).pop(shard_id, None)
        self.failure = self.failure or message
        self.stopped = True

    def held_by(self, worker: str) -> list[str]:
        """The shards `worker` holds or has to take back, in run order."""
        held = [*self._leases.get(worker, {}).values(), *self._reserved.get(worker, ())]
        return [lease[1].shard_id for lease in sorted(held, key=lambda lease: lease[0])]

    def poll(self) -> BoardNews:
        """The reports since the last poll, the failure if any, and how much is left."""
        reports, self._new_reports = self._new_reports, []
        leased = sum(len(held) for held in self._leases.values())
        waiting = len(self.todo) + sum(len(kept) for kept in self._reserved.values())
        return BoardNews(reports, self.failure, waiting, leased, dict(self.counts))

    def add(self, increments: dict[str, int]) -> None:
        """Add to the progress counters (`jobs.engine.control.progress.BatchedCounter`)."""
        for key, value in increments.items():
            self.counts[key] = self.counts.get(key, 0) + value


class RunCoordinator(ShardBoard):
    """The actor's body (`coordinator_actor_class`): the board's calls and counters and the
    governor's; every call is cheap and never blocks. One actor, not three: each is a process
    Ray starts, seconds on a busy node before the first shard."""

    def __init__(
        self,
        leases: list[Lease],
        governor: RunGovernor | None,
        owners: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        super().__init__(deque(leases), owners or {})
        self._governor = governor

    def reserve(self, estimated_tokens: int) -> tuple[float, int]:
        assert self._governor is not None
        return self._governor.reserve(estimated_tokens)

    def refused(self, retry_after: float | None) -> None:
        if self._governor is not None:
            self._governor.refused(retry_after)

    def report(
        self, worker: str, demand: int, in_flight: int, completions: list[Completion]
    ) -> int:
        assert self._governor is not None
        return self._governor.report(worker, demand, in_flight, completions)

    def flow(self) -> FlowSnapshot | None:
        return self._governor.snapshot() if self._governor is not None else None


def coordinator_actor_class() -> Any:
    """`RunCoordinator` as a Ray actor class (importing this module does not import Ray)."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0)(RunCoordinator)
