"""What the engine is handed to run a config, its whole contract with `jobs.run.factory`: the
input, how each worker builds the judge, the verdict cache, what the judge can do. The engine
never builds a judge itself; the parts are picklable (they travel in the `ShardContext`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Protocol

from jobs.core.verdict_cache import CacheSpec
from jobs.inputs.records import ItemReader
from scorer_core.capabilities import JudgeCapabilities
from scorer_core.protocols import Judge, Limiter

Gate = contextlib.AbstractAsyncContextManager[None]


class CanaryJudge(Protocol):
    """Judges the run's labelled canary in the driver process, fresh: the summary's canary
    metrics (`jobs.engine.publish.aggregate.CANARY_METRICS`, name and value)."""

    def judge(self) -> tuple[tuple[str, float | None], ...]: ...


class JudgeMaker(Protocol):
    """Builds the configured judge inside a worker (its event loop, its connection pool)."""

    def build(self, limiter: Limiter | None, api_key: str | None, gate: Gate | None) -> Judge:
        """The judge, paced by `limiter`, its requests in flight bounded by `gate` (a worker's
        allowance of the run-wide budget) or, without one, by the configured concurrency."""
        ...

    def local_limiter(self) -> Limiter | None:
        """The run's rate limit kept in this one process (None when no limit is set)."""
        ...


@dataclass(frozen=True)
class RunParts:
    """A config's input, judge and cache, as the engine uses them."""

    # How the items are read; None for traces (input.format otlp), which the run assembles
    # into items first and reads with `ItemReader.for_config` (jobs.engine.trace_staging).
    reader: ItemReader | None
    judges: JudgeMaker
    capabilities: JudgeCapabilities
    # The verdict cache, or None when the run does not use one.
    cache: CacheSpec | None
    # Whether repeated query ids across shards are found before judging (the look-ahead).
    find_duplicates_first: bool
    # The judge canary (jobs.run.canary), judged by the driver before the items; None: none.
    canary: CanaryJudge | None = None
