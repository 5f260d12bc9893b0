"""The look-ahead: one pass over the input before the fan-out, so that no pair is paid twice.
Each shard is read once (`shard_keys`); then `Lookahead`, on the driver in bounded memory,
finds the later occurrences of a query id, the pairs the verdict store holds and the new pairs
several shards hold (judged by the lowest, awaited by the others), and stages per shard what
its worker needs (`read_needs`)."""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from jobs.core.run_layout import item_seq
from jobs.core.storage import Store
from jobs.core.verdict_cache import Entries, pair_key
from jobs.core.verdict_store import VerdictStore, partition_expr
from jobs.engine.messages import StagedNeeds
from jobs.engine.pairs import repeats
from jobs.engine.pairs.shared_pairs import HIT_KEYS, awaited_pairs, worth_waiting
from jobs.engine.pairs.spill import Spill, shard_blocks
from jobs.engine.pairs.store_join import KEYS, PACK_KEYS, join_pack, store_packs
from jobs.engine.plan import RunPlan
from jobs.engine.ray_runtime import Mapper, local_map, ray_map
from jobs.inputs import RowError, Shard
from jobs.inputs.records import ItemReader, read_query_ids
from jobs.inputs.sampling import judged
from jobs.inputs.shard_read import RunRows
from scorer_core.errors import InputError

logger = logging.getLogger(__name__)

TASK_SHARDS = 16
"""Shards one `shard_keys` call reads (a task of a few ms would cost more than it does)."""
LOCAL_ITEMS = 5_000
"""A run of at most this many items (or fewer shards than workers) is looked at in the driver."""

NEEDS = pl.Schema(
    {
        "shard": pl.Int64(),
        "item_seq": pl.Int64(),  # a later occurrence of a query id ...
        "duplicate_of": pl.String(),  # ... and where its first one is
        "pair_key": pl.String(),  # a pair the store holds, with its verdict ...
        "relevant": pl.Boolean(),
        "judge_reason": pl.String(),
        "owner": pl.Int64(),  # ... or a pair an earlier shard judges (its number)
    }
)


@dataclass(frozen=True)
class ShardKeys:
    """What reading some shards gave: every row's `repeats.KEYS` and their pairs' `KEYS`."""

    ids: pl.DataFrame
    pairs: pl.DataFrame


@dataclass(frozen=True, kw_only=True)
class KeyReading:
    """How shards are read for their keys, as their workers read them (`rows`), and the verdict
    cache's fingerprint their pair keys are made with (None: no pair keys)."""

    rows: RunRows
    fingerprint: str | None = None


def shard_keys(
    reading: KeyReading,
    numbered: Sequence[tuple[int, Shard]],
    ids: bool = False,
    pairs_of: Collection[int] | None = None,
) -> ShardKeys:
    """A Ray task body: the keys of `numbered` ((number, shard) pairs) as their workers will
    see them: with `ids`, every row's query id and `item_seq`; with a fingerprint, the pair
    keys of the items judged in the shards of `pairs_of` (None: all). An unreadable shard gets
    no keys (its own worker fails the run naming the file)."""
    id_rows: list[tuple[str, int, str, int]] = []
    pair_rows: list[tuple[int, str]] = []
    for number, shard in numbered:
        try:
            if reading.fingerprint is not None and (pairs_of is None or number in pairs_of):
                found, keys = _read_items(reading, number, shard)
            elif ids:
                found = _read_ids(reading.rows.reader, number, shard)
                keys = set()
            else:
                continue
        except InputError:
            continue
        if ids:
            id_rows.extend(found)
        pair_rows.extend((number, key) for key in keys)
    ids_frame = pl.DataFrame(id_rows, schema=repeats.KEYS, orient="row")
    return ShardKeys(ids_frame, pl.DataFrame(pair_rows, schema=KEYS, orient="row"))


def _read_ids(reader: ItemReader, number: int, shard: Shard) -> list[tuple[str, int, str, int]]:
    """(query id, item_seq, source, row) of every row of the shard, its query ids alone read."""
    rows = read_query_ids(reader.spec, shard)
    return [
        (query_id, item_seq(number, index), source, row)
        for index, (query_id, source, row) in enumerate(rows)
    ]


