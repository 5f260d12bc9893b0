"""What the engine is handed to run a config, its whole contract with `jobs.run.factory`: the
input reader, how each worker builds the judge, the judge's settings the engine acts on
(scoring, batch mode), the verdict cache, what the judge can do. The engine never builds a
judge and never reads `judge.*` itself; the parts are picklable (they travel in the
`ShardContext`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from jobs.core.config import BatchConfig
from jobs.core.verdict_cache import CacheSpec
from jobs.inputs.records import ItemReader
from scorer_core.capabilities import JudgeCapabilities
from scorer_core.protocols import Gate, Judge, Limiter, Sleeper
from scorer_core.scoring import ScoringSettings

if TYPE_CHECKING:
    from jobs.engine.batch.provider import LiteLLMBatches
    from jobs.engine.batch.requests import RequestLines


class CanaryJudge(Protocol):
    """Judges the run's labelled canary in the driver process, fresh: the summary's canary
    metrics (`jobs.engine.publish.aggregate.CANARY_METRICS`, name and value)."""

    def judge(self) -> tuple[tuple[str, float | None], ...]: ...


class JudgeMaker(Protocol):
    """Builds the configured judge inside a worker (its event loop, its connection pool), with
    the API key the driver read from its environment (workers may not have it)."""

    def build(self, limiter: Limiter | None, gate: Gate | None) -> Judge:
        """The judge, paced by `limiter`, its requests in flight bounded by `gate` (a worker's
        allowance of the run-wide budget) or, without one, by the configured concurrency."""
        ...

    def local_limiter(self) -> Limiter | None:
        """The run's rate limit kept in this one process (None when no limit is set)."""
        ...


class BatchesMaker(Protocol):
    """Opens the provider's Files + Batches API for batch mode's rounds on the driver."""

    def open(self, sleep: Sleeper) -> LiteLLMBatches:
        """The provider's client; `sleep` paces its retries."""
        ...


@dataclass(frozen=True, kw_only=True)
class BatchParts:
    """Batch mode's parts (`judge.mode: batch`): the `judge.batch` section the rounds follow,
    the provider and how its request lines are written, the re-asks a reply may need and
    whether verdicts carry reasons (both as the online judge has them)."""

    settings: BatchConfig
    provider: str  # litellm's custom_llm_provider for files and batches
    lines: RequestLines
    max_reasks: int
    verdict_reasons: bool
    batches: BatchesMaker


@dataclass(frozen=True, kw_only=True)
class RunParts:
    """A config's input, judge and cache, as the engine uses them."""

    # How the items are read. Traces (input.format otlp, phoenix): the items the run assembles
    # from them first, under its staging area (jobs.engine.trace_staging).
    reader: ItemReader
    judges: JudgeMaker
    # The judge model, as the logs, the summary (its cost) and the manifest name it.
    model: str
    capabilities: JudgeCapabilities
    scoring: ScoringSettings  # scorer.scale, scorer.reason and judge.contexts_per_call
    # Batch mode's parts; None for an online run.
    batch: BatchParts | None = None
    # The verdict cache, or None when the run does not use one.
    cache: CacheSpec | None = None
    # Whether repeated query ids across shards are found before judging (the look-ahead).
    find_duplicates_first: bool = False
    # The judge canary (jobs.run.canary), judged by the driver before the items; None: none.
    canary: CanaryJudge | None = None
