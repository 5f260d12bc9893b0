"""What a worker does with a shard: read -> validate -> judge -> build rows -> write.

The steps `item_row`, `error_row` and `verdict_rows` are pure `dict -> dict` functions, tested
without Ray. `ShardRunner.run_shard` ties them to storage: it writes the shard's verdicts, then
its items file, each atomically; the items file is the shard's commit marker, so a shard is
either done or redone, never half done. The two files' columns are `jobs.schema.STAGED_VERDICTS`
and `jobs.schema.STAGED_ITEMS`.

A `ShardRunner` lives as long as its worker (`run_worker`, one long Ray task): the judge (and
its connection pool) is built once, and the worker runs a few shards at a time on one event
loop (its lanes), so its requests never pause between shards: the next shard is read (in a
thread) and its requests queue behind the current shard's while that one's last replies are
outstanding. Requests in flight are bounded by the worker's allowance of the run-wide budget
(`jobs.engine.flow`), not per shard. `run_shard` runs one shard in this process, without Ray.

In batch mode (`ShardContext.batch_round`) the judge stage is a `jobs.engine.batch.stage.
ShardPass`: the same scorer, cache and row builders, with a judge that answers from the batch
replies staged so far; a shard with requests still unanswered records them for the next batch
round instead of being staged (`ShardReport.pending`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa

from jobs import factory, sampling
from jobs.cache import (
    CachingJudge,
    VerdictCache,
    load_cache,
    pair_key,
    slot_path,
)
from jobs.config import JobConfig
from jobs.engine.batch.judge import OnlineAsk
from jobs.engine.batch.stage import ShardPass
from jobs.engine.flow import WorkerFlow
from jobs.engine.lookahead import read_marks
from jobs.engine.progress import BatchedCounter
from jobs.inputs import (
    ItemRecord,
    RowError,
    Shard,
)
from jobs.schema import STAGED_ITEMS, STAGED_VERDICTS, RunSchema, context_hash, duplicate_error
from jobs.storage import Store, open_store
from scorer_core.errors import FatalJudgeError, StorageError
from scorer_core.judge import LLMJudge
from scorer_core.protocols import Judge
from scorer_core.scorer import ContextPrecisionScorer
from scorer_core.types import ScoreResult, Usage

# item_seq = shard number << 32 | index within the shard: unique and ordered across the run,
# so duplicates of a query_id can be told apart and the first occurrence found.
_SEQ_SHIFT = 32


@dataclass(frozen=True)
class ShardContext:
    """What every worker needs besides its shards; small and picklable."""

    config: JobConfig
    staging: str  # the run's staging folder, relative to the output store's root
    # Ray actor handle of the run's coordinator (jobs.engine.coordinator: shard board, progress
    # counters, and the governor's pace and budget unless `governed` is false), or None.
    coordinator: Any = None
    governed: bool = False
    # The judge's API key as the driver read it (workers may not have the driver's environment).
    api_key: str | None = field(default=None, repr=False)
    # The run's tables with the input columns it carries, their types decided at start-up.
    tables: RunSchema = field(default_factory=RunSchema)
    # The shards with later occurrences of a query_id found before judging, in the staging
    # area (jobs.engine.lookahead): those rows are written as duplicates, not judged.
    duplicates: frozenset[str] = frozenset()
    # Batch mode: the round whose pass this is (jobs.engine.batch); None for an online run.
    batch_round: int | None = None


@dataclass
class ShardReport:
    shard_id: str
    skipped: bool = False
    items: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    seconds: float = 0.0
    fatal: str | None = None
    # What the worker's judge settled on (transport, structured-output form), for the summary.
    judge: dict[str, Any] = field(default_factory=dict)
    # Batch mode: requests recorded for the next batch round (the shard is not staged yet).
    pending: int = 0
    # The Ray node the shard ran on (empty outside Ray), for the manifest.
    node: str = ""


def shard_paths(store: Store, staging: str, shard_id: str) -> tuple[str, str]:
    """(verdicts file, items file) of a shard in the run's staging area."""
    return (
        store.join(staging, "verdicts", f"{shard_id}.parquet"),
        store.join(staging, "items", f"{shard_id}.parquet"),
    )


# -- pure steps -----------------------------------------------------------------------------


def _with_carried(
    row: dict[str, Any], names: Sequence[str], values: Sequence[Any]
) -> dict[str, Any]:
    """`row` with the carried columns' values after our columns (nulls when `values` is ())."""
    if names:
        row.update(zip(names, values or (None,) * len(names), strict=True))
    return row


_NO_USAGE = Usage()
# The items table names its judging-cost columns after `Usage`'s fields, in the same order.
_USAGE_COLUMNS = tuple(f.name for f in fields(Usage))


