"""What the driver, the run's coordinator actor and the workers send each other, and the
coordinator handle they call. Small picklable records; imports nothing heavy (the actor
imports this)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from jobs.inputs.spec import Shard
from scorer_core.types import Usage

if TYPE_CHECKING:
    from jobs.core.config import OutputConfig
    from jobs.core.schema import RunSchema
    from jobs.engine.parts import RunParts
    from jobs.inputs.sampling import SamplePlan

Assignment = tuple[int, Shard]
"""A shard handed to a worker by the run's shard board: (its number in the run, the shard)."""


class Remote(Protocol):
    """An actor method as a handle offers it: the call's result is awaitable and `ray.get`-able
    (test fakes return awaitables)."""

    def remote(self, *args: Any) -> Any: ...


class Governor(Protocol):
    """What a worker's flow calls on the run's governor (`jobs.engine.control.governor`)."""

    reserve: Remote
    refused: Remote
    report: Remote


class CoordinatorHandle(Governor, Protocol):
    """The run's coordinator actor (`jobs.engine.control.shard_board.RunCoordinator`) as workers
    and the driver call it: the shard board, the governor, the progress counters."""

    rejoin: Remote
    next_shard: Remote
    done: Remote
    failed: Remote
    held_by: Remote
    poll: Remote
    flow: Remote
    add: Remote


@dataclass(frozen=True)
class StagedNeeds:
    """What the look-ahead staged for the shards' workers: the shards with later occurrences
    of a query id, those with pairs found in the store or awaited, and the owners each
    awaiting shard waits for (`jobs.engine.pairs.lookahead.ShardNeeds` is one shard's)."""

    with_repeats: frozenset[str] = frozenset()
    with_pairs: frozenset[str] = frozenset()
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeFacts:
    """What a worker's judge settled on: its transport (None: offline) and its structured-output
    negotiation (`ResponseFormatNegotiation.summary()`; None: nothing negotiated)."""

    transport: str | None = None
    response_format: Mapping[str, Any] | None = None


@dataclass(kw_only=True)
class ShardReport:
    """How one shard went: staged (with its counts), skipped (staged by an earlier attempt),
    stopped by a fatal judge error, or left waiting for a batch round (`pending`)."""

    shard_id: str
    skipped: bool = False
    items: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    fatal: str | None = None
    judge: JudgeFacts = field(default_factory=JudgeFacts)
    # Batch mode: requests recorded for the next batch round (the shard is not staged yet).
    pending: int = 0
    # The Ray node the shard ran on (empty outside Ray), for the manifest.
    node: str = ""


@dataclass(frozen=True)
class BatchPass:
    """A batch round's pass over the shards (`jobs.engine.batch_rounds`): its round, and
    whether the requests without a final reply are asked online now (re-asks with
    judge.batch.reask online, or the round the deadline sent online) instead of recorded."""

    round: int
    asks_online: bool = False


@dataclass(frozen=True, kw_only=True)
class ShardContext:
    """What every worker needs besides its shards; small and picklable."""

    # What the run is made of: the input, the judge, the cache (built by jobs.run.factory).
    parts: RunParts
    output: OutputConfig  # where the run's store is
    staging: str  # the run's staging folder, relative to the output store's root
    # The run's coordinator (its pace and budget unless `governed` is false), or None.
    coordinator: CoordinatorHandle | None = None
    governed: bool = False
    # Whether rate_limit sets a pace (requests or tokens per minute) the governor keeps.
    paced: bool = False
    # Attempts at a shard whose store failed (ray.max_task_retries + 1).
    attempts: int = 1
    # The run's tables with the input columns it carries, their types decided at start-up.
    tables: RunSchema | None = None
    # What the look-ahead staged for the shards.
    needs: StagedNeeds = field(default_factory=StagedNeeds)
    # A sampled run's plan: the rows it judges (jobs.inputs.sampling); None: every row.
    sample: SamplePlan | None = None
    # The run's id: the workers' journals are named after it (jobs.core.verdict_store.Journal).
    run_id: str = "local"
    # Batch mode: the round whose pass this is (jobs.engine.batch); None for an online run.
    batch_pass: BatchPass | None = None
