"""The run's one coordinator actor: the shard board, the governor and the progress counters
behind one Ray actor (`jobs.engine.messages.CoordinatorHandle` is what it offers). One actor,
not three: each is a process Ray starts, seconds on a busy node before the first shard."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from jobs.core.run_manifest import FlowSnapshot
from jobs.engine.control.governor import Completion, RunGovernor
from jobs.engine.control.shard_board import ShardBoard
from jobs.engine.messages import Lease


class RunCoordinator(ShardBoard):
    """The actor's body (`coordinator_actor_class`): the board's calls and counters
    (`ShardBoard`) and the governor's; every call is cheap and never blocks."""

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
