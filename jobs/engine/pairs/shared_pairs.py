"""Pairs new to the verdict store that several shards of a run hold: the lowest shard owns
each, and another shard awaits it when that owner judges a good share of its pairs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from jobs.core.run_layout import StagingArea
from jobs.core.storage import Store
from jobs.core.verdict_cache import Entries

WAIT_SHARE = 0.1
"""A shard waits for an owner that judges at least this share of its pairs."""

AWAITS = pl.Schema({"shard": pl.Int64(), "pair_key": pl.String(), "owner": pl.Int64()})
HIT_KEYS = pl.Schema({"pair_key": pl.String()})


def awaited_pairs(keys: pl.DataFrame, answered: pl.DataFrame | None) -> pl.DataFrame:
    """`AWAITS`: every (shard, pair) of `keys` (one store partition's, unique per shard) that
    the store did not answer (`answered`) and a lower-numbered shard, its owner, also holds."""
    left = keys if answered is None else keys.join(answered, on="pair_key", how="anti")
    shared = left.filter(pl.len().over("pair_key") > 1)
    return (
        shared.with_columns(owner=pl.col("shard").min().over("pair_key"))
        .filter(pl.col("shard") != pl.col("owner"))
        .select(AWAITS.names())
    )


def worth_waiting(awaits: pl.DataFrame, pairs: int) -> pl.DataFrame:
    """The rows of one shard's `awaits` (of its `pairs`) whose owner judges at least
    `WAIT_SHARE` of them: waiting holds the whole shard back, so a pair here and there (repeats
    spread through the input) is judged again; the same items exported twice are waited for."""
    per_owner = awaits.group_by("owner").len()
    worth = per_owner.filter(pl.col("len") >= max(1, WAIT_SHARE * pairs))["owner"]
    return awaits.filter(pl.col("owner").is_in(worth.implode()))


def awaited_verdicts(store: Store, staging: str, awaits: Mapping[str, Sequence[str]]) -> Entries:
    """The verdicts of the pairs awaited (owner shard id -> pair keys), from the owners' staged
    verdicts (blocking). A pair its owner left without a verdict is missing: judged again."""
    area = StagingArea(store, staging)
    found: Entries = {}
    for owner, keys in awaits.items():
        data = store.read_bytes(area.verdicts_file(owner))
        rows = pl.read_parquet(data, columns=["pair_key", "relevant", "judge_reason"])
        wanted = pl.col("pair_key").is_in(pl.Series(keys, dtype=pl.String).implode())
        for key, relevant, reason in rows.filter(wanted & pl.col("relevant").is_not_null()).rows():
            found[key] = (bool(relevant), reason or "")
    return found
