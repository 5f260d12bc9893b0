"""Fan-out: run a run's shards on `ray.workers` long-lived worker tasks around one
coordinator actor, draw the progress line, and stop at the first fatal judge error; a shard
that fails for good fails the run naming it, and staged shards are kept for a rerun."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, cast

from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import FlowSnapshot
from jobs.engine.control.governor import RunGovernor
from jobs.engine.control.progress import ProgressLine
from jobs.engine.control.shard_board import coordinator_actor_class
from jobs.engine.failures import RunFailed, rerun_hint
from jobs.engine.messages import BatchPass, CoordinatorHandle, ShardContext, ShardReport
from jobs.engine.plan import RunPlan
from jobs.engine.ray_runtime import ray_task
from jobs.engine.shards.worker import run_worker
from jobs.inputs import Shard
from scorer_core.errors import FatalJudgeError, one_line

__all__ = ["SHARDS_PER_WORKER", "RunFailed", "fan_out", "raise_if_fatal"]

_DRAW_EVERY_S = 0.5
"""How often the driver refreshes the progress line and the lock's heartbeat."""
SHARDS_PER_WORKER = 2
"""Shards a worker works on at once (its lanes): the current one and the next, read ahead."""


def raise_if_fatal(reports: Sequence[ShardReport]) -> None:
    """`FatalJudgeError` naming the first fatal judge error among `reports`, if any."""
    fatal = next((report.fatal for report in reports if report.fatal), None)
    if fatal:
        raise FatalJudgeError(f"the judge cannot work, run stopped: {fatal}")


def fan_out(
    plan: RunPlan,
    todo: Sequence[tuple[int, Shard]],
    *,
    heartbeat: Callable[[], None] = lambda: None,
    batch_pass: BatchPass | None = None,
) -> tuple[list[ShardReport], FlowSnapshot | None]:
    """Run `todo` ((shard number, shard) pairs) on the workers, with progress: the shards'
    reports and the run's flow. Stops at the first fatal judge error; `RunFailed` names a shard
    that failed for good. `batch_pass`: a batch round's pass (sends nothing unless it asks
    online)."""
    if not todo:
        return [], None
    import ray

    asks_online = batch_pass is None or batch_pass.asks_online
    governed = not plan.parts.capabilities.offline and asks_online
    coordinator = _start_coordinator(plan, todo, governed)
    limits = plan.rate_limit
    context = ShardContext(
        parts=plan.parts,
        output=plan.output,
        staging=plan.location.staging,
        coordinator=coordinator,
        governed=governed,
        paced=bool(limits.requests_per_minute or limits.tokens_per_minute),
        attempts=plan.ray.max_task_retries + 1,
        tables=plan.tables,
        needs=plan.needs,
        sample=plan.sample,
        run_id=plan.location.run_id,
        batch_pass=batch_pass,
    )
    task = ray_task(plan.ray, run_worker)
    names = [f"worker-{number}" for number in range(min(plan.ray.workers, len(todo)))]
    workers = {task.remote(context, name, SHARDS_PER_WORKER): name for name in names}
    sizes = {shard.shard_id: shard.end - shard.start for _, shard in todo}
    line = ProgressLine(sizes, exact=all(shard.kind == "rows" for _, shard in todo))
    try:
        reports = _watch(coordinator, workers, plan.location, heartbeat, line)
    finally:
        line.draw(final=True)
        for ref in workers:
            ray.cancel(ref)
        flow = None
        with contextlib.suppress(Exception):
            flow = ray.get(coordinator.flow.remote(), timeout=10)
        ray.kill(cast(Any, coordinator))
    return reports, flow


def _start_coordinator(
    plan: RunPlan, todo: Sequence[tuple[int, Shard]], governed: bool
) -> CoordinatorHandle:
    """The run's board, on the driver's node: a worker node lost mid-run takes its workers
    (Ray retries them elsewhere), never the run's board and counters."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    governor = RunGovernor.for_limits(plan.rate_limit) if governed else None
    actor = coordinator_actor_class().options(scheduling_strategy=here)
    return cast(CoordinatorHandle, actor.remote(list(todo), governor, plan.needs.owners))


def _watch(
    coordinator: CoordinatorHandle,
    workers: dict[Any, str],
    location: RunLocation,
    heartbeat: Callable[[], None],
    line: ProgressLine,
) -> list[ShardReport]:
    """Poll the board until every worker ended (or a fatal judge error stops the run at once),
    drawing `line`: the shards' reports. The workers left stay in `workers`."""
    import ray

    reports: list[ShardReport] = []
    failure: str | None = None
    while workers:
        ended, _ = ray.wait(list(workers), num_returns=len(workers), timeout=_DRAW_EVERY_S)
        polled = ray.get(coordinator.poll.remote())
        line.counts = polled.counts
        for report in polled.reports:
            reports.append(report)
            line.shard_done(report.shard_id, report.items)
        # A failed shard stops the board handing out shards; the shards in progress finish
        # and stay staged for the rerun. A fatal judge error stops everything at once.
        failure = failure or polled.failure
        if any(report.fatal for report in polled.reports):
            return reports
        for ref in ended:
            worker = workers.pop(ref)
            try:
                ray.get(ref)
            except Exception as exc:  # it died more often than Ray retries: the run fails
                held = ray.get(coordinator.held_by.remote(worker))
                what = f"shard {held[0]}" if held else worker
                raise RunFailed(_failed(f"{what} failed: {_root_cause(exc)}", location)) from None
        heartbeat()
        line.draw()
    if failure is not None:
        raise RunFailed(_failed(failure, location))
    return reports


def _failed(message: str, location: RunLocation) -> str:
    return f"{message}. Finished shards are kept: {rerun_hint(location.run_id, 'resume')}."


def _root_cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None:  # the task's own exception
        return one_line(cause)
    lines = str(exc).strip().splitlines()  # a Ray error with a traceback: its last line
    return lines[-1] if lines else type(exc).__name__
