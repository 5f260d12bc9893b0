"""One shard's pass in batch mode: the judge stage `jobs.engine.shards.worker` plugs in. It
loads the shard's replies and the cache view its first pass froze (a shard's requests must
be the same in every pass), and after judging records the requests still unanswered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobs.core.config import JobConfig
from jobs.core.run_layout import index_in_shard
from jobs.core.storage import Store
from jobs.core.verdict_cache import VerdictCache, decode_entries, pair_key, write_entries
from jobs.engine.batch.batch_judge import BatchJudge, OnlineAsk, ReplayClient, Reply
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.batch.requests import RequestLines, item_key
from jobs.inputs import ItemRecord, Shard
from scorer_core.types import ScoringItem


@dataclass
class ShardPass:
    """What one shard's pass in round `round_number` works from and records."""

    layout: BatchLayout
    round_number: int
    shard: Shard
    shard_number: int
    replies: dict[str, Reply]
    frozen_cache: VerdictCache | None
    keys: dict[ScoringItem, str]
    client: ReplayClient | None = None
    # The round's pass asks online whatever has no final reply (judge.batch.deadline neared).
    online: bool = False

    @classmethod
    def load(
        cls,
        store: Store,
        staging: str,
        round_number: int,
        shard: Shard,
        shard_number: int,
        records: Sequence[tuple[int, ItemRecord]],
    ) -> ShardPass:
        """Read the shard's replies and frozen cache view (blocking: run it in a thread)."""
        layout = BatchLayout(store, staging)
        frozen: VerdictCache | None = None
        path = layout.frozen_cache(shard.shard_id)
        if store.exists(path):
            frozen = VerdictCache(known=decode_entries(store.read_bytes(path)))
        # Items with the same content share their requests (and replies): the last key wins,
        # the same in every pass.
        keys = {
            record.to_scoring_item(): item_key(shard_number, index_in_shard(seq))
            for seq, record in records
        }
        return cls(
            layout,
            round_number,
            shard,
            shard_number,
            layout.read_replies(shard.shard_id),
            frozen,
            keys,
            online=layout.online_round(round_number),
        )

    def judge(self, config: JobConfig, reask: OnlineAsk | None) -> BatchJudge:
        """The shard's judge for this pass; `reask` sends re-asks online (judge.batch.reask)."""
        self.client = ReplayClient(
            RequestLines.for_config(config),
            self.replies,
            reask=reask,
            max_rounds=config.judge.batch.max_rounds,
            all_online=self.online,
        )
        return BatchJudge(
            self.client,
            self.keys,
            max_reasks=config.judge.max_reasks,
            scale=config.scorer.scale,
        )

    @property
    def pending(self) -> int:
        """Requests this pass recorded for the next batch (0: the shard can be staged)."""
        return len(self.client.recorded) if self.client is not None else 0

    def finish(
        self,
        cache: VerdictCache | None,
        fingerprint: str,
        records: Sequence[tuple[int, ItemRecord]],
    ) -> None:
        """Keep what the next pass needs; the request index is written last (blocking)."""
        assert self.client is not None
        layout, shard_id = self.layout, self.shard.shard_id
        if cache is not None and self.frozen_cache is None:
            used = {}
            for _, record in records:
                item = record.to_scoring_item()
                for position in range(len(item.contexts)):
                    key = pair_key(fingerprint, item, position)
                    if key in cache.known:
                        used[key] = cache.known[key]
            write_entries(layout.store, layout.frozen_cache(shard_id), used)
        if self.client.online_replies:
            layout.write_replies(
                shard_id,
                f"online-{self.round_number:03d}",
                sorted(self.client.online_replies.items()),
            )
        # Identical items recorded the same request once per item: one line each is enough.
        unique = list({r.custom_id: r for r in self.client.recorded}.values())
        layout.write_requests(self.round_number, shard_id, unique)
