"""The driver: one scoring run end to end, `run_job(config, parts, location)`.

check -> plan -> lock -> look ahead -> fan out (or batch rounds) -> publish; docs/layout.md
draws it. Rerunning with the same `run.id` resumes: shards already staged are not judged again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from jobs.core.config import TRACES, JobConfig
from jobs.core.pricing import price_basis
from jobs.core.run_layout import RunLocation, StagingArea, manifests_glob, run_of
from jobs.core.run_manifest import FlowSnapshot, JudgeRecord, RunManifest
from jobs.core.schema import RunSchema
from jobs.core.storage import Store, open_store
from jobs.engine.clock import RunClock, Timings
from jobs.engine.failures import RunFailed, RunInterrupted, rerun_hint
from jobs.engine.fanout import fan_out, raise_if_fatal
from jobs.engine.guards import check_paths_apart
from jobs.engine.messages import ShardReport, StagedNeeds
from jobs.engine.pairs.lookahead import in_driver, look_ahead
from jobs.engine.parts import RunParts
from jobs.engine.plan import RunPlan
from jobs.engine.publish.aggregate import SummarySpec
from jobs.engine.publish.manifest_builder import (
    ManifestFacts,
    flow_metrics,
    judge_record,
    run_manifest,
    shards_by_node,
)
from jobs.engine.publish.publisher import Published, PublishSpec, publish_run
from jobs.engine.ray_runtime import alive_nodes, cluster_address, start_ray, stop_ray
from jobs.engine.run_lock import RunLock
from jobs.engine.shared_paths import check_shared_paths, run_paths
from jobs.inputs import Shard, inspect_input, list_input_files, plan_shards
from jobs.inputs.carry import check_segment_columns
from jobs.inputs.columns import check_every_file
from jobs.inputs.sampling import SamplePlan, plan_sample
from scorer_core.errors import ConfigError

logger = logging.getLogger(__name__)

__all__ = ["RunFailed", "RunInterrupted", "RunOutcome", "locate_run", "run_job"]


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """A finished run: its id and date, what was published, its shards and its time."""

    run_id: str
    run_date: dt.date
    published: Published
    shards_total: int
    shards_skipped: int
    seconds: float


@contextlib.contextmanager
def _signals_stop(run_id: str) -> Iterator[None]:
    """SIGINT and SIGTERM, whenever they come, shut Ray down and raise `RunInterrupted`."""
    terms: list[int] = []

    def terminate(signum: int, frame: object) -> None:
        terms.append(signum)  # Ray's waits re-raise a signal's exception as a new one
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminate) if main else None
    try:
        yield
    except (KeyboardInterrupt, SystemExit) as exc:
        # Ray's own SIGTERM handler, in place while ray.init runs, exits with the signal's number
        term = bool(terms) or getattr(exc, "code", None) == signal.SIGTERM
        if isinstance(exc, SystemExit) and not term:
            raise
        stop_ray()
        raise RunInterrupted(run_id, signal.SIGTERM if term else signal.SIGINT) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def resolve_location(
    config: JobConfig, store: Store | None = None, today: dt.date | None = None
) -> RunLocation:
    """The run's id and date: the config's, else a fresh id and today (UTC). With `store`, the
    id names one run there: a published one is refused (`ConfigError`, on any date), and a
    resumed run keeps the date it started with."""
    run_date = config.run.date or today or dt.datetime.now(dt.UTC).date()
    run_id = config.run.id or f"{run_date:%Y%m%d}-{uuid.uuid4().hex[:8]}"
    if store is None:
        return RunLocation(run_id=run_id, run_date=run_date)
    for path in store.list(store.join(manifests_glob(run_id))):
        published = run_of(path)
        if published is not None:
            raise ConfigError(
                f"run.id: run {run_id} is already published, for run.date "
                f"{published.run_date} ({store.url(path)}); a run id names one run: choose "
                "another run.id"
            )
    date_file = StagingArea.of_run(store, run_id).date_file
    if not store.exists(date_file):
        return RunLocation(run_id=run_id, run_date=run_date)
    started = dt.date.fromisoformat(store.read_bytes(date_file).decode())
    if config.run.date not in (None, started):
        raise ConfigError(
            f"run.date: run {run_id} started as run.date {started}, not {config.run.date}; "
            "resume it with that date (or none), or choose another run.id"
        )
    return RunLocation(run_id=run_id, run_date=started)


def locate_run(config: JobConfig, clock: RunClock) -> RunLocation:
    """The id and date of `config`'s run in its output store (`resolve_location`), today
    being `clock`'s: a fresh run, or the unfinished one it resumes."""
    store = open_store(config.output.path, config.output.storage_options, create=False)
    today = dt.datetime.fromtimestamp(clock.wall(), dt.UTC).date()
    return resolve_location(config, store, today)


