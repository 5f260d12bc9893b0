"""The driver: one scoring run end to end, `run_job(config)`.

    check    config, API key variable, the judge's model and endpoint, output apart from the
             input, every input file's format and columns (jobs.guards), the types of the
             carried columns: a whole-run problem fails in seconds, before Ray and the first
             judge call, with a message naming its cause (exit 2); joining a cluster of
             several nodes, every path the workers use must be one all nodes reach
             (jobs.engine.shared_paths)
    plan     shards of about `ray.shard_size` items; the run's id and date
    lease    one driver at a time per run id (jobs.engine.lease), given back on every exit
    look     (an LLM judge) duplicate query ids across shards, so that they are not judged
             (jobs.engine.lookahead)
    fan out  the shards not yet staged run as Ray tasks (jobs.engine.fanout); in batch mode
             (judge.mode batch) rounds of passes and provider batches (jobs.engine.batch)
    publish  staged shards -> scores / verdicts / summary tables, all or nothing
             (jobs.engine.publish), with the manifest (jobs.engine.manifest)
    outcome  where the results are, for `print_outcome`; `run_command` exits 1 when the
             share of error items exceeds run.max_error_rate (jobs.error_rate)

Rerunning with the same `run.id` resumes: shards already staged are not judged again.
`ctxprec run` / `python -m jobs.context_precision` call `run_command`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from jobs import factory
from jobs.config import JobConfig, load_config
from jobs.engine.fanout import RunFailed, fan_out
from jobs.engine.lease import RunLease
from jobs.engine.lookahead import find_duplicates_first
from jobs.engine.manifest import flow_metrics, judge_facts_of_run, run_manifest, shards_by_node
from jobs.engine.publish import Published, RunLocation, publish_run, read_manifest
from jobs.engine.ray_runtime import alive_nodes, cluster_address, start_ray
from jobs.engine.shared_paths import check_shared_paths
from jobs.engine.worker import ShardReport
from jobs.guards import check_before_start
from jobs.inputs import inspect_input, list_input_files, plan_shards
from jobs.inputs.carry import check_segment_columns
from jobs.pricing import price_basis
from jobs.schema import RunSchema
from jobs.storage import Store, open_store
from scorer_core.errors import FatalJudgeError
from scorer_core.protocols import Sleeper
from scorer_core.retry import real_sleep

__all__ = ["RunFailed", "RunOutcome", "print_outcome", "resolve_location", "run_command", "run_job"]


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    run_date: dt.date
    published: Published
    shards_total: int
    shards_skipped: int
    seconds: float


def resolve_location(config: JobConfig) -> RunLocation:
    """The run's id and date: from the config, else today (UTC) and a fresh id."""
    run_date = config.run.date or dt.datetime.now(dt.UTC).date()
    run_id = config.run.id or f"{run_date:%Y%m%d}-{uuid.uuid4().hex[:8]}"
    return RunLocation(run_id=run_id, run_date=run_date)


def run_job(
    config: JobConfig,
    *,
    out: TextIO = sys.stderr,
    sleep: Sleeper = real_sleep,
    clock: Callable[[], float] = time.monotonic,
) -> RunOutcome:
    """Run (or resume) one scoring run end to end and return where its results are.

    `sleep` and `clock` pace batch mode's waiting (tests inject them). In batch mode a wait cut
    short by judge.batch.max_wait_s raises `BatchesStillRunning`; the same run id resumes."""
    started = time.monotonic()
    # check
    factory.check_api_key(config)
    location = resolve_location(config)
    store = open_store(config.output.path, config.output.storage_options)
    spec = factory.input_spec(config)
    files = list_input_files(spec)
    check_before_start(config, spec, files)  # judge, paths apart, every file's columns
    # the types of the carried columns, decided once so that every shard writes the same ones
    tables = RunSchema(inspect_input(spec, files).carried)
    check_segment_columns(config.summary.by, tables.carried)
    # join the cluster, if there is one: every node must reach the paths the workers use
    joined = 0.0
    if cluster_address(config):
        start_ray(config)
        check_shared_paths(config, alive_nodes())
        joined = time.monotonic() - started
    # plan
    shards = plan_shards(spec, files, config.ray.shard_size)
    if read_manifest(store, location) is not None:
        raise RunFailed(
            f"run {location.run_id} is already published at "
            f"{store.url(store.join(location.manifest))}; choose another run.id"
        )
    done = _staged_shard_ids(store, location)
    # lease
    with RunLease(store, store.join(location.staging, "LEASE.json")) as lease:
        todo = [(n, s) for n, s in enumerate(shards) if s.shard_id not in done]
        resuming = len(shards) - len(todo)
        out.write(
            f"run {location.run_id}: {len(files)} file(s), {len(shards)} shard(s)"
            + (f", {resuming} already done (resuming)" if resuming else "")
            + f"; judge {config.judge.model}\n"
        )
        # fan out
        planned = time.monotonic()
        if todo:
            start_ray(config)
        ray_ready = time.monotonic()
        duplicates: frozenset[str] = frozenset()
        if todo and factory.find_duplicates_first(config):
            duplicates = find_duplicates_first(config, store, location.staging, shards, out)
        looked = time.monotonic()
        timings = {
            "plan": planned - started - joined,
            "ray_start": ray_ready - planned + joined,
            "duplicates_first": looked - ray_ready,
        }
        batch_mode = config.judge.mode == "batch"
        judge_facts: dict[str, Any] = {}
        if batch_mode:
            from jobs.engine.batch.rounds import run_batches

            batched = run_batches(
                config,
                location,
                shards,
                store,
                out,
                heartbeat=lease.heartbeat,
                tables=tables,
                duplicates=duplicates,
                sleep=sleep,
                clock=clock,
            )
            reports, flow = batched.reports, {}
            # The rounds time their passes, waits and ingests (Ray is up already).
            for phase, seconds in batched.timings.items():
                timings[phase] = timings.get(phase, 0.0) + seconds
            judge_facts = {**batched.facts, "price": price_basis(config.judge.model, batch=True)}
        else:
            fanned = fan_out(
                config,
                location,
                shards,
                todo,
                out,
                heartbeat=lease.heartbeat,
                tables=tables,
                duplicates=duplicates,
            )
            reports, flow = fanned.reports, fanned.flow
            timings["fan_out"] = time.monotonic() - looked
        _check_all_staged(store, location, [s.shard_id for s in shards], reports)
        # publish (it removes the staging area, lease file included, once the run is out)
        manifest = run_manifest(
            config,
            location,
            shards=len(shards),
            shards_reused=resuming,
            seconds=time.monotonic() - started,
            timings=timings,
            flow=flow,
            judge={**judge_facts_of_run(reports), **judge_facts},
            nodes=shards_by_node(reports),
        )
        published = publish_run(
            store,
            location,
            model=config.judge.model,
            scale=config.scorer.scale,
            manifest=manifest,
            flow=flow_metrics(flow),
            tables=tables,
            segment_by=config.summary.by,
            batch_price=batch_mode,
            max_error_rate=config.run.max_error_rate,
        )
    return RunOutcome(
        run_id=location.run_id,
        run_date=location.run_date,
        published=published,
        shards_total=len(shards),
        shards_skipped=resuming,
        seconds=time.monotonic() - started,
    )


