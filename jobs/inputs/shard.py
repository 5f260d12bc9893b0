"""A shard: the unit of work the driver plans and a worker reads, judges and stages. Apart from
planning, so processes that only pass shards around import neither pyarrow nor fsspec."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jobs.inputs.spec import InputFormat


@dataclass(frozen=True, slots=True)
class Shard:
    """A piece of one input file: rows `[start, end)` of a Parquet file, bytes `[start, end)` of
    a JSONL file, or a whole gzipped JSONL file (`start == 0`, `end == compressed size`).
    `slot`: its place among its file's shards (0, 1, ...)."""

    shard_id: str
    file_index: int
    path: str
    format: InputFormat
    start: int
    end: int
    compression: str | None = None
    slot: int = 0

    @property
    def kind(self) -> Literal["rows", "bytes"]:
        return "rows" if self.format == "parquet" else "bytes"
