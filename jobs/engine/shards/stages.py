"""A shard's judge stage, online or one pass of a batch round: the judge its items are scored
with (the verdict cache in front), how its progress counts, and whether the shard can be
committed after judging or waits for a batch round."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from jobs.core.config import JobConfig
from jobs.core.run_layout import index_in_shard
from jobs.core.storage import Store
from jobs.core.verdict_cache import CachingJudge, Entries, InFlight, VerdictCache, write_entries
from jobs.core.verdict_store import Journal
from jobs.engine.batch.batch_judge import BatchJudge, OnlineAsk, ReplayClient
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.batch.requests import RequestLines, item_key
from jobs.engine.control.progress import USAGE_COUNTERS, BatchedCounter
from jobs.engine.pairs.lookahead import ShardNeeds
from jobs.engine.pairs.shared_pairs import awaited_verdicts
from jobs.engine.shards.shard_rows import PairKeys
from jobs.inputs.shard_read import ShardRead
from scorer_core.protocols import Judge
from scorer_core.types import ScoreResult


class JudgeStage(Protocol):
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


@dataclass(frozen=True)
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


@dataclass
class OnlineStage:
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
    ) -> OnlineStage:
        """The stage for a shard, its cached verdicts loaded (in a thread: it reads files)."""
        cache = await asyncio.to_thread(caches.load, needs) if caches is not None else None
        counter.add(items=len(read.errors), errors=len(read.errors))
        fingerprint = caches.fingerprint if caches else ""
        judge, pairs = cache_in_front(own_judge, cache, fingerprint, fresh_hits=True)
        return cls(own_judge, judge, pairs, counter)

    def item_done(self, result: ScoreResult) -> None:
        count_item(self._counter, result)

    async def finish(self, read: ShardRead, results: Sequence[ScoreResult]) -> int:
        self._counter.drain()
        return 0

    def cache_entries(self, read: ShardRead) -> Entries | None:
        return None  # every fresh verdict went to the journal as it arrived


@dataclass
class BatchPassStage:
    """One pass of a batch round over a shard: answers from the batch replies ingested so far
    and records the requests still unanswered for the next round. A shard's requests must be
    the same in every pass, so its first pass freezes the cache view it used."""

    own_judge: Judge
    judge: Judge
    pairs: PairKeys
    _client: ReplayClient
    _layout: BatchLayout
    _round: int
    _shard_id: str
    _counter: BatchedCounter
    _cache: VerdictCache | None
    _frozen: bool

    @classmethod
    async def open(
        cls,
        layout: BatchLayout,
        round_number: int,
        config: JobConfig,
        reask: OnlineAsk | None,
        counter: BatchedCounter,
        caches: ShardCaches | None,
        needs: ShardNeeds,
        shard_id: str,
        number: int,
        read: ShardRead,
    ) -> BatchPassStage:
        """The pass's stage for shard `number`: its replies so far and the cache view its first
        pass froze (else found in the store); `reask` sends re-asks online."""
        replies, frozen, online = await asyncio.to_thread(
            lambda: (
                layout.read_replies(shard_id),
                layout.read_frozen_cache(shard_id),
                layout.online_round(round_number),
            )
        )
        lines, max_rounds = RequestLines.for_config(config), config.judge.batch.max_rounds
        client = ReplayClient(lines, replies, reask=reask, max_rounds=max_rounds, all_online=online)
        judge = _batch_judge(client, config, number, read)
        cache = frozen
        if cache is None and caches is not None:
            cache = caches.load(needs, journaled=False)
        fingerprint = caches.fingerprint if caches is not None else ""
        # No fresh hits within the shard: which verdicts are fresh depends on the order
        # replies arrive in.
        judged, pairs = cache_in_front(judge, cache, fingerprint, fresh_hits=False)
        was_frozen = frozen is not None
        return cls(
            judge, judged, pairs, client, layout, round_number, shard_id, counter, cache, was_frozen
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
        if self._cache is not None and not self._frozen:
            known = self._cache.known
            used = {
                key: known[key]
                for _, record in read.records
                for key in self.pairs.keys(record)
                if key in known
            }
            write_entries(self._layout.store, self._layout.frozen_cache(self._shard_id), used)
        if client.online_replies:
            name = f"online-{self._round:03d}"
            self._layout.write_replies(self._shard_id, name, sorted(client.online_replies.items()))
        # Identical items recorded the same request once per item: one line each is enough.
        unique = list({r.custom_id: r for r in client.recorded}.values())
        self._layout.write_requests(self._round, self._shard_id, unique)

    def cache_entries(self, read: ShardRead) -> Entries | None:
        """What the batches answered for this shard (journaled when it is committed)."""
        return dict(self._cache.fresh) if self._cache is not None else None


def _batch_judge(client: ReplayClient, config: JobConfig, number: int, read: ShardRead) -> Judge:
    """The batch judge of shard `number`. Items with the same content share their requests
    (and replies): the last key wins, the same in every pass."""
    keys = {
        record.to_scoring_item(): item_key(number, index_in_shard(seq))
        for seq, record in read.records
    }
    return BatchJudge(
        client,
        keys,
        max_reasks=config.judge.max_reasks,
        scale=config.scorer.scale,
        verdict_reasons=config.judge.verdict_reasons,
    )
