"""Fan-out: run a run's shards on `ray.workers` long-lived worker tasks around one
coordinator actor, draw the progress line, and stop at the first fatal judge error; a shard
that fails for good fails the run naming it, and staged shards are kept for a rerun."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.engine.control.budget import budget_settings
from jobs.engine.control.coordinator import coordinator_actor_class, make_governor
from jobs.engine.control.governor import RunGovernor
from jobs.engine.control.progress import ExpectedItems, ProgressLine
from jobs.engine.messages import CoordinatorHandle, FlowFacts, ShardContext, ShardReport
from jobs.engine.plan import RunPlan
from jobs.engine.shards.worker import run_worker
from jobs.inputs import Shard
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
    flow: FlowFacts | None = None


def fan_out(
    plan: RunPlan,
    todo: Sequence[tuple[int, Shard]],
    *,
    heartbeat: Callable[[], None] = lambda: None,
    batch_round: int | None = None,
) -> FanOutResult:
    """Run `todo` ((shard number, shard) pairs) on the workers, with progress.

    Stops early (cancelling the workers) at the first report with a fatal judge error. Raises
    `RunFailed` naming the shard when a shard fails for good. `batch_round`: the shards' pass
    of that round in batch mode (jobs.engine.batch), which sends nothing itself unless
    re-asks go online.
    """
    if not todo:
        return FanOutResult([])
    import ray

    config = plan.config
    governed = not plan.parts.capabilities.offline and (
        batch_round is None or config.judge.batch.reask == "online"
    )
    coordinator = _start_coordinator(plan, todo, governed)
    context = ShardContext(
        config=config,
        parts=plan.parts,
        staging=plan.location.staging,
        coordinator=coordinator,
        governed=governed,
        api_key=config.judge.api_key(),
        tables=plan.tables,
        looked=plan.looked,
        run_id=plan.location.run_id,
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
    watch = _Watch(coordinator, workers, todo, plan.location)
    try:
        watch.until_done(heartbeat)
    finally:
        watch.close()
    return watch.result


def _start_coordinator(
    plan: RunPlan, todo: Sequence[tuple[int, Shard]], governed: bool
) -> CoordinatorHandle:
    """The run's coordinator actor (board, counters, governor), on the driver's node: a worker
    node lost mid-run takes its workers (Ray retries them elsewhere), never the run's board
    and counters."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    handle: CoordinatorHandle = (
        coordinator_actor_class()
        .options(scheduling_strategy=here)
        .remote(
            list(todo),
            _governor(plan.config) if governed else None,
            plan.looked.owners,
        )
    )
    return handle


class _Watch:
    """The driver's side of a fan-out: polls the board, draws progress, notices failures."""

    def __init__(
        self,
        coordinator: CoordinatorHandle,
        workers: dict[Any, str],
        todo: Sequence[tuple[int, Shard]],
        location: RunLocation,
    ) -> None:
        self._coordinator = coordinator
        self._running = dict(workers)
        self._todo = len(todo)
        self._location = location
        self._expected = ExpectedItems(
            {shard.shard_id: shard.end - shard.start for _, shard in todo},
            exact=all(shard.kind == "rows" for _, shard in todo),
        )
        self._line = ProgressLine(self._expected.total)
        self._counts: dict[str, int] = {}
        self._failure: str | None = None
        self.result = FanOutResult([])

    def until_done(self, heartbeat: Callable[[], None]) -> None:
        """Poll until every worker ended (or a fatal judge error stops the run at once)."""
        import ray

        while True:
            running = list(self._running)
            ended, _ = ray.wait(running, num_returns=len(running), timeout=_DRAW_EVERY_S)
            if self._take_news():
                return
            for ref in ended:
                self._check_ended(ref)
            heartbeat()
            self._line.update(self._counts, len(self.result.reports), self._todo)
            if not self._running:
                break
        if self._failure is not None:
            raise RunFailed(_failed(self._failure, self._location))

    def _take_news(self) -> bool:
        """Take the board's news; True when a report says the judge cannot work."""
        import ray

        news, self._counts = ray.get(self._coordinator.poll.remote())
        for report in news.reports:
            self.result.reports.append(report)
            self._expected.shard_done(report.shard_id, report.items)
            self._line.set_total(self._expected.total)
        # A failed shard stops the board handing out shards; the shards in progress finish
        # and stay staged for the rerun. A fatal judge error stops everything at once.
        self._failure = self._failure or news.failure
        return any(report.fatal for report in news.reports)

    def _check_ended(self, ref: Any) -> None:
        """A worker ended: fine, or it died more often than Ray retries (the run fails)."""
        import ray

        worker = self._running.pop(ref)
        try:
            ray.get(ref)
        except Exception as exc:
            held = ray.get(self._coordinator.held_by.remote(worker))
            what = f"shard {held[0]}" if held else worker
            raise RunFailed(_failed(f"{what} failed: {_root_cause(exc)}", self._location)) from None

    def close(self) -> None:
        """Draw the last progress line, cancel the workers left, keep the flow's snapshot."""
        import ray

        self._line.update(self._counts, len(self.result.reports), self._todo, final=True)
        for ref in self._running:
            ray.cancel(ref)
        with contextlib.suppress(Exception):
            self.result.flow = ray.get(self._coordinator.flow.remote(), timeout=10)
        ray.kill(cast(Any, self._coordinator))


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
        budget=budget_settings(config.rate_limit),
    )


def _root_cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None:
        # The task's own exception: keep all of its message (its first line names the file or
        # URL; pyarrow's messages continue on further lines).
        text = " ".join(part.strip() for part in str(cause).strip().splitlines())
        return text or type(cause).__name__
    lines = str(exc).strip().splitlines()  # a Ray error with a traceback: its last line
    return lines[-1] if lines else type(exc).__name__