def run_job(
    config: JobConfig, parts: RunParts, location: RunLocation, *, clock: RunClock | None = None
) -> RunOutcome:
    """Run (or resume) one scoring run end to end.

    Args:
        config: the run's job config; the engine reads its sections but `judge`, whose
            decisions come in `parts`.
        parts: what the config's run is made of (`jobs.run.factory.run_parts`).
        location: the run's id and date (`locate_run`).
        clock: batch mode's waiting and pace, and the wall clock of judge.batch.deadline;
            tests inject them.

    Returns:
        Where the results are, and how the run went. Raises `RunFailed` (staged shards are
        kept: the same run id resumes), `FatalJudgeError`, `RunInterrupted` on SIGINT or
        SIGTERM, or in batch mode `BatchesStillRunning` when judge.batch.max_wait_s cut the
        wait short.
    """
    store = open_store(config.output.path, config.output.storage_options, create=False)
    with _signals_stop(location.run_id):
        return _run(config, parts, location, store, clock or RunClock())


def _run(
    config: JobConfig, parts: RunParts, location: RunLocation, store: Store, clock: RunClock
) -> RunOutcome:
    started = time.monotonic()
    timings = Timings()
    plan = _plan(config, parts, location, store, timings)
    done = plan.staging.staged_shards()
    with RunLock(store=plan.store, path=plan.staging.lock_file) as lock:
        todo = [
            (number, shard)
            for number, shard in enumerate(plan.shards)
            if shard.shard_id not in done
        ]
        resuming = len(plan.shards) - len(todo)
        logger.info(_first_line(plan, resuming))
        plan = _look_ahead(plan, todo, timings, lock.confirm)
        if not store.exists(plan.staging.date_file):
            store.write_bytes_atomic(plan.staging.date_file, location.run_date.isoformat().encode())
        reports, flow, judge = _judge(plan, todo, lock.heartbeat, timings, clock)
        _check_all_staged(plan, reports)
        facts = ManifestFacts(
            shards=len(plan.shards),
            shards_reused=resuming,
            seconds=time.monotonic() - started,
            timings=timings.rounded(),
            flow=flow,
            judge=judge,
            nodes=shards_by_node(reports),
            traces=plan.traces,
        )
        manifest = run_manifest(config, parts.model, location, facts)
        published = _publish(config, plan, manifest)
    return RunOutcome(
        run_id=location.run_id,
        run_date=location.run_date,
        published=published,
        shards_total=len(plan.shards),
        shards_skipped=resuming,
        seconds=time.monotonic() - started,
    )


def _first_line(plan: RunPlan, resuming: int) -> str:
    """The run's first line in the log: its shards, those a resumed run has done, its judge."""
    line = f"run {plan.location.run_id}: {plan.files} file(s), {len(plan.shards)} shard(s)"
    if resuming:
        line += f", {resuming} already done (resuming)"
    return f"{line}; judge {plan.parts.model}"


def _plan(
    config: JobConfig, parts: RunParts, location: RunLocation, store: Store, timings: Timings
) -> RunPlan:
    """Check the input, join the cluster if there is one, and plan the shards. Fails before
    anything is judged: a missing column, a path other nodes cannot reach."""
    started = time.monotonic()
    check_paths_apart(config)  # before anything starts (assembling traces starts Ray)
    traces = None
    if config.input.format in TRACES:
        # traces are assembled into the items the reader reads (docs/traces.md)
        from jobs.engine.trace_staging import stage_traces

        traces = stage_traces(config, parts, store, location)
    reader = parts.reader
    files = list_input_files(reader.spec)
    check_every_file(reader.spec, files)  # every file's format and columns, not just the first's
    # the types of the carried columns, decided once so that every shard writes the same ones
    tables = RunSchema(inspect_input(reader.spec, files).carried)
    check_segment_columns(config.summary.by, tables.carried)
    joined = _join_cluster(config, parts)
    shards = plan_shards(reader.spec, files, config.ray.shard_size)
    sample = _sample(config, parts, shards, tables)
    # the judge canary, judged fresh before the items: a broken judge or label file stops here
    canary = parts.canary.judge() if parts.canary is not None else ()
    timings.add("plan", time.monotonic() - started - joined)
    timings.add("ray_start", joined)
    return RunPlan(
        parts=parts,
        location=location,
        store=store,
        output=config.output,
        ray=config.ray,
        rate_limit=config.rate_limit,
        shards=shards,
        tables=tables,
        files=len(files),
        traces=traces,
        sample=sample,
        canary=canary,
    )