def _staged_shard_ids(store: Store, location: RunLocation) -> set[str]:
    """The shards whose results are in the run's staging area (their items file is written
    last, so its presence means the shard is complete)."""
    return {
        path.rsplit("/", 1)[-1].removesuffix(".parquet")
        for path in store.list(store.join(location.staging, "items"))
    }


def _check_all_staged(
    store: Store, location: RunLocation, shard_ids: list[str], reports: list[ShardReport]
) -> None:
    """Raise unless every shard is staged: `FatalJudgeError` when the judge cannot work,
    else `RunFailed` naming the first shard without results. Nothing is published then."""
    fatal = next((r.fatal for r in reports if r.fatal), None)
    if fatal:
        raise FatalJudgeError(f"the judge cannot work, run stopped: {fatal}")
    staged = _staged_shard_ids(store, location)
    missing = [shard_id for shard_id in shard_ids if shard_id not in staged]
    if missing:
        raise RunFailed(
            f"{len(missing)} shard(s) have no results (first: {missing[0]}); nothing was "
            f"published. Rerun with --set run.id={location.run_id} to finish them."
        )


def print_outcome(outcome: RunOutcome, store_root: str, out: TextIO = sys.stdout) -> None:
    """The summary table, where the results are, and a DuckDB query to read them."""
    from jobs.summary_table import format_summary_table

    where = outcome.published.scores_url
    summary = outcome.published.summary
    errors = outcome.published.error_rate
    out.write(format_summary_table(summary, where, outcome.published.judge) + "\n")
    out.write(
        f"run {outcome.run_id} ({outcome.run_date}) done in {outcome.seconds:.1f}s; "
        f"{outcome.shards_skipped} of {outcome.shards_total} shard(s) reused; "
        f"duplicates {outcome.published.duplicates}\n"
        + (f"errors: {errors.describe()}\n" if errors and errors.errors else "")
        + f'query it: .venv/bin/duckdb -c "select count(*), avg(score) from read_parquet('
        f"'{store_root.rstrip('/')}/scores/**/*.parquet', hive_partitioning=true)\"\n"
    )


def run_command(args: argparse.Namespace) -> int:
    """`ctxprec run --config FILE [--set KEY=VALUE ...]`: load the config, run, print."""
    from jobs.engine.batch.rounds import BatchesStillRunning

    config = load_config(args.config, args.set)
    try:
        outcome = run_job(config)
    except BatchesStillRunning as exc:
        # Not a failure: the evening half of a nightly batch run (README "Batch mode").
        print(f"batches submitted, not finished: {exc}", file=sys.stderr)
        return 0
    store = open_store(config.output.path, config.output.storage_options)
    print_outcome(outcome, store.url(store.root))
    return exit_code_of(outcome)


def exit_code_of(outcome: RunOutcome) -> int:
    """0, or 1 (saying why on stderr) when the run's errors exceed run.max_error_rate: the
    run is published all the same (docs/exit-codes.md)."""
    errors = outcome.published.error_rate
    if errors is None or not errors.exceeded:
        return 0
    print(f"error: run {outcome.run_id} published, but {errors.describe()}", file=sys.stderr)
    return 1
