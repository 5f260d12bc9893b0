"""The driver: one scoring run end to end, `run_job(config, parts)`.

check -> plan -> lease -> look ahead -> fan out (or batch rounds) -> publish; docs/layout.md
draws it. Rerunning with the same `run.id` resumes: shards already staged are not judged again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from jobs.core.config import TRACES, JobConfig
from jobs.core.pricing import price_basis
from jobs.core.run_layout import RunLocation, StagingArea, manifests_glob, published_glob, run_of
from jobs.core.run_manifest import FlowSnapshot, JudgeRecord, RunManifest
from jobs.core.schema import RunSchema
from jobs.core.storage import Store, open_store
from jobs.engine.fanout import RunFailed as RunFailed
from jobs.engine.fanout import fan_out, raise_if_fatal
from jobs.engine.guards import check_judge_settings, check_paths_apart
from jobs.engine.lease import RunLease
from jobs.engine.messages import Looked, ShardReport
from jobs.engine.pairs.lookahead import in_driver, look_ahead
from jobs.engine.parts import RunParts
from jobs.engine.plan import RunPlan
from jobs.engine.publish.manifest_builder import (
    flow_metrics,
    judge_record,
    run_manifest,
    shards_by_node,
)
from jobs.engine.publish.publisher import Published, publish_run
from jobs.engine.ray_runtime import alive_nodes, cluster_address, start_ray, stop_ray
from jobs.engine.shared_paths import check_shared_paths
from jobs.inputs import Shard, inspect_input, list_input_files, plan_shards
from jobs.inputs.carry import check_segment_columns
from jobs.inputs.columns import check_every_file
from jobs.inputs.records import ItemReader
from jobs.inputs.sampling import SamplePlan, plan_sample
from scorer_core.errors import ConfigError
from scorer_core.protocols import Sleeper
from scorer_core.retry import real_sleep

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutcome:
    """A finished run: its id and date, what was published, its shards and its time."""

    run_id: str
    run_date: dt.date
    published: Published
    shards_total: int
    shards_skipped: int
    seconds: float


class RunInterrupted(Exception):
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM: Ray is shut down, the staged shards are
    kept and the same run id resumes; `exit_code` is the shell's, 128 + the signal."""

    def __init__(self, run_id: str, signum: int) -> None:
        super().__init__(
            f"run {run_id} stopped by {signal.Signals(signum).name}; the shards staged so far "
            f"are kept: rerun with --set run.id={run_id} to resume"
        )
        self.exit_code = 128 + signum


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
        if (published := run_of(path)) is not None:
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


