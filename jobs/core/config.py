"""The job's configuration: YAML in, validated pydantic models out, unknown keys rejected (a
typo fails at start-up with the key's full path). `--set dotted.key=value` overrides are
applied to the raw YAML before validation.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from jobs.core.config_yaml import load_yaml, plain, resolve_user_text
from jobs.core.validated import Validated
from scorer_core.capabilities import OFFLINE_JUDGE, capabilities_of
from scorer_core.errors import ConfigError
from scorer_core.judge_access import JudgeAccess
from scorer_core.response_format import ResponseFormatSetting

# A run id becomes part of object paths (`run_id=<id>`): no '/' or spaces.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
DEFAULT_MAX_CONTEXT_CHARS = 200_000
DEFAULT_MAX_CONTEXTS = 1000
TRACES = ("otlp", "phoenix")  # the formats whose spans are assembled into items first


def _all_carried(option: str, names: list[str], carry: list[str]) -> None:
    missing = [name for name in names if name not in carry]
    if missing:
        raise ValueError(
            f"{option} names {missing}, which input.carry does not carry; add them to input.carry"
        )


def _names_once(value: list[str]) -> list[str]:
    repeated = sorted({name for name in value if value.count(name) > 1})
    if repeated:
        raise ValueError(f"names a column more than once: {repeated}")
    return value


class _Strict(Validated):
    # no inf or nan: a "number" like .inf would pass every bound and break the pacing maths
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ColumnsConfig(_Strict):
    """Which input column holds each field of an item."""

    query_id: str = Field("query_id", description="Column with the item's unique id.")
    input: str = Field("input", description="Column with the query (a non-empty string).")
    output: str | None = Field(
        "output",
        description="Column with the system's answer; may be empty. With no answer and no "
        "reference the item is retrieval-only: judged against the query. null: there is no "
        "answer column.",
    )
    expected_output: str | None = Field(
        None,
        description="Column with the reference answer; relevance is judged against it when "
        "given. null: there is none.",
    )
    context: str = Field(
        "context",
        description="Column with the retrieved contexts: a list of strings in retrieved order.",
    )
    context_ids: str | None = Field(
        None,
        description="Column with the contexts' ids (document or passage ids): a list parallel "
        "to the contexts, strings or integers; lands in the verdicts as context_id. null: none.",
    )


# The item fields of traces assembled into items (jobs.inputs.traces.items_schema).
_OTLP_ITEM_FIELDS = frozenset({"query_id", "input", "output", "context", "context_ids"})


class OtlpConfig(_Strict):
    """How `input.format: otlp` turns traces into items (docs/traces.md)."""

    output: Literal["root", "next_llm", "none"] = Field(
        "root",
        description="The answer judged with each retrieval: root: output.value of the trace's "
        "root span; next_llm: the output of the first LLM span that starts after the "
        "retrieval ends; none: no answer (retrieval-only: contexts judged against the query).",
    )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_name(value: str | None) -> str | None:
    """`value` when it is the name of an environment variable (ValueError saying so if not)."""
    if value is not None and not _ENV_NAME.fullmatch(value):
        raise ValueError(
            "must be the NAME of an environment variable (e.g. OPENAI_API_KEY), never the key "
            "itself"
        )
    return value


class PhoenixAccess(_Strict):
    """A Phoenix server and project; its API key is read from the environment when needed."""

    endpoint: str = Field(
        description="Phoenix's URL (http:// or https://), e.g. http://127.0.0.1:6006. Required."
    )
    project: str = Field(
        description="The Phoenix project holding the spans (its name, as Phoenix shows it). "
        "Required."
    )
    api_key_env: str = Field(
        "PHOENIX_API_KEY",
        description="NAME of the environment variable holding Phoenix's API key (sent as a "
        "bearer token), never the key itself; when the variable is unset, no key is sent.",
    )
    headers: dict[str, str] = Field(
        {},
        description="Extra HTTP headers sent with every request to Phoenix (in the run's "
        "manifest their values are redacted).",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_is_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:6006, "
                f"got {value!r}"
            )
        return value

    _api_key_env_is_a_name = field_validator("api_key_env")(_env_name)

    def http_headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env)
        return self.headers | ({"Authorization": f"Bearer {key}"} if key else {})


class PhoenixInputConfig(PhoenixAccess):
    """Which spans input.format phoenix pulls: those started in [start, end), or in the last
    last_hours hours (docs/traces.md#phoenix-in-and-out)."""

    start: dt.datetime | None = Field(
        None, description="ISO 8601, inclusive; null: from the first span."
    )
    end: dt.datetime | None = Field(
        None,
        description="ISO 8601, exclusive (spans started before it); null: up to now. With "
        "start, not with last_hours.",
    )
    last_hours: float | None = Field(
        None,
        gt=0,
        description="Instead of start and end (not with them): the spans started in the last "
        "this many hours, up to now (for nightly runs).",
    )


class PhoenixExportConfig(PhoenixAccess):
    """What `ctxprec export phoenix` sends once the run is published
    (docs/traces.md#phoenix-in-and-out)."""

    name: str = Field(
        "context_precision_relevance",
        description="The document annotations' name (one per verdict); the span annotations' "
        "(one per score) is it without _relevance, else it with _precision added (the default "
        "gives context_precision).",
    )
    span_id_column: str = Field(
        "query_id",
        description="The column of the scores and verdicts tables holding the span id: "
        "query_id for runs read from traces (input.format otlp or phoenix); for other inputs "
        "a column carried into both tables (input.carry and input.carry_to_verdicts).",
    )


class ExportConfig(_Strict):
    """Where the verdicts and scores go once the run is published; a failed export keeps the
    run published (exit 1, docs/exit-codes.md)."""

    phoenix: PhoenixExportConfig | None = Field(
        None,
        description="null: no export. Once the run is published, its verdicts (document "
        "annotations) and scores (span annotations) are sent to this Phoenix, as ctxprec "
        "export phoenix sends them (the keys below). A failed export leaves the run published "
        "and exits 1 naming the command that completes it (docs/commands.md, "
        "docs/traces.md#phoenix-in-and-out).",
    )


class InputConfig(_Strict):
    """Where the items are and how to read them."""

    path: str = Field(
        "",
        description="A file, a folder (every file under it) or a glob; a local path or an "
        "s3://, gs:// or az:// URL. Required, except with input.format phoenix (the spans then "
        "come from input.phoenix).",
    )
    format: Literal["jsonl", "parquet", "otlp", "phoenix"] | None = Field(
        None,
        description="jsonl or parquet; null: from each file's suffix. otlp: OpenTelemetry "
        "trace files (OTLP JSON, as a collector's file exporter writes them), assembled into "
        "items first (docs/traces.md). phoenix: spans pulled from Phoenix (input.phoenix).",
    )
    columns: ColumnsConfig = Field(
        ColumnsConfig(), description="Which input column holds each field."
    )
    context_extractor: str | None = Field(
        None,
        description='"package.module:function" called with the whole row, returning the list '
        "of context strings (instead of columns.context).",
    )
    carry: list[str] = Field(
        default_factory=list,
        description="Input columns copied as they are, with their types, into every scores row "
        "(e.g. [retriever, tenant]); a missing one fails at start-up.",
    )
    carry_to_verdicts: list[str] = Field(
        default_factory=list,
        description="Of input.carry, the columns also copied into every verdicts row.",
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Passed to fsspec (endpoint_url, region, ...); put credentials in the "
        "environment, not here.",
    )
    max_context_chars: int = Field(
        DEFAULT_MAX_CONTEXT_CHARS,
        ge=100,
        description="A longer context is cut to this; the row is flagged truncated.",
    )
    max_contexts: int = Field(
        DEFAULT_MAX_CONTEXTS,
        ge=1,
        description="Contexts beyond this many are dropped; the row is flagged truncated.",
    )
    duplicate_query_ids: Literal["keep_first"] = Field(
        "keep_first",
        description="keep_first: the first occurrence of a query_id is scored, later ones are "
        "errors naming it.",
    )
    otlp: OtlpConfig = Field(
        OtlpConfig(), description="How traces become items (input.format otlp, phoenix)."
    )
    phoenix: PhoenixInputConfig | None = Field(
        None,
        description="With input.format phoenix (and only then): the Phoenix server and project "
        "to pull spans from, and their time window, start and end or last_hours (the keys "
        "below; docs/traces.md#phoenix-in-and-out).",
    )
    find_duplicates_first: bool | Literal["auto"] = Field(
        "auto",
        description="true: before judging, read every shard's query ids once to find the "
        "duplicates across shards, which are then not judged (false: they are judged, then "
        "marked at publication). auto: true for an LLM judge, false for the offline lexical "
        "judge, whose judging costs less than the extra read.",
    )

    @field_validator("context_extractor")
    @classmethod
    def _extractor_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\w.]+:[\w]+", value):
            raise ValueError("must look like 'package.module:function'")
        return value

    @field_validator("carry", "carry_to_verdicts")
    @classmethod
    def _carried_names(cls, value: list[str]) -> list[str]:
        if any(not name for name in _names_once(value)):
            raise ValueError("a column name is empty")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> InputConfig:
        # Traces are assembled into items whose columns are ours (jobs.inputs.traces).
        if self.format == "phoenix" and self.phoenix is None:
            raise ValueError(
                "format phoenix needs input.phoenix (endpoint, project and the window: start "
                "and end, or last_hours)"
            )
        if self.phoenix is not None and self.format != "phoenix":
            raise ValueError("input.phoenix needs format: phoenix")
        if self.phoenix and self.phoenix.last_hours and (self.phoenix.start or self.phoenix.end):
            raise ValueError("phoenix: give last_hours or start/end, not both")
        if not self.path and self.format != "phoenix":
            raise ValueError(
                "path: required (a file, a folder or a glob), unless format is phoenix"
            )
        if self.format in TRACES:
            own = sorted({"columns", "context_extractor"} & self.model_fields_set)
            if own:
                raise ValueError(
                    f"format {self.format} reads spans, not columns: remove {', '.join(own)} "
                    "(docs/traces.md says which span attribute becomes which field)"
                )
            taken = [name for name in self.carry if name in _OTLP_ITEM_FIELDS]
            if taken:
                raise ValueError(
                    f"carry: {taken} are fields of the items assembled from traces, not "
                    "attributes that can be carried (docs/traces.md)"
                )
        elif "otlp" in self.model_fields_set:
            raise ValueError("otlp settings need format: otlp or phoenix")
        _all_carried("carry_to_verdicts", self.carry_to_verdicts, self.carry)
        if self.carry:
            # jobs.core.schema imports Polars: only a config that carries columns pays for it.
            from jobs.core.schema import carry_clashes

            problems = carry_clashes(self.carry, self.carry_to_verdicts)
            if problems:
                raise ValueError(
                    "carry: a carried column cannot take the name of one of ours: "
                    + "; ".join(problems)
                )
        return self


