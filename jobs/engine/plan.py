"""A run as planned by the driver: what the fan-out and batch rounds work from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation, StagingArea
from jobs.core.schema import RunSchema
from jobs.core.storage import Store
from jobs.engine.messages import Looked
from jobs.engine.parts import RunParts
from jobs.inputs import Shard
from jobs.inputs.records import ItemReader
from jobs.inputs.sampling import SamplePlan


@dataclass(frozen=True)
class RunPlan:
    """One run: its config and parts, where it goes, its shards and its tables."""

    config: JobConfig
    parts: RunParts
    location: RunLocation
    store: Store
    shards: Sequence[Shard]
    # The run's tables with the input columns it carries, their types decided at start-up.
    tables: RunSchema = field(default_factory=RunSchema)
    # What the look-ahead staged for the shards' workers (jobs.engine.pairs.lookahead).
    looked: Looked = field(default_factory=Looked)
    # How many input files the shards come from (for the run's first line).
    files: int = 0
    # input.format otlp: the config as the user gave it (`config` reads the assembled items)
    # and the assembly's report, both for the manifest.
    source: JobConfig | None = None
    traces: dict[str, Any] | None = None
    # A sampled run's plan (the reader carries it to the workers) and the judge canary's
    # metrics (jobs.run.canary), both for the summary.
    sample: SamplePlan | None = None
    canary: tuple[tuple[str, float | None], ...] = ()

    @property
    def reader(self) -> ItemReader:
        """How the run's items are read (traces are assembled into items before planning)."""
        if self.parts.reader is None:
            raise RuntimeError("the run's items have no reader: traces not assembled yet")
        return self.parts.reader

    @property
    def staging(self) -> StagingArea:
        return StagingArea(self.store, self.location.staging)
