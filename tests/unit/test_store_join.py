"""The run's keys joined with the verdict store, without Ray: keys packed into joins of a fixed
size, and each join finding exactly the stored verdicts of its keys, newest first."""

from __future__ import annotations

import hashlib
from pathlib import Path

import polars as pl
import pytest

from jobs.core.storage import open_store
from jobs.core.verdict_store import VerdictStore, partition_expr
from jobs.engine.pairs import store_join
from jobs.engine.pairs.spill import Spill
from jobs.engine.pairs.store_join import HITS, KEYS, join_pack, store_packs


def partition_of(key: str) -> int:
    """The store partition of a pair key, as `partition_expr` computes it."""
    return int(key[:2], 16)


def key(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()[:32]


def run_keys(count: int, shards: int) -> pl.DataFrame:
    return pl.DataFrame(
        {"shard": [n % shards for n in range(count)], "pair_key": [key(n) for n in range(count)]},
        schema=KEYS,
    )


def spilled(tmp_path: Path, keys: pl.DataFrame) -> Spill:
    spill = Spill(tmp_path / "keys", partition_expr(), KEYS, flush_bytes=20_000)
    for at in range(0, keys.height, 300):
        spill.add(keys.slice(at, 300))
    return spill


@pytest.mark.parametrize("size", [7, 100, 5_000])
def test_packs_hold_size_keys_each_and_the_files_of_their_partitions(
    tmp_path: Path, size: int
) -> None:
    keys = run_keys(3_000, shards=4)
    stored = {p: [f"p={p:03d}/f.parquet"] for p in range(0, 256, 2)}  # odd partitions: no files
    packs = list(store_packs(spilled(tmp_path, keys), stored, size))
    assert all(pack.height == size for _, pack in packs[:-1])
    assert 0 < packs[-1][1].height <= size
    for files, pack in packs:
        partitions = set(pack["pair_key"].map_elements(partition_of, return_dtype=pl.Int64))
        assert files == {p: stored[p] for p in partitions}
    with_files = keys.filter(
        pl.col("pair_key").map_elements(partition_of, return_dtype=pl.Int64) % 2 == 0
    )
    everything = pl.concat([pack for _, pack in packs])
    assert everything.sort("pair_key").equals(with_files.sort("pair_key"))


def test_a_task_finds_exactly_the_stored_verdicts_of_its_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_join, "_JOIN_BATCH", 5)  # a partition's keys over several batches
    verdicts = VerdictStore(store=open_store(str(tmp_path / "out")), folder="_cache/fp")
    stored = [key(n) for n in range(0, 600, 3)]
    older = pl.DataFrame(
        {
            "pair_key": stored,
            "relevant": [False] * len(stored),
            "judge_reason": ["old"] * len(stored),
            "written_at": [1_800_000_000] * len(stored),
        }
    )
    newer = older.head(50).with_columns(
        relevant=pl.lit(True), judge_reason=pl.lit("new"), written_at=pl.lit(1_800_000_000 + 5)
    )
    for name, frame in (("a", older), ("b", newer)):
        for (partition,), piece in (
            frame.with_columns(partition_expr())
            .partition_by("_partition", as_dict=True, include_key=False)
            .items()
        ):
            verdicts.write(verdicts.partition_folder(int(partition)), name, piece)  # type: ignore[call-overload]
    keys = run_keys(600, shards=7)
    files = verdicts.files_by_partition()
    hits = pl.concat(
        [
            join_pack(verdicts, pack_files, pack)
            for pack_files, pack in store_packs(spilled(tmp_path, keys), files, 64)
        ]
    )
    assert hits.schema == HITS
    assert sorted(hits["pair_key"]) == sorted(stored)
    expected_shard = {key(n): n % 7 for n in range(600)}
    assert all(expected_shard[k] == s for k, s in hits.select("pair_key", "shard").iter_rows())
    newest = set(newer["pair_key"])
    for pair, relevant, reason in hits.select("pair_key", "relevant", "judge_reason").iter_rows():
        assert (relevant, reason) == ((True, "new") if pair in newest else (False, "old"))
