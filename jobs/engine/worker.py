"""What one Ray task does with one shard: read -> preprocess -> judge -> postprocess -> write.

The steps `preprocess`, `item_row` and `verdict_rows` are pure `dict -> dict` functions, tested
without Ray. `judge_shard` runs every item of the shard concurrently on one event loop (the
judge bounds requests in flight and draws on the run's shared rate limit). `run_shard` ties
them to storage: it writes the shard's verdicts, then its items file, each atomically; the
items file is the shard's commit marker, so a shard is either done or redone, never half done.
The two files' columns are `jobs.schema.STAGED_VERDICTS` and `jobs.schema.STAGED_ITEMS`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs import factory
from jobs.config import JobConfig
from jobs.engine.cache import (
    CachingJudge,
    VerdictCache,
    load_cache,
    pair_key,
    slot_path,
)
from jobs.engine.inputs import (
    ItemRecord,
    RowError,
    Shard,
)
from jobs.engine.progress import BatchedCounter
from jobs.engine.storage import Store, open_store
from jobs.schema import STAGED_ITEMS, STAGED_VERDICTS, duplicate_error
from scorer_core.errors import FatalJudgeError
from scorer_core.scorer import ContextPrecisionScorer
from scorer_core.types import ScoreResult, Usage

# item_seq = shard number << 32 | index within the shard: unique and ordered across the run,
# so duplicates of a query_id can be told apart and the first occurrence found.
_SEQ_SHIFT = 32


@dataclass(frozen=True)
class ShardContext:
    """What every task needs besides its shard; small and picklable."""

    config: JobConfig
    staging: str  # the run's staging folder, relative to the output store's root
    limiter: Any = None  # Ray actor handle of the shared rate limiter, or None
    progress: Any = None  # Ray actor handle of the progress counters, or None
    # The judge's API key as the driver read it (workers may not have the driver's environment).
    api_key: str | None = field(default=None, repr=False)


@dataclass
class ShardReport:
    shard_id: str
    skipped: bool = False
    items: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    fatal: str | None = None
    # The judge's structured-output negotiation after the shard (`ResponseFormatNegotiation.
    # summary()`); None when nothing was negotiated (offline judge, shard skipped).
    response_format: dict[str, Any] | None = None


def shard_paths(store: Store, staging: str, shard_id: str) -> tuple[str, str]:
    """(verdicts file, items file) of a shard in the run's staging area."""
    return (
        store.join(staging, "verdicts", f"{shard_id}.parquet"),
        store.join(staging, "items", f"{shard_id}.parquet"),
    )


# -- pure steps -----------------------------------------------------------------------------


def error_row(
    error: RowError, seq: int, model: str, duplicate_of: str | None = None
) -> dict[str, Any]:
    """The staged items row of a row that cannot be scored (`duplicate_of`: see the schema)."""
    return STAGED_ITEMS.build_row(
        query_id=error.query_id if error.query_id is not None else f"{error.source}#{error.row}",
        item_seq=seq,
        status="error",
        error=error.message,
        score=None,
        reason="",
        context_count=0,
        relevant_count=0,
        truncated=False,
        judge_model=model,
        calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        retries=0,
        rate_limited=0,
        reasks=0,
        cache_hits=0,
        source=error.source,
        row=error.row,
        duplicate_of=duplicate_of,
    )


def item_row(record: ItemRecord, seq: int, result: ScoreResult, model: str) -> dict[str, Any]:
    """The staged items row of a judged item: the worker's score is the published score."""
    usage = result.usage
    return STAGED_ITEMS.build_row(
        query_id=record.query_id,
        item_seq=seq,
        status=result.status,
        error=result.error,
        score=result.score,
        reason=result.reason,
        context_count=len(record.contexts),
        relevant_count=result.relevant_count,
        truncated=record.truncated,
        judge_model=model,
        calls=usage.calls,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        retries=usage.retries,
        rate_limited=usage.rate_limited,
        reasks=usage.reasks,
        cache_hits=usage.cache_hits,
        source=record.source,
        row=record.row,
        duplicate_of=None,
    )


def verdict_rows(
    record: ItemRecord, seq: int, result: ScoreResult, keys: Sequence[str], cached: set[int]
) -> list[dict[str, Any]]:
    """One row per context position; `relevant` is null where no verdict was obtained."""
    by_index = {v.index: v for v in result.verdicts}
    usable = result.status == "ok"
    rows = []
    for position in range(len(record.contexts)):
        verdict = by_index.get(position)
        rows.append(
            STAGED_VERDICTS.build_row(
                query_id=record.query_id,
                item_seq=seq,
                position=position,
                relevant=verdict.relevant if (verdict and usable) else None,
                judge_reason=verdict.reason if verdict else "",
                pair_key=keys[position] if keys else "",
                cached=position in cached,
            )
        )
    return rows


# -- judging --------------------------------------------------------------------------------


async def judge_shard(
    records: Sequence[ItemRecord],
    scorer: ContextPrecisionScorer,
    on_done: Callable[[ScoreResult], None],
    item_concurrency: int,
) -> list[ScoreResult]:
    """Score every record concurrently (at most `item_concurrency` items at a time)."""
    gate = asyncio.Semaphore(item_concurrency)

    async def one(record: ItemRecord) -> ScoreResult:
        async with gate:
            result = await scorer.score_item(record.to_scoring_item())
        on_done(result)
        return result

    return list(await asyncio.gather(*(one(r) for r in records)))


