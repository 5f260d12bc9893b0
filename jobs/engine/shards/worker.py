"""What a worker does with a shard: read -> judging -> rows -> commit (verdicts, then the
items file, the shard's commit marker). A `ShardRunner` lives as long as its worker (one long
Ray task): the judge is built once and a few lanes run shards on one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

import pyarrow as pa

from jobs.core.run_layout import StagingArea
from jobs.core.schema import RunSchema
from jobs.core.storage import open_store
from jobs.core.verdict_store import Journal
from jobs.engine.batch.batch_judge import OnlineAsk
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.control.progress import BatchedCounter
from jobs.engine.control.shard_board import WAIT
from jobs.engine.control.worker_flow import WorkerFlow
from jobs.engine.messages import CoordinatorHandle, JudgeFacts, ShardContext, ShardReport
from jobs.engine.pairs.lookahead import ShardNeeds, read_needs
from jobs.engine.shards.judging import (
    BatchPassJudging,
    BatchShard,
    OnlineJudging,
    ShardCaches,
    ShardJudging,
)
from jobs.engine.shards.shard_rows import ShardRows, shard_rows
from jobs.inputs import ItemRecord, Shard
from jobs.inputs.shard_read import RunRows, ShardRead, read_shard_records
from scorer_core.errors import ConfigError, FatalJudgeError, StorageError, one_line
from scorer_core.protocols import Judge
from scorer_core.scoring import ScoringSettings, score_item
from scorer_core.types import ScoreResult

logger = logging.getLogger(__name__)

_WAIT_S = 0.2
"""A lane's pause when every shard left awaits a shard in progress."""


async def judge_shard(
    judge: Judge,
    records: Sequence[ItemRecord],
    scoring: ScoringSettings,
    on_done: Callable[[ScoreResult], None],
) -> list[ScoreResult]:
    """Score every record concurrently (the judge's gate bounds the requests in flight); a
    `FatalJudgeError` cancels the shard's other items at once, so nothing more is paid for."""

    async def one(record: ItemRecord) -> ScoreResult:
        result = await score_item(judge, record.to_scoring_item(), scoring)
        on_done(result)
        return result

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(record)) for record in records]
    except* FatalJudgeError as failures:
        raise failures.exceptions[0] from None
    return [task.result() for task in tasks]


def judge_facts(judge: Judge) -> JudgeFacts:
    """The transport and structured-output negotiation of a worker's own judge; empty for the
    offline judge."""
    asker = judge.asker
    if asker is None:
        return JudgeFacts()
    return JudgeFacts(asker.transport, asker.response_format.summary())


