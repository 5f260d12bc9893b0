"""A run's manifest (`manifest.json` beside its tables), typed: one strict pydantic model for
the engine that writes it and the tools and benchmarks that read it. `RunManifest.read` reads
the manifests of older versions too (the keys this version no longer knows are dropped).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scorer_core.errors import CtxPrecError

if TYPE_CHECKING:
    from jobs.core.run_layout import RunLocation
    from jobs.core.storage import Store

# A removed key's error leaves at most this many retries before a manifest is called unreadable.
_MAX_DROPPED = 200


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FlowSnapshot(_Record):
    """What the run's governor settled on (`RunGovernor.snapshot`): the in-flight budget,
    latencies, the pace of a rate-limited run; empty without one (offline judge, batch mode)."""

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
    """The structured-output form the run's judge settled on (`RunResponseFormat.to_dict`)."""

    endpoint: str = ""
    setting: str = ""
    in_use: str = ""
    confirmed: bool = False
    dropped: list[DroppedFormRecord] = Field(default_factory=list)
    shards: int = 0


class BatchRoundRecord(_Record):
    """One batch round (`jobs.engine.batch.state.RoundState.summary`): its batches and
    requests, the requests that failed transiently by reason (asked again after it) and those
    that failed for good; `online` when the deadline sent the round's pass online."""

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
    """What the run's judge was and settled on: its transport and structured-output form, and
    in batch mode (`mode` "batch") the run's batches over every round and the price basis."""

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
    """The share of the run's items that are errors, against `run.max_error_rate`, and the
    commonest error (`jobs.core.error_rate.ErrorRate`)."""

    items: int
    errors: int
    limit: float | None = None
    commonest: str | None = None
    commonest_items: int = 0
    rate: float = 0.0
    exceeded: bool = False


class RunManifest(_Record):
    """A run's manifest: who made it with what (config with secrets redacted, judge, prompt
    version), how it went (shards, timings, flow, nodes) and, once published, what it holds."""

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
    traces: dict[str, Any] | None = None
    # -- added by publishing
    status: Literal["complete"] | None = None
    summary: dict[str, Any] = Field(default_factory=dict)  # RunSummary.to_dict()
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
        data = json.loads(raw) if isinstance(raw, bytes | str) else dict(raw)
        for _ in range(_MAX_DROPPED):
            try:
                return cls.model_validate(data)
            except ValidationError as exc:
                unknown = [e["loc"] for e in exc.errors() if e["type"] == "extra_forbidden"]
                if not unknown or len(unknown) != len(exc.errors()):
                    raise
                for loc in unknown:
                    _drop(data, loc)
        return cls.model_validate(data)


def _drop(data: dict[str, Any], loc: tuple[int | str, ...]) -> None:
    """Remove the key at `loc` (a path of keys) from nested dicts."""
    node: Any = data
    for key in loc[:-1]:
        node = node[key]
    node.pop(loc[-1], None)


def read_manifest(store: Store, location: RunLocation) -> RunManifest | None:
    """The run's manifest, or None when it has none (not published, or published by a version
    without manifests). Raises `CtxPrecError` naming the file when it is not a manifest."""
    path = store.join(location.manifest)
    if not store.exists(path):
        return None
    try:
        return RunManifest.read(store.read_bytes(path))
    except ValueError as exc:  # not JSON, or not a manifest (pydantic's ValidationError)
        raise CtxPrecError(f"{store.url(path)}: unreadable run manifest: {exc}") from None
