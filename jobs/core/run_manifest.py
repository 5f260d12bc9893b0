"""A run's manifest (`manifest.json` beside its tables) as strict pydantic models, for the
engine that writes it and the tools that read it; `RunManifest.read` reads older versions too.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, model_validator

from jobs.core.text_safety import terminal_safe
from jobs.core.validated import Validated
from scorer_core.errors import CtxPrecError, one_line

if TYPE_CHECKING:
    from jobs.core.run_layout import RunLocation
    from jobs.core.storage import Store

_READING = {"read": "manifest"}  # the validation context of `RunManifest.read`


class _Record(Validated):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_keys(cls, data: Any, info: ValidationInfo) -> Any:
        """In `RunManifest.read`, drop the keys of older versions that this one no longer knows."""
        if info.context == _READING and isinstance(data, dict):
            return {key: value for key, value in data.items() if key in cls.model_fields}
        return data


class FlowSnapshot(_Record):
    """What the run's governor settled on (`RunGovernor.snapshot`); empty without one."""

    budget: float | None = None
    budget_max: float | None = None
    budget_mode: Literal["auto", "explicit"] | None = None
    max_in_flight: float | None = None
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p99_s: float | None = None
    latency_mean_s: float | None = None
    replies: int | None = None
    completed: int | None = None
    requests: int | None = None
    pace_granted: float | None = None
    pace_refusals: float | None = None
    pace_factor: float | None = None
    pace_token_ratio: float | None = None
    pace_requests_per_second: float | None = None

    @property
    def in_flight_budget(self) -> float | None:
        """The largest budget the run used (manifests before `budget_max` have `budget`)."""
        return self.budget_max if self.budget_max is not None else self.budget

    def is_empty(self) -> bool:
        return not self.model_dump(exclude_none=True)


class DroppedFormRecord(_Record):
    """A structured-output form the endpoint rejected, with its answer."""

    form: str
    reason: str = ""


class ResponseFormatRecord(_Record):
    """The structured-output form of a run's judge requests, from `shards` shard reports:
    `setting` (judge.response_format), `in_use` (the form sent at the end), `confirmed` (the
    endpoint answered one sent with it: not when the cache answered every item or every request
    failed), `dropped` (the forms the endpoint rejected, strongest first, with its answer)."""

    endpoint: str = ""
    setting: str = ""
    in_use: str = ""
    confirmed: bool = False
    dropped: list[DroppedFormRecord] = Field(default_factory=list)
    shards: int = 0

    def describe(self, max_reason_chars: int | None = None) -> str:
        """One line: "json_object (json_schema rejected: <the server's answer, cut>)"."""
        form = self.in_use if self.confirmed else f"{self.in_use} (not confirmed)"
        if not self.dropped:
            return form
        rejected = "; ".join(
            f"{dropped.form} rejected: {one_line(dropped.reason, max_reason_chars)}"
            for dropped in self.dropped
        )
        return f"{form} ({rejected})"


class BatchRoundRecord(_Record):
    """One batch round (`RoundState.summary`): its batches, requests and retries by reason."""

    round: int
    batches: int = 0
    requests: int = 0
    completed: int = 0
    failed: int = 0
    retried: dict[str, int] = Field(default_factory=dict)
    final_errors: int = 0
    stopped_at_deadline: int = 0
    online: bool = False


class JudgeRecord(_Record):
    """What the run's judge was and settled on, and in batch mode the run's batches."""

    transport: str | None = None
    response_format: ResponseFormatRecord | None = None
    price: str | None = None
    mode: Literal["batch"] | None = None
    provider: str | None = None
    rounds: int | None = None
    batches: int | None = None
    batch_statuses: dict[str, int] = Field(default_factory=dict)
    requests: int | None = None
    requests_failed: int | None = None
    # Each round, and why its lines were asked again (manifests before them have none).
    round_details: list[BatchRoundRecord] = Field(default_factory=list)
    max_rounds: int | None = None
    deadline_at: str | None = None
    bytes_uploaded: int | None = None
    uploads_by_this_driver: int | None = None
    batches_created_by_this_driver: int | None = None


class ErrorRateRecord(_Record):
    """`errors` of `items` were errors (`rate`); `limit` is run.max_error_rate (None: not
    checked), `commonest` the commonest error (`jobs.engine.publish.publisher.measure`)."""

    items: int
    errors: int
    limit: float | None = None
    commonest: str | None = None
    commonest_items: int = 0
    rate: float = 0.0
    exceeded: bool = False

    @classmethod
    def of(
        cls,
        items: int,
        errors: int,
        limit: float | None,
        commonest: str | None = None,
        commonest_items: int = 0,
    ) -> ErrorRateRecord:
        rate = errors / items if items else 0.0
        return cls(
            items=items,
            errors=errors,
            limit=limit,
            commonest=commonest,
            commonest_items=commonest_items,
            rate=round(rate, 6),
            exceeded=limit is not None and rate > limit,
        )

    def describe(self) -> str:
        """One line: the share of errors, against the limit, and the commonest error."""
        rate = self.errors / self.items if self.items else 0.0
        text = f"{self.errors:,} of {self.items:,} items are errors ({rate:.1%})"
        if self.limit is not None:
            against = "over" if self.exceeded else "within"
            text += f", {against} run.max_error_rate {self.limit:g}"
        if self.commonest:
            text += (
                f"; commonest error ({self.commonest_items:,} items): "
                f"{terminal_safe(self.commonest)[:300]}"
            )
        return text


