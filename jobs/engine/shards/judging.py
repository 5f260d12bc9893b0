"""How a shard is judged, online or in one pass of a batch round: the judge its items are
scored with (the verdict cache in front), how its progress counts, and whether the shard can be
committed after judging or waits for a batch round."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jobs.core.run_layout import index_in_shard
from jobs.core.storage import Store
from jobs.core.verdict_cache import CachingJudge, Entries, InFlight, VerdictCache, write_entries
from jobs.core.verdict_store import Journal
from jobs.engine.batch.batch_judge import BatchJudge, OnlineAsk, ReplayClient
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.batch.requests import item_key
from jobs.engine.control.progress import USAGE_COUNTERS, BatchedCounter
from jobs.engine.pairs.lookahead import ShardNeeds
from jobs.engine.pairs.shared_pairs import awaited_verdicts
from jobs.engine.parts import BatchParts
from jobs.engine.shards.shard_rows import PairKeys
from jobs.inputs.shard_read import ShardRead
from scorer_core.protocols import Judge
from scorer_core.types import ScoreResult


class ShardJudging(Protocol):
    """What a shard is judged with, and what is done once it is judged."""

    # The judge the items are scored with (the verdict cache in front of the worker's judge).
    judge: Judge
    # The worker's own judge, for the facts it settled on (transport, structured output).
    own_judge: Judge
    pairs: PairKeys

    def item_done(self, result: ScoreResult) -> None:
        """One item was scored (progress)."""
        ...

    async def finish(self, read: ShardRead, results: Sequence[ScoreResult]) -> int:
        """After judging: the requests left for a batch round (0: commit the shard now)."""
        ...

    def cache_entries(self, read: ShardRead) -> Entries | None:
        """Verdicts to journal when the shard is committed (None: journaled already)."""
        ...


@dataclass(frozen=True, kw_only=True)
class ShardCaches:
    """Where a worker's shards find their verdicts: what the look-ahead staged for each, the
    worker's journal (every fresh verdict goes to it, and its recent verdicts answer the
    worker's later items), and the pairs the worker is asking about right now."""

    store: Store
    staging: str
    fingerprint: str
    journal: Journal
    in_flight: InFlight = field(default_factory=InFlight)

    def load(self, needs: ShardNeeds, *, journaled: bool = True) -> VerdictCache:
        """The shard's cache (blocking); not `journaled` (batch mode): fresh verdicts stay in it
        (journaled at commit), answer no other item, and no pair is awaited."""
        known = dict(needs.known)
        if not journaled:
            return VerdictCache(known=known)
        if needs.awaits:
            known.update(awaited_verdicts(self.store, self.staging, needs.awaits))
        return VerdictCache(known=known, journal=self.journal, in_flight=self.in_flight)


def cache_in_front(
    own_judge: Judge, cache: VerdictCache | None, fingerprint: str, *, fresh_hits: bool
) -> tuple[Judge, PairKeys]:
    """The judge a shard's items are scored with (`cache` in front of `own_judge`, when the
    run has one) and the pair keys its verdict rows are written with."""
    if cache is None:
        return own_judge, PairKeys()
    caching = CachingJudge(own_judge, cache, fingerprint, fresh_hits=fresh_hits)
    return caching, PairKeys(cache, fingerprint)


def count_item(counter: BatchedCounter, result: ScoreResult) -> None:
    """Add one scored item to the progress counters."""
    counter.add(
        items=1,
        ok=int(result.status == "ok"),
        unscored=int(result.status == "unscored"),
        errors=int(result.status == "error"),
        **{name: getattr(result.usage, name) for name in USAGE_COUNTERS},
    )


@dataclass(kw_only=True)
class OnlineJudging:
    """The worker's judge, asked now, with the verdict cache in front: the shard's verdicts
    found in the store, and the worker's journal, which gets every fresh verdict."""

    own_judge: Judge
    judge: Judge
    pairs: PairKeys
    _counter: BatchedCounter

    @classmethod
    async def open(
        cls,
        own_judge: Judge,
        counter: BatchedCounter,
        caches: ShardCaches | None,
        needs: ShardNeeds,
        read: ShardRead,
    ) -> OnlineJudging:
        """The judging of a shard, its cached verdicts loaded (in a thread: it reads files)."""
        cache = await asyncio.to_thread(caches.load, needs) if caches is not None else None
        counter.add(items=len(read.errors), errors=len(read.errors))
        fingerprint = caches.fingerprint if caches else ""
        judge, pairs = cache_in_front(own_judge, cache, fingerprint, fresh_hits=True)
        return cls(own_judge=own_judge, judge=judge, pairs=pairs, _counter=counter)

    def item_done(self, result: ScoreResult) -> None:
        count_item(self._counter, result)

    async def finish(self, read: ShardRead, results: Sequence[ScoreResult]) -> int:
        self._counter.drain()
        return 0

    def cache_entries(self, read: ShardRead) -> Entries | None:
        return None  # every fresh verdict went to the journal as it arrived


