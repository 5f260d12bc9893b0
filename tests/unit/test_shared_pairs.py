"""Pairs a run holds in several shards (`jobs.engine.pairs.shared_pairs`), without Ray: who owns a
pair, who awaits it, and what an awaiting shard reads from its owners' staged verdicts."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from jobs.core.run_layout import StagingArea
from jobs.core.schema import RunSchema
from jobs.core.storage import open_store
from jobs.core.verdict_store import partition_expr
from jobs.engine.pairs.cache_lookup import KEYS
from jobs.engine.pairs.shared_pairs import (
    HIT_KEYS,
    awaited_pairs,
    awaited_verdicts,
    awaits_path,
    find_shared,
    worth_waiting,
)
from jobs.engine.pairs.spill import Spill

KEY_A, KEY_B, KEY_C, KEY_D = ("a0" + "1" * 30, "a1" + "2" * 30, "b0" + "3" * 30, "c0" + "4" * 30)


def frame(rows: list[tuple[int, str]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"shard": [r[0] for r in rows], "pair_key": [r[1] for r in rows]}, schema=KEYS
    )


def test_the_lowest_shard_owns_a_pair_the_store_did_not_answer() -> None:
    keys = frame([(3, KEY_A), (1, KEY_A), (5, KEY_A), (2, KEY_B), (4, KEY_B), (0, KEY_C)])
    answered = pl.DataFrame({"pair_key": [KEY_B]}, schema=HIT_KEYS)
    awaits = awaited_pairs(keys, answered).sort("shard")
    assert awaits.rows() == [(3, KEY_A, 1), (5, KEY_A, 1)]  # KEY_B answered, KEY_C alone


def test_awaits_are_staged_per_shard_and_read_from_the_owners_verdicts(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "out"))
    staging = "_staging/run_id=r1"
    shard_ids = [f"{n:05d}" for n in range(6)]
    keys = Spill(tmp_path / "keys", partition_expr(), KEYS, flush_bytes=10)
    keys.add(frame([(0, KEY_A), (4, KEY_A), (1, KEY_D), (5, KEY_D), (2, KEY_C), (3, KEY_C)]))
    hit_keys = Spill(tmp_path / "hits", partition_expr(), HIT_KEYS)
    hit_keys.add(pl.DataFrame({"pair_key": [KEY_C]}, schema=HIT_KEYS))
    owners = find_shared(keys, hit_keys, (store, staging), shard_ids, tmp_path)
    assert owners == {"00004": frozenset({"00000"}), "00005": frozenset({"00001"})}
    assert not store.exists(awaits_path(store, staging, "00003"))  # KEY_C: from the store

    # the owners staged their verdicts: KEY_A judged, KEY_D's item left unscored (no verdict)
    area = StagingArea(store, staging)
    schema = RunSchema().staged_verdicts.arrow
    for shard_id, key, relevant in (("00000", KEY_A, True), ("00001", KEY_D, None)):
        row = {name: None for name in schema.names}
        row.update(pair_key=key, relevant=relevant, judge_reason="because" if relevant else None)
        store.write_parquet_atomic(
            area.verdicts_file(shard_id), pa.Table.from_pylist([row], schema=schema)
        )
    assert awaited_verdicts(store, staging, "00004") == {KEY_A: (True, "because")}
    assert awaited_verdicts(store, staging, "00005") == {}  # judged again by its own worker


def test_a_shard_waits_only_for_an_owner_of_a_good_share_of_its_pairs() -> None:
    """100 pairs: 3 shared with shard 1 (judged again), 40 with shard 2 (waited for)."""
    awaits = pl.DataFrame(
        {
            "shard": [9] * 43,
            "pair_key": [f"k{n}" for n in range(43)],
            "owner": [1] * 3 + [2] * 40,
        },
        schema={"shard": pl.Int64(), "pair_key": pl.String(), "owner": pl.Int64()},
    )
    kept = worth_waiting(awaits, pairs=100)
    assert set(kept["owner"]) == {2} and kept.height == 40
    assert worth_waiting(awaits.head(3), pairs=10).height == 3  # 30% of a small shard
