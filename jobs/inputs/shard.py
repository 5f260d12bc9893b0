"""A shard: the unit of work the driver plans and a worker reads, judges and stages. Apart from
planning, so processes that only pass shards around import neither pyarrow nor fsspec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jobs.inputs.spec import InputFormat

ShardKind = Literal["rows", "bytes"]


@dataclass(frozen=True, slots=True)
class Shard:
    """A piece of one input file: rows `[start, end)` (Parquet) or bytes `[start, end)` (JSONL).

    For gzipped JSONL the shard is the whole file (`start == 0`, `end == compressed size`).
    """

    shard_id: str
    file_index: int
    path: str
    format: InputFormat
    kind: ShardKind
    start: int
    end: int
    compression: str | None = None
    # The shard's place among its file's shards (0, 1, ...), set at planning: the verdict
    # cache stores a shard's verdicts by (file, slot) and looks them up there on a rerun.
    slot: int = 0
