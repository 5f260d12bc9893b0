"""Text UTF-8 cannot encode (a lone surrogate, valid in JSON) is an item's problem, not its
shard's: such a row becomes its own `RowError` naming the field and character, and every error
row leaving the reader is writable (ids and messages escaped, unwritable carried values null).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jobs.core.schema import CarriedColumn
from jobs.core.text_safety import escaped, unencodable
from jobs.inputs.rows import ItemRecord, RowError


def encodable_record(
    record: ItemRecord | RowError, carried: Sequence[CarriedColumn] = ()
) -> ItemRecord | RowError:
    """`record` when everything in it encodes, else its `RowError` naming the field."""
    if isinstance(record, RowError):
        return writable_error(record)
    problem = _first_problem(record, carried)
    if problem is None:
        return record
    where = record.where or f"{record.source} row {record.row}"
    return writable_error(
        RowError(
            record.source,
            record.row,
            f"{where}: {problem} (text that cannot be encoded as UTF-8)",
            record.query_id,
            record.carried,
        )
    )


def writable_error(error: RowError) -> RowError:
    """`error` with its query_id and message escaped and unwritable carried values null."""
    query_id = escaped(error.query_id) if error.query_id is not None else None
    carried = tuple(None if unencodable(v) else v for v in error.carried)
    message = escaped(error.message)
    if (query_id, carried, message) == (error.query_id, error.carried, error.message):
        return error
    return RowError(error.source, error.row, message, query_id, carried)


def _first_problem(record: ItemRecord, carried: Sequence[CarriedColumn]) -> str | None:
    fields: list[tuple[str, Any]] = [
        ("query_id", record.query_id),
        ("input", record.input),
        ("output", record.output),
        ("expected_output", record.expected_output),
        ("context", list(record.contexts)),
        ("context_ids", list(record.context_ids or ())),
    ]
    names = [column.name for column in carried] or [f"#{n}" for n in range(len(record.carried))]
    fields += [
        (f"{name} (carried column)", value)
        for name, value in zip(names, record.carried, strict=False)
    ]
    for name, value in fields:
        found = unencodable(value) if value is not None else None
        if found is not None:
            return f"{name}: {found}"
    return None
