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
    from jobs.core.config import JobConfig
    from jobs.core.schema import RunSchema
    from jobs.engine.parts import RunParts

Lease = tuple[int, Shard]
"""What a worker gets: (the shard's number in the run, the shard)."""


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
class Looked:
    """What the look-ahead staged: the shards with later occurrences of a query id, those with
    pairs found in the store or awaited, and the owners each awaiting shard waits for."""

    with_repeats: frozenset[str] = frozenset()
    with_pairs: frozenset[str] = frozenset()
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeFacts:
    """What a worker's judge settled on: its transport (None: offline) and its structured-output
    negotiation (`ResponseFormatNegotiation.summary()`; None: nothing negotiated)."""

    transport: str | None = None
    response_format: Mapping[str, Any] | None = None


@dataclass
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
class ShardContext:
    """What every worker needs besides its shards; small and picklable."""

    config: JobConfig
    # What the run is made of: the input, the judge, the cache (built by jobs.run.factory).
    parts: RunParts
    staging: str  # the run's staging folder, relative to the output store's root
    # The run's coordinator (its pace and budget unless `governed` is false), or None.
    coordinator: CoordinatorHandle | None = None
    governed: bool = False
    # The judge's API key as the driver read it (workers may not have the driver's environment).
    api_key: str | None = field(default=None, repr=False)
    # The run's tables with the input columns it carries, their types decided at start-up.
    tables: RunSchema | None = None
    # What the look-ahead staged for the shards.
    looked: Looked = field(default_factory=Looked)
    # The run's id: the workers' journals are named after it (jobs.core.verdict_store.Journal).
    run_id: str = "local"
    # Batch mode: the round whose pass this is (jobs.engine.batch); None for an online run.
    batch_round: int | None = None