class OutputConfig(_Strict):
    """Where the published tables go."""

    path: str = Field("results/", description="A local folder or any fsspec URL (s3://...).")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="Passed to fsspec; credentials via the environment."
    )


class BatchConfig(_Strict):
    """How `judge.mode: batch` uses the provider's Files + Batches API."""

    provider: str | None = Field(
        None,
        description="litellm's custom_llm_provider for files and batches (openai, azure, "
        "vertex_ai, bedrock, hosted_vllm, ...). null: the model's prefix (openai/... -> openai); "
        "a model without one is openai.",
    )
    completion_window: Literal["24h"] = Field(
        "24h", description="The window the provider has to answer a batch."
    )
    max_requests_per_batch: int = Field(
        50_000, ge=1, description="Requests per batch file (OpenAI: 50,000)."
    )
    max_bytes_per_batch: int = Field(
        200_000_000, ge=10_000, description="Bytes per batch file (OpenAI: 200 MB)."
    )
    max_enqueued_tokens: int = Field(
        0,
        ge=0,
        description="The provider's queue limit of batch tokens for the model (OpenAI: per "
        "model and usage tier). No batch holds more, and batches wait to be submitted while "
        "the run's unfinished ones hold this many. 0: no limit.",
    )
    reask: Literal["batch", "online"] = Field(
        "batch",
        description="Replies that break the contract are re-asked in a follow-up batch, or "
        "online (paced by rate_limit) at once.",
    )
    poll_interval_s: float = Field(
        30.0, gt=0, description="Seconds before the first poll of a batch's status."
    )
    max_poll_interval_s: float = Field(
        600.0, gt=0, description="The poll interval doubles up to this while batches run."
    )
    max_wait_s: float | None = Field(
        None,
        ge=0,
        description="The driver waits at most this long for batches, then exits (exit code 0) "
        "leaving them running; a rerun of the same run.id collects them. null: wait until "
        "they end.",
    )
    max_rounds: int = Field(
        4,
        ge=1,
        le=50,
        description="Batch rounds a request is sent in at most. A line that fails transiently "
        "(HTTP 5xx or 429, batch_expired, batch_cancelled, or missing from an expired, cancelled "
        "or failed batch) goes into the next round until then, and is the item's error after "
        "the last; a deterministic failure (HTTP 400 ...) is final at once, with the "
        "provider's reason. 1: nothing is sent again.",
    )
    deadline: str | None = Field(
        None,
        description='When the run must be done: a time of day in UTC ("06:30", the next one '
        'after the run started) or a duration from the run\'s start ("8h", "90m", "1d"). '
        "When it nears (judge.batch.deadline_margin_s, plus the time the unanswered requests "
        "need at rate_limit.requests_per_minute), running batches are cancelled and whatever "
        "is still unanswered is asked online under rate_limit. null: no deadline.",
    )
    deadline_margin_s: float = Field(
        1800.0,
        ge=0,
        description="Seconds before judge.batch.deadline at which batches stop and the rest "
        "goes online: the time an online pass over the unanswered requests needs beyond their "
        "pacing at rate_limit.requests_per_minute (workers' start, slow replies, publishing).",
    )

    @field_validator("deadline")
    @classmethod
    def _deadline_shape(cls, value: str | None) -> str | None:
        if value is not None:
            parse_deadline(value)  # raises ValueError saying what is expected
        return value


