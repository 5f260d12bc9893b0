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
from jobs.engine.messages import Assignment, ShardReport

WAIT: Literal["wait"] = "wait"
"""`next_shard`'s answer while every shard left awaits an owner not yet staged."""


@dataclass(frozen=True, kw_only=True)
class BoardPoll:
    """What the driver learns at each poll: the reports since the last one, the first failure,
    the shards waiting and those assigned, and the progress counters' totals."""

    reports: list[ShardReport]
    failure: str | None
    waiting: int
    assigned: int
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(kw_only=True)
class ShardBoard:
    """The shards of a run not yet handed out, those assigned to each worker, and the reports
    that came back."""

    todo: deque[Assignment]
    # shard id -> the owners it awaits (jobs.engine.pairs.shared_pairs)
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)
    _assigned: dict[str, dict[str, Assignment]] = field(default_factory=dict)
    _reserved: dict[str, deque[Assignment]] = field(default_factory=dict)
    _unfinished: set[str] = field(init=False)

    def __post_init__(self) -> None:
        # owners outside the board (staged by an earlier attempt of the run) are finished
        self._unfinished = {shard.shard_id for _, shard in self.todo}

    _new_reports: list[ShardReport] = field(default_factory=list)
    failure: str | None = None
    stopped: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def rejoin(self, worker: str) -> int:
        """A (re)started worker: the shards its dead attempts held are kept for it, handed
        out to it before any other. Returns how many it has to take back."""
        held = sorted(self._assigned.pop(worker, {}).values(), key=_run_order)
        reserved = self._reserved.setdefault(worker, deque())
        reserved.extendleft(reversed(held))
        return len(reserved)

    def next_shard(self, worker: str) -> Assignment | Literal["wait"] | None:
        """The next shard for `worker`; `WAIT` when every shard left awaits an owner not yet
        staged; None when there is none (or the run stopped)."""
        if self.stopped:
            return None
        reserved = self._reserved.get(worker)
        if reserved:
            assignment = reserved.popleft()
        elif self.todo:
            ready = next(
                (place for place, waiting in enumerate(self.todo) if self._ready(waiting)), None
            )
            if ready is None:
                return WAIT
            assignment = self.todo[ready]
            del self.todo[ready]
        else:
            return None
        _, shard = assignment
        self._assigned.setdefault(worker, {})[shard.shard_id] = assignment
        return assignment

    def _ready(self, assignment: Assignment) -> bool:
        _, shard = assignment
        return self._unfinished.isdisjoint(self.owners.get(shard.shard_id, ()))

    def done(self, worker: str, report: ShardReport) -> None:
        """A shard came back (staged, skipped, or stopped by a fatal judge error)."""
        self._assigned.get(worker, {}).pop(report.shard_id, None)
        if not report.pending:
            self._unfinished.discard(report.shard_id)
        self._new_reports.append(report)
        if report.fatal:
            self.stopped = True

    def failed(self, worker: str, shard_id: str, message: str) -> None:
        """A shard failed for good: the run stops; the first failure is the one reported."""
        self._assigned.get(worker, {}).pop(shard_id, None)
        self.failure = self.failure or message
        self.stopped = True

    def held_by(self, worker: str) -> list[str]:
        """The shards `worker` holds or has to take back, in run order."""
        held = [*self._assigned.get(worker, {}).values(), *self._reserved.get(worker, ())]
        return [shard.shard_id for _, shard in sorted(held, key=_run_order)]

    def poll(self) -> BoardPoll:
        """The reports since the last poll, the failure if any, and how much is left."""
        reports = self._new_reports
        self._new_reports = []
        assigned = sum(len(held) for held in self._assigned.values())
        waiting = len(self.todo) + sum(len(kept) for kept in self._reserved.values())
        return BoardPoll(
            reports=reports,
            failure=self.failure,
            waiting=waiting,
            assigned=assigned,
            counts=dict(self.counts),
        )

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
        todo: list[Assignment],
        governor: RunGovernor | None,
        owners: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        super().__init__(todo=deque(todo), owners=owners or {})
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


def _run_order(assignment: Assignment) -> int:
    number, _ = assignment
    return number


def coordinator_actor_class() -> Any:
    """`RunCoordinator` as a Ray actor class (importing this module does not import Ray)."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0)(RunCoordinator)