@dataclass(frozen=True, kw_only=True)
class BatchShard:
    """A shard in a batch round's pass: where the round's files are, the round, batch mode's
    parts, the scorer's scale, and the shard's id, number in the run and rows."""

    layout: BatchLayout
    round: int
    batch: BatchParts
    scale: float
    shard_id: str
    number: int
    read: ShardRead


@dataclass(kw_only=True)
class BatchPassJudging:
    """One pass of a batch round over a shard: answers from the batch replies ingested so far
    and records the requests still unanswered for the next round. A shard's requests must be
    the same in every pass, so its first pass freezes the cache view it used."""

    own_judge: Judge
    judge: Judge
    pairs: PairKeys
    _client: ReplayClient
    _shard: BatchShard
    _counter: BatchedCounter
    _cache: VerdictCache | None
    _frozen: bool

    @classmethod
    async def open(
        cls,
        shard: BatchShard,
        reask: OnlineAsk | None,
        counter: BatchedCounter,
        caches: ShardCaches | None,
        needs: ShardNeeds,
    ) -> BatchPassJudging:
        """The pass's judging of `shard`: its replies so far and the cache view its first pass
        froze (else found in the store); `reask` sends re-asks online."""
        layout = shard.layout
        replies = await asyncio.to_thread(layout.read_replies, shard.shard_id)
        frozen = await asyncio.to_thread(layout.read_frozen_cache, shard.shard_id)
        online = await asyncio.to_thread(layout.online_round, shard.round)
        batch = shard.batch
        client = ReplayClient(
            batch.lines,
            replies,
            reask=reask,
            max_rounds=batch.settings.max_rounds,
            all_online=online,
        )
        judge = _batch_judge(client, shard)
        cache = frozen
        if cache is None and caches is not None:
            cache = caches.load(needs, journaled=False)
        fingerprint = caches.fingerprint if caches is not None else ""
        # No fresh hits within the shard: which verdicts are fresh depends on the order
        # replies arrive in.
        judged, pairs = cache_in_front(judge, cache, fingerprint, fresh_hits=False)
        return cls(
            own_judge=judge,
            judge=judged,
            pairs=pairs,
            _client=client,
            _shard=shard,
            _counter=counter,
            _cache=cache,
            _frozen=frozen is not None,
        )

    def item_done(self, result: ScoreResult) -> None:
        """Counted when the shard is staged: a pass may leave it waiting."""

    async def finish(self, read: ShardRead, results: Sequence[ScoreResult]) -> int:
        pending = len(self._client.recorded)
        if pending:
            await asyncio.to_thread(self._keep, read)
            # The pass's progress: items gone through, none of them final yet.
            self._counter.add(items=len(read.records) + len(read.errors))
        else:
            self._counter.add(items=len(read.errors), errors=len(read.errors))
            for result in results:
                count_item(self._counter, result)
        self._counter.drain()
        return pending

    def _keep(self, read: ShardRead) -> None:
        """Keep what the next pass needs (blocking); the request index, written last, marks
        the shard's pass as done."""
        client = self._client
        layout = self._shard.layout
        shard_id = self._shard.shard_id
        if self._cache is not None and not self._frozen:
            write_entries(layout.store, layout.frozen_cache(shard_id), self._used(read))
        if client.online_replies:
            name = f"online-{self._shard.round:03d}"
            layout.write_replies(shard_id, name, sorted(client.online_replies.items()))
        # Identical items recorded the same request once per item: one line each is enough.
        unique = list({request.custom_id: request for request in client.recorded}.values())
        layout.write_requests(self._shard.round, shard_id, unique)

    def _used(self, read: ShardRead) -> Entries:
        """The cached verdicts the shard's items used: the view its later passes see."""
        assert self._cache is not None
        known = self._cache.known
        used: Entries = {}
        for _, record in read.records:
            for key in self.pairs.keys(record):
                if key in known:
                    used[key] = known[key]
        return used

    def cache_entries(self, read: ShardRead) -> Entries | None:
        """What the batches answered for this shard (journaled when it is committed)."""
        return dict(self._cache.fresh) if self._cache is not None else None


def _batch_judge(client: ReplayClient, shard: BatchShard) -> Judge:
    """The batch judge of `shard`. Items with the same content share their requests (and
    replies): the last key wins, the same in every pass."""
    keys = {
        record.to_scoring_item(): item_key(shard.number, index_in_shard(seq))
        for seq, record in shard.read.records
    }
    return BatchJudge(
        client,
        keys,
        max_reasks=shard.batch.max_reasks,
        scale=shard.scale,
        verdict_reasons=shard.batch.verdict_reasons,
    )
