"""The nightly job: `python -m jobs.context_precision --config configs/local.yaml`.

read -> plan shards -> fan out Ray tasks (bounded in flight, one shared rate limit) ->
aggregate verdicts with Polars -> publish Parquet atomically -> print the summary.

Everything that can be checked before the first judge call is checked first (config, API key
variable, input files and columns), so a whole-run problem fails in seconds with a message that
names its cause. Rerunning with the same `run.id` resumes: finished shards are skipped.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from jobs import factory
from jobs.config import JobConfig, add_run_arguments, load_config
from jobs.engine.inputs import check_schema, list_input_files, plan_shards
from jobs.engine.lease import RunLease
from jobs.engine.progress import ProgressLine, progress_actor_class
from jobs.engine.publish import Published, RunLocation, publish_run, read_manifest
from jobs.engine.storage import Store, open_store
from jobs.engine.worker import ShardContext, ShardReport, run_shard
from scorer_core.errors import CtxPrecError, FatalJudgeError, StorageError
from scorer_core.prompt import PROMPT_VERSION

# Keep a local Ray on loopback and litellm offline-safe, in this process and in the workers.
_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "RAY_USAGE_STATS_ENABLED": "0",
}


class RunFailed(CtxPrecError):
    """The run could not finish; staged shards are kept so the same run id resumes."""


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    run_date: dt.date
    published: Published
    shards_total: int
    shards_skipped: int
    seconds: float


def resolve_location(config: JobConfig) -> RunLocation:
    run_date = config.run.date or dt.datetime.now(dt.UTC).date()
    run_id = config.run.id or f"{run_date:%Y%m%d}-{uuid.uuid4().hex[:8]}"
    return RunLocation(run_id=run_id, run_date=run_date)


def start_ray(config: JobConfig) -> None:
    """Join the configured cluster (or the one a Ray Job runs in), else start Ray locally."""
    address = config.ray.address or os.environ.get("RAY_ADDRESS")
    if not address:
        # Ray reads these when it is imported: set them first.
        for key, value in _RAY_ENV.items():
            os.environ.setdefault(key, value)
    import ray

    if ray.is_initialized():
        return
    if address:
        # No runtime_env of our own: a Ray Job's runtime_env may set the same variables and Ray
        # refuses to merge conflicting ones. The workers need nothing from here (scorer_core
        # sets litellm's offline price map itself before importing it).
        ray.init(address=address, log_to_driver=True)
    else:
        for attempt in (1, 2):
            try:
                ray.init(
                    num_cpus=max(2, os.cpu_count() or 2),
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    runtime_env={"env_vars": {k: os.environ[k] for k in _RAY_ENV}},
                    log_to_driver=True,
                )
                return
            except Exception as exc:
                # On an overloaded machine a local node can miss Ray's start-up deadline; a
                # second try usually makes it. Anything else is not ours to retry.
                if attempt == 2 or "timed out during startup" not in str(exc):
                    raise
                ray.shutdown()


def _manifest_base(
    config: JobConfig,
    location: RunLocation,
    shards: int,
    started: float,
    timings: dict[str, float],
) -> dict[str, Any]:
    return {
        "run_id": location.run_id,
        "run_date": location.run_date.isoformat(),
        "judge_model": config.judge.model,
        "prompt_version": PROMPT_VERSION,
        "config": config.redacted(),
        "shards": shards,
        "seconds": round(time.monotonic() - started, 3),
        "timings_s": {k: round(v, 3) for k, v in timings.items()},
    }


def run_job(config: JobConfig, *, out: TextIO = sys.stderr) -> RunOutcome:
    """Run (or resume) one scoring run end to end and return where its results are."""
    started = time.monotonic()
    factory.check_api_key(config)
    location = resolve_location(config)
    store = open_store(config.output.path, config.output.storage_options)
    spec = factory.input_spec(config)
    files = list_input_files(spec)
    check_schema(spec, files)
    shards = plan_shards(spec, files, config.ray.shard_size)
    if read_manifest(store, location) is not None:
        raise RunFailed(
            f"run {location.run_id} is already published at "
            f"{store.url(store.join(location.manifest))}; choose another run.id"
        )
    done = {
        path.rsplit("/", 1)[-1].removesuffix(".parquet")
        for path in store.list(store.join(location.staging, "items"))
    }
    lease = RunLease(store, store.join(location.staging, "LEASE.json"))
    lease.acquire()
    todo = [(n, s) for n, s in enumerate(shards) if s.shard_id not in done]
    out.write(
        f"run {location.run_id}: {len(files)} file(s), {len(shards)} shard(s)"
        + (
            f", {len(shards) - len(todo)} already done (resuming)"
            if len(todo) < len(shards)
            else ""
        )
        + f"; judge {config.judge.model}\n"
    )
    try:
        planned = time.monotonic()
        if todo:
            start_ray(config)
        ray_ready = time.monotonic()
        reports = fan_out(config, location, shards, todo, out, heartbeat=lease.heartbeat)
        timings = {
            "plan": planned - started,
            "ray_start": ray_ready - planned,
            "fan_out": time.monotonic() - ray_ready,
        }
    except BaseException:
        lease.release()
        raise
    fatal = next((r.fatal for r in reports if r.fatal), None)
    if fatal:
        lease.release()
        raise FatalJudgeError(f"the judge cannot work, run stopped: {fatal}")
    finished = {
        path.rsplit("/", 1)[-1].removesuffix(".parquet")
        for path in store.list(store.join(location.staging, "items"))
    }
    missing = [s.shard_id for s in shards if s.shard_id not in finished]
    if missing:
        lease.release()
        raise RunFailed(
            f"{len(missing)} shard(s) have no results (first: {missing[0]}); nothing was "
            f"published. Rerun with --set run.id={location.run_id} to finish them."
        )
    manifest = _manifest_base(config, location, len(shards), started, timings)
    manifest["shards_reused"] = len(shards) - len(todo)
    try:
        published = publish_run(
            store, location, model=config.judge.model, scale=config.scorer.scale, manifest=manifest
        )
    except BaseException:
        # Staged shards stay; a rerun with the same run id publishes them without re-judging.
        lease.release()
        raise
    return RunOutcome(
        run_id=location.run_id,
        run_date=location.run_date,
        published=published,
        shards_total=len(shards),
        shards_skipped=len(shards) - len(todo),
        seconds=time.monotonic() - started,
    )


def fan_out(
    config: JobConfig,
    location: RunLocation,
    shards: Sequence[Any],
    todo: Sequence[tuple[int, Any]],
    out: TextIO,
    heartbeat: Callable[[], None] = lambda: None,
) -> list[ShardReport]:
    """Run the shards as Ray tasks, at most `ray.workers` at a time, with progress."""
    if not todo:
        return []
    import ray

    from jobs.engine.limiter import limiter_actor_class

    limits = config.rate_limit
    limiter = None
    if limits.requests_per_minute or limits.tokens_per_minute:
        limiter = limiter_actor_class().remote(
            requests_per_minute=limits.requests_per_minute,
            tokens_per_minute=limits.tokens_per_minute,
            headroom=limits.headroom,
        )
    progress = progress_actor_class().remote()
    context = ray.put(
        ShardContext(
            config=config,
            staging=location.staging,
            limiter=limiter,
            progress=progress,
            api_key=config.judge.api_key(),
        )
    )
    slots: dict[str, int] = {}
    per_file: dict[int, int] = {}
    for shard in shards:
        slots[shard.shard_id] = per_file.get(shard.file_index, 0)
        per_file[shard.file_index] = slots[shard.shard_id] + 1
    task = ray.remote(run_shard).options(
        num_cpus=config.ray.num_cpus_per_task,
        max_retries=config.ray.max_task_retries,
        retry_exceptions=[StorageError],
    )
    # Parquet shards are row ranges (exact item counts); JSONL shards are byte ranges, so the
    # total is extrapolated from the items per byte of the shards finished so far.
    exact = all(shard.kind == "rows" for _, shard in todo)
    units_total = sum(shard.end - shard.start for _, shard in todo)
    units_by_id = {shard.shard_id: shard.end - shard.start for _, shard in todo}
    units_done = items_done = 0
    line = ProgressLine(units_total if exact else None, out=out)
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
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                shard_id = pending.pop(ref)
                try:
                    report: ShardReport = ray.get(ref)
                except Exception as exc:  # a task that failed after its retries
                    for other in pending:  # do not leave the rest running (and paying)
                        ray.cancel(other)
                    raise RunFailed(
                        f"shard {shard_id} failed: "
                        f"{_root_cause(exc)}. Finished shards are kept: rerun with "
                        f"--set run.id={location.run_id} to resume."
                    ) from None
                reports.append(report)
                units_done += units_by_id.get(shard_id, 0)
                items_done += report.items
                if not exact and units_done:
                    line.set_total(round(items_done / units_done * units_total))
                if report.fatal:
                    for other in pending:
                        ray.cancel(other)
                    return reports
            if time.monotonic() - last_draw >= 0.5:
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


def _root_cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    if cause is not None:
        # The task's own exception: keep all of its message (its first line names the file or
        # URL; pyarrow's messages continue on further lines).
        text = " ".join(part.strip() for part in str(cause).strip().splitlines())
        return text or type(cause).__name__
    lines = str(exc).strip().splitlines()  # a Ray error with a traceback: its last line
    return lines[-1] if lines else type(exc).__name__


def print_outcome(outcome: RunOutcome, store_root: str, out: TextIO = sys.stdout) -> None:
    from jobs.summary_table import format_summary_table

    where = outcome.published.scores_url
    out.write(format_summary_table(outcome.published.summary, where) + "\n")
    out.write(
        f"run {outcome.run_id} ({outcome.run_date}) done in {outcome.seconds:.1f}s; "
        f"{outcome.shards_skipped} of {outcome.shards_total} shard(s) reused; "
        f"duplicates {outcome.published.duplicates}\n"
        f'query it: .venv/bin/duckdb -c "select count(*), avg(score) from read_parquet('
        f"'{store_root.rstrip('/')}/scores/**/*.parquet', hive_partitioning=true)\"\n"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.engine.driver", description="Score context precision at scale."
    )
    add_run_arguments(parser)
    return parser


def run_command(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.set)
    outcome = run_job(config)
    store: Store = open_store(config.output.path, config.output.storage_options)
    print_outcome(outcome, store.url(store.root))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run_command(args)
    except CtxPrecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
