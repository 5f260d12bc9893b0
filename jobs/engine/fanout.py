"""Fan-out: run a run's shards on `ray.workers` long-lived workers and wait for them.

Each worker is one Ray task (`jobs.engine.worker.run_worker`) with `SHARDS_PER_WORKER` lanes
that take shards from the run's board (`jobs.engine.dispatch`) until none are left: a worker
reads its next shard and queues its requests while the current shard's last replies are
outstanding, and its judge and connections live for the whole run. All workers share one
governor (`jobs.engine.governor`): the provider's pace (when the config sets limits) and
the run-wide in-flight budget, sized from the limits and the measured latency under
`rate_limit.max_concurrency: auto` and shared out by each worker's demand. The board, the
governor and the progress counters live in one coordinator actor (`jobs.engine.coordinator`);
the driver polls it to draw the progress line.

A worker whose process dies is retried by Ray and takes back the shards it held (each shard is
staged all or nothing). A shard that fails after its retries stops the run: no more shards
are handed out, the shards in progress finish (and stay staged), then the run fails naming the
shard. A fatal judge error stops everything at once, so nothing keeps judging (and paying) for
a run that cannot finish. Shards that finished are kept in staging, so
a rerun with the same run id resumes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from jobs import factory
from jobs.config import JobConfig
from jobs.engine.coordinator import coordinator_actor_class, make_governor
from jobs.engine.governor import RunGovernor
from jobs.engine.progress import ExpectedItems, ProgressLine
from jobs.engine.publish import RunLocation
from jobs.engine.worker import ShardContext, ShardReport, run_worker
from jobs.inputs import Shard
from jobs.schema import RunSchema
from scorer_core.errors import CtxPrecError

# How often the driver refreshes the progress line and the lease's heartbeat.
_DRAW_EVERY_S = 0.5
# Shards a worker works on at once (its lanes): the current one and the next, read ahead.
SHARDS_PER_WORKER = 2


class RunFailed(CtxPrecError):
    """The run could not finish; staged shards are kept so the same run id resumes."""


@dataclass
class FanOutResult:
    """The reports of the shards that ran, and what the run's flow control settled on."""

    reports: list[ShardReport]
    flow: dict[str, Any] = field(default_factory=dict)


def fan_out(
    config: JobConfig,
    location: RunLocation,
    shards: Sequence[Shard],
    todo: Sequence[tuple[int, Shard]],
    out: TextIO,
    heartbeat: Callable[[], None] = lambda: None,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
    duplicates: frozenset[str] = frozenset(),
    *,
    batch_round: int | None = None,
) -> FanOutResult:
    """Run `todo` ((shard number, shard) pairs out of `shards`) on the workers, with progress.
    `duplicates`: the shards with later occurrences staged by `jobs.engine.lookahead`.

    Stops early (cancelling the workers) at the first report with a fatal judge error. Raises
    `RunFailed` naming the shard when a shard fails for good. `batch_round`: the shards' pass
    of that round in batch mode (jobs.engine.batch), which sends nothing itself unless
    re-asks go online.
    """
    if not todo:
        return FanOutResult([])
    import ray

    slots = _slots_in_file(shards)
    governed = config.judge.model != "lexical" and (
        batch_round is None or config.judge.batch.reask == "online"
    )
    coordinator = coordinator_actor_class().remote(
        [(n, s, slots[s.shard_id]) for n, s in todo], _governor(config) if governed else None
    )
    context = ShardContext(
        config=config,
        staging=location.staging,
        coordinator=coordinator,
        governed=governed,
        api_key=config.judge.api_key(),
        tables=tables,
        duplicates=duplicates,
        batch_round=batch_round,
    )
    task = ray.remote(run_worker).options(
        num_cpus=config.ray.num_cpus_per_task,
        max_retries=config.ray.max_task_retries,
        scheduling_strategy="SPREAD",
    )
    workers = {
        task.remote(context, f"worker-{n}", SHARDS_PER_WORKER): f"worker-{n}"
        for n in range(min(config.ray.workers, len(todo)))
    }
    expected = ExpectedItems(
        {shard.shard_id: shard.end - shard.start for _, shard in todo},
        exact=all(shard.kind == "rows" for _, shard in todo),
    )
    line = ProgressLine(expected.total, out=out)
    result = FanOutResult([])
    counts: dict[str, int] = {}
    running = dict(workers)
    failure: str | None = None
    try:
        while True:
            ended, _ = ray.wait(list(running), num_returns=len(running), timeout=_DRAW_EVERY_S)
            news, counts = ray.get(coordinator.poll.remote())
            for report in news.reports:
                result.reports.append(report)
                expected.shard_done(report.shard_id, report.items)
                line.set_total(expected.total)
            # A failed shard stops the board handing out shards; the shards in progress finish
            # and stay staged for the rerun. A fatal judge error stops everything at once.
            failure = failure or news.failure
            if any(report.fatal for report in news.reports):
                return result
            for ref in ended:
                worker = running.pop(ref)
                try:
                    ray.get(ref)
                except Exception as exc:  # the worker died more often than Ray retries
                    held = ray.get(coordinator.held_by.remote(worker))
                    what = f"shard {held[0]}" if held else worker
                    raise RunFailed(
                        _failed(f"{what} failed: {_root_cause(exc)}", location)
                    ) from None
            heartbeat()
            line.update(counts, len(result.reports), len(todo))
            if not running:
                break
        if failure is not None:
            raise RunFailed(_failed(failure, location))
    finally:
        line.close(counts, len(result.reports), len(todo))
        for ref in running:
            ray.cancel(ref)
        with contextlib.suppress(Exception):
            result.flow = ray.get(coordinator.flow.remote(), timeout=10)
        ray.kill(coordinator)
    return result


def _failed(message: str, location: RunLocation) -> str:
    return (
        f"{message}. Finished shards are kept: rerun with --set run.id={location.run_id} to resume."
    )


def _governor(config: JobConfig) -> RunGovernor:
    limits = config.rate_limit
    return make_governor(
        requests_per_minute=limits.requests_per_minute,
        tokens_per_minute=limits.tokens_per_minute,
        headroom=limits.headroom,
        budget=factory.budget_settings(config),
    )


def _slots_in_file(shards: Sequence[Shard]) -> dict[str, int]:
    """Each shard's 0-based position among the shards of its input file."""
    slots: dict[str, int] = {}
    per_file: dict[int, int] = {}
    for shard in shards:
        slots[shard.shard_id] = per_file.get(shard.file_index, 0)
        per_file[shard.file_index] = slots[shard.shard_id] + 1
    return slots


def _root_cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None:
        # The task's own exception: keep all of its message (its first line names the file or
        # URL; pyarrow's messages continue on further lines).
        text = " ".join(part.strip() for part in str(cause).strip().splitlines())
        return text or type(cause).__name__
    lines = str(exc).strip().splitlines()  # a Ray error with a traceback: its last line
    return lines[-1] if lines else type(exc).__name__
