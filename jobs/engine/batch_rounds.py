"""Batch mode on the driver: rounds of pass -> plan -> submit -> wait -> ingest until every
shard is staged; the rounds resume from what staging records, and near `judge.batch.deadline`
the rest goes online. docs/batch.md describes the rounds for users."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import logging
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from jobs.core.config import deadline_at
from jobs.core.formatting import duration
from jobs.core.run_manifest import JudgeRecord
from jobs.engine.batch.batch_layout import BatchLayout
from jobs.engine.batch.ingest import ingest_batch
from jobs.engine.batch.provider import BatchInfo, LiteLLMBatches
from jobs.engine.batch.state import BatchRecord, RoundState, now_iso, split_batches
from jobs.engine.clock import RunClock, Timings
from jobs.engine.failures import BatchesStillRunning, RunFailed, rerun_hint
from jobs.engine.fanout import fan_out, raise_if_fatal
from jobs.engine.messages import BatchPass, ShardReport
from jobs.engine.parts import BatchParts
from jobs.engine.plan import RunPlan
from jobs.engine.ray_runtime import start_ray
from scorer_core.errors import CtxPrecError
from scorer_core.types import ReasonMode

__all__ = ["BatchRounds", "BatchesStillRunning", "max_rounds"]

logger = logging.getLogger(__name__)

_HEARTBEAT_EVERY_S = 10.0
"""The run lock's heartbeat is refreshed at least this often while the driver waits."""
_POLL_CONCURRENCY = 8
_SHOWN_BATCHES = 6
"""Batches named on the progress line (`ctxprec status` lists them all)."""


def max_rounds(batch: BatchParts, reason: ReasonMode) -> int:
    """Rounds a run can need: every re-ask of the verdicts, then of an LLM reason (`reason`:
    scorer.reason), each sent in up to judge.batch.max_rounds rounds, and the deadline's online
    round."""
    asks = batch.max_reasks + 1
    kinds = 2 if reason == "llm" else 1
    return asks * kinds * batch.settings.max_rounds + 1


