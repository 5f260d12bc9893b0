"""A run as planned by the driver: what the fan-out and batch rounds work from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation, StagingArea
from jobs.core.schema import RunSchema
from jobs.core.storage import Store
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
    # The shards with later occurrences of a query id staged by the look-ahead
    # (jobs.engine.pairs.lookahead): their rows are written as duplicates, not judged.
    duplicates: frozenset[str] = frozenset()
    # The shards with verdicts found in the verdict store before the fan-out, staged for
    # their workers (jobs.engine.pairs.cache_lookup).
    cached: frozenset[str] = frozenset()
    # The shards awaiting pairs a lower-numbered shard of the run judges first, with those
    # owners (jobs.engine.pairs.shared_pairs); empty in batch mode, whose requests are fixed per
    # pass.
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # How many input files the shards come from (for the run's first line).
    files: int = 0
    # input.format otlp: the config as the user gave it (`config` reads the assembled items)
    # and the assembly's report, both for the manifest.
    source: JobConfig | None = None
    traces: dict[str, Any] | None = None
    # A sampled run's plan (jobs.inputs.sampling; the reader carries it to the workers) and the
    # judge
    # canary's metrics (jobs.run.canary), both for the summary.
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
