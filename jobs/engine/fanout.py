"""Fan-out: run a run's shards as Ray tasks and wait for them.

At most `ray.workers` tasks are in flight; they share one rate limit (a limiter actor, when
the config sets one) and add to one progress actor, which the driver draws as a progress line.
A task that fails after its retries, or a shard that reports a fatal judge error, cancels the
tasks still running: nothing keeps judging (and paying) for a run that cannot finish. Shards
that finished are kept in staging, so a rerun with the same run id resumes.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from jobs.config import JobConfig
from jobs.engine.inputs import Shard
from jobs.engine.progress import ExpectedItems, ProgressLine, progress_actor_class
from jobs.engine.publish import RunLocation
from jobs.engine.worker import ShardContext, ShardReport, run_shard
from jobs.schema import RunSchema
from scorer_core.errors import CtxPrecError, StorageError

# How often the driver refreshes the progress line and the lease's heartbeat.
_DRAW_EVERY_S = 0.5


class RunFailed(CtxPrecError):
    """The run could not finish; staged shards are kept so the same run id resumes."""


def fan_out(
    config: JobConfig,
    location: RunLocation,
    shards: Sequence[Shard],
    todo: Sequence[tuple[int, Shard]],
    out: TextIO,
    heartbeat: Callable[[], None] = lambda: None,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> list[ShardReport]:
    """Run `todo` ((shard number, shard) pairs out of `shards`) as Ray tasks, with progress.

    Returns the reports of the shards that ran; stops early (cancelling the rest) at the first
    report with a fatal judge error. Raises `RunFailed` naming the shard when a task fails.
    """
    if not todo:
        return []
    import ray

    limiter, progress = _start_actors(config)
    context = ray.put(
        ShardContext(
            config=config,
            staging=location.staging,
            limiter=limiter,
            progress=progress,
            api_key=config.judge.api_key(),
            tables=tables,
        )
    )
    slots = _slots_in_file(shards)
    task = ray.remote(run_shard).options(
        num_cpus=config.ray.num_cpus_per_task,
        max_retries=config.ray.max_task_retries,
        retry_exceptions=[StorageError],
    )
    expected = ExpectedItems(
        {shard.shard_id: shard.end - shard.start for _, shard in todo},
        exact=all(shard.kind == "rows" for _, shard in todo),
    )
    line = ProgressLine(expected.total, out=out)
    queue = collections.deque(todo)
    pending: dict[Any, str] = {}
    reports: list[ShardReport] = []
    counts: dict[str, int] = {}
    last_draw = 0.0
    try:
        while queue or pending:
            while queue and len(pending) < config.ray.workers:
                number, shard = queue.popleft()
                pending[task.remote(shard, number, slots[shard.shard_id], context)] = shard.shard_id
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=_DRAW_EVERY_S)
            for ref in ready:
                shard_id = pending.pop(ref)
                try:
                    report: ShardReport = ray.get(ref)
                except Exception as exc:  # a task that failed after its retries
                    _cancel(pending)
                    raise RunFailed(
                        f"shard {shard_id} failed: "
                        f"{_root_cause(exc)}. Finished shards are kept: rerun with "
                        f"--set run.id={location.run_id} to resume."
                    ) from None
                reports.append(report)
                expected.shard_done(shard_id, report.items)
                line.set_total(expected.total)
                if report.fatal:
                    _cancel(pending)
                    return reports
            if time.monotonic() - last_draw >= _DRAW_EVERY_S:
                heartbeat()
                counts = ray.get(progress.snapshot.remote())
                line.update(counts, len(reports), len(todo))
                last_draw = time.monotonic()
        counts = ray.get(progress.snapshot.remote())
    finally:
        line.close(counts, len(reports), len(todo))
        for actor in (limiter, progress):
            if actor is not None:
                ray.kill(actor)
    return reports


def _start_actors(config: JobConfig) -> tuple[Any, Any]:
    """(limiter or None when the config sets no rate limit, progress counters)."""
    from jobs.engine.limiter import limiter_actor_class

    limits = config.rate_limit
    limiter = None
    if limits.requests_per_minute or limits.tokens_per_minute:
        limiter = limiter_actor_class().remote(
            requests_per_minute=limits.requests_per_minute,
            tokens_per_minute=limits.tokens_per_minute,
            headroom=limits.headroom,
        )
    return limiter, progress_actor_class().remote()


def _slots_in_file(shards: Sequence[Shard]) -> dict[str, int]:
    """Each shard's 0-based position among the shards of its input file."""
    slots: dict[str, int] = {}
    per_file: dict[int, int] = {}
    for shard in shards:
        slots[shard.shard_id] = per_file.get(shard.file_index, 0)
        per_file[shard.file_index] = slots[shard.shard_id] + 1
    return slots


def _cancel(pending: dict[Any, str]) -> None:
    import ray

    for ref in pending:
        ray.cancel(ref)


def _root_cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None:
        # The task's own exception: keep all of its message (its first line names the file or
        # URL; pyarrow's messages continue on further lines).
        text = " ".join(part.strip() for part in str(cause).strip().splitlines())
        return text or type(cause).__name__
    lines = str(exc).strip().splitlines()  # a Ray error with a traceback: its last line
    return lines[-1] if lines else type(exc).__name__
