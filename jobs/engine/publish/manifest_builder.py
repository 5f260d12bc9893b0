"""What a run's manifest records about how the run was made, converted from the engine's
records to the manifest's (`jobs.core.run_manifest`); `publish_run` adds what publishing
learns and writes `manifest.json`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import FlowSnapshot, JudgeRecord, RunManifest
from jobs.engine.messages import ShardReport
from jobs.engine.publish.aggregate import FLOW_METRICS
from jobs.engine.publish.response_formats import combine as combine_response_formats
from scorer_core.prompt import PROMPT_VERSION


def run_manifest(
    config: JobConfig,
    location: RunLocation,
    *,
    shards: int,
    shards_reused: int,
    seconds: float,
    timings: dict[str, float],
    flow: FlowSnapshot | None = None,
    judge: JudgeRecord | None = None,
    nodes: Mapping[str, int] | None = None,
    traces: Mapping[str, Any] | None = None,
) -> RunManifest:
    """The run's identity, judge, prompt version, config (secrets redacted) and timings.

    `timings` are seconds per phase; `seconds` the whole run so far; `flow` what the run's
    governor settled on; `judge` what its judge settled on (`judge_record`); `nodes` how many
    shards ran on each Ray node (`shards_by_node`); `traces` the traces' assembly report.
    """
    return RunManifest(
        run_id=location.run_id,
        run_date=location.run_date.isoformat(),
        judge_model=config.judge.model,
        prompt_version=PROMPT_VERSION,
        config=config.redacted(),
        shards=shards,
        seconds=round(seconds, 3),
        timings_s={phase: round(value, 3) for phase, value in timings.items()},
        shards_reused=shards_reused,
        flow=FlowSnapshot.model_validate(flow.model_dump() if flow is not None else {}),
        judge=judge or JudgeRecord(),
        nodes=dict(nodes or {}),
        **({"traces": dict(traces)} if traces is not None else {}),
    )


def shards_by_node(reports: Sequence[ShardReport]) -> dict[str, int]:
    """How many of the shards this driver ran (not those it found staged) ran on each Ray
    node, by node id."""
    counts = Counter(report.node for report in reports if report.node and not report.skipped)
    return dict(sorted(counts.items()))


def judge_record(
    reports: Sequence[ShardReport], batch: JudgeRecord | None = None, price: str | None = None
) -> JudgeRecord:
    """What the run's judge settled on: the workers' transport and structured-output form,
    combined over every shard's report (processes negotiate independently, and the run cannot
    claim a stronger form than some of its requests used); in batch mode its batches and
    `price` basis."""
    facts: dict[str, Any] = {}
    transports = [report.judge.transport for report in reports if report.judge.transport]
    if transports:
        facts["transport"] = transports[-1]
    negotiated = combine_response_formats(report.judge.response_format for report in reports)
    if negotiated is not None:
        facts["response_format"] = negotiated.model_dump()
    if batch is not None:
        facts.update(batch.model_dump(exclude_unset=True), price=price)
    return JudgeRecord.model_validate(facts)


def flow_metrics(flow: FlowSnapshot) -> list[tuple[str, float | None]]:
    """The governor's snapshot as the summary's flow metrics (`aggregate.FLOW_METRICS`)."""
    if flow.is_empty():
        return []
    return [(name, getattr(flow, name)) for name in FLOW_METRICS]
