"""The content-addressed verdict cache, so tomorrow's run re-judges only what changed.

A verdict is keyed by sha256 of (judge fingerprint, prompt version, query, output, reference,
context text): change any of them and the pair is judged again; a cache hit can never return a
verdict for different text. Entries live in one Parquet file per input region
(`<cache>/<fingerprint>/<file-index>/<slot>.parquet`), written by the worker that judged that
region. A worker loads its own slot and its two neighbours, so memory stays one shard's worth
however large the cache grows, and small shifts of the input (rows added or removed) still hit.
Items that move far in the input are re-judged: a miss costs a call, never a wrong verdict.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.schema import VERDICT_CACHE
from jobs.storage import Store, open_store
from scorer_core.errors import StorageError
from scorer_core.prompt import PROMPT_VERSION
from scorer_core.protocols import Judge
from scorer_core.types import ContextVerdict, ScoringItem, Usage, VerdictBatch

CACHE_SCHEMA = VERDICT_CACHE.arrow


def judge_fingerprint(
    model: str, options: dict[str, object] | None = None, *, endpoint: str = ""
) -> str:
    """Identifies a judge configuration whose verdicts are interchangeable: the model string,
    the prompt, the judge's options and the `endpoint` that answers
    (`jobs.endpoints.endpoint_identity`: the same model name on another server is another
    judge)."""
    material = repr((model, PROMPT_VERSION, sorted((options or {}).items()), endpoint))
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def pair_key(fingerprint: str, item: ScoringItem, position: int) -> str:
    digest = hashlib.sha256()
    for part in (
        fingerprint,
        item.input,
        item.output,
        item.expected_output or "",
        item.contexts[position],
    ):
        encoded = part.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()[:32]


@dataclass
class VerdictCache:
    """Cached verdicts for one shard's region, plus what this shard judged anew."""

    known: dict[str, tuple[bool, str]] = field(default_factory=dict)
    fresh: dict[str, tuple[bool, str]] = field(default_factory=dict)

    def get(self, key: str) -> tuple[bool, str] | None:
        return self.fresh.get(key) or self.known.get(key)

    def put(self, key: str, relevant: bool, reason: str) -> None:
        self.fresh[key] = (relevant, reason)

    def entries_for(self, keys: Sequence[str]) -> dict[str, tuple[bool, str]]:
        """The entries this shard uses now (written back as its slot's new cache file)."""
        seen: dict[str, tuple[bool, str]] = {}
        for key in keys:
            value = self.get(key)
            if value is not None:
                seen[key] = value
        return seen


Entries = dict[str, tuple[bool, str]]
"""pair key -> (relevant, the judge's reason): what a cache file holds."""


def encode_entries(entries: Entries) -> pa.Table:
    """Entries as a cache file's table (`jobs.schema.VERDICT_CACHE`)."""
    return pa.table(
        {
            "pair_key": list(entries),
            "relevant": [value[0] for value in entries.values()],
            "judge_reason": [value[1] for value in entries.values()],
        },
        schema=CACHE_SCHEMA,
    )


def decode_entries(data: bytes) -> Entries:
    """A cache file's bytes as entries (raises pyarrow's errors on a damaged file)."""
    table = pq.read_table(io.BytesIO(data))
    return {
        key: (bool(relevant), reason or "")
        for key, relevant, reason in zip(
            table.column("pair_key").to_pylist(),
            table.column("relevant").to_pylist(),
            table.column("judge_reason").to_pylist(),
            strict=True,
        )
    }


def read_entries(store: Store, path: str) -> Entries:
    """The entries of the cache file at `path`; none when it is missing or unreadable (a
    damaged cache file costs calls, never a run)."""
    try:
        if not store.exists(path):
            return {}
        return decode_entries(store.read_bytes(path))
    except (StorageError, pa.ArrowInvalid, OSError, KeyError):
        return {}


def write_entries(store: Store, path: str, entries: Entries) -> None:
    """Write `entries` as the cache file at `path`, atomically."""
    store.write_parquet_atomic(path, encode_entries(entries))


