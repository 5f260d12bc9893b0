"""A shard's rows as items: read by format, then normalised, truncated and checked (`to_item`).
Bad data never raises here: a row that cannot be scored becomes a `RowError` naming its
position and the field, and reading goes on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jobs.core.config import DEFAULT_MAX_CONTEXT_CHARS, DEFAULT_MAX_CONTEXTS, TRACES, JobConfig
from jobs.core.schema import CarriedColumn
from jobs.core.storage import filesystem
from jobs.core.text_safety import escaped, unencodable
from jobs.inputs.carry import conform
from jobs.inputs.jsonl import read_jsonl_shard
from jobs.inputs.parquet import read_parquet_shard
from jobs.inputs.spec import (
    InputSpec,
    ItemRecord,
    RawRow,
    RowError,
    Shard,
    input_spec_of,
    load_extractor,
    trace_items_spec,
)
from scorer_core.errors import InputError
from scorer_core.prompt import Against, judged_item
from scorer_core.scorer import validate_item


@dataclass(frozen=True, kw_only=True)
class ItemReader:
    """How a run reads its items: the input, the per-item limits, what items are judged against."""

    spec: InputSpec
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS
    max_contexts: int = DEFAULT_MAX_CONTEXTS
    against: Against = "all"  # what the items are judged against (`judge.against`)

    @classmethod
    def for_config(cls, config: JobConfig, trace_items: str | None = None) -> ItemReader:
        """How `config`'s items are read. Traces (input.format otlp, phoenix) are read as the
        items the run assembles from them, at `trace_items` (a URL under the output)."""
        if config.input.format in TRACES:
            if trace_items is None:
                raise ValueError(f"input.format {config.input.format}: where are the items?")
            spec = trace_items_spec(config, trace_items)
        else:
            spec = input_spec_of(config)
        return cls(
            spec=spec,
            max_context_chars=config.input.max_context_chars,
            max_contexts=config.input.max_contexts,
            against=config.judge.against,
        )

    def read(
        self, shard: Shard, carried: Sequence[CarriedColumn] = ()
    ) -> Iterator[ItemRecord | RowError]:
        """`shard`'s rows, normalised and validated, in input order."""
        limits = {"max_context_chars": self.max_context_chars, "max_contexts": self.max_contexts}
        for raw in read_shard(self.spec, shard):
            item = to_item(self.spec, raw, **limits, carried=carried)
            yield validate_record(encodable_record(item, carried), self.against)


def read_shard(
    spec: InputSpec, shard: Shard, only: Sequence[str] | None = None
) -> Iterator[RawRow]:
    """Stream the rows of `shard` (`only`: of a Parquet file, just these columns)."""
    fs, fs_path, _ = filesystem(shard.path, spec.storage_options)
    if shard.format == "parquet":
        return read_parquet_shard(spec, fs, fs_path, shard, only)
    return read_jsonl_shard(fs, fs_path, shard)


def read_query_ids(spec: InputSpec, shard: Shard) -> Iterator[tuple[str, str, int]]:
    """(query_id, source, row) of every row of `shard`, the id as the job records it."""
    column = spec.columns.query_id
    for raw in read_shard(spec, shard, only=[column] if column else None):
        query_id = f"{raw.source}#{raw.row}"
        if raw.error is None and raw.data is not None:
            with contextlib.suppress(_Invalid):
                query_id = escaped(_query_id(raw, column))  # as its error row names it
        yield query_id, raw.source, raw.row


class _Invalid(Exception):
    """One field of a row is unusable (internal; becomes a RowError)."""


def to_item(
    spec: InputSpec,
    raw: RawRow,
    *,
    max_context_chars: int = DEFAULT_MAX_CONTEXT_CHARS,
    max_contexts: int = DEFAULT_MAX_CONTEXTS,
    carried: Sequence[CarriedColumn] = (),
) -> ItemRecord | RowError:
    """One row checked and normalised, or its `RowError` naming the position and the field."""
    if raw.error is not None or raw.data is None:
        return RowError(
            source=raw.source, row=raw.row, message=raw.error or f"{raw.where}: no data"
        )
    data = raw.data
    cols = spec.columns
    values, carry_problem = _carried(data, carried)
    query_id: str | None = None
    try:
        query_id = _query_id(raw, cols.query_id)
        text_input = _text(data, "input", cols.input)
        reference = _optional_text(data, cols.expected_output)
        output = "" if cols.output is None else _text(data, "output", cols.output, empty=True)
        contexts = _contexts(spec, data)
        ids = _context_ids(data, cols.context_ids, len(contexts))
        if carry_problem is not None:
            raise _Invalid(carry_problem)
    except _Invalid as exc:
        return RowError(
            source=raw.source,
            row=raw.row,
            message=f"{raw.where}: {exc}",
            query_id=query_id,
            carried=values,
        )
    kept = contexts[:max_contexts]
    truncated = len(contexts) > max_contexts or any(
        len(context) > max_context_chars for context in kept
    )
    return ItemRecord(
        query_id=query_id,
        input=text_input,
        output=output,
        expected_output=reference,
        contexts=tuple(context[:max_context_chars] for context in kept),
        source=raw.source,
        row=raw.row,
        truncated=truncated,
        where=raw.where,
        context_ids=ids[:max_contexts] if ids is not None else None,
        carried=values,
    )


def _row_error(record: ItemRecord, problem: str) -> RowError:
    """The error row of `record`, whose `problem` is named after its position."""
    where = record.where or f"{record.source} row {record.row}"
    return RowError(
        source=record.source,
        row=record.row,
        message=f"{where}: {problem}",
        query_id=record.query_id,
        carried=record.carried,
    )


