"""The run's one coordinator actor: the shard board, the governor and the progress counters
behind one Ray actor (`jobs.engine.messages.CoordinatorHandle` is what it offers). One actor,
not three: each is a process Ray starts, seconds on a busy node before the first shard."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

from jobs.engine.control.governor import Completion, RunGovernor
from jobs.engine.control.progress import COUNTERS
from jobs.engine.control.shard_board import BoardNews, ShardBoard
from jobs.engine.messages import FlowFacts, Lease, ShardReport


class RunCoordinator:
    """The actor's body (`coordinator_actor_class`); every call is cheap and never blocks."""

    def __init__(
        self,
        leases: list[Lease],
        governor: RunGovernor | None,
        owners: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self._board = ShardBoard(deque(leases), owners or {})
        self._governor = governor
        self._counts = dict.fromkeys(COUNTERS, 0)

    # the board
    def rejoin(self, worker: str) -> int:
        return self._board.rejoin(worker)

    def next_shard(self, worker: str) -> Lease | Literal["wait"] | None:
        return self._board.next_shard(worker)

    def done(self, worker: str, report: ShardReport) -> None:
        self._board.done(worker, report)

    def failed(self, worker: str, shard_id: str, message: str) -> None:
        self._board.failed(worker, shard_id, message)

    def held_by(self, worker: str) -> list[str]:
        return self._board.held_by(worker)

    def poll(self) -> tuple[BoardNews, dict[str, int]]:
        return self._board.poll(), dict(self._counts)

    # the governor
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

    def flow(self) -> FlowFacts | None:
        return self._governor.snapshot() if self._governor is not None else None

    # the progress counters
    def add(self, increments: dict[str, int]) -> None:
        for key, value in increments.items():
            self._counts[key] = self._counts.get(key, 0) + value


def coordinator_actor_class() -> Any:
    """`RunCoordinator` as a Ray actor class (importing this module does not import Ray)."""
    import ray

    return ray.remote(num_cpus=0, max_restarts=0)(RunCoordinator)