@dataclass(frozen=True)
class CacheRegions:
    """The cache files of one judge fingerprint: one per input region (file, slot)."""

    store: Store
    folder: str  # relative to the store's root
    fingerprint: str

    def slot_file(self, file_index: int, slot: int) -> str:
        return slot_path(self.store, self.folder, self.fingerprint, file_index, slot)

    @property
    def root(self) -> str:
        return self.store.join(self.folder, self.fingerprint)

    def neighbourhood(self, slot: int) -> list[int]:
        """The slots a shard at `slot` looks up: its own and both neighbours."""
        return [n for n in (slot - 1, slot, slot + 1) if n >= 0]

    def load(self, file_index: int, slot: int) -> VerdictCache:
        """Entries of `slot` and its neighbours (blocking)."""
        cache = VerdictCache()
        for neighbour in self.neighbourhood(slot):
            cache.known.update(read_entries(self.store, self.slot_file(file_index, neighbour)))
        return cache

    def save(self, file_index: int, slot: int, entries: Entries) -> None:
        """Replace the region's cache file with `entries` (blocking)."""
        write_entries(self.store, self.slot_file(file_index, slot), entries)


@dataclass(frozen=True)
class CacheSpec:
    """Where a run's verdict cache is: its own store (`cache.path`) or a folder of the output
    store (`url` None), and the judge fingerprint its verdicts are filed under (picklable)."""

    fingerprint: str
    folder: str
    url: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)

    def regions(self, output_store: Store) -> CacheRegions:
        """The cache's files, opened next to `output_store` when the cache lives there."""
        store = output_store if self.url is None else open_store(self.url, self.storage_options)
        return CacheRegions(store, self.folder, self.fingerprint)


def slot_path(store: Store, folder: str, fingerprint: str, file_index: int, slot: int) -> str:
    """The cache file of one input region; `folder` is relative to the store's root."""
    return store.join(folder, fingerprint, f"{file_index:05d}", f"{slot:08d}.parquet")


class CachingJudge:
    """A `Judge` decorator: answers from the cache, asks the inner judge only for misses.

    `fresh_hits`: whether a verdict judged earlier in this shard answers a later item with the
    same pair (online: it saves a call). Batch mode turns it off: a shard's requests must be the
    same in every pass, and which verdicts are fresh depends on the order replies arrive in."""

    def __init__(
        self, inner: Judge, cache: VerdictCache, fingerprint: str, *, fresh_hits: bool = True
    ) -> None:
        self._inner = inner
        self._cache = cache
        self._fingerprint = fingerprint
        self._lookup = cache.get if fresh_hits else cache.known.get

    @property
    def model(self) -> str:
        return self._inner.model

    async def judge(self, item: ScoringItem, positions: Sequence[int]) -> VerdictBatch:
        keys = {p: pair_key(self._fingerprint, item, p) for p in positions}
        hits: list[ContextVerdict] = []
        misses: list[int] = []
        for position in positions:
            cached = self._lookup(keys[position])
            if cached is None:
                misses.append(position)
            else:
                hits.append(ContextVerdict(position, cached[0], cached[1]))
        usage = Usage(cache_hits=len(hits))
        if not misses:
            return VerdictBatch(tuple(hits), usage)
        batch = await self._inner.judge(item, misses)
        if batch.unscored_reason is not None:
            return VerdictBatch((), usage + batch.usage, batch.unscored_reason)
        for verdict in batch.verdicts:
            self._cache.put(keys[verdict.index], verdict.relevant, verdict.reason)
        merged = tuple(sorted((*hits, *batch.verdicts), key=lambda v: v.index))
        return VerdictBatch(merged, usage + batch.usage)

    async def explain(
        self, item: ScoringItem, verdicts: Sequence[ContextVerdict], score: float
    ) -> tuple[str, Usage]:
        return await self._inner.explain(item, verdicts, score)
