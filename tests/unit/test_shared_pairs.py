"""Pairs a run holds in several shards (`jobs.engine.pairs.shared_pairs`, found by the
look-ahead), without Ray: who owns a pair, who awaits it, what the look-ahead stages for an
awaiting shard, and what that shard reads from its owners' staged verdicts."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pyarrow as pa

from jobs.core.run_layout import StagingArea
from jobs.core.schema import RunSchema
from jobs.core.storage import open_store
from jobs.engine.pairs.lookahead import Lookahead, ShardKeys, needs_path, read_needs
from jobs.engine.pairs.repeats import KEYS as ID_KEYS
from jobs.engine.pairs.shared_pairs import HIT_KEYS, awaited_pairs, awaited_verdicts, worth_waiting
from jobs.engine.pairs.store_join import KEYS

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
    look = Lookahead(tmp_path / "look", shard_ids, ids=False)
    keys = frame([(0, KEY_A), (4, KEY_A), (1, KEY_D), (5, KEY_D), (2, KEY_C), (3, KEY_C)])
    look.add(ShardKeys(pl.DataFrame(schema=ID_KEYS), keys))
    look.hit_keys.add(pl.DataFrame({"pair_key": [KEY_C]}, schema=HIT_KEYS))  # KEY_C: stored
    look.share()
    looked = look.stage(store, staging)
    assert looked.owners == {"00004": frozenset({"00000"}), "00005": frozenset({"00001"})}
    assert looked.with_pairs == {"00004", "00005"} and looked.with_repeats == frozenset()
    assert not store.exists(needs_path(store, staging, "00003", "pairs"))
    awaits = {n: read_needs(store, staging, n, looked).awaits for n in ("00004", "00005")}
    assert awaits == {"00004": {"00000": [KEY_A]}, "00005": {"00001": [KEY_D]}}

    # the owners staged their verdicts: KEY_A judged, KEY_D's item left unscored (no verdict)
    area = StagingArea(store, staging)
    schema = RunSchema().staged_verdicts.arrow
    for shard_id, key, relevant in (("00000", KEY_A, True), ("00001", KEY_D, None)):
        row = {name: None for name in schema.names}
        row.update(pair_key=key, relevant=relevant, judge_reason="because" if relevant else None)
        store.write_parquet_atomic(
            area.verdicts_file(shard_id), pa.Table.from_pylist([row], schema=schema)
        )
    assert awaited_verdicts(store, staging, awaits["00004"]) == {KEY_A: (True, "because")}
    assert awaited_verdicts(store, staging, awaits["00005"]) == {}  # judged again by its worker


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
