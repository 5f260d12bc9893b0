"""A run as planned by the driver: what the fan-out and batch rounds work from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jobs.core.config import OutputConfig, RateLimitConfig, RayConfig
from jobs.core.run_layout import RunLocation, StagingArea
from jobs.core.run_manifest import TracesRecord
from jobs.core.schema import RunSchema
from jobs.core.storage import Store
from jobs.engine.messages import StagedNeeds
from jobs.engine.parts import RunParts
from jobs.inputs import Shard
from jobs.inputs.sampling import SamplePlan


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """One run: its parts, where it goes, its shards and its tables, and the config sections
    the fan-out and the batch rounds use (`output`, `ray`, `rate_limit`)."""

    parts: RunParts
    location: RunLocation
    store: Store
    output: OutputConfig
    ray: RayConfig
    rate_limit: RateLimitConfig
    shards: Sequence[Shard]
    # The run's tables with the input columns it carries, their types decided at start-up.
    tables: RunSchema = field(default_factory=RunSchema)
    # What the look-ahead staged for the shards' workers (jobs.engine.pairs.lookahead).
    needs: StagedNeeds = field(default_factory=StagedNeeds)
    # How many input files the shards come from (for the run's first line).
    files: int = 0
    # input.format otlp or phoenix: what assembling the traces into items found (manifest).
    traces: TracesRecord | None = None
    # A sampled run's plan (which rows are judged) and the judge canary's metrics
    # (jobs.run.canary), both for the summary.
    sample: SamplePlan | None = None
    canary: tuple[tuple[str, float | None], ...] = ()

    @property
    def staging(self) -> StagingArea:
        return StagingArea(self.store, self.location.staging)
