"""The verdict cache's keys and the judge in front of it: a verdict is keyed by sha256 of (judge
fingerprint, prompt version, query, output, reference, context) of the item as the prompt
carries it (`judge.against` drops the rest when the item is read), so a change to any text the
judge saw judges the pair again, and no other change does. The verdicts live in
`jobs.core.verdict_store`.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.schema import VERDICT_CACHE
from jobs.core.storage import Store, open_store
from jobs.core.verdict_store import Journal, VerdictStore
from scorer_core.capabilities import JudgeCapabilities
from scorer_core.prompt import PROMPT_VERSION
from scorer_core.protocols import ChatAsker, Judge
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch


def judge_fingerprint(
    model: str, options: dict[str, object] | None = None, *, endpoint: str = ""
) -> str:
    """Names a judge whose verdicts are interchangeable: model, prompt, options, endpoint."""
    material = repr((model, PROMPT_VERSION, sorted((options or {}).items()), endpoint))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def pair_key(fingerprint: str, item: ScoringItem, position: int) -> str:
    """The cache key of the pair (item, context at `position`) for the judge `fingerprint`."""
    digest = hashlib.sha256()
    parts = (fingerprint, item.input, item.output, item.expected_output or "")
    for part in (*parts, item.contexts[position]):
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()[:32]


Verdict = tuple[bool, str]
"""(relevant, the judge's reason)."""


class InFlight:
    """The pairs a worker is asking about now: an item with the same pair waits for the reply."""

    def __init__(self) -> None:
        # a pair asked about -> the future its waiters await, made when the first one comes
        # (most pairs have none: a future for each would cost the fast path)
        self._asked: dict[str, asyncio.Future[Verdict | None] | None] = {}

    def __len__(self) -> int:
        return len(self._asked)

    def waiting_for(self, key: str) -> asyncio.Future[Verdict | None] | None:
        """The reply to wait for when `key` is being asked about, else None."""
        if key not in self._asked:
            return None
        future = self._asked[key]
        if future is None:
            future = self._asked[key] = asyncio.get_running_loop().create_future()
        return future

    def ask(self, keys: Sequence[str]) -> None:
        for key in keys:
            self._asked.setdefault(key, None)

    def answer(self, key: str, verdict: Verdict | None) -> None:
        future = self._asked.pop(key, None)
        if future is not None and not future.done():
            future.set_result(verdict)


@dataclass(kw_only=True)
class VerdictCache:
    """A shard's verdicts: found in the store, judged by this shard, in the worker's journal."""

    known: dict[str, tuple[bool, str]] = field(default_factory=dict)
    fresh: dict[str, tuple[bool, str]] = field(default_factory=dict)
    journal: Journal | None = None
    in_flight: InFlight | None = None

    def get(self, key: str) -> tuple[bool, str] | None:
        found = self.fresh.get(key) or self.known.get(key)
        if found is None and self.journal is not None:
            found = self.journal.get(key)
        return found

    def put(self, key: str, relevant: bool, reason: str) -> None:
        self.fresh[key] = (relevant, reason)
        if self.journal is not None:
            self.journal.add(key, relevant, reason)


Entries = dict[str, tuple[bool, str]]
"""pair key -> (relevant, the judge's reason): what a cache file holds."""


def encode_entries(entries: Entries) -> pa.Table:
    """Entries as a cache file's table (`jobs.core.schema.VERDICT_CACHE`)."""
    return pa.table(
        {
            "pair_key": list(entries),
            "relevant": [relevant for relevant, _ in entries.values()],
            "judge_reason": [reason for _, reason in entries.values()],
        },
        schema=VERDICT_CACHE.arrow,
    )


def decode_entries(data: bytes) -> Entries:
    """A cache file's bytes as entries (raises pyarrow's errors on a damaged file)."""
    columns = pq.read_table(io.BytesIO(data), columns=list(VERDICT_CACHE.names)).to_pydict()
    rows = zip(*columns.values(), strict=True)
    return {key: (bool(relevant), reason or "") for key, relevant, reason in rows}


def write_entries(store: Store, path: str, entries: Entries) -> None:
    """Write `entries` as the cache file at `path`, atomically."""
    store.write_parquet_atomic(path, encode_entries(entries))


@dataclass(frozen=True, kw_only=True)
class CacheSpec:
    """Where a run's verdict store is (`url` None: in the output store), and its fingerprint."""

    fingerprint: str
    folder: str
    url: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    max_age_days: float | None = None
    journal_interval_s: float = 2.0

    def verdict_store(self, output_store: Store) -> VerdictStore:
        """The store's files, opened next to `output_store` when the cache lives there."""
        store = output_store if self.url is None else open_store(self.url, self.storage_options)
        return VerdictStore(store=store, folder=self.store_folder, max_age_days=self.max_age_days)

    @property
    def store_folder(self) -> str:
        """The verdict store's folder, relative to its store's root."""
        return "/".join(part for part in (self.folder, self.fingerprint) if part)


class CachingJudge:
    """A `Judge` decorator: answers from the cache, asks the inner judge only for misses.
    `fresh_hits` False (batch mode, whose requests must be the same in every pass): only what
    the store held answers, not this shard's own or in-flight verdicts."""

    def __init__(
        self, inner: Judge, cache: VerdictCache, fingerprint: str, *, fresh_hits: bool = True
    ) -> None:
        self._inner = inner
        self._cache = cache
        self._fingerprint = fingerprint
        self._lookup = cache.get if fresh_hits else cache.known.get
        self._in_flight = cache.in_flight if fresh_hits else None

    @property
    def model(self) -> str:
        return self._inner.model

    @property
    def capabilities(self) -> JudgeCapabilities:
        return self._inner.capabilities

    @property
    def asker(self) -> ChatAsker | None:
        return self._inner.asker

    def reason_prompt(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> str | None:
        return self._inner.reason_prompt(item, verdicts, score)

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        keys = {position: pair_key(self._fingerprint, item, position) for position in positions}
        verdicts: list[ContextVerdict] = []
        misses: list[int] = []
        for position in positions:
            cached = self._lookup(keys[position])
            if cached is None:
                misses.append(position)
            else:
                verdicts.append(ContextVerdict(position, cached[0], cached[1]))
        usage = Usage(cache_hits=len(verdicts))
        if not misses:
            return VerdictBatch(verdicts=tuple(verdicts), usage=usage)
        waiting = self._asked_already(misses, keys)
        # This item's own misses are asked about first; then it takes the replies other items
        # are getting, and asks about the pairs those brought no verdict for.
        own = [position for position in misses if position not in waiting]
        asked = await self._ask(item, own, keys)
        if waiting and asked.unscored_reason is None:
            before = len(verdicts)
            left = await self._wait(waiting, verdicts)
            usage = usage + Usage(cache_hits=len(verdicts) - before)
            again = await self._ask(item, left, keys)
            asked = VerdictBatch(
                verdicts=asked.verdicts + again.verdicts,
                usage=asked.usage + again.usage,
                unscored_reason=again.unscored_reason,
                prompt=asked.prompt or again.prompt,
            )
        if asked.unscored_reason is not None:
            return VerdictBatch(
                verdicts=(),
                usage=usage + asked.usage,
                unscored_reason=asked.unscored_reason,
                prompt=asked.prompt,
            )
        merged = tuple(sorted((*verdicts, *asked.verdicts), key=lambda verdict: verdict.index))
        return VerdictBatch(verdicts=merged, usage=usage + asked.usage, prompt=asked.prompt)

    def _asked_already(
        self, misses: Sequence[int], keys: dict[int, str]
    ) -> dict[int, asyncio.Future[Verdict | None]]:
        """The missed positions whose pair another item of this worker is asking about."""
        if self._in_flight is None:
            return {}
        futures = {position: self._in_flight.waiting_for(keys[position]) for position in misses}
        return {position: future for position, future in futures.items() if future is not None}

    async def _wait(
        self, waiting: dict[int, asyncio.Future[Verdict | None]], verdicts: list[ContextVerdict]
    ) -> list[int]:
        """Add the verdicts other items are getting to `verdicts`; the positions left to ask."""
        # shielded: this item being cancelled must not cancel the other item's reply
        answers = await asyncio.gather(*(asyncio.shield(future) for future in waiting.values()))
        unanswered = []
        for position, answer in zip(waiting, answers, strict=True):
            if answer is None:
                unanswered.append(position)
            else:
                verdicts.append(ContextVerdict(position, answer[0], answer[1]))
        return unanswered

    async def _ask(
        self, item: ScoringItem, positions: list[int], keys: dict[int, str]
    ) -> VerdictBatch:
        """Ask the inner judge about `positions`, then tell whoever waits what came back."""
        if not positions:
            return VerdictBatch(verdicts=())
        asked = [keys[position] for position in positions]
        if self._in_flight is not None:
            self._in_flight.ask(asked)
        answered: dict[str, Verdict] = {}
        try:
            batch = await self._inner.judge(item, positions)
            if batch.unscored_reason is None:
                for verdict in batch.verdicts:
                    key = keys[verdict.index]
                    self._cache.put(key, verdict.relevant, verdict.reason)
                    answered[key] = (verdict.relevant, verdict.reason)
            return batch
        finally:
            if self._in_flight is not None:
                for key in asked:
                    self._in_flight.answer(key, answered.get(key))

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        return await self._inner.explain(item, verdicts, score)
