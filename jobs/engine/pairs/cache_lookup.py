"""Before the fan-out: the verdicts the store already holds for the shards to judge.

The verdict store (`jobs.core.verdict_store`) is partitioned by pair key, the run by shard; a
worker must not read the store (100M verdicts) nor the run's keys (10M items). So, as the
duplicate look-ahead does (`jobs.engine.pairs.lookahead`), a partitioned join, every step bounded:

1. the journal left by earlier runs (a killed one's included) is folded into the partitions;
2. Ray tasks read the shards (`_TASK_SHARDS` a task) and return their pair keys
   (`shard_pair_keys`, the keys the worker will compute); the driver files them on local disk
   by store partition (`jobs.engine.pairs.spill.Spill`: one writer at a time, whatever the buckets);
3. Ray tasks (`join_keys`) of about `_TASK_KEYS` keys each (several small partitions packed
   in one, a large one spread over several: `_packs`) read the store files of those keys'
   partitions, one partition at a time, keep only the run's keys, and return the hits with
   their shard numbers; the driver files them again, by block of shards;
4. each block is read back and every shard's hits are staged as
   `<staging>/cache/<shard id>.parquet`, which its worker loads (`cached_verdicts`).

Memory: on the driver, the spill's buffer, a task's keys and one block of hits; on a task,
its keys and one store partition. None of them grows with the run (docs/benchmarks.md,
"Verdict store"); never the store, never the run. A rerun (same run id) looks again: the
verdicts its killed predecessor journaled are in the store by then, so resume is per item,
not per shard.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import polars as pl

from jobs.core.schema import RunSchema
from jobs.core.storage import Store
from jobs.core.verdict_cache import Entries, decode_entries, encode_entries, pair_key
from jobs.core.verdict_store import VerdictStore, partition_expr
from jobs.engine.pairs.shared_pairs import HIT_KEYS, find_shared
from jobs.engine.pairs.spill import Spill, shard_blocks
from jobs.engine.plan import RunPlan
from jobs.inputs import Shard
from jobs.inputs.records import ItemReader
from jobs.inputs.shard_read import read_shard_records
from scorer_core.errors import InputError

_TASK_SHARDS = 16
"""Shards whose keys one Ray task computes."""
_TASK_KEYS = 32_768
"""Keys a join task looks up (`_packs`), whatever the size of the run."""
_JOIN_BATCH = 2_048
"""Keys of a partition a join task matches at a time."""

KEYS = pl.Schema({"shard": pl.Int64(), "pair_key": pl.String()})
HITS = pl.Schema(
    {
        "shard": pl.Int64(),
        "pair_key": pl.String(),
        "relevant": pl.Boolean(),
        "judge_reason": pl.String(),
    }
)


def hits_path(store: Store, staging: str, shard_id: str) -> str:
    """The staged file of a shard's verdicts found in the store (absent: none)."""
    return store.join(staging, "cache", f"{shard_id}.parquet")


def cached_verdicts(store: Store, staging: str, shard_id: str) -> Entries:
    """A shard's verdicts found in the store before the fan-out (blocking)."""
    return decode_entries(store.read_bytes(hits_path(store, staging, shard_id)))


def shard_pair_keys(
    reader: ItemReader,
    tables: RunSchema,
    fingerprint: str,
    numbered: Sequence[tuple[int, Shard]],
) -> pl.DataFrame:
    """`KEYS` of every context of the shards' items, as their workers will key them (the
    same reading and checks, `read_shard_records`). A Ray task body.

    A shard that cannot be read (a corrupt page) gets no keys: the lookup only saves calls,
    and the shard's own worker fails the run naming the file, as without a store."""
    shards: list[int] = []
    keys: list[str] = []
    for number, shard in numbered:
        try:
            read = read_shard_records(reader, shard, number, tables)
        except InputError:
            continue
        for _, record in read.records:
            item = record.to_scoring_item()
            for position in range(len(item.contexts)):
                shards.append(number)
                keys.append(pair_key(fingerprint, item, position))
    return pl.DataFrame({"shard": shards, "pair_key": keys}, schema=KEYS).unique()