def _join_cluster(config: JobConfig, parts: RunParts) -> float:
    """Join the cluster, if there is one: every node must reach the paths the workers use.
    The seconds it took (0 without a cluster)."""
    if not cluster_address(config.ray):
        return 0.0
    started = time.monotonic()
    start_ray(config.ray)
    check_shared_paths(run_paths(config, parts.cache), alive_nodes(), config.ray)
    return time.monotonic() - started


def _sample(
    config: JobConfig, parts: RunParts, shards: Sequence[Shard], tables: RunSchema
) -> SamplePlan | None:
    """A sampled run's plan, from every row's id and stratum; None when every row is judged."""
    if not config.sample.enabled:
        return None
    read = functools.partial(parts.reader.read, carried=tables.carried)
    sample = plan_sample(config.sample, shards, read, tables.carried, config.summary.by)
    logger.info(f"sample: {sample.describe()}")
    return sample


def _look_ahead(
    plan: RunPlan,
    todo: list[tuple[int, Shard]],
    timings: Timings,
    confirm_lock: Callable[[], None],
) -> RunPlan:
    """Start Ray when there is work, and look ahead (`jobs.engine.pairs.lookahead`; a small run's
    in the driver, while Ray starts) for repeated ids or the verdict cache: the plan with it.
    The lock is confirmed first, while Ray starts: the look-ahead writes to the staging area."""
    if not todo:
        confirm_lock()
        return plan
    started = time.monotonic()
    # a batch round's requests are fixed per pass: no shard waits for another's replies
    look = functools.partial(look_ahead, plan, todo, shared=plan.parts.batch is None)
    wanted = plan.parts.find_duplicates_first or plan.parts.cache is not None
    early = look if wanted and in_driver(plan, plan.shards) else None
    with ThreadPoolExecutor(1) as pool:
        confirmed = pool.submit(_confirm_then, confirm_lock, early)
        start_ray(plan.ray)
        ready = time.monotonic()
        timings.add("ray_start", ready - started)
        needs = confirmed.result()
        if wanted:
            plan = replace(plan, needs=look() if needs is None else needs)
            timings.add("lookahead", time.monotonic() - ready)  # beyond Ray's start
    return plan


def _confirm_then(
    confirm: Callable[[], None], look: Callable[[], StagedNeeds] | None
) -> StagedNeeds | None:
    confirm()
    return look() if look else None


def _judge(
    plan: RunPlan,
    todo: list[tuple[int, Shard]],
    heartbeat: Callable[[], None],
    timings: Timings,
    clock: RunClock,
) -> tuple[list[ShardReport], FlowSnapshot | None, JudgeRecord]:
    """Judge the shards left, online on the workers or in batch mode's rounds (`clock`: their
    sleep, monotonic clock and wall clock): the shards' reports, the flow, the judge."""
    if plan.parts.batch is None:
        with timings.timed("fan_out"):
            reports, flow = fan_out(plan, todo, heartbeat=heartbeat)
        return reports, flow, judge_record(reports)
    from jobs.engine.batch_rounds import BatchRounds

    rounds = BatchRounds(plan, heartbeat=heartbeat, clock=clock, timings=timings)  # Ray is up
    facts = rounds.run()
    price = price_basis(plan.parts.model, batch=True)
    return rounds.reports, None, judge_record(rounds.reports, facts, price)


def _publish(config: JobConfig, plan: RunPlan, manifest: RunManifest) -> Published:
    """Publish the staged shards (and remove the staging area, lock file included)."""
    summary = SummarySpec(
        model=plan.parts.model,
        scale=plan.parts.scoring.scale,
        segment_by=config.summary.by,
        batch_price=plan.parts.batch is not None,
        sample=plan.sample,
    )
    spec = PublishSpec(
        summary=summary,
        tables=plan.tables,
        flow=flow_metrics(manifest.flow),
        canary=plan.canary,
        max_error_rate=config.run.max_error_rate,
    )
    return publish_run(plan.store, plan.location, manifest, spec)


def _check_all_staged(plan: RunPlan, reports: list[ShardReport]) -> None:
    """Raise unless every shard is staged: `FatalJudgeError` when the judge cannot work,
    else `RunFailed` naming the first shard without results. Nothing is published then."""
    raise_if_fatal(reports)
    staged = plan.staging.staged_shards()
    missing = [shard.shard_id for shard in plan.shards if shard.shard_id not in staged]
    if missing:
        raise RunFailed(
            f"{len(missing)} shard(s) have no results (first: {missing[0]}); nothing was "
            f"published: {rerun_hint(plan.location.run_id, 'finish them')}."
        )