def _read_items(
    reading: KeyReading, number: int, shard: Shard
) -> tuple[list[tuple[str, int, str, int]], set[str]]:
    """Every row's id, and the pair keys of the rows `read_shard_records` hands the judge."""
    ids: list[tuple[str, int, str, int]] = []
    keys: set[str] = set()
    first_seen: set[str] = set()
    rows = reading.rows
    fingerprint = reading.fingerprint or ""
    for index, record in enumerate(rows.reader.read(shard, rows.tables.carried)):
        where = f"{record.source}#{record.row}"  # the id of a row without one (its error row)
        query_id = where if record.query_id is None else record.query_id
        ids.append((query_id, item_seq(number, index), record.source, record.row))
        if isinstance(record, RowError) or not judged(rows.sample, record, rows.tables.names):
            continue
        if query_id in first_seen:
            continue
        first_seen.add(query_id)
        item = record.to_scoring_item()
        keys.update(pair_key(fingerprint, item, position) for position in range(len(item.contexts)))
    return ids, keys


def _needs(frame: pl.DataFrame, **values: Any) -> pl.DataFrame:
    """`frame` with `values` and nulls in the `NEEDS` columns it lacks."""
    frame = frame.with_columns(**{name: pl.lit(value) for name, value in values.items()})
    missing = [
        pl.lit(None, kind).alias(name) for name, kind in NEEDS.items() if name not in frame.columns
    ]
    return frame.with_columns(missing)


class Lookahead:
    """The driver's side: keys in (`add`), then `find_repeats`, `join_store`, `share`, and
    `stage` each shard's needs. Memory: a partition's keys or a block of shards' needs;
    `folder` is local scratch space the caller removes."""

    def __init__(self, folder: Path, shard_ids: Sequence[str], ids: bool) -> None:
        self.shard_ids = shard_ids
        self.finder = repeats.RepeatFinder(folder / "repeats") if ids else None
        self.keys = Spill(folder / "keys", partition_expr(), KEYS)
        self.hit_keys = Spill(folder / "hit-keys", partition_expr(), HIT_KEYS)
        self.needs = Spill(folder / "needs", shard_blocks(), NEEDS)
        self.pairs = [0] * len(shard_ids)  # each shard's pairs, counted by `share`
        self.later = self.hits = self.folded = self.with_hits = 0

    def add(self, found: ShardKeys) -> None:
        if self.finder is not None:
            self.finder.add(found.ids)
        self.keys.add(found.pairs)

    def find_repeats(self) -> None:
        """The later occurrences of every query id, as needs of their shards."""
        assert self.finder is not None
        with self.finder:
            marks = self.finder.finish()
            self.later = marks.count
            for number, later in marks.by_shard():
                self.needs.add(_needs(later, shard=number))

    def join_store(self, verdicts: VerdictStore, mapper: Mapper) -> None:
        """The pairs the store holds (its journal folded in first), as needs of their shards."""
        self.folded = verdicts.fold_journal(writer="lookahead.fold")
        packs = store_packs(self.keys, verdicts.files_by_partition(), PACK_KEYS)
        for hits in mapper(join_pack, ((verdicts, files, pack) for files, pack in packs)):
            self.needs.add(_needs(hits))
            self.hit_keys.add(hits.select("pair_key"))
            self.hits += hits.height

    def share(self) -> None:
        """The pairs new to the store that several shards hold, as awaited from their owner."""
        answered = set(self.hit_keys.close())
        for partition in self.keys.close():
            run_keys = self.keys.read(partition)
            known = self.hit_keys.read(partition) if partition in answered else None
            for number, count in run_keys.group_by("shard").len().iter_rows():
                self.pairs[number] += count
            self.needs.add(_needs(awaited_pairs(run_keys, known)))

    def stage(self, store: Store, staging: str) -> StagedNeeds:
        """Write each shard's needs (`needs_path`): what was staged, and the owners awaited."""
        staged: dict[str, set[str]] = {"repeats": set(), "pairs": set()}
        owners: dict[str, frozenset[str]] = {}
        for number, rows in self.needs.groups("shard"):
            shard_id = self.shard_ids[number]
            awaits = rows.filter(pl.col("owner").is_not_null())
            kept = worth_waiting(awaits, self.pairs[number]) if awaits.height else awaits
            owned = [self.shard_ids[owner] for owner in kept["owner"]]
            if owned:
                owners[shard_id] = frozenset(owned)
            hits = rows.filter(pl.col("relevant").is_not_null()).unique("pair_key")
            self.with_hits += bool(hits.height)
            known = hits.select(*_PAIRS[:3], owner=pl.lit(None, pl.String))
            awaited = kept.select(*_PAIRS[:3], owner=pl.Series(owned, dtype=pl.String))
            files = {
                "repeats": rows.filter(pl.col("item_seq").is_not_null()).select(_REPEATS),
                "pairs": pl.concat([known, awaited]),
            }
            for kind, table in files.items():
                if table.height:
                    path = needs_path(store, staging, shard_id, kind)
                    store.write_parquet_atomic(path, table.to_arrow())
                    staged[kind].add(shard_id)
        return StagedNeeds(
            with_repeats=frozenset(staged["repeats"]),
            with_pairs=frozenset(staged["pairs"]),
            owners=owners,
        )

    def report(self, staged: StagedNeeds, seconds: float, ids: bool, store: bool) -> None:
        """The look-ahead's lines in the run's log."""
        if ids:
            assert self.finder is not None
            logger.info(
                f"duplicates across shards: {self.later} later occurrence(s) of a query_id in "
                f"{len(staged.with_repeats)} shard(s) will not be judged ({self.finder.keys:,} "
                f"ids read in {seconds:.1f}s)"
            )
        if store:
            line = (
                f"verdict store: {self.hits:,} of {self.keys.rows:,} pair(s) already judged, "
                f"found for {self.with_hits} shard(s) ({self.folded:,} journaled verdict(s) "
                f"folded in; {seconds:.1f}s)"
            )
            awaiting = len(staged.owners)
            if awaiting:
                line += f"; {awaiting} shard(s) await pairs an earlier shard judges"
            logger.info(line)