_TIME_OF_DAY = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_deadline(value: str) -> dt.time | dt.timedelta:
    """judge.batch.deadline as a time of day (UTC) or a duration; ValueError otherwise."""
    text = value.strip().lower()
    if clock := _TIME_OF_DAY.fullmatch(text):
        return dt.time(int(clock.group(1)), int(clock.group(2)))
    if span := _DURATION.fullmatch(text):
        seconds = float(span.group(1)) * _UNIT_S[span.group(2)]
        if 0 < seconds <= 7 * 86400:
            return dt.timedelta(seconds=seconds)
        raise ValueError(f"{value!r}: a duration must be more than 0 and at most 7 days")
    raise ValueError(
        f'{value!r} is neither a time of day in UTC (HH:MM, e.g. "06:30") nor a duration '
        'from the run\'s start (e.g. "8h", "90m", "1d")'
    )


def deadline_at(value: str, started: float) -> float:
    """The deadline in epoch seconds for a run started at `started` (a time of day: the next)."""
    when = parse_deadline(value)
    if isinstance(when, dt.timedelta):
        return started + when.total_seconds()
    start = dt.datetime.fromtimestamp(started, dt.UTC)
    moment = dt.datetime.combine(start.date(), when, tzinfo=dt.UTC)
    return (moment if moment > start else moment + dt.timedelta(days=1)).timestamp()