def run_job(
    config: JobConfig,
    parts: RunParts,
    *,
    sleep: Sleeper = real_sleep,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> RunOutcome:
    """Run (or resume) one scoring run end to end.

    Args:
        config: the run's job config.
        parts: what the config's run is made of (`jobs.run.factory.run_parts`).
        sleep, clock, wall_clock: batch mode's waiting, pace and judge.batch.deadline (epoch
            seconds); tests inject them.

    Returns:
        Where the results are, and how the run went. Raises `RunFailed` (staged shards are
        kept: the same run id resumes), `FatalJudgeError`, `RunInterrupted` on SIGINT or
        SIGTERM, or in batch mode `BatchesStillRunning` when judge.batch.max_wait_s cut the
        wait short.
    """
    store = open_store(config.output.path, config.output.storage_options, create=False)
    today = dt.datetime.fromtimestamp(wall_clock(), dt.UTC).date()
    location = resolve_location(config, store, today)
    with _signals_stop(location.run_id):
        return _run(config, parts, location, store, (sleep, clock, wall_clock))


def _run(
    config: JobConfig,
    parts: RunParts,
    location: RunLocation,
    store: Store,
    time_of: tuple[Sleeper, Callable[[], float], Callable[[], float]],
) -> RunOutcome:
    started = time.monotonic()
    plan, timings = _plan(config, parts, location, store)
    done = plan.staging.staged_shards()
    with RunLease(plan.store, plan.staging.lease) as lease:
        todo = [(n, s) for n, s in enumerate(plan.shards) if s.shard_id not in done]
        resuming = len(plan.shards) - len(todo)
        logger.info(
            f"run {location.run_id}: {plan.files} file(s), {len(plan.shards)} shard(s)"
            + (f", {resuming} already done (resuming)" if resuming else "")
            + f"; judge {config.judge.model}"
        )
        plan = _look_ahead(plan, todo, timings, lease.confirm)
        if not store.exists(plan.staging.date_file):
            store.write_bytes_atomic(plan.staging.date_file, location.run_date.isoformat().encode())
        reports, flow, judge = _judge(plan, todo, lease.heartbeat, timings, time_of)
        _check_all_staged(plan, reports)
        manifest = run_manifest(
            plan.source or config,
            location,
            shards=len(plan.shards),
            shards_reused=resuming,
            seconds=time.monotonic() - started,
            timings=timings,
            flow=flow,
            judge=judge,
            nodes=shards_by_node(reports),
            traces=plan.traces,
        )
        published = _publish(plan, manifest)
    return RunOutcome(
        run_id=location.run_id,
        run_date=location.run_date,
        published=published,
        shards_total=len(plan.shards),
        shards_skipped=resuming,
        seconds=time.monotonic() - started,
    )


def _plan(
    config: JobConfig, parts: RunParts, location: RunLocation, store: Store
) -> tuple[RunPlan, dict[str, float]]:
    """Check the input, join the cluster if there is one, and plan the shards. Fails before
    anything is judged: a missing column, a path other nodes cannot reach."""
    started = time.monotonic()
    # the judge and the paths before anything starts (assembling traces starts Ray)
    check_judge_settings(config)
    check_paths_apart(config)
    source, traces = config, None
    if config.input.format in TRACES:
        # traces are assembled into item Parquet first, then read like any input (docs/traces.md)
        from jobs.engine.trace_staging import stage_traces

        config, traces = stage_traces(config, store, location)
        parts = dataclasses.replace(parts, reader=ItemReader.for_config(config))
    reader = RunPlan(config, parts, location, store, ()).reader
    spec = reader.spec
    files = list_input_files(spec)
    check_every_file(spec, files)  # every file's format and columns, not just the first's
    # the types of the carried columns, decided once so that every shard writes the same ones
    tables = RunSchema(inspect_input(spec, files).carried)
    check_segment_columns(config.summary.by, tables.carried)
    # join the cluster, if there is one: every node must reach the paths the workers use
    joined = 0.0
    if cluster_address(config):
        start_ray(config)
        check_shared_paths(config, alive_nodes())
        joined = time.monotonic() - started
    shards = plan_shards(spec, files, config.ray.shard_size)
    parts, sample = _sample(config, parts, reader, shards, tables)
    # the judge canary, judged fresh before the items: a broken judge or label file stops here
    canary = parts.canary.judge() if parts.canary is not None else ()
    plan = RunPlan(
        config,
        parts,
        location,
        store,
        shards,
        tables,
        files=len(files),
        source=source if traces is not None else None,
        traces=traces,
        sample=sample,
        canary=canary,
    )
    return plan, {"plan": time.monotonic() - started - joined, "ray_start": joined}


def _sample(
    config: JobConfig,
    parts: RunParts,
    reader: ItemReader,
    shards: Sequence[Shard],
    tables: RunSchema,
) -> tuple[RunParts, SamplePlan | None]:
    """A sampled run's plan, from every row's id and stratum, and the parts with a reader that
    carries it to the workers; the parts as they are otherwise."""
    if not config.sample.enabled:
        return parts, None
    read = functools.partial(reader.read, carried=tables.carried)
    sample = plan_sample(config.sample, shards, read, tables.carried, config.summary.by)
    logger.info(f"sample: {sample.describe()}")
    return dataclasses.replace(parts, reader=dataclasses.replace(reader, sample=sample)), sample


def _look_ahead(
    plan: RunPlan,
    todo: list[tuple[int, Shard]],
    timings: dict[str, float],
    confirm_lease: Callable[[], None],
) -> RunPlan:
    """Start Ray when there is work, and look ahead (`jobs.engine.pairs.lookahead`; a small run's
    in the driver, while Ray starts) for repeated ids or the verdict cache: the plan with it.
    The lease is confirmed first, while Ray starts: the look-ahead writes to the staging area."""
    if not todo:
        confirm_lease()
        return plan
    started = time.monotonic()
    # a batch round's requests are fixed per pass: no shard waits for another's replies
    look = functools.partial(look_ahead, plan, todo, shared=plan.config.judge.mode != "batch")
    wanted = plan.parts.find_duplicates_first or plan.parts.cache is not None
    early = look if wanted and in_driver(plan, plan.shards) else None
    with ThreadPoolExecutor(1) as pool:
        confirmed = pool.submit(_confirm_then, confirm_lease, early)
        start_ray(plan.config)
        ready = time.monotonic()
        timings["ray_start"] += ready - started
        looked = confirmed.result()
        if wanted:
            plan = dataclasses.replace(plan, looked=look() if looked is None else looked)
            timings["lookahead"] = time.monotonic() - ready  # what it took beyond Ray's start
    return plan


def _confirm_then(confirm: Callable[[], None], look: Callable[[], Looked] | None) -> Looked | None:
    confirm()
    return look() if look else None


def _judge(
    plan: RunPlan,
    todo: list[tuple[int, Shard]],
    heartbeat: Callable[[], None],
    timings: dict[str, float],
    time_of: tuple[Sleeper, Callable[[], float], Callable[[], float]],
) -> tuple[list[ShardReport], FlowSnapshot | None, JudgeRecord]:
    """Judge the shards left, online on the workers or in batch mode's rounds (`time_of`:
    their sleep, monotonic clock and wall clock): the shards' reports, the flow, the judge."""
    started = time.monotonic()
    if plan.config.judge.mode != "batch":
        reports, flow = fan_out(plan, todo, heartbeat=heartbeat)
        timings["fan_out"] = time.monotonic() - started
        return reports, flow, judge_record(reports)
    from jobs.engine.batch_rounds import BatchRounds

    sleep, clock, wall_clock = time_of
    rounds = BatchRounds(plan, heartbeat=heartbeat, sleep=sleep, clock=clock, wall_clock=wall_clock)
    facts = rounds.run()
    for phase, seconds in rounds.timings.items():  # Ray is up already
        timings[phase] = timings.get(phase, 0.0) + seconds
    price = price_basis(plan.config.judge.model, batch=True)
    return rounds.reports, None, judge_record(rounds.reports, facts, price)


def _publish(plan: RunPlan, manifest: RunManifest) -> Published:
    """Publish the staged shards (and remove the staging area, lease file included)."""
    config = plan.config
    return publish_run(
        plan.store,
        plan.location,
        model=config.judge.model,
        scale=config.scorer.scale,
        manifest=manifest,
        flow=flow_metrics(manifest.flow),
        tables=plan.tables,
        segment_by=config.summary.by,
        batch_price=config.judge.mode == "batch",
        sample=plan.sample,
        canary=plan.canary,
        max_error_rate=config.run.max_error_rate,
    )


def _check_all_staged(plan: RunPlan, reports: list[ShardReport]) -> None:
    """Raise unless every shard is staged: `FatalJudgeError` when the judge cannot work,
    else `RunFailed` naming the first shard without results. Nothing is published then."""
    raise_if_fatal(reports)
    staged = plan.staging.staged_shards()
    missing = [shard.shard_id for shard in plan.shards if shard.shard_id not in staged]
    if missing:
        raise RunFailed(
            f"{len(missing)} shard(s) have no results (first: {missing[0]}); nothing was "
            f"published. Rerun with --set run.id={plan.location.run_id} to finish them."
        )


def print_outcome(outcome: RunOutcome, store_root: str) -> None:
    """Print (stdout: the command's output) the summary table, where the results are, and a
    DuckDB query to read them."""
    from jobs.engine.publish.summary_table import format_summary_table

    published, errors = outcome.published, outcome.published.error_rate
    print(format_summary_table(published.summary, published.scores_url, published.judge))
    cut = published.truncated
    scores = published_glob("scores", outcome.run_id, outcome.run_date.isoformat())
    print(
        f"run {outcome.run_id} ({outcome.run_date}) done in {outcome.seconds:.1f}s; "
        f"{outcome.shards_skipped} of {outcome.shards_total} shard(s) reused; "
        f"duplicates {published.duplicates}\n"
        + (f"errors: {errors.describe()}\n" if errors and errors.errors else "")
        + (
            f"truncated: {cut:,} item(s) had contexts cut (input.max_context_chars or "
            "input.max_contexts; column truncated)\n"
            if cut
            else ""
        )
        + f'query it: .venv/bin/duckdb -c "select count(*), avg(score) from read_parquet('
        f"'{store_root.rstrip('/')}/{scores}', hive_partitioning=true)\"",
        flush=True,
    )


def exit_code_of(outcome: RunOutcome) -> int:
    """0, or 1 (saying why on stderr) when the run's errors exceed run.max_error_rate: the
    run is published all the same (docs/exit-codes.md)."""
    errors = outcome.published.error_rate
    if errors is None or not errors.exceeded:
        return 0
    print(f"error: run {outcome.run_id} published, but {errors.describe()}", file=sys.stderr)
    return 1