def validate_record(
    record: ItemRecord | RowError, against: Against = "all"
) -> ItemRecord | RowError:
    """Reject items the scorer cannot take, with the row's position in the message; keep of
    output and reference only what the item is judged `against`."""
    if isinstance(record, RowError):
        return record
    try:
        item = judged_item(record.to_scoring_item(), against)
        validate_item(item)
    except InputError as exc:
        return _row_error(record, str(exc))
    if against == "all":
        return record
    return replace(record, output=item.output, expected_output=item.expected_output)


def _carried(
    data: Mapping[str, Any], carried: Sequence[CarriedColumn]
) -> tuple[tuple[Any, ...], str | None]:
    """The carried values (None where one does not fit) and the first problem, if any."""
    values: list[Any] = []
    problem: str | None = None
    for column in carried:
        try:
            values.append(conform(column, data.get(column.name)))
        except ValueError as exc:
            values.append(None)
            problem = problem or f"{column.name} (carried column) {exc}"
    return tuple(values), problem


def _context_ids(
    data: Mapping[str, Any], column: str | None, count: int
) -> tuple[str | None, ...] | None:
    value = None if column is None else data.get(column)
    if value is None:
        return None
    label = f"context_ids (column {column!r})"
    if not isinstance(value, list | tuple):
        raise _Invalid(
            f"{label} is a {type(value).__name__}, expected a list with one id per context"
        )
    if len(value) != count:
        raise _Invalid(f"{label} has {len(value)} ids for {count} contexts")
    for position, element in enumerate(value):
        if isinstance(element, bool) or not isinstance(element, str | int | None):
            raise _Invalid(
                f"{label} element {position} is a {type(element).__name__}, expected a string "
                "or an integer"
            )
    return tuple(None if element is None else str(element) for element in value)


def _query_id(raw: RawRow, column: str | None) -> str:
    if column is None:
        return f"{raw.source}#{raw.row}"
    assert raw.data is not None
    return _text(raw.data, "query_id", column, integer=True)


def _text(
    data: Mapping[str, Any], name: str, column: str, *, empty: bool = False, integer: bool = False
) -> str:
    """The text of field `name`; `empty`: it may be blank; `integer`: an integer is text too."""
    label = f"{name} (column {column!r})"
    value = data.get(column)
    if column not in data:
        raise _Invalid(f"{label} is missing")
    if value is None:
        raise _Invalid(f"{label} is null")
    if isinstance(value, bool) or not isinstance(value, str | int if integer else str):
        expected = "a string or an integer" if integer else "a string"
        raise _Invalid(f"{label} is a {type(value).__name__}, expected {expected}")
    if not empty and not str(value).strip():
        raise _Invalid(f"{label} is empty")
    return str(value)


def _optional_text(data: Mapping[str, Any], column: str | None) -> str | None:
    value = None if column is None else data.get(column)
    if value is not None and not isinstance(value, str):
        raise _Invalid(
            f"expected_output (column {column!r}) is a {type(value).__name__}, "
            "expected a string or null"
        )
    return value if value and value.strip() else None


def _contexts(spec: InputSpec, data: dict[str, Any]) -> list[str]:
    if spec.context_extractor:
        label = f"context (from context_extractor {spec.context_extractor!r})"
        extractor = load_extractor(spec.context_extractor)
        try:
            value = extractor(data)
        except Exception as exc:
            raise _Invalid(f"{label} raised {type(exc).__name__}: {exc}") from exc
    else:
        column = spec.columns.context
        label = f"context (column {column!r})"
        if column not in data:
            raise _Invalid(f"{label} is missing")
        value = data[column]
    if value is None:
        raise _Invalid(f"{label} is null, expected a list of strings")
    if isinstance(value, str):
        hint = (
            "; it looks like a JSON-encoded list: decode it with a context_extractor"
            if value.lstrip().startswith("[")
            else ""
        )
        raise _Invalid(f"{label} is a string, expected a list of strings{hint}")
    if not isinstance(value, list | tuple):
        raise _Invalid(f"{label} is a {type(value).__name__}, expected a list of strings")
    if not value:
        raise _Invalid(f"{label} is an empty list")
    for position, element in enumerate(value):
        if not isinstance(element, str):
            raise _Invalid(
                f"{label} element {position} is a {type(element).__name__}, expected a string"
            )
    return list(value)


# -- text UTF-8 cannot encode (a lone surrogate, valid in JSON): the row's error, not its shard's


def encodable_record(
    record: ItemRecord | RowError, carried: Sequence[CarriedColumn] = ()
) -> ItemRecord | RowError:
    """`record` when everything in it encodes, else its `RowError` naming the field."""
    if isinstance(record, RowError):
        return writable_error(record)
    names = [column.name for column in carried] or [
        f"#{number}" for number in range(len(record.carried))
    ]
    fields: list[tuple[str, Any]] = [
        ("query_id", record.query_id),
        ("input", record.input),
        ("output", record.output),
        ("expected_output", record.expected_output),
        ("context", list(record.contexts)),
        ("context_ids", list(record.context_ids or ())),
        *(
            (f"{name} (carried column)", value)
            for name, value in zip(names, record.carried, strict=False)
        ),
    ]
    for name, value in fields:
        found = unencodable(value) if value is not None else None
        if found is not None:
            problem = f"{name}: {found} (text that cannot be encoded as UTF-8)"
            return writable_error(_row_error(record, problem))
    return record


def writable_error(error: RowError) -> RowError:
    """`error` with its query_id and message escaped and unwritable carried values null."""
    query_id = escaped(error.query_id) if error.query_id is not None else None
    carried = tuple(None if unencodable(value) else value for value in error.carried)
    message = escaped(error.message)
    if (query_id, carried, message) == (error.query_id, error.carried, error.message):
        return error
    return replace(error, message=message, query_id=query_id, carried=carried)