class JudgeConfig(_Strict):
    """The model that gives the per-context verdicts, and how it is called."""

    model: str = Field(
        OFFLINE_JUDGE,
        description='Any litellm model string ("openai/gpt-4o-mini", "anthropic/...") or '
        f'"{OFFLINE_JUDGE}", the offline judge.',
    )
    api_base: str | None = Field(
        None, description="URL of an OpenAI-compatible server (vLLM, Ollama, llama.cpp, gateway)."
    )
    transport: Literal["auto", "litellm", "http"] = Field(
        "auto",
        description="auto: the lean http client for OpenAI-compatible endpoints (openai/... "
        "models, or hosted_vllm/ and lm_studio/ with an api_base), litellm for every other "
        "provider; litellm or http to choose.",
    )
    api_key_env: str | None = Field(
        None,
        description="NAME of the environment variable holding the API key, never the key. "
        "null: the provider's own (OPENAI_API_KEY, ANTHROPIC_API_KEY, ... as litellm knows "
        "them), needed only without an api_base.",
    )
    contexts_per_call: int = Field(
        16, ge=1, le=256, description="Long context lists are split into calls of this many."
    )
    against: Literal["auto", "reference", "output", "query"] = Field(
        "auto",
        description="What each passage is judged against; the prompt and the verdict store's "
        "key hold only it. auto: the reference answer when the item has one (a regenerated "
        "output then costs nothing), else the output, else the query; reference or output: "
        "an item without it is an error row.",
    )
    verdict_reasons: bool = Field(
        True,
        description="true: each verdict comes with one short clause saying why (in the verdicts "
        "table's reason); false: verdicts alone, a shorter reply (reason null).",
    )
    timeout_s: float = Field(60.0, gt=0, description="Seconds per request.")
    max_retries: int = Field(
        6,
        ge=0,
        le=50,
        description="Retries per request for 429, 5xx, timeouts and refused connections.",
    )
    max_reasks: int = Field(
        2, ge=0, le=10, description="Re-asks per request for replies that break the contract."
    )
    temperature: float | None = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(
        None, ge=1, description="Completion token cap per request; null: the provider's default."
    )
    response_format: ResponseFormatSetting = Field(
        "auto",
        description="How requests ask for JSON. auto: json_schema, stepping down once per "
        "endpoint to json_object (llama.cpp) and then prompt when the server rejects a form; "
        "an explicit form that is rejected stops the run.",
    )
    mode: Literal["online", "batch"] = Field(
        "online",
        description="online: requests as the run goes, paced by rate_limit; batch: the "
        "provider's Batch API (about half the price, answers within judge.batch."
        "completion_window, its own queue limit; see docs/batch.md).",
    )
    batch: BatchConfig = Field(BatchConfig(), description="Batch mode's settings.")
    lexical: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the offline judge only, e.g. {threshold: 0.2}.",
    )

    @field_validator("api_base")
    @classmethod
    def _api_base_is_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            _ = parts.port  # raises ValueError for a port that is not a number in range
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000/v1"
                )
        return value

    _env_name_not_key = field_validator("api_key_env")(_env_name)

    def access(self) -> JudgeAccess:
        """The judge's model, endpoint and key variable, for the start-up check and its key."""
        return JudgeAccess(
            model=self.model,
            api_base=self.api_base,
            transport=self.transport,
            key_env=self.api_key_env,
        )

    def api_key(self) -> str | None:
        """The key from the environment, read at the moment it is needed, never stored."""
        return self.access().api_key()


