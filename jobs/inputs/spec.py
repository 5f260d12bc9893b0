"""The input's types: what to read (`InputSpec`, `ColumnMap`), the `Shard`, and a row at each
stage (`RawRow`, then `ItemRecord` or `RowError`). Light: imports neither pyarrow nor fsspec."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from scorer_core.errors import ConfigError
from scorer_core.types import ScoringItem

if TYPE_CHECKING:
    from jobs.core.config import JobConfig

InputFormat = Literal["jsonl", "parquet"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ColumnMap:
    """Which input column holds each field (`input.columns`); None: there is none."""

    query_id: str | None = "query_id"
    input: str = "input"
    output: str | None = "output"
    expected_output: str | None = None
    context: str = "context"
    context_ids: str | None = None


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    """Where the items are and how to read them (the `input` section)."""

    path: str
    format: InputFormat | None = None
    columns: ColumnMap = field(default_factory=ColumnMap)
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    context_extractor: str | None = None
    carry: tuple[str, ...] = ()
    carry_to_verdicts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("input path is empty")


@dataclass(frozen=True, slots=True, kw_only=True)
class Shard:
    """A piece of one input file: rows or bytes `[start, end)`, or a whole gzipped JSONL file."""

    shard_id: str
    path: str
    format: InputFormat
    start: int
    end: int
    compression: str | None = None

    @property
    def kind(self) -> Literal["rows", "bytes"]:
        return "rows" if self.format == "parquet" else "bytes"


@dataclass(frozen=True, slots=True, kw_only=True)
class RawRow:
    """One input row as read, before validation: `data` or else `error` is set; `row` is a
    Parquet file's row number (`unit` "row") or a JSONL line's byte offset ("offset")."""

    source: str
    row: int
    data: dict[str, Any] | None = None
    error: str | None = None
    unit: Literal["row", "offset"] = "row"

    @property
    def where(self) -> str:
        """Position for messages: "s3://b/f.parquet row 12" or "f.jsonl line at byte 345"."""
        unit = "line at byte" if self.unit == "offset" else "row"
        return f"{self.source} {unit} {self.row}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemRecord:
    """A validated item, normalized, with where it came from and its carried values."""

    query_id: str
    input: str
    output: str
    expected_output: str | None
    contexts: tuple[str, ...]
    source: str
    row: int
    truncated: bool = False
    where: str = ""  # position for messages, as RawRow.where
    context_ids: tuple[str | None, ...] | None = None
    carried: tuple[Any, ...] = ()

    def to_scoring_item(self) -> ScoringItem:
        return ScoringItem(
            input=self.input,
            output=self.output,
            contexts=self.contexts,
            expected_output=self.expected_output,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RowError:
    """A row that cannot be scored; `message` names the position and the field."""

    source: str
    row: int
    message: str
    query_id: str | None = None
    carried: tuple[Any, ...] = ()


def required_columns(spec: InputSpec) -> list[tuple[str, str]]:
    """(field, column) for every column the spec reads (carried ones under "carry")."""
    cols = spec.columns
    wanted: list[tuple[str, str | None]] = [
        ("query_id", cols.query_id),
        ("input", cols.input),
        ("output", cols.output),
        ("expected_output", cols.expected_output),
        ("context", None if spec.context_extractor else cols.context),
        ("context_ids", cols.context_ids),
        *(("carry", name) for name in spec.carry),
    ]
    return [(fld, col) for fld, col in wanted if col is not None]


@functools.cache
def load_extractor(ref: str) -> Callable[[dict[str, Any]], Any]:
    """Import "package.module:function" once per process; `ConfigError` naming `ref` if not."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"context_extractor {ref!r} must look like 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(
            f"context_extractor {ref!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    try:
        target = functools.reduce(getattr, attr.split("."), target)
    except AttributeError as exc:
        raise ConfigError(
            f"context_extractor {ref!r}: {module_name!r} has no attribute {attr!r}"
        ) from exc
    if not callable(target):
        raise ConfigError(f"context_extractor {ref!r} is not callable")
    extractor: Callable[[dict[str, Any]], Any] = target
    return extractor


def input_spec_of(config: JobConfig) -> InputSpec:
    """The input a job config reads: where the items are and which columns hold which field."""
    fmt = config.input.format
    if fmt == "otlp" or fmt == "phoenix":
        raise ConfigError(
            f"input.format {fmt}: traces are assembled into items by `ctxprec run` only; "
            "this command reads items (docs/traces.md)"
        )
    return InputSpec(
        path=config.input.path,
        format=fmt,
        columns=ColumnMap(**config.input.columns.model_dump()),
        storage_options=config.input.storage_options,
        context_extractor=config.input.context_extractor,
        carry=tuple(config.input.carry),
        carry_to_verdicts=tuple(config.input.carry_to_verdicts),
    )


def trace_items_spec(config: JobConfig, url: str) -> InputSpec:
    """The items assembled from `config`'s traces, at `url` in the output store (their columns:
    `jobs.inputs.traces.items_schema`)."""
    answers = None if config.input.otlp.output == "none" else "output"
    columns = ColumnMap(
        query_id="query_id",
        input="input",
        output=answers,
        context="context",
        context_ids="context_ids",
    )
    return InputSpec(
        path=url,
        format="parquet",
        columns=columns,
        storage_options=dict(config.output.storage_options),
        carry=tuple(config.input.carry),
        carry_to_verdicts=tuple(config.input.carry_to_verdicts),
    )