class BatchRounds:
    """The driver's side of one batch-mode run (see the module doc): `run`, then its
    `reports`; the seconds of its phases go to `timings`."""

    def __init__(
        self,
        plan: RunPlan,
        *,
        heartbeat: Callable[[], None] = lambda: None,
        clock: RunClock | None = None,
        timings: Timings | None = None,
        provider: LiteLLMBatches | None = None,
    ) -> None:
        if plan.parts.batch is None:
            raise ValueError("batch rounds need a run in judge.mode batch")
        self._plan = plan
        self._batch = plan.parts.batch
        self._settings = plan.parts.batch.settings
        self._heartbeat = heartbeat
        self._clock = clock or RunClock()
        self.timings = timings or Timings()
        self._deadline: float | None = None  # epoch seconds, set when the run starts
        self._provider = provider or self._batch.batches.open(self._clock.sleep)
        self._layout = BatchLayout(plan.store, plan.location.staging)
        self.reports: list[ShardReport] = []
        # What this driver sent (a resumed run's earlier drivers sent the rest).
        self._uploads = 0
        self._created = 0

    def run(self) -> JudgeRecord:
        """Every round until every shard is staged (raises `BatchesStillRunning` when the
        wait is cut short by judge.batch.max_wait_s); the run's batches."""
        layout = self._layout
        if layout.read_json(layout.run_file) is None:
            layout.write_json(
                layout.run_file,
                {
                    "run_id": self._plan.location.run_id,
                    "model": self._plan.parts.model,
                    "provider": self._batch.provider,
                    "shards": [shard.shard_id for shard in self._plan.shards],
                    "created_at": now_iso(),
                    "started_at": self._clock.wall(),
                },
            )
        setting = self._settings.deadline
        if setting is not None:  # from the run's start (its first driver's)
            started = (layout.read_json(layout.run_file) or {}).get("started_at")
            start = float(started) if isinstance(started, int | float) else self._clock.wall()
            self._deadline = deadline_at(setting, start)
        # One event loop for every round's provider calls: litellm keeps its HTTP client per
        # process, and a client made on one loop and used on the next can hang a call until
        # litellm's 600 s timeout.
        with asyncio.Runner() as runner:
            self._rounds(runner)
        return self.facts()

    def _rounds(self, runner: asyncio.Runner) -> None:
        layout = self._layout
        round_number = max([*layout.rounds_built(), *layout.rounds_planned()], default=0)
        while True:
            if round_number in layout.rounds_planned() and not layout.online_round(round_number):
                state = self._load_round(round_number)
            else:
                online = self._online_round(round_number)
                pending = self._pass(round_number, online)
                if not pending:
                    break
                if online or round_number >= max_rounds(
                    self._batch, self._plan.parts.scoring.reason
                ):
                    raise RunFailed(
                        f"{len(pending)} shard(s) still have requests after {round_number} "
                        f"batch round(s) (first: {pending[0]}); this is a bug"
                    )
                state = self._plan_round(round_number, pending)
            runner.run(self._submit_wait_ingest(state))
            round_number += 1

    def _until_online(self, unanswered: int) -> float | None:
        """Seconds until the rest must go online (<= 0: now), leaving the time `unanswered`
        requests take online at rate_limit.requests_per_minute; None without a deadline."""
        if self._deadline is None:
            return None
        per_minute = self._plan.rate_limit.requests_per_minute
        online_s = unanswered / per_minute * 60.0 if per_minute else 0.0
        margin = self._settings.deadline_margin_s
        return self._deadline - margin - online_s - self._clock.wall()

    def _online_round(self, round_number: int) -> bool:
        """Whether round `round_number` goes online: it was marked so, or the deadline is near
        (then the mark is recorded first, so a resumed driver goes on online)."""
        layout = self._layout
        if layout.online_round(round_number):
            return True
        if self._deadline is None:
            return False
        # The requests the last round left to ask again: what an online pass would send now.
        previous = layout.read_json(layout.round_file(round_number - 1)) if round_number else None
        left = sum(RoundState.from_dict(previous).retried().values()) if previous else 0
        until = self._until_online(left)
        if until is None or until > 0:
            return False
        logger.info(
            f"batch round {round_number}: judge.batch.deadline "
            f"({self._settings.deadline}, {_iso(self._deadline)}) is near: whatever "
            "is still unanswered is asked online under rate_limit"
        )
        self._save(RoundState(round=round_number, batches=(), online=True))
        return True

    async def _stop_at_deadline(self, state: RoundState) -> RoundState:
        """Cancel the round's unfinished batches: their requests go online next round."""
        stopped = 0
        for record in state.batches:
            if record.final:
                continue
            if record.batch_id is not None:
                try:
                    record = _with_info(record, await self._provider.cancel(record.batch_id))
                except CtxPrecError as exc:  # it may have ended meanwhile: ask no more of it
                    logger.warning(f"batch {record.batch_id}: could not cancel it: {exc}")
            state = state.replace(replace(record, stopped=True, polled_at=now_iso()))
            stopped += 1
        self._save(state)
        logger.info(
            f"batch round {state.round}: judge.batch.deadline is near: {stopped} unfinished "
            "batch(es) cancelled; their requests go online"
        )
        return state

    def _pass(self, round_number: int, online: bool) -> list[str]:
        """Run round `round_number`'s pass on the shards that need it; the shards left waiting
        for this round's batches, in shard order. `online`: the pass asks online whatever has
        no final reply (the workers' judge, paced by the run's governor)."""
        started = time.monotonic()
        staged = self._plan.staging.staged_shards()
        # An online pass also takes the shards that recorded this round's requests before the
        # deadline neared (a driver stopped between the pass and the plan): nothing waits.
        skip = staged | (set() if online else self._layout.indexed_shards(round_number))
        todo = [
            (number, shard)
            for number, shard in enumerate(self._plan.shards)
            if shard.shard_id not in skip
        ]
        if todo:
            source = "the cache" if round_number == 0 else "the replies so far"
            unanswered = "asked online" if online else "recorded"
            logger.info(
                f"batch round {round_number}: judging {len(todo)} shard(s) from {source}; "
                f"requests without a reply are {unanswered}"
            )
            before = time.monotonic()
            start_ray(self._plan.ray)
            self.timings.add("ray_start", time.monotonic() - before)
            started += time.monotonic() - before
            # Online: the workers' online judge, governed as online re-asks are.
            asks_online = online or self._settings.reask == "online"
            batch_pass = BatchPass(round=round_number, asks_online=asks_online)
            reports, _ = fan_out(self._plan, todo, heartbeat=self._heartbeat, batch_pass=batch_pass)
            self.reports.extend(report for report in reports if not report.pending)
            raise_if_fatal(reports)  # only online re-asks can meet a judge that cannot work
        self.timings.add("build" if round_number == 0 else "passes", time.monotonic() - started)
        waiting = self._layout.indexed_shards(round_number) - self._plan.staging.staged_shards()
        return [shard.shard_id for shard in self._plan.shards if shard.shard_id in waiting]

    def _plan_round(self, round_number: int, pending: list[str]) -> RoundState:
        limits = self._settings
        shards = []
        for shard_id in pending:
            index = self._layout.read_index(round_number, shard_id)
            sizes = (index.column("bytes").to_pylist(), index.column("tokens").to_pylist())
            shards.append((shard_id, *sizes))
        try:
            records = split_batches(
                round_number,
                shards,
                max_requests=limits.max_requests_per_batch,
                max_bytes=limits.max_bytes_per_batch,
                max_tokens=limits.max_enqueued_tokens,
            )
        except ValueError as exc:
            raise RunFailed(str(exc)) from None
        state = RoundState(round=round_number, batches=tuple(records))
        requests = sum(record.requests for record in records)
        why = _limit_note(records, limits.max_requests_per_batch, limits.max_bytes_per_batch)
        logger.info(
            f"batch round {round_number}: {requests:,} request(s) from {len(pending)} shard(s) "
            f"in {len(records)} batch(es){why}"
        )
        self._save(state)
        return state

    def _load_round(self, round_number: int) -> RoundState:
        data = self._layout.read_json(self._layout.round_file(round_number))
        assert data is not None
        return RoundState.from_dict(data)

    def _save(self, state: RoundState) -> None:
        self._layout.write_json(self._layout.round_file(state.round), state.to_dict())

    async def _submit_wait_ingest(self, state: RoundState) -> None:
        state = await self._wait(state)
        started = time.monotonic()
        for record in state.batches:
            if not record.ingested:
                state = state.replace(await self._ingest(state.round, record))
                self._save(state)
        self.timings.add("ingest", time.monotonic() - started)

    async def _wait(self, state: RoundState) -> RoundState:
        settings = self._settings
        started = self._clock.monotonic()
        deadline = None if settings.max_wait_s is None else started + settings.max_wait_s
        delay = settings.poll_interval_s
        while True:
            state = await self._poll(state)
            counts = state.counts()
            until_online = self._until_online(counts["total"] - counts["completed"])
            unfinished = not all(batch.final for batch in state.batches)
            if until_online is not None and until_online <= 0 and unfinished:
                return await self._stop_at_deadline(state)
            state = await self._submit_ready(state)
            self._progress(state, started)
            if all(batch.final for batch in state.batches):
                return state
            if deadline is not None and self._clock.monotonic() >= deadline:
                running = [batch for batch in state.batches if not batch.final]
                hint = rerun_hint(self._plan.location.run_id, "collect them and publish")
                raise BatchesStillRunning(
                    f"{len(running)} batch(es) of round {state.round} still running after "
                    f"judge.batch.max_wait_s ({settings.max_wait_s:g} s); they go on at the "
                    f"provider: {hint}"
                )
            pause = delay
            if deadline is not None:
                pause = max(0.0, min(delay, deadline - self._clock.monotonic()))
            if until_online is not None:
                pause = max(0.0, min(pause, until_online))
            await self._pause(pause)
            delay = min(delay * 2, settings.max_poll_interval_s)

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds`, keeping the run's lock alive."""
        started = time.monotonic()
        while seconds > 0:
            step = min(seconds, _HEARTBEAT_EVERY_S)
            await self._clock.sleep(step)
            self._heartbeat()
            seconds -= step
        self.timings.add("waiting", time.monotonic() - started)

    async def _poll(self, state: RoundState) -> RoundState:
        running = [
            batch for batch in state.batches if batch.batch_id is not None and not batch.final
        ]
        gate = asyncio.Semaphore(_POLL_CONCURRENCY)

        async def one(record: BatchRecord) -> BatchInfo:
            assert record.batch_id is not None
            async with gate:
                return await self._provider.retrieve(record.batch_id)

        infos = await asyncio.gather(*(one(record) for record in running))
        polled = state
        for record, info in zip(running, infos, strict=True):
            updated = _with_info(record, info)
            if updated != record:
                polled = polled.replace(replace(updated, polled_at=now_iso()))
        if polled is not state:
            self._save(polled)
        return polled

    async def _submit_ready(self, state: RoundState) -> RoundState:
        """Submit, in order, the batches that fit under the enqueued-token limit."""
        limit = self._settings.max_enqueued_tokens
        for record in state.batches:
            if record.batch_id is not None:
                continue
            running = [
                batch for batch in state.batches if batch.batch_id is not None and not batch.final
            ]
            enqueued = sum(batch.tokens for batch in running)
            if limit and enqueued and enqueued + record.tokens > limit:
                break  # keeps the order: later batches wait too
            started = time.monotonic()
            state = await self._submit(state, record)
            self.timings.add("submit", time.monotonic() - started)
        return state

    async def _submit(self, state: RoundState, record: BatchRecord) -> RoundState:
        run_id = self._plan.location.run_id
        info = None
        if record.file_id is None:
            with tempfile.TemporaryDirectory(prefix="ctxprec-batch-") as folder:
                path = os.path.join(folder, f"{record.name}.jsonl")
                await asyncio.to_thread(self._write_batch_file, state.round, record, path)
                file_id = await self._provider.upload(f"{run_id}-{record.name}.jsonl", path)
            record = replace(record, file_id=file_id)
            state = state.replace(record)
            self._save(state)  # recorded before the batch exists
            self._uploads += 1
        else:
            # Uploaded by an earlier driver that may have created the batch without living
            # to record it: look for it before creating one.
            info = await self._provider.find(record.file_id)
        if info is None:
            assert record.file_id is not None
            metadata = {"ctxprec_run": run_id[:64], "ctxprec_batch": record.name}
            info = await self._provider.create(record.file_id, metadata)
            self._created += 1
        record = replace(_with_info(record, info), batch_id=info.id, submitted_at=now_iso())
        state = state.replace(record)
        self._save(state)
        logger.info(
            f"batch round {state.round}: {record.name} submitted as {info.id} "
            f"({record.requests:,} requests, {record.bytes / 1e6:,.1f} MB)"
        )
        return state

    def _write_batch_file(self, round_number: int, record: BatchRecord, path: str) -> None:
        with open(path, "wb") as handle:
            for shard_id, start, end in record.parts:
                lines = self._layout.read_request_lines(round_number, shard_id)
                handle.writelines(lines[start:end])

    async def _ingest(self, round_number: int, record: BatchRecord) -> BatchRecord:
        files = [
            await self._provider.content(file_id)
            for file_id in (record.output_file_id, record.error_file_id)
            if file_id is not None and not record.stopped
        ]
        parts = []
        for shard_id, start, end in record.parts:
            index = self._layout.read_index(round_number, shard_id)
            parts.append((shard_id, index.column("custom_id").to_pylist()[start:end]))
        sent: list[str] = []
        for _, ids in parts:
            sent.extend(ids)
        ingested = await asyncio.to_thread(ingest_batch, record, files, sent)
        del files
        for shard_id, ids in parts:
            replies = [(request_id, ingested.replies[request_id]) for request_id in ids]
            await asyncio.to_thread(self._layout.write_replies, shard_id, record.name, replies)
        if ingested.unknown or ingested.unreadable:
            logger.info(
                f"batch {record.batch_id}: {ingested.unknown} line(s) for requests it was not "
                f"sent and {ingested.unreadable} unreadable line(s) were ignored"
            )
        retried = ingested.retried
        if retried:
            reasons = sorted(retried.items(), key=lambda item: (-item[1], item[0]))
            logger.info(
                f"batch {record.batch_id or record.name}: {sum(retried.values()):,} request(s) "
                "failed transiently, asked again: "
                + ", ".join(f"{reason} {count:,}" for reason, count in reasons)
            )
        return replace(record, ingested=True, retried=retried, final_errors=ingested.final_errors)

    def _progress(self, state: RoundState, started: float) -> None:
        """One line per poll: the round's requests completed and failed, then each batch's."""
        counts = state.counts()
        shown = [_batch_progress(batch) for batch in state.batches[:_SHOWN_BATCHES]]
        hidden = len(state.batches) - len(shown)
        if hidden > 0:
            shown.append(f"{hidden} more")
        logger.info(
            f"batch round {state.round}: requests {counts['completed']:,}/{counts['total']:,} "
            f"completed, {counts['failed']:,} failed | {'; '.join(shown)} | "
            f"{duration(self._clock.monotonic() - started)} since submitting"
        )

    def facts(self) -> JudgeRecord:
        """The run's batches over every round (from staging: a resumed run counts them all)."""
        rounds = [self._load_round(number) for number in self._layout.rounds_planned()]
        batches = list(itertools.chain.from_iterable(state.batches for state in rounds))
        return JudgeRecord(
            mode="batch",
            provider=self._batch.provider,
            rounds=len(rounds),
            batches=len(batches),
            batch_statuses=dict(Counter(record.status or "not submitted" for record in batches)),
            requests=sum(batch.requests for batch in batches),
            requests_failed=sum(batch.failed for batch in batches),
            round_details=[state.summary() for state in rounds],
            max_rounds=self._settings.max_rounds,
            deadline_at=None if self._deadline is None else _iso(self._deadline),
            bytes_uploaded=sum(batch.bytes for batch in batches),
            uploads_by_this_driver=self._uploads,
            batches_created_by_this_driver=self._created,
        )


_INFO_FIELDS = ("status", "completed", "failed", "output_file_id", "error_file_id", "errors")


def _with_info(record: BatchRecord, info: BatchInfo) -> BatchRecord:
    return replace(record, **{name: getattr(info, name) for name in _INFO_FIELDS})


def _batch_progress(batch: BatchRecord) -> str:
    """One batch on the progress line: its name, status, requests completed and failed."""
    status = batch.status or "not submitted"
    line = f"{batch.name} {status} {batch.completed:,}/{batch.requests:,}"
    if batch.failed:
        line += f" ({batch.failed:,} failed)"
    return line


def _iso(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat(timespec="seconds")


def _limit_note(records: list[BatchRecord], max_requests: int, max_bytes: int) -> str:
    """Why the requests were split, when they were."""
    if len(records) < 2:
        return ""
    reasons = set()
    for record in records[:-1]:
        if record.requests >= max_requests:
            reasons.add(f"at most {max_requests:,} requests per batch")
        elif record.bytes > max_bytes * 0.9:
            reasons.add(f"at most {max_bytes / 1e6:,.0f} MB per batch")
        else:
            reasons.add("the enqueued-token limit (judge.batch.max_enqueued_tokens)")
    return " (split by the provider's limits: " + "; ".join(sorted(reasons)) + ")"
