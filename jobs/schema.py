"""Every table the job writes: its columns, their types and meanings, written once.

* staged (per shard, under `_staging/`, written by `jobs.engine.worker`): `STAGED_ITEMS`,
  `STAGED_VERDICTS`;
* published (what readers see, written by `jobs.engine.publish`): `PUBLISHED_SCORES`,
  `PUBLISHED_VERDICTS`, `PUBLISHED_SUMMARY`;
* `VERDICT_CACHE`, the verdict cache files that outlive runs (`jobs.engine.cache`).

The workers write with pyarrow and publishing reads with Polars; both take their schemas from
here (`Table.arrow`, `Table.polars`), and the row builders take their keys from here
(`Table.build_row`). The published tables are projections of the staged ones, so a column has
one type from the shard file to the reader. The README's "Output" section lists the published
columns with these types and meanings; tests/test_schema.py keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl
import pyarrow as pa

ColumnType = Literal["string", "bool", "int32", "int64", "float64"]

_ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    "string": pa.string(),
    "bool": pa.bool_(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "float64": pa.float64(),
}
_POLARS_TYPES: dict[ColumnType, pl.DataType] = {
    "string": pl.String(),
    "bool": pl.Boolean(),
    "int32": pl.Int32(),
    "int64": pl.Int64(),
    "float64": pl.Float64(),
}


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its name, its type and what it holds (the README shows `doc` verbatim)."""

    name: str
    type: ColumnType
    doc: str


@dataclass(frozen=True)
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
        # A frozen dataclass sets its derived fields through object.__setattr__.
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "_by_name", {column.name: column for column in self.columns})
        object.__setattr__(
            self, "arrow", pa.schema([(c.name, _ARROW_TYPES[c.type]) for c in self.columns])
        )
        object.__setattr__(
            self, "polars", pl.Schema([(c.name, _POLARS_TYPES[c.type]) for c in self.columns])
        )

    def column(self, name: str) -> Column:
        """The column called `name` (KeyError naming the table when there is none)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"table {self.name} has no column {name!r}") from None

    def project(self, name: str, names: Sequence[str]) -> Table:
        """A table `name` made of some of these columns, in the order of `names`."""
        return Table(name, tuple(self.column(n) for n in names))

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


# -- staged, one file per shard -------------------------------------------------------------

STAGED_ITEMS = Table(
    "items",
    (
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
        Column("source", "string", "the input file"),
        Column(
            "row",
            "int64",
            "row number in a Parquet file; byte offset of the line in a JSONL file",
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
    "verdicts",
    (
        Column("query_id", "string", "the item's id"),
        Column("item_seq", "int64", "the item's `item_seq` (tells duplicates apart)"),
        Column("position", "int32", "0-based rank of the context as retrieved"),
        Column(
            "relevant",
            "bool",
            "the judge's verdict; null where none was obtained (item not `ok`)",
        ),
        Column("judge_reason", "string", "the judge's one-line reason for the verdict"),
        Column("pair_key", "string", "the verdict cache key; empty when the cache is off"),
        Column("cached", "bool", "the verdict came from the cache"),
    ),
)
"""One row per context of a judged item."""

# -- published, one file per run ------------------------------------------------------------

PUBLISHED_SCORES = STAGED_ITEMS.project(
    "scores",
    (
        "query_id",
        "score",
        "reason",
        "status",
        "error",
        "relevant_count",
        "context_count",
        "judge_model",
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "cache_hits",
        "source",
        "row",
        "truncated",
        "duplicate_of",
    ),
)
"""One row per input row of the run."""

PUBLISHED_VERDICTS = STAGED_VERDICTS.project(
    "verdicts", ("query_id", "position", "relevant", "judge_reason", "cached")
)
"""One row per context of a judged item (later duplicates' verdicts are dropped)."""

PUBLISHED_SUMMARY = Table(
    "summary",
    (
        Column("model", "string", "the judge model"),
        Column(
            "metric",
            "string",
            "`scale`, `items`, `scored`, `unscored`, `errors`, `mean`, `median`, `p10`, "
            "`p90`, `judge_calls`, `prompt_tokens`, `completion_tokens`, `cache_hits`, "
            "`cost_usd`, `band_count`, `position_judged`, `position_relevant`, "
            "`position_rate`",
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
"""One row per metric of the run (a tidy table, see `jobs.engine.aggregate.RunSummary`)."""

PUBLISHED: tuple[Table, ...] = (PUBLISHED_SCORES, PUBLISHED_VERDICTS, PUBLISHED_SUMMARY)
"""The tables a reader of the output root sees, by their folder names."""

# -- the verdict cache ----------------------------------------------------------------------

VERDICT_CACHE = STAGED_VERDICTS.project("cache", ("pair_key", "relevant", "judge_reason"))
"""One row per cached verdict (`relevant` is never null here)."""
