"""A shard's staged rows, built from what was read and what the judge said: pure functions.

`item_row`, `error_row` and `verdict_rows` are `dict -> dict` steps tested without Ray;
`shard_rows` applies them to a whole shard. The columns are `jobs.core.schema.STAGED_ITEMS` and
`jobs.core.schema.STAGED_VERDICTS`, with the run's carried columns after ours (`RunSchema`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from jobs.core.schema import STAGED_ITEMS, STAGED_VERDICTS, RunSchema, context_hash
from jobs.core.verdict_cache import VerdictCache, pair_key
from jobs.inputs import ItemRecord, RowError
from jobs.inputs.shard_read import ShardRead
from scorer_core.types import ScoreResult, Usage


def _with_carried(
    row: dict[str, Any], names: Sequence[str], values: Sequence[Any]
) -> dict[str, Any]:
    """`row` with the carried columns' values after our columns (nulls when `values` is ())."""
    if names:
        row.update(zip(names, values or (None,) * len(names), strict=True))
    return row


def _usage_columns(usage: Usage) -> dict[str, int]:
    """The items table's judging-cost columns, named after `Usage`'s fields, in their order."""
    return {column.name: getattr(usage, column.name) for column in fields(usage)}


def error_row(
    error: RowError,
    seq: int,
    model: str,
    duplicate_of: str | None = None,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> dict[str, Any]:
    """The staged items row of a row that cannot be scored (`duplicate_of`: see the schema)."""
    row = STAGED_ITEMS.build_row(
        query_id=error.query_id if error.query_id is not None else f"{error.source}#{error.row}",
        item_seq=seq,
        status="error",
        error=error.message,
        score=None,
        reason="",
        context_count=0,
        relevant_count=0,
        truncated=False,
        judge_model=model,
        **_usage_columns(Usage()),  # not judged: all 0
        source=error.source,
        row=error.row,
        duplicate_of=duplicate_of,
    )
    return _with_carried(row, tables.names, error.carried)


def item_row(
    record: ItemRecord,
    seq: int,
    result: ScoreResult,
    model: str,
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> dict[str, Any]:
    """The staged items row of a judged item: the worker's score is the published score."""
    row = STAGED_ITEMS.build_row(
        query_id=record.query_id,
        item_seq=seq,
        status=result.status,
        error=result.error,
        score=result.score,
        reason=result.reason,
        context_count=len(record.contexts),
        relevant_count=result.relevant_count,
        truncated=record.truncated,
        judge_model=model,
        **_usage_columns(result.usage),
        source=record.source,
        row=record.row,
        duplicate_of=None,
    )
    return _with_carried(row, tables.names, record.carried)


@dataclass(frozen=True, kw_only=True)
class ContextKeys:
    """An item's pair keys, one per context (none without a cache), and the positions whose
    verdict the cache knew before judging."""

    keys: Sequence[str] = ()
    cached: frozenset[int] = frozenset()


def verdict_rows(
    record: ItemRecord,
    seq: int,
    result: ScoreResult,
    context_keys: ContextKeys = ContextKeys(),
    tables: RunSchema = RunSchema(),  # noqa: B008 - frozen, shared safely
) -> list[dict[str, Any]]:
    """One row per context position; `relevant` is null where no verdict was obtained."""
    keys = context_keys.keys
    by_index = {verdict.index: verdict for verdict in result.verdicts}
    usable = result.status == "ok"
    ids = record.context_ids
    names = tables.verdict_names
    values: tuple[Any, ...] = ()
    if names:
        by_name = dict(zip(tables.names, record.carried, strict=True)) if record.carried else {}
        values = tuple(by_name.get(name) for name in names)
    rows = []
    for position, text in enumerate(record.contexts):
        verdict = by_index.get(position)
        row = STAGED_VERDICTS.build_row(
            query_id=record.query_id,
            item_seq=seq,
            position=position,
            context_id=ids[position] if ids is not None else None,
            context_hash=context_hash(text),
            relevant=verdict.relevant if (verdict and usable) else None,
            judge_reason=verdict.reason or None if verdict else None,  # null: none was asked
            pair_key=keys[position] if keys else "",
            cached=position in context_keys.cached,
        )
        rows.append(_with_carried(row, names, values))
    return rows


@dataclass(kw_only=True)
class ShardRows:
    """A shard's staged rows, in input order, and what they count."""

    items: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    statuses: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PairKeys:
    """The verdict cache's view of a shard: each context's pair key under the run's cache
    fingerprint, and which were known before judging (no keys without a cache)."""

    cache: VerdictCache | None = None
    fingerprint: str = ""

    def keys(self, record: ItemRecord) -> list[str]:
        if self.cache is None:
            return []
        item = record.to_scoring_item()
        return [
            pair_key(self.fingerprint, item, position) for position in range(len(record.contexts))
        ]

    def of(self, record: ItemRecord) -> ContextKeys:
        """`record`'s pair keys, and which the cache knew before judging."""
        keys = self.keys(record)
        known = self.cache.known if self.cache is not None else {}
        cached = frozenset(position for position, key in enumerate(keys) if key in known)
        return ContextKeys(keys=keys, cached=cached)


def shard_rows(
    read: ShardRead, results: Sequence[ScoreResult], model: str, tables: RunSchema, pairs: PairKeys
) -> ShardRows:
    """The staged rows of a shard: its read errors and its judged items, sorted by item_seq."""
    rows = ShardRows()
    rows.items = [
        error_row(error, seq, model, duplicate_of=first, tables=tables)
        for seq, error, first in read.errors
    ]
    for (seq, record), result in zip(read.records, results, strict=True):
        rows.items.append(item_row(record, seq, result, model, tables))
        rows.verdicts.extend(verdict_rows(record, seq, result, pairs.of(record), tables))
        rows.usage = rows.usage + result.usage
        rows.statuses[result.status] = rows.statuses.get(result.status, 0) + 1
    if read.errors:
        rows.statuses["error"] = rows.statuses.get("error", 0) + len(read.errors)
    rows.items.sort(key=lambda row: row["item_seq"])
    return rows
