"""What the driver, the run's coordinator actor and the workers send each other.

Small picklable records, in a module that imports neither pyarrow, Polars nor the scorer: the
coordinator actor, which only passes leases and reports around, imports this and nothing heavy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.inputs.spec import Shard
from scorer_core.types import Usage

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.core.schema import RunSchema
    from jobs.engine.parts import RunParts

Lease = tuple[int, Shard]
"""What a worker gets: (the shard's number in the run, the shard)."""


@dataclass(frozen=True)
class JudgeFacts:
    """What a worker's judge settled on, for the run's summary and manifest: its transport
    ("http", "litellm"; None for the offline judge) and its structured-output negotiation as
    `ResponseFormatNegotiation.summary()` reports it (None when it negotiates nothing)."""

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

    def count(self, status: str, n: int = 1) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + n


@dataclass(frozen=True)
class ShardContext:
    """What every worker needs besides its shards; small and picklable."""

    config: JobConfig
    # What the run is made of: the input, the judge, the cache (built by jobs.run.factory).
    parts: RunParts
    staging: str  # the run's staging folder, relative to the output store's root
    # Ray actor handle of the run's coordinator (jobs.engine.control.coordinator: shard board,
    # progress
    # counters, and the governor's pace and budget unless `governed` is false), or None.
    coordinator: Any = None
    governed: bool = False
    # The judge's API key as the driver read it (workers may not have the driver's environment).
    api_key: str | None = field(default=None, repr=False)
    # The run's tables with the input columns it carries, their types decided at start-up.
    tables: RunSchema | None = None
    # The shards with later occurrences of a query_id found before judging, in the staging
    # area (jobs.engine.pairs.lookahead): those rows are written as duplicates, not judged.
    duplicates: frozenset[str] = frozenset()
    # The shards whose verdicts found in the verdict store are staged
    # (jobs.engine.pairs.cache_lookup).
    cached: frozenset[str] = frozenset()
    # The shards awaiting pairs a lower-numbered shard judges first, staged for their workers
    # (jobs.engine.pairs.shared_pairs).
    awaiting: frozenset[str] = frozenset()
    # The run's id: the workers' journals are named after it (jobs.core.verdict_store.Journal).
    run_id: str = "local"
    # Batch mode: the round whose pass this is (jobs.engine.batch); None for an online run.
    batch_round: int | None = None