def join_keys(
    verdicts: VerdictStore, files: dict[int, list[str]], keys: pl.DataFrame
) -> pl.DataFrame:
    """`HITS`: the run's `keys` that the store holds; `files` are the store files of the
    partitions the keys fall in. A Ray task body: one partition's files read at a time."""
    found = []
    for (partition,), part in (
        keys.with_columns(partition_expr())
        .partition_by("_partition", as_dict=True, include_key=False)
        .items()
    ):
        # The partition's keys a batch at a time: what a batch holds is the same whether the
        # partition has few of the task's keys (a small run) or all of them (a large one).
        batches = [part.slice(at, _JOIN_BATCH) for at in range(0, part.height, _JOIN_BATCH)]
        wanted = (batch["pair_key"].unique() for batch in batches)
        number = int(partition)  # type: ignore[call-overload]
        for batch, stored in zip(
            batches, verdicts.lookup_batches(wanted, files[number]), strict=True
        ):
            if not stored.is_empty():
                found.append(batch.join(stored.drop("written_at"), on="pair_key", how="inner"))
    if not found:
        return pl.DataFrame(schema=HITS)
    return pl.concat(found).select(HITS.names())


def _packs(
    keys: Spill, stored: dict[int, list[str]], size: int
) -> Iterator[tuple[dict[int, list[str]], pl.DataFrame]]:
    """The run's keys in the store's partitions, `size` keys a task (the last one fewer;
    several small partitions in one, a large one over several): a task's memory is the same
    whatever the size of the run. With the files of the partitions each pack falls in."""
    held: list[pl.DataFrame] = []
    count = 0
    partitions: set[int] = set()
    for partition in keys.close():
        if partition not in stored:
            continue  # no task for a partition without files
        for chunk in keys.chunks(partition, size):
            while chunk.height:
                taken = chunk.head(size - count)
                chunk = chunk.slice(taken.height)
                held.append(taken)
                count += taken.height
                partitions.add(partition)
                if count == size:
                    yield {p: stored[p] for p in partitions}, pl.concat(held)
                    held, count, partitions = [], 0, set()
    if held:
        yield {p: stored[p] for p in partitions}, pl.concat(held)


def stored_pair_keys(
    reader: ItemReader,
    tables: RunSchema,
    fingerprint: str,
    shards: Sequence[Shard],
    verdicts: VerdictStore,
    scratch: Path,
) -> Iterator[pl.Series]:
    """In this process, without Ray and without writing to the store (`ctxprec estimate`):
    the pair keys of `shards` that the store holds (its journal included), a partition at a
    time. `scratch` is a local folder for the spilled keys."""
    keys = Spill(scratch / "keys", partition_expr(), KEYS)
    for number, shard in enumerate(shards):
        keys.add(shard_pair_keys(reader, tables, fingerprint, [(number, shard)]))
    # the journal is small (each run folds it first): read once, whole
    journal = verdicts.newest([verdicts.read_file(p) for p in verdicts.journal_files()])
    for partition in keys.close():
        for chunk in keys.chunks(partition, _TASK_KEYS):
            wanted = chunk["pair_key"].unique()
            found = verdicts.lookup(partition, wanted)["pair_key"]
            journaled = journal.filter(pl.col("pair_key").is_in(wanted.implode()))["pair_key"]
            yield pl.concat([found, journaled]).unique()


def _bounded(tasks: Iterator[Any], in_flight: int) -> Iterator[Any]:
    """The results of Ray object refs from `tasks`, at most `in_flight` running at once."""
    import ray

    pending: list[Any] = []
    for ref in tasks:
        pending.append(ref)
        if len(pending) >= in_flight:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    for ref in pending:
        yield ray.get(ref)


@dataclass(frozen=True)
class CacheLookup:
    """What the lookup staged: the shards with verdicts found in the store, and the shards
    awaiting pairs another shard of the run judges first, with those owners
    (`jobs.engine.pairs.shared_pairs`)."""

    with_hits: frozenset[str] = frozenset()
    owners: Mapping[str, frozenset[str]] = field(default_factory=dict)