class ShardRunner:
    """Runs shards for one worker; holds the worker's judge and its share of the run's flow."""

    def __init__(
        self,
        ctx: ShardContext,
        worker_id: str,
        node: str = "",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._ctx = ctx
        self._tables = ctx.tables or RunSchema()
        self._rows = RunRows(reader=ctx.parts.reader, tables=self._tables, sample=ctx.sample)
        self._worker_id = worker_id
        self._node = node
        self._store = open_store(ctx.output.path, ctx.output.storage_options)
        self._staging = StagingArea(self._store, ctx.staging)
        self._caches = self._open_caches()
        self._sleep = sleep
        self._judge: Judge | None = None
        self._flow: WorkerFlow | None = None
        self._reports: asyncio.Task[None] | None = None
        self._flushes: asyncio.Task[None] | None = None

    def _open_caches(self) -> ShardCaches | None:
        """Where the shards find verdicts, and the worker's journal; None without a cache."""
        spec = self._ctx.parts.cache
        if spec is None:
            return None
        writer = f"{self._ctx.run_id}.{self._worker_id}"
        journal = Journal(
            spec.verdict_store(self._store), writer, interval_s=spec.journal_interval_s
        )
        return ShardCaches(
            store=self._store,
            staging=self._ctx.staging,
            fingerprint=spec.fingerprint,
            journal=journal,
        )

    async def take_over(self) -> int:
        """A retried worker: remember what its dead attempt journaled (the verdicts of the
        shards it held, which this attempt takes back). Returns how many."""
        if self._caches is None:
            return 0
        return await asyncio.to_thread(self._caches.journal.take_over)

    async def _flush_loop(self, journal: Journal) -> None:
        """Flush the journal every `cache.journal_interval_s` while the worker runs."""
        while True:
            await self._sleep(journal.interval_s)
            await self._flush(journal)

    async def _flush(self, journal: Journal) -> None:
        taken = journal.take()
        try:
            await asyncio.to_thread(journal.write, taken)
        except StorageError as exc:  # the store is down: these verdicts cost calls next time
            logger.warning(f"verdict journal: {len(taken)} verdict(s) not kept: {exc}")

    def _own_judge(self) -> Judge:
        """The worker's judge, built on first use inside the worker's event loop."""
        if self._judge is not None:
            return self._judge
        judges = self._ctx.parts.judges
        coordinator = self._ctx.coordinator
        if not self._ctx.governed or coordinator is None:
            self._judge = judges.build(judges.local_limiter(), None)
            return self._judge
        self._flow = WorkerFlow(coordinator, self._worker_id, paced=self._ctx.paced)
        self._judge = judges.build(self._flow, self._flow.gate)
        self._reports = asyncio.get_running_loop().create_task(self._flow.run_reports())
        return self._judge

    def _online_reask(self) -> OnlineAsk | None:
        """A batch pass that asks online: how a re-ask goes out (the worker's online judge,
        paced by the run's governor); None when re-asks go in batches."""
        batch_pass = self._ctx.batch_pass
        if batch_pass is None or not batch_pass.asks_online:
            return None
        asker = self._own_judge().asker
        if asker is None:  # the config forbids batch mode for a judge that asks no chat model
            raise ConfigError("judge.batch.reask online needs an LLM judge")
        return asker.ask

    async def close(self) -> None:
        """Stop reporting to the governor and flush the journal (the worker is done)."""
        for task in (self._reports, self._flushes):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._reports = self._flushes = None
        if self._caches is not None:
            await self._flush(self._caches.journal)

    async def run_shard(self, shard: Shard, number: int) -> ShardReport:
        """Judge one shard and stage its files. `number` is the shard's place in the run."""
        started = time.monotonic()
        report = ShardReport(shard_id=shard.shard_id, node=self._node)
        items_file = self._staging.items_file(shard.shard_id)
        if await asyncio.to_thread(self._store.exists, items_file):
            report.skipped = True
            return report
        if self._caches is not None and self._flushes is None:
            loop = asyncio.get_running_loop()
            self._flushes = loop.create_task(self._flush_loop(self._caches.journal))
        needs = ShardNeeds()
        staged = self._ctx.needs
        if shard.shard_id in staged.with_repeats | staged.with_pairs:
            needs = await asyncio.to_thread(
                read_needs, self._store, self._ctx.staging, shard.shard_id, staged
            )
        read = await asyncio.to_thread(read_shard_records, self._rows, shard, number, needs.later)
        coordinator = self._ctx.coordinator
        counter = BatchedCounter(
            flush=coordinator.add.remote if coordinator else lambda counts: None
        )
        judging = await self._judging(shard, number, read, counter, needs)
        scoring = self._ctx.parts.scoring
        try:
            records = [record for _, record in read.records]
            results = await judge_shard(judging.judge, records, scoring, judging.item_done)
        except FatalJudgeError as exc:
            counter.drain()
            report.fatal = str(exc)
            report.judge = judge_facts(judging.own_judge)
            return report
        report.judge = judge_facts(judging.own_judge)
        report.pending = await judging.finish(read, results)
        if not report.pending:
            model = judging.own_judge.model
            rows = shard_rows(read, results, model, self._tables, judging.pairs)
            entries = judging.cache_entries(read)  # batch mode's, not journaled as they came
            if entries and self._caches is not None:
                for key, (relevant, reason) in entries.items():
                    self._caches.journal.add(key, relevant, reason)
            await asyncio.to_thread(self._commit, shard, rows)
            report.items = len(rows.items)
            report.usage = rows.usage
            report.statuses = rows.statuses
        report.seconds = time.monotonic() - started
        return report

    async def _judging(
        self, shard: Shard, number: int, read: ShardRead, counter: BatchedCounter, needs: ShardNeeds
    ) -> ShardJudging:
        """How the shard is judged: a batch round's pass, or the worker's judge online."""
        batch_pass = self._ctx.batch_pass
        batch = self._ctx.parts.batch
        if batch_pass is None or batch is None:
            judging: ShardJudging = await OnlineJudging.open(
                self._own_judge(), counter, self._caches, needs, read
            )
            if self._flow is not None:
                self._flow.wake()
            return judging
        return await BatchPassJudging.open(
            BatchShard(
                layout=BatchLayout(self._store, self._ctx.staging),
                round=batch_pass.round,
                batch=batch,
                scale=self._ctx.parts.scoring.scale,
                shard_id=shard.shard_id,
                number=number,
                read=read,
            ),
            self._online_reask(),
            counter,
            self._caches,
            needs,
        )

    def _commit(self, shard: Shard, rows: ShardRows) -> None:
        """Stage the shard's files (blocking): verdicts, then the items file, whose presence
        marks the shard done for resume."""
        tables = self._tables
        verdicts = pa.Table.from_pylist(rows.verdicts, schema=tables.staged_verdicts.arrow)
        self._store.write_parquet_atomic(self._staging.verdicts_file(shard.shard_id), verdicts)
        items = pa.Table.from_pylist(rows.items, schema=tables.staged_items.arrow)
        self._store.write_parquet_atomic(self._staging.items_file(shard.shard_id), items)


async def _run_lane(
    runner: ShardRunner, board: CoordinatorHandle, worker_id: str, attempts: int
) -> None:
    """Take the next shard from the board and run it, until the board has none left."""
    while True:
        assignment = await board.next_shard.remote(worker_id)
        if assignment is None:
            return
        if assignment == WAIT:  # every shard left awaits pairs a shard in progress judges first
            await asyncio.sleep(_WAIT_S)
            continue
        number, shard = assignment
        for attempt in range(1, attempts + 1):
            try:
                report = await runner.run_shard(shard, number)
            except Exception as exc:  # a bad file, a bug: the run stops, naming the shard
                # the store's own retries are spent: a later attempt may find it back
                if isinstance(exc, StorageError) and attempt < attempts:
                    continue
                message = f"shard {shard.shard_id} failed: {one_line(exc)}"
                await board.failed.remote(worker_id, shard.shard_id, message)
                return
            await board.done.remote(worker_id, report)
            if report.fatal:
                return
            break


async def _run_lanes(ctx: ShardContext, worker_id: str, lanes: int, node: str = "") -> None:
    """A worker's life: `lanes` loops of `_run_lane`."""
    runner = ShardRunner(ctx, worker_id, node)
    board = ctx.coordinator
    assert board is not None, "a worker runs with the run's coordinator"
    attempts = ctx.attempts
    held = await board.rejoin.remote(worker_id)
    if held:
        taken = await runner.take_over()  # this attempt takes back the shards of a dead one
        logger.warning(
            f"{worker_id}: took back {held} shard(s) of its dead attempt and {taken:,} "
            "verdict(s) it had journaled"
        )
    try:
        await asyncio.gather(*(_run_lane(runner, board, worker_id, attempts) for _ in range(lanes)))
    finally:
        await runner.close()


def run_worker(ctx: ShardContext, worker_id: str, lanes: int) -> None:
    """The Ray task body of one worker: run shards from the run's board until there are none
    left. Ray retries it when the process dies; the new attempt takes back the dead one's."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    asyncio.run(_run_lanes(ctx, worker_id, lanes, node))
