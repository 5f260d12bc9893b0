"""The run's one coordinating actor: shard board, flow control and progress counters together.

Workers talk to it for everything they share with the rest of the run:

- the shard board (`jobs.engine.control.shard_board.ShardBoard`): `rejoin`, `next_shard`, `done`,
  `failed`, `held_by`, `poll`;
- the governor (`jobs.engine.control.governor.RunGovernor`, absent for the offline judge):
`reserve`,
  `refused`, `report`, `flow`;
- the progress counters the driver draws: `add`, `counts`.

One actor rather than three: each actor is a process Ray has to start, which costs seconds on
a busy node before the first shard can begin; every call here is cheap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

from jobs.engine.control.budget import BudgetSettings
from jobs.engine.control.governor import Completion, RunGovernor
from jobs.engine.control.limiter import PacingState
from jobs.engine.control.progress import COUNTERS
from jobs.engine.control.shard_board import BoardNews, ShardBoard
from jobs.engine.messages import FlowFacts, Lease, ShardReport


def make_governor(
    *, requests_per_minute: float, tokens_per_minute: float, headroom: float, budget: BudgetSettings
) -> RunGovernor:
    """The run's governor: a pace when a limit is set, and the in-flight budget."""
    pacing = (
        PacingState(
            requests_per_minute=requests_per_minute,
            tokens_per_minute=tokens_per_minute,
            headroom=headroom,
        )
        if requests_per_minute or tokens_per_minute
        else None
    )
    return RunGovernor(pacing, budget)


def coordinator_actor_class() -> Any:
    """The Ray actor class, built lazily (importing this module does not import Ray)."""
    import ray

    @ray.remote(num_cpus=0, max_restarts=0)
    class RunCoordinator:
        def __init__(
            self,
            leases: list[Lease],
            governor: RunGovernor | None,
            owners: Mapping[str, frozenset[str]] | None = None,
        ) -> None:
            self._board = ShardBoard(deque(leases), owners or {})
            self._governor = governor
            self._counts = dict.fromkeys(COUNTERS, 0)

        # -- board
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

        # -- governor
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

        # -- progress
        def add(self, increments: dict[str, int]) -> None:
            for key, value in increments.items():
                self._counts[key] = self._counts.get(key, 0) + value

        def counts(self) -> dict[str, int]:
            return dict(self._counts)

    return RunCoordinator