def _usage_columns(usage: Usage) -> dict[str, int]:
    """The items table's judging-cost columns of a row (all 0 for a row not judged)."""
    return {name: getattr(usage, name) for name in _USAGE_COLUMNS}


def error_row(
    error: RowError,
    seq: int,
    model: str,
    duplicate_of: str | None = None,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> dict[str, Any]:
    """The staged items row of a row that cannot be scored (`duplicate_of`: see the schema)."""
    row = STAGED_ITEMS.build_row(
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
        **_usage_columns(_NO_USAGE),
        source=error.source,
        row=error.row,
        duplicate_of=duplicate_of,
    )
    return _with_carried(row, tables.names, error.carried)


def item_row(
    record: ItemRecord,
    seq: int,
    result: ScoreResult,
    model: str,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> dict[str, Any]:
    """The staged items row of a judged item: the worker's score is the published score."""
    row = STAGED_ITEMS.build_row(
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
        **_usage_columns(result.usage),
        source=record.source,
        row=record.row,
        duplicate_of=None,
    )
    return _with_carried(row, tables.names, record.carried)


def verdict_rows(
    record: ItemRecord,
    seq: int,
    result: ScoreResult,
    keys: Sequence[str],
    cached: set[int],
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> list[dict[str, Any]]:
    """One row per context position; `relevant` is null where no verdict was obtained."""
    by_index = {v.index: v for v in result.verdicts}
    usable = result.status == "ok"
    ids = record.context_ids
    names = tables.verdict_names
    values: tuple[Any, ...] = ()
    if names:
        by_name = dict(zip(tables.names, record.carried, strict=True)) if record.carried else {}
        values = tuple(by_name.get(name) for name in names)
    rows = []
    for position, text in enumerate(record.contexts):
        verdict = by_index.get(position)
        row = STAGED_VERDICTS.build_row(
            query_id=record.query_id,
            item_seq=seq,
            position=position,
            context_id=ids[position] if ids is not None else None,
            context_hash=context_hash(text),
            relevant=verdict.relevant if (verdict and usable) else None,
            judge_reason=verdict.reason if verdict else "",
            pair_key=keys[position] if keys else "",
            cached=position in cached,
        )
        rows.append(_with_carried(row, names, values))
    return rows


# -- judging --------------------------------------------------------------------------------


async def judge_shard(
    records: Sequence[ItemRecord],
    scorer: ContextPrecisionScorer,
    on_done: Callable[[ScoreResult], None],
) -> list[ScoreResult]:
    """Score every record concurrently: the judge's gate bounds the requests in flight.

    A `FatalJudgeError` (no request can succeed) cancels the shard's other items at once, so
    nothing keeps judging and paying for a run that is stopping.
    """

    async def one(record: ItemRecord) -> ScoreResult:
        result = await scorer.score_item(record.to_scoring_item())
        on_done(result)
        return result

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(r)) for r in records]
    except* FatalJudgeError as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]


@dataclass
class _Read:
    """A shard's rows after reading: the records to judge and the rows that are errors."""

    records: list[tuple[int, ItemRecord]]
    # (item_seq, the error, where the first occurrence is when the row repeats a query_id)
    errors: list[tuple[int, RowError, str | None]]


def read_shard_records(
    config: JobConfig,
    shard: Shard,
    number: int,
    tables: RunSchema = RunSchema(),  # noqa: B008
    later: Mapping[int, str] | None = None,
) -> _Read:
    """Read and validate a shard's rows; repeats of a query_id within it become errors (not
    worth a judge call: publishing keeps only the first occurrence, and finds repeats across
    shards itself), and so do the rows in `later` (item_seq -> where the first occurrence is,
    in another shard: jobs.engine.lookahead)."""
    first_seq = number << _SEQ_SHIFT
    read = _Read([], [])
    first_seen: dict[str, ItemRecord] = {}
    later = later or {}
    for index, record in enumerate(factory.shard_items(config, shard, tables.carried)):
        seq = first_seq + index
        if not sampling.keeps(config, record, tables.names):
            continue  # a sampled run (jobs.sampling): not chosen, not judged, not published
        if isinstance(record, ItemRecord) and seq in later:
            elsewhere = later[seq]
            duplicate = RowError(
                record.source,
                record.row,
                duplicate_error(record.query_id, elsewhere),
                record.query_id,
                record.carried,
            )
            read.errors.append((seq, duplicate, elsewhere))
        elif isinstance(record, ItemRecord) and record.query_id in first_seen:
            first = first_seen[record.query_id].where
            duplicate = RowError(
                record.source,
                record.row,
                duplicate_error(record.query_id, first),
                record.query_id,
                record.carried,
            )
            read.errors.append((seq, duplicate, first))
        elif isinstance(record, RowError):
            read.errors.append((seq, record, None))
        else:
            first_seen[record.query_id] = record
            read.records.append((seq, record))
    return read


