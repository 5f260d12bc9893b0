"""What a run's manifest records about how the run was made.

The driver builds this part; `jobs.engine.publish.publisher.publish_run` adds what publishing learns
(counts, summary, publication time) and writes `manifest.json` next to the run's tables.
Readers: `ctxprec compare` / `report` (through jobs.tools.published_runs) and the benchmarks, which
read
`timings_s`.
"""

from __future__ import annotations

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
    flow: Mapping[str, Any] | None = None,
    judge: Mapping[str, Any] | None = None,
    nodes: Mapping[str, int] | None = None,
    traces: Mapping[str, Any] | None = None,
) -> RunManifest:
    """The run's identity, judge, prompt version, config (secrets redacted) and timings.

    `timings` are seconds per phase (plan, ray_start, fan_out); `seconds` is the whole run so
    far; `flow` is what the run's governor settled on (in-flight budget, latency percentiles,
    pace); `judge` what the workers' judge settled on (transport, structured-output form:
    `judge_facts_of_run`); `nodes` how many shards ran on each Ray node (`shards_by_node`);
    `traces` the assembly's report of a run on OpenTelemetry traces (jobs.engine.trace_staging).
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
        flow=FlowSnapshot.model_validate(dict(flow or {})),
        judge=JudgeRecord.model_validate(dict(judge or {})),
        nodes=dict(nodes or {}),
        **({"traces": dict(traces)} if traces is not None else {}),
    )


def shards_by_node(reports: Sequence[ShardReport]) -> dict[str, int]:
    """How many of the shards this driver ran (not those it found staged) ran on each Ray
    node, by node id."""
    counts: dict[str, int] = {}
    for report in reports:
        if report.node and not report.skipped:
            counts[report.node] = counts.get(report.node, 0) + 1
    return dict(sorted(counts.items()))


def judge_facts_of_run(reports: Sequence[ShardReport]) -> dict[str, Any]:
    """The workers' judge facts (`ShardReport.judge`) for the run: the transport, and the
    structured-output form their negotiations settled on, combined over every shard's report
    (`jobs.engine.publish.response_formats.combine`: worker processes negotiate independently, and
    the
    run cannot claim a stronger form than some of its requests used)."""
    facts: dict[str, Any] = {}
    transports = [report.judge.transport for report in reports if report.judge.transport]
    if transports:
        facts["transport"] = transports[-1]
    negotiated = combine_response_formats(report.judge.response_format for report in reports)
    if negotiated is not None:
        facts["response_format"] = negotiated.to_dict()
    return facts


def flow_metrics(flow: FlowSnapshot) -> list[tuple[str, float | None]]:
    """The governor's snapshot as the summary's flow metrics (`aggregate.FLOW_METRICS`)."""
    if flow.is_empty():
        return []
    values = {
        "in_flight_budget": flow.in_flight_budget,
        "max_in_flight": flow.max_in_flight,
        "latency_p50_s": flow.latency_p50_s,
        "latency_p90_s": flow.latency_p90_s,
        "latency_p99_s": flow.latency_p99_s,
    }
    return [(name, values[name]) for name in FLOW_METRICS]
