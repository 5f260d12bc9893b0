"""The run's pair keys joined with the verdict store, in memory that does not grow with either.

The keys come filed by store partition (`Spill`); `store_packs` cuts them into packs of
`PACK_KEYS` (several small partitions in one, a large one over several) with the files of
their partitions, and `join_pack` (a Ray task body, or a call in the driver for a small run)
returns the pack's keys that the store holds, one partition's files at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from jobs.core.verdict_store import VerdictStore, partition_expr
from jobs.engine.pairs.spill import Spill

PACK_KEYS = 32_768
"""Keys a join looks up, whatever the size of the run."""
_JOIN_BATCH = 2_048
"""Keys of a partition a join matches at a time."""

KEYS = pl.Schema({"shard": pl.Int64(), "pair_key": pl.String()})
HITS = pl.Schema({**KEYS, "relevant": pl.Boolean(), "judge_reason": pl.String()})


def join_pack(
    verdicts: VerdictStore, files: dict[int, list[str]], keys: pl.DataFrame
) -> pl.DataFrame:
    """`HITS`: the `keys` the store holds; `files` are the store files of their partitions."""
    found = []
    for (partition,), part in (
        keys.with_columns(partition_expr())
        .partition_by("_partition", as_dict=True, include_key=False)
        .items()
    ):
        # A batch holds the same whether the partition has few of the pack's keys or all.
        batches = [part.slice(at, _JOIN_BATCH) for at in range(0, part.height, _JOIN_BATCH)]
        wanted = (batch["pair_key"].unique() for batch in batches)
        number = int(partition)  # type: ignore[call-overload]
        lookups = verdicts.lookup_batches(wanted, files[number])
        for batch, stored in zip(batches, lookups, strict=True):
            if not stored.is_empty():
                found.append(batch.join(stored.drop("written_at"), on="pair_key", how="inner"))
    return pl.concat(found).select(HITS.names()) if found else pl.DataFrame(schema=HITS)


def store_packs(
    keys: Spill, stored: dict[int, list[str]], size: int = PACK_KEYS
) -> Iterator[tuple[dict[int, list[str]], pl.DataFrame]]:
    """(the files of the partitions a pack falls in, the pack): the run's keys `size` at a
    time (the last pack fewer), only those of partitions with files."""
    held: list[pl.DataFrame] = []
    count = 0
    partitions: set[int] = set()
    for partition in keys.close():
        if partition not in stored:
            continue
        for chunk in keys.chunks(partition, size):
            while chunk.height:
                taken = chunk.head(size - count)
                chunk = chunk.slice(taken.height)
                held.append(taken)
                count += taken.height
                partitions.add(partition)
                if count == size:
                    yield (
                        {partition: stored[partition] for partition in partitions},
                        pl.concat(held),
                    )
                    held = []
                    count = 0
                    partitions = set()
    if held:
        yield {partition: stored[partition] for partition in partitions}, pl.concat(held)