class RateLimitConfig(_Strict):
    """The provider's limits, shared by every worker of the run through one limiter."""

    requests_per_minute: float = Field(
        0, ge=0, description="0: unlimited. Shared by ALL workers of the run."
    )
    tokens_per_minute: float = Field(0, ge=0, description="0: unlimited. Shared likewise.")
    max_concurrency: int | Literal["auto"] = Field(
        "auto",
        description="Judge requests in flight across the run. auto: sized from the limits and "
        "the measured reply latency (Little's law), between concurrency_floor and "
        "concurrency_ceiling; 64 when no limit is set. A number is used as given.",
    )
    concurrency_floor: int = Field(8, ge=1, description="The least that auto sizes to.")
    concurrency_ceiling: int = Field(
        4096, ge=1, description="The most that auto sizes to (connections per run)."
    )
    # Pace a little under the provider's limit so clock skew and latency jitter do not tip
    # a window over it.
    headroom: float = Field(0.98, gt=0.5, le=1.0, description="Pace at this share of the limits.")


class ScorerConfig(_Strict):
    """How a score is reported."""

    scale: float = Field(1.0, ge=0, description="Scores run from 0 to this.")
    reason: Literal["template", "llm", "none"] = Field(
        "template",
        description="template: built from the verdicts, no extra call; llm: one more judge call "
        "per item; none.",
    )


class SummaryConfig(_Strict):
    """What the run's summary is computed over, besides the whole run."""

    by: list[str] = Field(
        default_factory=list,
        description="Carried columns (input.carry) to summarise by as well: every metric once "
        "per value of each, in the summary table's segment_by / segment columns.",
    )

    _by_names_once = field_validator("by")(_names_once)


