"""`ctxprec status RUN`: where a run stands, from what it recorded, asking nothing of the judge.

A published run: when, its counts, mean and cost. A run in progress or stopped: its shards
staged, in batch mode each round's batches as last polled, and who holds the run's lock.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from jobs.core import formatting as fmt
from jobs.core.config import RUN_ID_PATTERN
from jobs.core.formatting import Column, table
from jobs.core.run_layout import StagingArea
from jobs.core.run_manifest import BatchRoundRecord, RunManifest, read_manifest
from jobs.core.storage import Store
from jobs.engine import BatchLayout, RoundState
from jobs.tools.published_runs import RunNotFound, find_run
from jobs.tools.tool_options import StatusOptions


def _published(store: Store, run_id: str) -> list[str] | None:
    try:
        location = find_run(store, run_id)
    except RunNotFound:
        return None
    bare = RunManifest(run_id=run_id, run_date=location.run_date.isoformat())
    manifest = read_manifest(store, location) or bare
    summary, judge = manifest.summary, manifest.judge
    mode = judge.mode or "online"
    lines = [
        f"run {run_id} ({location.run_date}): published {manifest.published_at or ''}, "
        f"{mode} mode, judge {manifest.judge_model or '?'}",
        f"  items {fmt.integer(summary.items)}: ok {fmt.integer(summary.scored)}, "
        f"unscored {fmt.integer(summary.unscored)}, errors "
        f"{fmt.integer(summary.errors)}; mean {fmt.number(summary.mean)}; "
        f"estimated cost {fmt.cost(summary.cost_usd, manifest.judge_model)}",
    ]
    if mode == "batch":
        batches = (
            f"  {judge.batches or 0} batch(es) in {judge.rounds or 0} round(s), "
            f"{fmt.integer(judge.requests)} requests; price {judge.price or '?'}"
        )
        if judge.deadline_at:
            batches += f"; deadline {judge.deadline_at}"
        lines.append(batches)
        lines += [_round_line(record) for record in judge.round_details]
    errors = manifest.error_rate
    if errors is not None and errors.errors:
        failed = "FAILED: " if errors.exceeded else ""
        lines.append(f"  {failed}{errors.describe()}")
    lines.append(f"  scores: {store.url(store.join(location.table_file('scores')))}")
    return lines


def _lock(store: Store, staging: StagingArea) -> str:
    path = staging.lock_file
    if not store.exists(path):
        return "no driver holds the run (rerun the same run.id to go on)"
    try:
        holder: dict[str, Any] = json.loads(store.read_bytes(path))
    except ValueError:
        return "the run's lock file is unreadable"
    age = time.time() - float(holder.get("heartbeat", 0))
    return (
        f"lock: pid {holder.get('pid')} on {holder.get('host')}, heartbeat "
        f"{fmt.duration(age)} ago (a lock without a heartbeat for 60 s is taken over)"
    )


def _round_line(record: BatchRoundRecord) -> str:
    """A round's counts, and why lines were asked again."""
    if record.online:
        return f"  round {record.round}: online (judge.batch.deadline neared)"
    line = (
        f"  round {record.round}: {record.batches} batch(es), {record.requests:,} requests: "
        f"{record.completed:,} completed, {record.failed:,} failed"
    )
    if record.stopped_at_deadline:
        line += f", {record.stopped_at_deadline} cancelled at the deadline"
    # the reasons lines were asked again, the commonest first
    retried = sorted(record.retried.items(), key=lambda item: (-item[1], item[0]))
    if retried:
        line += "; asked again: " + ", ".join(f"{why} {count:,}" for why, count in retried)
    if record.final_errors:
        line += f"; {record.final_errors:,} failed for good"
    return line


def _batch_lines(round_state: RoundState) -> list[str]:
    """A round in progress: its counts and each batch as the driver last polled it."""
    line = _round_line(BatchRoundRecord.model_validate(round_state.summary()))
    if round_state.online:
        return [line]
    rows = []
    for record in round_state.batches:
        state = record.status or "not submitted"
        state += ", stopped at the deadline" if record.stopped else ""
        state += ", ingested" if record.ingested else ""
        polled = f"  (polled {record.polled_at})" if record.polled_at else ""
        errors = f"  errors: {record.errors}" if record.errors else ""
        counts = f"{record.completed:,}/{record.requests:,} completed, {record.failed:,} failed"
        rows.append((record.name, record.batch_id or "-", f"{state}: {counts}{polled}{errors}"))
    batches = table([Column(align="<")] * 3, rows, indent="    ", header=False)
    return [line + f" (planned {round_state.planned_at})", *([batches] if rows else [])]


def status_lines(store: Store, run_id: str) -> list[str]:
    """What `ctxprec status` prints for `run_id` (RunNotFound when there is no such run)."""
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise RunNotFound(f"{run_id!r} is not a valid run id")
    published = _published(store, run_id)
    if published is not None:
        return published
    staging = StagingArea.of_run(store, run_id)
    if not store.exists(staging.path()):
        raise RunNotFound(
            f"run {run_id!r} not found under {store.url(store.root)}: neither published nor "
            "started there"
        )
    staged = staging.staged_items_files()
    layout = BatchLayout(store, staging.folder)
    run_info = layout.read_json(layout.run_file)
    if run_info is None:
        online = f"run {run_id}: not published; {len(staged)} shard(s) staged (an online run)"
        return [online, f"  {_lock(store, staging)}"]
    total = len(run_info.get("shards") or [])
    lines = [
        f"run {run_id}: not published; batch mode, judge {run_info.get('model')} "
        f"({run_info.get('provider')}), started {run_info.get('created_at')}",
        f"  shards: {total} planned, {len(staged)} staged, {total - len(staged)} waiting",
    ]
    planned = layout.rounds_planned()
    for number in planned:
        data = layout.read_json(layout.round_file(number))
        if data is not None:
            lines += _batch_lines(RoundState.from_dict(data))
    for number in layout.rounds_built():
        if number in planned:
            continue
        built = len(layout.indexed_shards(number))
        lines.append(
            f"  round {number}: requests being built ({built} shard(s) done), not submitted"
        )
    lines.append(f"  {_lock(store, staging)}")
    return lines


def run(options: StatusOptions, out: TextIO | None = None) -> int:
    """`ctxprec status`: print where the run stands; returns 0 (an unknown run exits 2)."""
    out = out if out is not None else sys.stdout
    out.write("\n".join(status_lines(options.root.store(), options.run)) + "\n")
    return 0
