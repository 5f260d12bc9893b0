"""What a run's manifest records about how the run was made, converted from the engine's
records to the manifest's (`jobs.core.run_manifest`); `publish_run` adds what publishing
learns and writes `manifest.json`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.core.config import JobConfig
from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import (
    DroppedFormRecord,
    FlowSnapshot,
    JudgeRecord,
    ResponseFormatRecord,
    RunManifest,
    TracesRecord,
)
from jobs.engine.messages import ShardReport
from jobs.engine.publish.aggregate import FLOW_METRICS
from scorer_core.prompt import PROMPT_VERSION
from scorer_core.response_format import RESPONSE_FORMATS


@dataclass(frozen=True, kw_only=True)
class ManifestFacts:
    """How the run went, as its driver knows it before publishing: its shards (and those an
    earlier attempt staged), its seconds so far and per phase, what its governor settled on
    (`flow`), what its judge settled on (`judge_record`), how many shards ran on each Ray node
    (`shards_by_node`), and the traces' assembly."""

    shards: int
    shards_reused: int
    seconds: float
    timings: Mapping[str, float] = field(default_factory=dict)
    flow: FlowSnapshot | None = None
    judge: JudgeRecord | None = None
    nodes: Mapping[str, int] = field(default_factory=dict)
    traces: TracesRecord | None = None


def run_manifest(
    config: JobConfig, judge_model: str, location: RunLocation, facts: ManifestFacts
) -> RunManifest:
    """The run's identity, judge, prompt version, config (secrets redacted) and `facts`."""
    manifest = RunManifest(
        run_id=location.run_id,
        run_date=location.run_date.isoformat(),
        judge_model=judge_model,
        prompt_version=PROMPT_VERSION,
        config=config.redacted(),
        shards=facts.shards,
        seconds=round(facts.seconds, 3),
        timings_s=dict(facts.timings),
        shards_reused=facts.shards_reused,
        # every field of a governor's snapshot recorded, null ones too
        flow=FlowSnapshot.model_validate(facts.flow.model_dump() if facts.flow else {}),
        judge=facts.judge or JudgeRecord(),
        nodes=dict(facts.nodes),
    )
    if facts.traces is None:
        return manifest
    return manifest.with_changes(traces=facts.traces)


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
    negotiated = combine(report.judge.response_format for report in reports)
    if negotiated is not None:
        facts["response_format"] = negotiated.model_dump()
    if batch is not None:
        facts.update(batch.model_dump(exclude_unset=True), price=price)
    return JudgeRecord.model_validate(facts)


def flow_metrics(flow: FlowSnapshot) -> list[tuple[str, float | None]]:
    """The governor's snapshot as the summary's flow metrics (`aggregate.FLOW_METRICS`)."""
    return [] if flow.is_empty() else [(name, getattr(flow, name)) for name in FLOW_METRICS]


def _form(value: object) -> str:
    """`value` as a form name; ValueError naming it when it is none."""
    if value in RESPONSE_FORMATS:
        return str(value)
    raise ValueError(f"unknown response format {value!r}; expected one of {RESPONSE_FORMATS}")


def _strength(form: str) -> int:
    """0 for the strongest form; unknown forms count as weakest."""
    return RESPONSE_FORMATS.index(form) if form in RESPONSE_FORMATS else len(RESPONSE_FORMATS)


def combine(reports: Iterable[Mapping[str, Any] | None]) -> ResponseFormatRecord | None:
    """The structured-output form the run's judge settled on, from the shards' negotiation
    summaries (None entries are shards that negotiated nothing): the weakest form any worker
    process confirmed, with every form the endpoint rejected and its answer; None when no shard
    reported one."""
    summaries = [summary for summary in reports if summary is not None]
    if not summaries:
        return None
    confirmed = [summary for summary in summaries if summary.get("confirmed")]
    in_use = max((str(summary["in_use"]) for summary in confirmed or summaries), key=_strength)
    dropped: dict[str, DroppedFormRecord] = {}
    for summary in summaries:
        for entry in summary.get("dropped", ()):
            form = _form(entry["form"])
            if form not in dropped:
                dropped[form] = DroppedFormRecord(form=form, reason=str(entry.get("reason", "")))
    first = summaries[0]
    return ResponseFormatRecord(
        endpoint=str(first.get("endpoint", "")),
        setting=str(first.get("setting", "")),
        in_use=in_use,
        confirmed=any(summary["in_use"] == in_use for summary in confirmed),
        dropped=sorted(dropped.values(), key=lambda record: _strength(record.form)),
        shards=len(summaries),
    )