class SampleConfig(_Strict):
    """Judge a stratified random sample of the items instead of all of them (when a sample is
    enough: docs/is-the-drop-real.md); off unless `fraction` or `per_segment` is set."""

    fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Judge this share of the items of every stratum (0 < F <= 1). Give "
        "fraction or per_segment, not both; neither: every item is judged.",
    )
    per_segment: int | None = Field(
        None,
        ge=2,
        description="Judge this many items of every stratum (all of a smaller one). Give "
        "fraction or per_segment, not both.",
    )
    by: list[str] = Field(
        default_factory=list,
        description="Carried columns (input.carry; text, integer, boolean or date) whose values "
        "make the strata; empty: the whole input is one stratum.",
    )
    seed: int = Field(
        0,
        description="Which items are chosen depends only on this and the query id (a hash): "
        "keep it fixed to judge the same queries night after night.",
    )

    @model_validator(mode="after")
    def _one_size(self) -> SampleConfig:
        if self.fraction is not None and self.per_segment is not None:
            raise ValueError("give one of sample.fraction and sample.per_segment, not both")
        if not self.enabled and self.by:
            raise ValueError("sample.by needs sample.fraction or sample.per_segment")
        return self

    @property
    def enabled(self) -> bool:
        """Whether the run judges a sample (else every item)."""
        return self.fraction is not None or self.per_segment is not None


class CanaryConfig(_Strict):
    """Human-labelled items judged fresh in every run, to tell a changed judge apart."""

    labels: str | None = Field(
        None,
        description="null: no canary. Labelled JSONL in the format ctxprec calibrate reads: per "
        "row the query, its contexts in retrieved order (under input.columns' names, else query "
        "/ contexts), optionally the reference answer, and relevance (one label per context), "
        "optionally relevance_binary (docs/commands.md#what-ctxprec-calibrate-reads-and-reports)"
        "; a local path or any fsspec URL (input.storage_options apply). Judged by the run's "
        "judge in every run, never from the verdict cache.",
    )


class RunConfig(_Strict):
    """Which run this is: rerunning an unfinished run id resumes it."""

    id: str | None = Field(
        None,
        description="Letters, digits, '.', '_', '-' (max 100). null: a fresh id. Rerun an "
        "unfinished id to resume it.",
    )
    date: dt.date | None = Field(None, description="The run_date partition. null: today (UTC).")
    max_error_rate: float = Field(
        0.5,
        ge=0,
        le=1,
        description="The share of items with status error above which the run, published all "
        "the same, exits 1 naming the commonest error (docs/exit-codes.md). 1: never.",
    )

    @field_validator("id")
    @classmethod
    def _id_safe(cls, value: str | None) -> str | None:
        if value is not None and not RUN_ID_PATTERN.fullmatch(value):
            raise ValueError("use letters, digits, '.', '_' or '-' (max 100), no '/' or spaces")
        return value


class CacheConfig(_Strict):
    """The verdict cache: unchanged (query, output, reference, context) pairs are not re-judged."""

    enabled: bool = Field(True, description="Never used by the offline lexical judge.")
    path: str | None = Field(None, description="null: `<output.path>/_cache`.")
    max_age_days: float | None = Field(
        None,
        gt=0,
        description="A verdict older than this is not used, and `ctxprec cache compact` "
        "deletes it. null: verdicts are kept for ever.",
    )
    journal_interval_s: float = Field(
        2.0,
        gt=0,
        description="A worker writes the verdicts it received to the store's journal this "
        "often (and when it stops): a killed worker, driver or node loses at most this many "
        "seconds of replies.",
    )


class RayConfig(_Strict):
    """Where the job runs and how it is cut into tasks."""

    address: str | None = Field(
        None,
        description="null: RAY_ADDRESS when set (inside a Ray Job), else a local Ray on 127.0.0.1.",
    )
    shard_size: int = Field(2000, ge=1, description="Items per task.")
    workers: int = Field(4, ge=1, description="Tasks in flight at once.")
    num_cpus_per_task: float = Field(0.5, gt=0, description="Ray CPUs reserved per task.")
    max_task_retries: int = Field(
        3, ge=0, description="A task whose worker died is retried this many times."
    )
    shared_filesystem: bool = Field(
        False,
        description="true: local input, output and cache paths are on a filesystem every node "
        "mounts at the same place (NFS). false: on a cluster of more than one node a local "
        "path is refused at start-up (use s3://, gs:// or az://).",
    )


