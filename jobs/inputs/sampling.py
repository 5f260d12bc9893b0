"""Sampled runs (`sample:`): which items are judged, and how many each stratum had. An item is
judged when `unit_hash(seed, query_id)` is below `fraction`, or among the `per_segment`
smallest of its stratum, so the same queries are chosen night after night.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs.core.config import SampleConfig
from jobs.core.schema import CarriedColumn
from jobs.inputs.carry import check_carried
from jobs.inputs.spec import ItemRecord, RowError, Shard

Stratum = tuple[str | None, ...]  # the text of each `sample.by` column's value (None: null)


def unit_hash(seed: int, query_id: str) -> float:
    """A number in [0, 1) that depends only on `seed` and `query_id`."""
    digest = hashlib.sha256(f"{seed}:{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def stratum_text(value: Any) -> str | None:
    """A value as the summary writes a segment's: `true`/`false`, dates ISO, else as it prints."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


@dataclass(frozen=True, kw_only=True)
class SamplePlan:
    """Which items a sampled run judges, and each stratum's population."""

    config: SampleConfig
    population: Mapping[Stratum, int]
    # per_segment: the largest unit_hash kept in each stratum (absent: the whole stratum)
    thresholds: Mapping[Stratum, float] = field(default_factory=dict)
    # the population of every value of every summary.by column: (column, text) -> items
    segments: Mapping[tuple[str, str | None], int] = field(default_factory=dict)

    @property
    def items(self) -> int:
        return sum(self.population.values())

    def describe(self) -> str:
        """For people: "10% of 12,000 items in 4 strata (seed 7)"."""
        size = self.config.fraction
        amount = (
            f"{size:.4g} of" if size is not None else f"{self.config.per_segment} per stratum of"
        )
        strata = len(self.population)
        noun = "stratum" if strata == 1 else "strata"
        return f"{amount} {self.items:,} items in {strata} {noun} (seed {self.config.seed})"

    def keeps(self, record: ItemRecord | RowError, names: Sequence[str]) -> bool:
        """Whether the row `record` is judged (`names`: the run's carried columns, in order)."""
        carried = _carried_dict(record, names)
        stratum = tuple(stratum_text(carried.get(name)) for name in self.config.by)
        return self.keep(_record_id(record), stratum)

    def keep(self, query_id: str, stratum: Stratum) -> bool:
        """Whether the item `query_id` of `stratum` is judged."""
        draw = unit_hash(self.config.seed, query_id)
        if self.config.fraction is not None:
            return draw < self.config.fraction
        threshold = self.thresholds.get(stratum)
        return threshold is None or draw <= threshold


def judged(sample: SamplePlan | None, record: ItemRecord | RowError, names: Sequence[str]) -> bool:
    """Whether a run with `sample` (None: it judges every row) judges the row `record` (`names`:
    the run's carried columns, in order)."""
    return sample is None or sample.keeps(record, names)


def check_strata_columns(sample: SampleConfig, carried: Sequence[CarriedColumn]) -> None:
    """`ConfigError` unless every `sample.by` column is carried with a stratum's type."""
    kinds = [pa.types.is_string, pa.types.is_large_string, pa.types.is_integer]
    kinds += [pa.types.is_boolean, pa.types.is_date]
    need = "a stratum needs text, integer, boolean or date values"
    check_carried(
        "sample.by", sample.by, carried, lambda kind: any(test(kind) for test in kinds), need
    )


def _carried_dict(record: ItemRecord | RowError, names: Sequence[str]) -> dict[str, Any]:
    return dict(zip(names, record.carried or (), strict=False))


def plan_from_rows(
    sample: SampleConfig,
    rows: Iterable[tuple[str, Mapping[str, Any]]],
    segment_by: Sequence[str] = (),
) -> SamplePlan:
    """The plan from every input row's (query_id, carried values by column name)."""
    population: dict[Stratum, int] = {}
    segments: dict[tuple[str, str | None], int] = {}
    # per stratum, the N smallest hashes as a max-heap (negated)
    smallest: dict[Stratum, list[float]] = {}
    for query_id, carried in rows:
        stratum = tuple(stratum_text(carried.get(name)) for name in sample.by)
        population[stratum] = population.get(stratum, 0) + 1
        for column in segment_by:
            key = (column, stratum_text(carried.get(column)))
            segments[key] = segments.get(key, 0) + 1
        if sample.per_segment is not None:
            heap = smallest.setdefault(stratum, [])
            draw = unit_hash(sample.seed, query_id)
            if len(heap) < sample.per_segment:
                heapq.heappush(heap, -draw)
            elif draw < -heap[0]:
                heapq.heapreplace(heap, -draw)
    thresholds = {
        stratum: -heap[0]
        for stratum, heap in smallest.items()
        if population[stratum] > len(heap)  # a smaller stratum is judged whole
    }
    return SamplePlan(
        config=sample, population=population, thresholds=thresholds, segments=segments
    )


def plan_sample(
    sample: SampleConfig,
    shards: Sequence[Shard],
    read: Callable[[Shard], Iterable[ItemRecord | RowError]],
    carried: Sequence[CarriedColumn],
    segment_by: Sequence[str] = (),
) -> SamplePlan:
    """The plan from every row of `shards`, read with `read` before judging."""
    if not sample.enabled:
        raise ValueError("plan_sample needs sample.fraction or sample.per_segment")
    check_strata_columns(sample, carried)
    names = [column.name for column in carried]

    def rows() -> Iterable[tuple[str, Mapping[str, Any]]]:
        for shard in shards:
            for record in read(shard):
                yield _record_id(record), _carried_dict(record, names)

    return plan_from_rows(sample, rows(), segment_by)


def _record_id(record: ItemRecord | RowError) -> str:
    return record.query_id or f"{record.source}#{record.row}"