_REPEATS = ("item_seq", "duplicate_of")
_PAIRS = ("pair_key", "relevant", "judge_reason", "owner")


def needs_path(store: Store, staging: str, shard_id: str, kind: str) -> str:
    """The staged file of a shard's later occurrences ("repeats") or pairs ("pairs")."""
    return store.join(staging, "lookahead", f"{shard_id}.{kind}.parquet")


def _done_path(store: Store, staging: str) -> str:
    return store.join(staging, "lookahead", "DONE.json")


@dataclass(frozen=True)
class ShardNeeds:
    """What a shard's worker needs from the look-ahead: its later occurrences of a query id
    (item_seq -> where the first one is), the verdicts the store holds for its pairs, and the
    pairs it awaits, by owner shard id."""

    later: dict[int, str] = field(default_factory=dict)
    known: Entries = field(default_factory=dict)
    awaits: dict[str, list[str]] = field(default_factory=dict)


def read_needs(store: Store, staging: str, shard_id: str, staged: StagedNeeds) -> ShardNeeds:
    """A shard's staged needs (blocking)."""
    needs = ShardNeeds()
    if shard_id in staged.with_repeats:
        rows = pl.read_parquet(store.read_bytes(needs_path(store, staging, shard_id, "repeats")))
        needs.later.update(rows.select(_REPEATS).iter_rows())
    if shard_id in staged.with_pairs:
        rows = pl.read_parquet(store.read_bytes(needs_path(store, staging, shard_id, "pairs")))
        for key, relevant, reason, owner in rows.select(_PAIRS).iter_rows():
            if owner is None:
                needs.known[key] = (bool(relevant), reason or "")
            else:
                needs.awaits.setdefault(owner, []).append(key)
    return needs