class JobConfig(_Strict):
    """A whole job: one YAML file, every section optional except `input`."""

    input: InputConfig
    output: OutputConfig = OutputConfig()
    judge: JudgeConfig = JudgeConfig()
    rate_limit: RateLimitConfig = RateLimitConfig()
    scorer: ScorerConfig = ScorerConfig()
    summary: SummaryConfig = SummaryConfig()
    sample: SampleConfig = SampleConfig()
    canary: CanaryConfig = CanaryConfig()
    run: RunConfig = RunConfig()
    cache: CacheConfig = CacheConfig()
    ray: RayConfig = RayConfig()
    export: ExportConfig = ExportConfig()

    @model_validator(mode="after")
    def _consistent(self) -> JobConfig:
        limits = self.rate_limit
        if limits.concurrency_floor > limits.concurrency_ceiling:
            raise ValueError("rate_limit.concurrency_floor must be <= concurrency_ceiling")
        if isinstance(limits.max_concurrency, int) and limits.max_concurrency < 1:
            raise ValueError("rate_limit.max_concurrency must be >= 1 or auto")
        if self.judge.mode == "batch" and not capabilities_of(self.judge.model).supports_batch:
            raise ValueError(f"judge.mode batch needs an LLM judge.model, not {self.judge.model!r}")
        if self.judge.batch.max_poll_interval_s < self.judge.batch.poll_interval_s:
            raise ValueError("judge.batch.max_poll_interval_s must be >= poll_interval_s")
        if self.judge.model != OFFLINE_JUDGE and self.judge.lexical:
            raise ValueError(f"judge.lexical options apply only to judge.model {OFFLINE_JUDGE!r}")
        _all_carried("summary.by", self.summary.by, self.input.carry)
        _all_carried("sample.by", self.sample.by, self.input.carry)
        return self

    def redacted(self) -> dict[str, Any]:
        """The config as plain data, safe to write next to results (no secret values)."""
        data = self.model_dump(mode="json")
        for section in ("input", "output"):
            data[section]["storage_options"] = _redact(data[section]["storage_options"])
        for phoenix in (data["input"]["phoenix"], data["export"]["phoenix"]):
            if phoenix:
                phoenix["headers"] = dict.fromkeys(phoenix["headers"], "***")
        return data


# Keys of storage_options whose values are secrets: s3fs' key/secret/token, adlfs' account_key,
# sas_token, client_secret, credential and connection_string (which holds the account key),
# gcsfs' token (a path or the credentials themselves).
_SECRET_KEY = re.compile(
    r"(secret|token|password|key|credential|sas|sig|connection_string)", re.IGNORECASE
)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        redacted: dict[str, Any] = {}
        for key, item in value.items():
            secret = _SECRET_KEY.search(str(key)) and not isinstance(item, dict)
            redacted[key] = "***" if secret else _redact(item)
        return redacted
    if isinstance(value, list):
        return [_redact(item) for item in value]
    return value


def assign_dotted(
    node: dict[str, Any],
    assignment: str,
    option: str,
    empty: Any = None,
    *,
    keep_text: bool = False,
) -> None:
    """Apply `dotted.key=value` to nested dicts, the value parsed as YAML (`empty` when blank)."""
    dotted, sep, text = assignment.partition("=")
    keys = dotted.strip().split(".")
    if not sep or not all(keys):
        raise ConfigError(f"{option} {assignment!r}: expected dotted.key=value")
    for key in keys[:-1]:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{option} {dotted}: {key} is not a section")
        node = child
    value = load_yaml(text, f"{option} {dotted}: value {text!r}") if text.strip() else empty
    node[keys[-1]] = value if keep_text else plain(value)


def parse_config(raw: Any, source: str = "config") -> JobConfig:
    """Validate a raw config (a number written where text is wanted is taken as its text)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return JobConfig.model_validate(resolve_user_text(raw, JobConfig))
    except ValidationError as exc:
        lines = [f"{source}: invalid configuration"]
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "(top level)"
            problem = error["msg"]
            if error["type"] == "extra_forbidden":
                problem = "unknown key (check the spelling; see docs/configuration.md)"
            lines.append(f"  {where}: {problem}")
        raise ConfigError("\n".join(lines)) from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> JobConfig:
    """Read, override and validate a YAML config; `ConfigError` names the file and the key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from None
    raw = load_yaml(text, str(path)) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    for assignment in overrides or []:
        assign_dotted(raw, assignment, "--set", keep_text=True)
    return parse_config(raw, str(path))