class PositionRateRecord(_Record):
    """How often the judge found the context at one position relevant."""

    position: int
    judged: int
    relevant: int
    rate: float


class SegmentRecord(_Record):
    """The summary of the items whose column `by` holds `value` (as text; None: null)."""

    by: str
    value: str | None = None
    summary: SummaryRecord


class SummaryRecord(_Record):
    """The run's summary as the manifest keeps it (`RunSummary.to_record`): score statistics
    over the "ok" items, counts, bands, relevance by position, cost, flow and canary metrics,
    and the same per `summary.by` segment. A manifest written before a field existed lacks it."""

    model: str | None = None
    scale: float | None = None
    items: int | None = None
    scored: int | None = None
    unscored: int | None = None
    errors: int | None = None
    mean: float | None = None
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    bands: dict[str, int] = Field(default_factory=dict)  # label -> items, worst band first
    position_rates: list[PositionRateRecord] = Field(default_factory=list)
    judge_calls: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cache_hits: int | None = None
    cost_usd: float | None = None
    flow: dict[str, float | None] = Field(default_factory=dict)
    segments: list[SegmentRecord] = Field(default_factory=list)
    mean_ci_low: float | None = None
    mean_ci_high: float | None = None
    population: int | None = None
    canary: dict[str, float | None] = Field(default_factory=dict)
    cached_prompt_tokens: int | None = None
    cache_creation_tokens: int | None = None


SegmentRecord.model_rebuild()


class TracesRecord(_Record):
    """What assembling a run's traces into items found (`jobs.inputs.traces.TraceReport`)."""

    files: int = 0
    spans: int = 0
    malformed: int = 0
    malformed_examples: list[str] = Field(default_factory=list)
    duplicate_spans: int = 0
    traces: int = 0
    traces_without_retriever: int = 0
    retrievals: int = 0
    retrievals_without_text: int = 0
    items: int = 0
    items_without_output: int = 0
    partitions: int = 0
    items_path: str = ""
    carried_types: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0
    peak_rss_mb: dict[str, float] = Field(default_factory=dict)


class RunManifest(_Record):
    """A run's manifest: who made it with what, how it went, and once published what it holds."""

    run_id: str
    run_date: str  # ISO date
    judge_model: str = ""
    prompt_version: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    shards: int = 0
    shards_reused: int = 0
    seconds: float = 0.0
    timings_s: dict[str, float] = Field(default_factory=dict)
    flow: FlowSnapshot = Field(default_factory=FlowSnapshot)
    judge: JudgeRecord = Field(default_factory=JudgeRecord)
    # shards run on each Ray node, by node id
    nodes: dict[str, int] = Field(default_factory=dict)
    # input.format otlp: what assembling the traces into items found (jobs.inputs.traces)
    traces: TracesRecord | None = None
    # -- added by publishing
    status: Literal["complete"] | None = None
    summary: SummaryRecord = Field(default_factory=SummaryRecord)
    duplicates: int = 0
    error_rate: ErrorRateRecord | None = None
    published_at: str | None = None
    tables: dict[str, str] = Field(default_factory=dict)  # table -> URL of its object

    def to_json(self) -> bytes:
        """The manifest file's bytes (keys sorted; facts the run did not record left out)."""
        data = self.model_dump(mode="json", exclude_unset=True)
        return json.dumps(data, indent=2, sort_keys=True).encode()

    @classmethod
    def read(cls, raw: bytes | str | dict[str, Any]) -> RunManifest:
        """A manifest from its file (or its parsed JSON), whatever version wrote it."""
        data = json.loads(raw) if isinstance(raw, bytes | str) else raw
        return cls.model_validate(data, context=_READING)


def read_manifest(store: Store, location: RunLocation) -> RunManifest | None:
    """The run's manifest (None without one); `CtxPrecError` naming the file when unreadable."""
    path = store.join(location.manifest)
    if not store.exists(path):
        return None
    try:
        return RunManifest.read(store.read_bytes(path))
    except ValueError as exc:  # not JSON, or not a manifest (pydantic's ValidationError)
        raise CtxPrecError(f"{store.url(path)}: unreadable run manifest: {exc}") from None
