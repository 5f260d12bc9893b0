"""Pairs a run holds in more than one shard, judged once: by the first shard that holds them.

The verdict store answers pairs judged in earlier runs; a pair new to the store that appears
in several shards of one run (the same items exported twice, in two files) would be judged
by every worker that meets it. So, from the run's keys the lookup filed by store partition
(`jobs.engine.pairs.cache_lookup`):

1. `find_shared` takes each partition's keys, drops those the store answered, and for every
   pair left in two or more shards names its *owner*, the lowest-numbered of them; every other
   shard holding it *awaits* it, if that owner judges a good share of its pairs
   (`worth_waiting`: waiting holds the whole shard back, so a pair here and there shared
   with another shard is judged again). What a shard awaits is staged as
   `<staging>/cache/<shard id>.awaits.parquet` (pair key, owner's shard id), and the driver
   keeps, per awaiting shard, the owners it waits for.
2. The shard board (`jobs.engine.control.shard_board`) hands an awaiting shard out once its owners
are
   staged: a worker asking for a shard meanwhile gets another one, or waits a moment.
3. `awaited_verdicts`: the awaiting shard's worker reads its owners' staged verdicts of the
   pairs it awaits (a pair its owner left unjudged, an unscored item, is judged again).

Owners are always lower-numbered than the shards awaiting them and the board hands shards out
in number order, so every waiting shard waits on shards handed out before it. Memory on the
driver: one partition's keys at a time. Online runs only (a batch round's requests are fixed
per pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import polars as pl

from jobs.core.run_layout import StagingArea
from jobs.core.storage import Store
from jobs.core.verdict_cache import Entries
from jobs.engine.pairs.spill import Spill, shard_blocks

WAIT_SHARE = 0.1
"""A shard waits for an owner that judges at least this share of its pairs."""

AWAITS = pl.Schema({"shard": pl.Int64(), "pair_key": pl.String(), "owner": pl.Int64()})
HIT_KEYS = pl.Schema({"pair_key": pl.String()})


def awaits_path(store: Store, staging: str, shard_id: str) -> str:
    """The staged file of the pairs a shard awaits from its owners."""
    return store.join(staging, "cache", f"{shard_id}.awaits.parquet")


def awaited_pairs(keys: pl.DataFrame, answered: pl.DataFrame) -> pl.DataFrame:
    """`AWAITS` rows: every (shard, pair) of `keys` (one store partition's, unique per shard)
    whose pair the store did not answer (`answered`) and a lower-numbered shard also holds,
    with that owner."""
    left = keys.join(answered, on="pair_key", how="anti")
    shared = left.filter(pl.len().over("pair_key") > 1)
    return (
        shared.with_columns(owner=pl.col("shard").min().over("pair_key"))
        .filter(pl.col("shard") != pl.col("owner"))
        .select(AWAITS.names())
    )


def worth_waiting(awaits: pl.DataFrame, pairs: int) -> pl.DataFrame:
    """The rows of one shard's `awaits` (of its `pairs`) whose owner is worth waiting for:
    one that judges at least `WAIT_SHARE` of the shard's pairs. Waiting holds the whole shard
    back, so a few pairs shared with many shards (repeats spread at random through the
    input) are judged again rather than serialising the run; the same items exported twice
    are waited for."""
    per_owner = awaits.group_by("owner").len()
    worth = per_owner.filter(pl.col("len") >= max(1, WAIT_SHARE * pairs))["owner"]
    return awaits.filter(pl.col("owner").is_in(worth.implode()))


def find_shared(
    keys: Spill,
    hit_keys: Spill,
    staging: tuple[Store, str],
    shard_ids: Sequence[str],
    scratch: Path,
) -> dict[str, frozenset[str]]:
    """Stage what each shard awaits (step 1 of the module's doc) from the run's `keys` and
    the keys the store answered (`hit_keys`), both filed by store partition (closed); the
    owners of every awaiting shard, by shard id."""
    awaits = Spill(scratch / "awaits", shard_blocks(), AWAITS)
    answered_partitions = set(hit_keys.close())
    pairs = [0] * len(shard_ids)  # each shard's pairs
    for partition in keys.close():
        answered = (
            hit_keys.read(partition).unique()
            if partition in answered_partitions
            else pl.DataFrame(schema=HIT_KEYS)
        )
        run_keys = keys.read(partition)
        for number, count in run_keys.group_by("shard").len().iter_rows():
            pairs[number] += count
        awaits.add(awaited_pairs(run_keys, answered))
    store, folder = staging
    owners: dict[str, frozenset[str]] = {}
    for number, piece in awaits.groups("shard"):
        piece = worth_waiting(piece, pairs[number])
        if piece.is_empty():
            continue
        staged = pl.DataFrame(
            {"pair_key": piece["pair_key"], "owner": [shard_ids[n] for n in piece["owner"]]},
            schema={"pair_key": pl.String(), "owner": pl.String()},
        )
        shard_id = shard_ids[number]
        store.write_parquet_atomic(awaits_path(store, folder, shard_id), staged.to_arrow())
        owners[shard_id] = frozenset(staged["owner"].unique())
    return owners


def awaited_verdicts(store: Store, staging: str, shard_id: str) -> Entries:
    """The verdicts a shard awaits, from its owners' staged verdicts (blocking). Pairs an
    owner left without a verdict are missing: the shard judges them itself."""
    wanted = pl.read_parquet(store.read_bytes(awaits_path(store, staging, shard_id)))
    area = StagingArea(store, staging)
    found: Entries = {}
    for (owner,), piece in wanted.partition_by("owner", as_dict=True).items():
        rows = pl.read_parquet(
            store.read_bytes(area.verdicts_file(str(owner))),
            columns=["pair_key", "relevant", "judge_reason"],
        )
        rows = rows.filter(
            pl.col("pair_key").is_in(piece["pair_key"].implode()) & pl.col("relevant").is_not_null()
        )
        for key, relevant, reason in rows.iter_rows():
            found[key] = (bool(relevant), reason or "")
    return found