class ShardRunner:
    """Runs shards for one worker; holds the worker's judge and its share of the run's flow."""

    def __init__(self, ctx: ShardContext, worker_id: str, node: str = "") -> None:
        self._ctx = ctx
        self._config = ctx.config
        self._worker_id = worker_id
        self._node = node
        self._store = open_store(self._config.output.path, self._config.output.storage_options)
        self._judge: Judge | None = None
        self._flow: WorkerFlow | None = None
        self._reports: asyncio.Task[None] | None = None

    def _inner_judge(self) -> Judge:
        """The worker's judge, built on first use inside the worker's event loop."""
        if self._judge is not None:
            return self._judge
        config = self._config
        if config.judge.model == "lexical" or not self._ctx.governed:
            self._judge = factory.build_judge(
                config, factory.local_limiter(config), self._ctx.api_key
            )
            return self._judge
        limits = config.rate_limit
        self._flow = WorkerFlow(
            self._ctx.coordinator,
            self._worker_id,
            paced=bool(limits.requests_per_minute or limits.tokens_per_minute),
        )
        self._judge = factory.build_judge(
            config, self._flow, self._ctx.api_key, gate=self._flow.gate
        )
        self._reports = asyncio.get_running_loop().create_task(self._flow.run_reports())
        return self._judge

    def _online_reask(self) -> OnlineAsk | None:
        """Batch mode with judge.batch.reask online: how a re-ask goes out (the worker's
        online judge, paced by the run's governor); None when re-asks go in batches."""
        if self._config.judge.batch.reask != "online":
            return None
        online = self._inner_judge()
        assert isinstance(online, LLMJudge)
        return online.ask

    async def close(self) -> None:
        """Stop reporting to the governor (the worker is done)."""
        if self._reports is not None:
            self._reports.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reports
            self._reports = None

    async def run_shard(self, shard: Shard, number: int, slot: int) -> ShardReport:
        """Judge one shard and stage its files. `number` is the shard's place in the run (for
        `item_seq`), `slot` its place within its file (for the cache)."""
        started = time.monotonic()
        config, store = self._config, self._store
        verdicts_path, items_path = shard_paths(store, self._ctx.staging, shard.shard_id)
        report = ShardReport(shard.shard_id, node=self._node)
        if await asyncio.to_thread(store.exists, items_path):
            report.skipped = True
            return report
        tables = self._ctx.tables
        later = None
        if shard.shard_id in self._ctx.duplicates:
            later = await asyncio.to_thread(read_marks, store, self._ctx.staging, shard.shard_id)
        read = await asyncio.to_thread(read_shard_records, config, shard, number, tables, later)
        batch: ShardPass | None = None
        inner: Judge
        if self._ctx.batch_round is not None:
            batch = await asyncio.to_thread(
                ShardPass.load,
                store,
                self._ctx.staging,
                self._ctx.batch_round,
                shard,
                number,
                read.records,
            )
            inner = batch.judge(config, self._online_reask())
        else:
            inner = self._inner_judge()
        judge: Judge = inner
        fingerprint = factory.cache_fingerprint(config)
        cache: VerdictCache | None = None
        cache_store: Store | None = None
        cache_dir = ""
        if factory.use_cache(config):
            cache_store, cache_dir = factory.cache_root(config, store)
            if batch is not None and batch.frozen_cache is not None:
                cache = batch.frozen_cache
            else:
                cache = await asyncio.to_thread(
                    load_cache, cache_store, cache_dir, fingerprint, shard.file_index, slot
                )
            judge = CachingJudge(inner, cache, fingerprint, fresh_hits=batch is None)
        scorer = ContextPrecisionScorer(
            judge,
            context=["unused"],  # contexts come with each item
            scale=config.scorer.scale,
            reason=config.scorer.reason,
            contexts_per_call=config.judge.contexts_per_call,
        )
        coordinator = self._ctx.coordinator
        counter = BatchedCounter(
            flush=(lambda inc: coordinator.add.remote(inc))
            if coordinator is not None
            else (lambda inc: None)
        )
        if batch is None:
            counter.add(items=len(read.errors), errors=len(read.errors))

        def on_done(result: ScoreResult) -> None:
            if batch is None:  # a batch pass counts once the shard is staged (it may wait)
                on_done_counts(counter, result)

        if self._flow is not None:
            self._flow.wake()
        try:
            results = await judge_shard([r for _, r in read.records], scorer, on_done)
        except FatalJudgeError as exc:
            counter.drain()
            report.fatal = str(exc)
            report.judge = judge_facts(inner)
            return report
        counter.drain()
        if batch is not None:
            if batch.pending:
                await asyncio.to_thread(batch.finish, cache, fingerprint, read.records)
                # The pass's progress: items gone through, none of them final yet.
                counter.add(items=len(read.records) + len(read.errors))
                counter.drain()
                report.pending = batch.pending
                report.seconds = time.monotonic() - started
                return report
            counter.add(items=len(read.errors), errors=len(read.errors))
            for result in results:
                on_done_counts(counter, result)
            counter.drain()
        report.judge = judge_facts(inner)

        item_rows = [error_row(e, seq, inner.model, first, tables) for seq, e, first in read.errors]
        all_verdicts: list[dict[str, Any]] = []
        all_keys: list[str] = []
        for (seq, record), result in zip(read.records, results, strict=True):
            item_rows.append(item_row(record, seq, result, inner.model, tables))
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
            all_verdicts.extend(verdict_rows(record, seq, result, keys, cached, tables))
            report.usage = report.usage + result.usage
            report.statuses[result.status] = report.statuses.get(result.status, 0) + 1
        if read.errors:
            report.statuses["error"] = report.statuses.get("error", 0) + len(read.errors)
        item_rows.sort(key=lambda row: row["item_seq"])
        report.items = len(item_rows)

        def write() -> None:
            store.write_parquet_atomic(
                verdicts_path,
                pa.Table.from_pylist(all_verdicts, schema=tables.staged_verdicts.arrow),
            )
            if cache is not None and cache_store is not None:
                cache_store.write_parquet_atomic(
                    slot_path(cache_store, cache_dir, fingerprint, shard.file_index, slot),
                    cache.entries_for(all_keys),
                )
            # Written last: its presence marks the shard done for resume.
            store.write_parquet_atomic(
                items_path, pa.Table.from_pylist(item_rows, schema=tables.staged_items.arrow)
            )

        await asyncio.to_thread(write)
        report.seconds = time.monotonic() - started
        return report


