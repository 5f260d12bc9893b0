"""Every table the job writes, its columns' names, types and meanings written once: staged shard
files, published tables, the verdict cache and store, batch mode's staging. `RunSchema` is a
run's tables with its carried columns; docs/output.md shows the published columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

import polars as pl
import pyarrow as pa

ColumnType = Literal["string", "bool", "int32", "int64", "float64"]


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its name, its type (ours, or any Arrow type when carried) and its `doc`."""

    name: str
    type: ColumnType | pa.DataType
    doc: str

    @property
    def arrow(self) -> pa.DataType:
        return self.type if isinstance(self.type, pa.DataType) else pa.type_for_alias(self.type)


@dataclass(frozen=True, kw_only=True)
class Table:
    """A table's columns in order, with its Arrow and Polars schemas derived from them."""

    name: str
    columns: tuple[Column, ...]
    names: tuple[str, ...] = field(init=False)
    arrow: pa.Schema = field(init=False, repr=False)
    polars: pl.Schema = field(init=False, repr=False)
    _by_name: dict[str, Column] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = tuple(column.name for column in self.columns)
        if len(set(names)) != len(names):
            raise ValueError(f"table {self.name}: a column name appears twice in {names}")
        arrow = pa.schema([(column.name, column.arrow) for column in self.columns])
        # A frozen dataclass sets its derived fields through object.__setattr__.
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "_by_name", {column.name: column for column in self.columns})
        object.__setattr__(self, "arrow", arrow)
        object.__setattr__(self, "polars", pl.from_arrow(pa.Table.from_batches([], arrow)).schema)  # type: ignore[union-attr]

    def column(self, name: str) -> Column:
        """The column called `name` (KeyError naming the table when there is none)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"table {self.name} has no column {name!r}") from None

    def project(self, name: str, names: Sequence[str]) -> Table:
        """A table `name` made of some of these columns, in the order of `names`."""
        return Table(name=name, columns=tuple(self.column(name) for name in names))

    def with_extra(self, extra: Iterable[Column]) -> Table:
        """This table with `extra` columns after its own (ValueError when a name clashes)."""
        extra = tuple(extra)
        return Table(name=self.name, columns=self.columns + extra) if extra else self

    def build_row(self, **values: Any) -> dict[str, Any]:
        """A row as a dict in column order; a missing or unknown column raises ValueError."""
        if tuple(values) == self.names:
            return values  # the builders pass columns in order: no copy per verdict row
        if values.keys() != self._by_name.keys():
            missing = sorted(set(self.names) - values.keys())
            unknown = sorted(values.keys() - set(self.names))
            raise ValueError(f"table {self.name}: missing columns {missing}, unknown {unknown}")
        return {name: values[name] for name in self.names}


def duplicate_error(query_id: str, first: str) -> str:
    """The `error` of a row whose `duplicate_of` is `first` (the users' message since v1)."""
    return f"duplicate query_id {query_id}: only its first occurrence ({first}) is scored"


def context_hash(text: str) -> str:
    """The `context_hash` of a context: the first 32 hex digits of the SHA-256 of its text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


# -- staged, one file per shard -------------------------------------------------------------

STAGED_ITEMS = Table(
    name="items",
    columns=(
        Column("query_id", "string", "the item's id (`source#row` when the row had none)"),
        Column(
            "item_seq",
            "int64",
            "shard number << 32 | index within the shard: unique and in input order across the run",
        ),
        Column("status", "string", "`ok`, `unscored` or `error`"),
        Column("error", "string", "why the item is not `ok`; null when it is"),
        Column(
            "score",
            "float64",
            "context precision times `scale`, 2 decimals, as the worker computed it; null "
            "unless `status` is `ok`",
        ),
        Column("reason", "string", "why the score is what it is (template or LLM)"),
        Column("context_count", "int32", "contexts judged (after truncation)"),
        Column("relevant_count", "int32", "contexts the judge found relevant"),
        Column(
            "truncated",
            "bool",
            "a context was cut to `input.max_context_chars` or contexts beyond "
            "`input.max_contexts` were dropped",
        ),
        Column("judge_model", "string", "the judge model (`lexical` for the offline judge)"),
        Column("calls", "int64", "judge requests made for the item"),
        Column("prompt_tokens", "int64", "prompt tokens the provider reported"),
        Column("completion_tokens", "int64", "completion tokens the provider reported"),
        Column("retries", "int64", "requests retried after a transport error"),
        Column("rate_limited", "int64", "requests refused with HTTP 429"),
        Column("reasks", "int64", "replies re-asked because they were unusable"),
        Column("cache_hits", "int64", "verdicts answered by the verdict cache"),
        Column(
            "cached_prompt_tokens",
            "int64",
            "of prompt_tokens, those the provider read from its prompt cache (billed at its "
            "cache rate)",
        ),
        Column(
            "cache_creation_tokens",
            "int64",
            "of prompt_tokens, those written to the provider's prompt cache (Anthropic "
            "reports them)",
        ),
        Column("source", "string", "the input file"),
        Column(
            "row", "int64", "row number in a Parquet file; byte offset of the line in a JSONL file"
        ),
        Column(
            "duplicate_of",
            "string",
            "for a repeated `query_id`, where its first occurrence is (`<file> row 7` or "
            "`<file> line at byte 120`); null otherwise",
        ),
    ),
)
"""One row per input row of a shard; the file is the shard's commit marker."""

STAGED_VERDICTS = Table(
    name="verdicts",
    columns=(
        Column("query_id", "string", "the item's id"),
        Column("item_seq", "int64", "the item's `item_seq` (tells duplicates apart)"),
        Column("position", "int32", "0-based rank of the context as retrieved"),
        Column(
            "context_id",
            "string",
            "the context's id from `input.columns.context_ids` (integers as text); null without",
        ),
        Column(
            "context_hash",
            "string",
            "the first 32 hex digits of the SHA-256 of the context's UTF-8 text as judged (after "
            "truncation): `left(sha256(text), 32)` in DuckDB",
        ),
        Column(
            "relevant", "bool", "the judge's verdict; null where none was obtained (item not `ok`)"
        ),
        Column(
            "judge_reason",
            "string",
            "the judge's one-line reason for the verdict; null when judge.verdict_reasons is "
            "false or no verdict was obtained",
        ),
        Column("pair_key", "string", "the verdict cache key; empty when the cache is off"),
        Column("cached", "bool", "the verdict came from the cache"),
    ),
)
"""One row per context of a judged item."""

# -- published, one file per run ------------------------------------------------------------

PUBLISHED_SCORES = STAGED_ITEMS.project(
    "scores",
    (
        *("query_id", "score", "reason", "status", "error", "relevant_count", "context_count"),
        *("judge_model", "calls", "prompt_tokens", "completion_tokens", "cache_hits"),
        *("cached_prompt_tokens", "cache_creation_tokens", "source", "row", "truncated"),
        "duplicate_of",
    ),
)
"""One row per input row of the run."""

PUBLISHED_VERDICTS = STAGED_VERDICTS.project(
    "verdicts",
    ("query_id", "position", "context_id", "context_hash", "relevant", "judge_reason", "cached"),
)
"""One row per context of a judged item (later duplicates' verdicts are dropped)."""

PUBLISHED_SUMMARY = Table(
    name="summary",
    columns=(
        Column("model", "string", "the judge model"),
        Column(
            "segment_by",
            "string",
            "the `summary.by` column a segment's row is about; null on the rows of the whole run",
        ),
        Column(
            "segment",
            "string",
            "that column's value, as text (dates ISO, booleans `true`/`false`); null on the rows "
            "of the whole run, and for the items whose value is null",
        ),
        Column(
            "metric",
            "string",
            "`scale`, `items`, `population`, `scored`, `unscored`, `errors`, `mean`, "
            "`median`, `p10`, `p90`, `mean_ci_low`, `mean_ci_high`, `judge_calls`, "
            "`prompt_tokens`, `completion_tokens`, `cache_hits`, `cached_prompt_tokens`, "
            "`cache_creation_tokens`, `cost_usd`, `band_count`, "
            "`position_judged`, `position_relevant`, `position_rate`; with a judge canary "
            "also canary_items, canary_kappa, canary_precision and canary_recall (the whole "
            "run's rows). mean_ci_low / mean_ci_high: the 95% interval of the mean; "
            "population: items in the input (items of them judged in a sampled run)",
        ),
        Column(
            "band",
            "string",
            "the band of score / scale of a `band_count` row: `none` (0), `low` (above 0, "
            "below 0.35), `moderate` (0.35 to 0.65), `good` (0.65 to 0.85), `excellent` (0.85 "
            "and up), as `scorer_core.score_band` names them (runs published before named "
            "bands say 0, 0.1-0.3, 0.4-0.6, 0.7-0.8, 0.9-1.0); null otherwise",
        ),
        Column("position", "int32", "the position of a `position_*` row; null otherwise"),
        Column("value", "float64", "the metric's value; null when undefined"),
    ),
)
"""One row per metric of the run, and per metric of each segment (`summary.by`): a tidy table,
see `jobs.engine.publish.aggregate.RunSummary`."""

# -- the verdict cache ----------------------------------------------------------------------

VERDICT_CACHE = STAGED_VERDICTS.project("cache", ("pair_key", "relevant", "judge_reason"))
"""One row per cached verdict (`relevant` is never null here)."""

VERDICT_STORE = VERDICT_CACHE.with_extra(
    (
        Column(
            "written_at",
            "int64",
            "when the verdict was written to the store (Unix seconds): retention drops it "
            "cache.max_age_days later",
        ),
    )
)
"""One row per verdict in the content-addressed verdict store (`jobs.core.verdict_store`)."""

# -- batch mode's staging (jobs.engine.batch) -----------------------------------------------

BATCH_REQUESTS = Table(
    name="batch_requests",
    columns=(
        Column(
            "custom_id",
            "string",
            "`<shard number>-<item index>-v<first position>-<attempt>` for verdicts, "
            "`...-r-<attempt>` for an LLM reason",
        ),
        Column("bytes", "int64", "the request line's size in the batch file, newline included"),
        Column("tokens", "int64", "the request's prompt tokens, estimated (for queue limits)"),
    ),
)
"""One row per request line of a shard's requests file for one round, in the same order."""

BATCH_REPLIES = Table(
    name="batch_replies",
    columns=(
        Column("custom_id", "string", "the request the reply answers"),
        Column("text", "string", "the reply's message content; null when there is none"),
        Column("error", "string", "why there is no reply (error file, expiry, missing line)"),
        Column("prompt_tokens", "int64", "prompt tokens the provider reported"),
        Column("completion_tokens", "int64", "completion tokens the provider reported"),
        Column("retry", "string", "why an error is transient (asked again); null: final"),
        Column(
            "cached_prompt_tokens",
            "int64",
            "of prompt_tokens, those the provider read from its prompt cache (billed at its "
            "cache rate)",
        ),
        Column(
            "cache_creation_tokens",
            "int64",
            "of prompt_tokens, those written to the provider's prompt cache (Anthropic "
            "reports them)",
        ),
    ),
)
"""One row per answered (or failed) request of a shard: a batch's output and error lines,
its missing lines, and online re-asks."""

# -- a run's tables: ours plus the input columns it carries ---------------------------------

HIVE_COLUMNS = ("run_date", "run_id")
"""The partition columns readers add (`hive_partitioning=true`): no table may have them."""


@dataclass(frozen=True, slots=True)
class CarriedColumn:
    """An input column a run copies into its scores (and, `into_verdicts`, verdicts) rows."""

    name: str
    type: pa.DataType
    into_verdicts: bool = False

    @property
    def column(self) -> Column:
        return Column(self.name, self.type, f"the input column {self.name!r}, as read")


def carry_clashes(carry: Sequence[str], into_verdicts: Sequence[str]) -> list[str]:
    """Why each carried name cannot be used (one of our columns, or a partition column)."""
    problems = []
    for name in carry:
        if name in HIVE_COLUMNS:
            problems.append(f"{name!r} is a partition column readers add (run_date, run_id)")
        elif name in STAGED_ITEMS.names:
            problems.append(f"{name!r} is a column of the scores table")
        elif name in into_verdicts and name in STAGED_VERDICTS.names:
            problems.append(f"{name!r} is a column of the verdicts table")
    return problems


@dataclass(frozen=True)
class RunSchema:
    """One run's tables with its carried columns; pickled as its carried columns only."""

    carried: tuple[CarriedColumn, ...] = ()

    def __post_init__(self) -> None:
        problems = carry_clashes(self.names, self.verdict_names)
        if problems:
            raise ValueError("carried columns clash: " + "; ".join(problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (RunSchema, (self.carried,))

    @property
    def names(self) -> tuple[str, ...]:
        """The carried columns' names, in the order their values travel (`ItemRecord.carried`)."""
        return tuple(carried.name for carried in self.carried)

    @property
    def verdict_names(self) -> tuple[str, ...]:
        return tuple(carried.name for carried in self.carried if carried.into_verdicts)

    @cached_property
    def staged_items(self) -> Table:
        return STAGED_ITEMS.with_extra(carried.column for carried in self.carried)

    @cached_property
    def staged_verdicts(self) -> Table:
        return STAGED_VERDICTS.with_extra(
            carried.column for carried in self.carried if carried.into_verdicts
        )

    @cached_property
    def scores(self) -> Table:
        return PUBLISHED_SCORES.with_extra(carried.column for carried in self.carried)

    @cached_property
    def verdicts(self) -> Table:
        return PUBLISHED_VERDICTS.with_extra(
            carried.column for carried in self.carried if carried.into_verdicts
        )