def look_ahead(plan: RunPlan, todo: Sequence[tuple[int, Shard]], shared: bool) -> StagedNeeds:
    """Stage what each shard of `todo` ((number, shard) pairs) needs (`ShardNeeds`; the pairs
    it awaits only when `shared`). Ray must be running unless the run is small."""
    store = plan.store
    staging = plan.location.staging
    parts = plan.parts
    done = _read_done(store, staging) if parts.find_duplicates_first else None
    ids = parts.find_duplicates_first and done is None
    if parts.cache is None and not ids:
        return StagedNeeds(with_repeats=done or frozenset())
    started = time.monotonic()
    numbered = list(enumerate(plan.shards)) if ids else list(todo)
    # calls in the driver for a small run (no round of Ray tasks to wait for), else Ray tasks,
    # twice as many in flight as the run has workers (the keys waiting stay small)
    mapper: Mapper = local_map
    if not in_driver(plan, [shard for _, shard in numbered]):
        mapper = ray_map(plan.ray, in_flight=2 * plan.ray.workers)
    rows = RunRows(reader=parts.reader, tables=plan.tables, sample=plan.sample)
    fingerprint = parts.cache.fingerprint if parts.cache is not None else None
    reading = KeyReading(rows=rows, fingerprint=fingerprint)
    todo_numbers = frozenset(number for number, _ in todo)
    calls = (
        (reading, numbered[at : at + TASK_SHARDS], ids, todo_numbers)
        for at in range(0, len(numbered), TASK_SHARDS)
    )
    with tempfile.TemporaryDirectory(prefix="ctxprec-lookahead-") as tmp:
        look = Lookahead(Path(tmp), [shard.shard_id for shard in plan.shards], ids)
        for found in mapper(shard_keys, calls):
            look.add(found)
        if ids:
            look.find_repeats()
        if parts.cache is not None:
            look.join_store(parts.cache.verdict_store(store), mapper)
            if shared:
                look.share()
        staged = look.stage(store, staging)
    look.report(staged, time.monotonic() - started, ids, parts.cache is not None)
    if ids:
        record = {"shards": sorted(staged.with_repeats), "later_occurrences": look.later}
        store.write_bytes_atomic(_done_path(store, staging), json.dumps(record).encode())
    elif done:
        staged = replace(staged, with_repeats=done)
    return staged


def _read_done(store: Store, staging: str) -> frozenset[str] | None:
    """The shards with later occurrences an earlier attempt of the run found, if it did."""
    path = _done_path(store, staging)
    if not store.exists(path):
        return None
    return frozenset(json.loads(store.read_bytes(path))["shards"])


def in_driver(plan: RunPlan, shards: Sequence[Shard]) -> bool:
    """Whether `shards` are looked at in the driver (no Ray needed): a small run."""
    size = plan.ray.shard_size
    items = sum(shard.end - shard.start if shard.kind == "rows" else size for shard in shards)
    return len(shards) < plan.ray.workers or items <= LOCAL_ITEMS


def stored_pair_keys(
    reading: KeyReading, shards: Sequence[Shard], verdicts: VerdictStore, scratch: Path
) -> Iterator[pl.Series]:
    """The pair keys of `shards` the store holds (its journal included), a partition at a
    time, in this process and without writing to the store (`ctxprec estimate`). `reading`
    has the fingerprint; `scratch`: a local folder for the spilled keys."""
    keys = Spill(scratch / "keys", partition_expr(), KEYS)
    for number, shard in enumerate(shards):
        keys.add(shard_keys(reading, [(number, shard)]).pairs)
    # the journal is small (each run folds it first): read once, whole
    journal = verdicts.newest([verdicts.read_file(path) for path in verdicts.journal_files()])
    for partition in keys.close():
        for chunk in keys.chunks(partition, PACK_KEYS):
            wanted = chunk["pair_key"].unique()
            found = verdicts.lookup(partition, wanted)["pair_key"]
            journaled = journal.filter(pl.col("pair_key").is_in(wanted.implode()))["pair_key"]
            yield pl.concat([found, journaled]).unique()