def find_cached_verdicts(
    plan: RunPlan,
    todo: Sequence[tuple[int, Shard]],
    verdicts: VerdictStore,
    out: TextIO,
    *,
    shared: bool = True,
) -> CacheLookup:
    """Stage, for every shard of `todo` ((number, shard) pairs of the run `plan`), the
    verdicts the store holds for its pairs (see the module's doc), and, `shared`, what it
    awaits from the run's other shards. Ray must be running."""
    import ray

    started = time.monotonic()
    config = plan.config
    folded = verdicts.fold_journal(writer=f"{plan.location.run_id}.fold")
    options = task_options(config.ray.num_cpus_per_task, config.ray.max_task_retries)
    keys_task = ray.remote(shard_pair_keys).options(**options)
    in_flight = 2 * config.ray.workers
    assert plan.parts.cache is not None
    fingerprint = plan.parts.cache.fingerprint
    groups = [todo[i : i + _TASK_SHARDS] for i in range(0, len(todo), _TASK_SHARDS)]
    with tempfile.TemporaryDirectory(prefix="ctxprec-cache-") as tmp:
        keys = Spill(Path(tmp, "keys"), partition_expr(), KEYS)
        reader, tables = plan.reader, plan.tables
        for frame in _bounded(
            (keys_task.remote(reader, tables, fingerprint, g) for g in groups), in_flight
        ):
            keys.add(frame)
        shard_ids = [shard.shard_id for shard in plan.shards]
        staging = (plan.store, plan.location.staging)
        hit_keys = Spill(Path(tmp, "hit-keys"), partition_expr(), HIT_KEYS)
        with_hits, found = join_and_stage(
            keys, verdicts, staging, shard_ids, options, in_flight, Path(tmp), hit_keys
        )
        owners = find_shared(keys, hit_keys, staging, shard_ids, Path(tmp)) if shared else {}
    awaiting = len(owners)
    out.write(
        f"verdict store: {found:,} of {keys.rows:,} pair(s) already judged, found for "
        f"{len(with_hits)} shard(s) ({folded:,} journaled verdict(s) folded in; "
        f"{time.monotonic() - started:.1f}s)"
        + (f"; {awaiting} shard(s) await pairs an earlier shard judges\n" if awaiting else "\n")
    )
    return CacheLookup(frozenset(with_hits), owners)


def task_options(num_cpus: float, retries: int) -> dict[str, Any]:
    """The Ray options of the lookup's tasks."""
    return {"num_cpus": num_cpus, "max_retries": retries, "scheduling_strategy": "SPREAD"}


def join_and_stage(
    keys: Spill,
    verdicts: VerdictStore,
    staging: tuple[Store, str],
    shard_ids: Sequence[str],
    options: dict[str, Any],
    in_flight: int,
    scratch: Path,
    hit_keys: Spill | None = None,
) -> tuple[list[str], int]:
    """Steps 3 and 4 (see the module's doc) over the run's spilled `keys`: the ids of the
    shards (by number, `shard_ids`) with hits, staged in `staging` (a store and the run's
    staging folder in it), and the hits found; the keys found are also filed in `hit_keys`.
    Ray must be running."""
    import ray

    join_task = ray.remote(join_keys).options(**options)
    hits = Spill(scratch / "hits", shard_blocks(), HITS)
    stored = verdicts.files_by_partition()  # one listing
    tasks = (
        join_task.remote(verdicts, files, pack) for files, pack in _packs(keys, stored, _TASK_KEYS)
    )
    for frame in _bounded(tasks, in_flight):
        hits.add(frame)
        if hit_keys is not None:
            hit_keys.add(frame.select("pair_key"))
    return _stage(staging, shard_ids, hits), hits.rows


def _stage(staging: tuple[Store, str], shard_ids: Sequence[str], hits: Spill) -> list[str]:
    """Write each shard's hits to its staged file, a block of shards at a time."""
    store, folder = staging
    staged = []
    for number, piece in hits.groups("shard"):
        shard_id = shard_ids[number]
        entries = {
            key: (bool(relevant), reason or "")
            for key, relevant, reason in piece.unique("pair_key").iter_rows()
        }
        store.write_parquet_atomic(hits_path(store, folder, shard_id), encode_entries(entries))
        staged.append(shard_id)
    return staged