def run_shard(shard: Shard, number: int, slot: int, ctx: ShardContext) -> ShardReport:
    """The Ray task body for one shard (also callable directly, without Ray).

    `number` is the shard's place in the run (for `item_seq`), `slot` its place within its
    file (for the cache).
    """
    started = time.monotonic()
    config = ctx.config
    store = open_store(config.output.path, config.output.storage_options)
    verdicts_path, items_path = shard_paths(store, ctx.staging, shard.shard_id)
    report = ShardReport(shard.shard_id)
    if store.exists(items_path):
        report.skipped = True
        return report

    first_seq = number << _SEQ_SHIFT
    records: list[tuple[int, ItemRecord]] = []
    # (item_seq, the error, where the first occurrence is when the row repeats a query_id)
    errors: list[tuple[int, RowError, str | None]] = []
    first_seen: dict[str, ItemRecord] = {}
    for index, record in enumerate(factory.shard_items(config, shard)):
        seq = first_seq + index
        if isinstance(record, ItemRecord) and record.query_id in first_seen:
            # Not worth a judge call: publishing keeps only the first occurrence (duplicates
            # across shards are found there).
            first = first_seen[record.query_id].where
            duplicate = RowError(
                record.source, record.row, duplicate_error(record.query_id, first), record.query_id
            )
            errors.append((seq, duplicate, first))
        elif isinstance(record, RowError):
            errors.append((seq, record, None))
        else:
            first_seen[record.query_id] = record
            records.append((seq, record))

    limiter = None
    if ctx.limiter is not None:
        from jobs.engine.limiter import SharedLimiter

        limiter = SharedLimiter(ctx.limiter)
    judge = factory.build_judge(config, limiter, ctx.api_key)
    llm_judge = judge  # the CachingJudge below hides the negotiation the report needs
    fingerprint = factory.cache_fingerprint(config)
    cache: VerdictCache | None = None
    cache_store: Store | None = None
    cache_dir = ""
    if factory.use_cache(config):
        cache_store, cache_dir = factory.cache_root(config, store)
        cache = load_cache(cache_store, cache_dir, fingerprint, shard.file_index, slot)
        judge = CachingJudge(judge, cache, fingerprint)
    scorer = ContextPrecisionScorer(
        judge,
        context=["unused"],  # contexts come with each item
        scale=config.scorer.scale,
        reason=config.scorer.reason,
        contexts_per_call=config.judge.contexts_per_call,
    )

    counter = BatchedCounter(
        flush=(lambda inc: ctx.progress.add.remote(inc))
        if ctx.progress is not None
        else (lambda inc: None)
    )
    for _ in errors:
        counter.add(items=1, errors=1)

    def on_done(result: ScoreResult) -> None:
        u = result.usage
        counter.add(
            items=1,
            ok=int(result.status == "ok"),
            unscored=int(result.status == "unscored"),
            errors=int(result.status == "error"),
            calls=u.calls,
            rate_limited=u.rate_limited,
            retries=u.retries,
            cache_hits=u.cache_hits,
        )

    concurrency = max(1, config.rate_limit.max_concurrency // config.ray.workers)
    try:
        results = asyncio.run(judge_shard([r for _, r in records], scorer, on_done, concurrency))
    except FatalJudgeError as exc:
        counter.drain()
        report.fatal = str(exc)
        report.response_format = factory.response_format_summary(llm_judge)
        return report
    counter.drain()

    item_rows = [error_row(e, seq, judge.model, first) for seq, e, first in errors]
    all_verdicts: list[dict[str, Any]] = []
    all_keys: list[str] = []
    for (seq, record), result in zip(records, results, strict=True):
        item_rows.append(item_row(record, seq, result, judge.model))
        keys = (
            [
                pair_key(fingerprint, record.to_scoring_item(), p)
                for p in range(len(record.contexts))
            ]
            if cache is not None
            else []
        )
        all_keys.extend(keys)
        cached = set()
        if cache is not None:
            cached = {p for p, key in enumerate(keys) if key in cache.known}
        all_verdicts.extend(verdict_rows(record, seq, result, keys, cached))
        report.usage = report.usage + result.usage
        report.statuses[result.status] = report.statuses.get(result.status, 0) + 1
    if errors:
        report.statuses["error"] = report.statuses.get("error", 0) + len(errors)
    item_rows.sort(key=lambda row: row["item_seq"])
    report.items = len(item_rows)

    store.write_parquet_atomic(
        verdicts_path, pa.Table.from_pylist(all_verdicts, schema=STAGED_VERDICTS.arrow)
    )
    if cache is not None and cache_store is not None:
        cache_store.write_parquet_atomic(
            slot_path(cache_store, cache_dir, fingerprint, shard.file_index, slot),
            cache.entries_for(all_keys),
        )
    # Written last: its presence marks the shard done for resume.
    store.write_parquet_atomic(
        items_path, pa.Table.from_pylist(item_rows, schema=STAGED_ITEMS.arrow)
    )
    report.seconds = time.monotonic() - started
    report.response_format = factory.response_format_summary(llm_judge)
    return report