def on_done_counts(counter: BatchedCounter, result: ScoreResult) -> None:
    """Add one judged item to the progress counters."""
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


def judge_facts(judge: Judge) -> dict[str, Any]:
    """What a judge settled on, for the run's summary: its transport and structured-output
    negotiation (`ResponseFormatNegotiation.summary()`, which `jobs.engine.response_formats`
    combines over the run's shards); empty for the offline judge. `judge` is the worker's own
    judge, not the CachingJudge around it, which hides the negotiation."""
    facts: dict[str, Any] = {}
    transport = getattr(judge, "transport", None)
    if transport:
        facts["transport"] = transport
    negotiated = factory.response_format_summary(judge)
    if negotiated is not None:
        facts["response_format"] = negotiated
    return facts


def run_shard(shard: Shard, number: int, slot: int, ctx: ShardContext) -> ShardReport:
    """Run one shard in this process, without Ray (tests, tools, one-off use)."""

    async def one() -> ShardReport:
        runner = ShardRunner(ctx, "local")
        try:
            return await runner.run_shard(shard, number, slot)
        finally:
            await runner.close()

    return asyncio.run(one())


async def _run_lanes(ctx: ShardContext, worker_id: str, lanes: int, node: str = "") -> None:
    """A worker's life: `lanes` loops that each take the next shard from the board and run it,
    until the board has none left (or the run stopped)."""
    runner = ShardRunner(ctx, worker_id, node)
    board = ctx.coordinator
    attempts = ctx.config.ray.max_task_retries + 1
    await board.rejoin.remote(worker_id)

    async def lane() -> None:
        while True:
            lease = await board.next_shard.remote(worker_id)
            if lease is None:
                return
            number, shard, slot = lease
            for attempt in range(1, attempts + 1):
                try:
                    report = await runner.run_shard(shard, number, slot)
                except StorageError as exc:
                    # The store's own retries are spent; a later attempt may find it back.
                    if attempt < attempts:
                        continue
                    await board.failed.remote(worker_id, shard.shard_id, _failure(shard, exc))
                    return
                except Exception as exc:  # a bad file, a bug: the run stops, naming the shard
                    await board.failed.remote(worker_id, shard.shard_id, _failure(shard, exc))
                    return
                await board.done.remote(worker_id, report)
                if report.fatal:
                    return
                break

    try:
        await asyncio.gather(*(lane() for _ in range(lanes)))
    finally:
        await runner.close()


def _failure(shard: Shard, exc: BaseException) -> str:
    """Which shard failed and all of the exception's message on one line (its first line often
    names the file; a pyarrow message goes on over several)."""
    text = " ".join(part.strip() for part in str(exc).strip().splitlines())
    return f"shard {shard.shard_id} failed: {text or type(exc).__name__}"


def run_worker(ctx: ShardContext, worker_id: str, lanes: int) -> None:
    """The Ray task body of one worker: run shards from the run's board (held by the
    coordinator, `jobs.engine.dispatch`) until there are none left. Ray retries it when the
    worker process dies; the new attempt takes back the shards the dead one held."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    asyncio.run(_run_lanes(ctx, worker_id, lanes, node))
