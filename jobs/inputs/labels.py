"""Human relevance labels: the labelled JSONL `ctxprec calibrate` and the judge canary read
(the fields: docs/commands.md). Contexts are cut as the job cuts them; a bad row is counted,
never raised."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import fsspec

from jobs.core.config import JobConfig
from scorer_core.errors import InputError
from scorer_core.prompt import judged_item
from scorer_core.scorer import validate_item
from scorer_core.types import ScoringItem

_MAX_INVALID_EXAMPLES = 5


@dataclass(frozen=True, kw_only=True)
class LabelledItem:
    """One labelled row, ready for the judge."""

    item_id: str
    item: ScoringItem
    gold: tuple[bool, ...]
    retriever: str | None
    rule: str  # how `gold` was derived


@dataclass(kw_only=True)
class LabelFile:
    """A labels file as read: its usable items, the rows read, the invalid ones (counted, the
    first quoted), and the items whose contexts the job's limits cut."""

    items: list[LabelledItem]
    rows_read: int
    invalid: int
    invalid_examples: list[str]
    truncated: int


def _labels(row: dict[str, Any], key: str, count: int, what: str) -> list[float]:
    values = row.get(key)
    if not isinstance(values, list) or not all(
        isinstance(value, int | float) and not (isinstance(value, float) and math.isnan(value))
        for value in values
    ):
        raise InputError(f"{key} must be a list of {what}, one per context")
    if len(values) != count:
        raise InputError(f"{key} has {len(values)} labels for {count} contexts")
    return values


def _gold(row: dict[str, Any], count: int, min_grade: float | None) -> tuple[list[bool], str]:
    relevance = _labels(row, "relevance", count, "numbers")
    if min_grade is not None:
        return [
            value >= min_grade for value in relevance
        ], f"relevance >= {min_grade:g} (--min-grade)"
    if row.get("relevance_binary") is not None:
        return [
            bool(value) for value in _labels(row, "relevance_binary", count, "0/1")
        ], "relevance_binary"
    return [value > 0 for value in relevance], "relevance > 0"


def _field(row: dict[str, Any], *names: str | None) -> tuple[str, Any]:
    """(name, value) of the first of `names` the row has: the config's column, else the
    labels' own name; the config's name and None when it has none."""
    given = [name for name in names if name]
    found = next((name for name in given if name in row), given[0])
    return found, row.get(found)


def _labelled_item(
    row: dict[str, Any], line: int, config: JobConfig, min_grade: float | None
) -> tuple[LabelledItem, bool]:
    """The row as an item cut as the job cuts it, and whether it was cut."""
    columns = config.input.columns
    name, query = _field(row, columns.input, "query")
    if not isinstance(query, str) or not query.strip():
        raise InputError(f"{name} (the query) must be a non-empty string")
    name, contexts = _field(row, columns.context, "contexts")
    if not (
        isinstance(contexts, list)
        and contexts
        and all(isinstance(context, str) for context in contexts)
    ):
        raise InputError(f"{name} (the contexts) must be a non-empty list of strings")
    gold, rule = _gold(row, len(contexts), min_grade)
    name, answer = _field(row, columns.expected_output, "expected_answer")
    if answer is not None and not isinstance(answer, str):
        raise InputError(f"{name} (the reference answer) must be a string or null")
    reference = answer if answer and answer.strip() else None
    chars, count = config.input.max_context_chars, config.input.max_contexts
    kept = tuple(context[:chars] for context in contexts[:count])
    item = ScoringItem(
        input=query, output=reference or "", contexts=kept, expected_output=reference
    )
    item = judged_item(item, config.judge.against)
    validate_item(item)  # as the job judges it
    _, identifier = _field(row, "row_id", columns.query_id, "query_id")
    retriever = row.get("retriever")
    labelled = LabelledItem(
        item_id=str(identifier) if identifier is not None else f"line {line}",
        item=item,
        gold=tuple(gold[:count]),
        retriever=str(retriever) if retriever is not None else None,
        rule=rule,
    )
    return labelled, len(contexts) > count or any(len(context) > chars for context in contexts)


def load_labels(
    path: str, config: JobConfig, *, min_grade: float | None = None, limit: int | None = None
) -> LabelFile:
    """Read labelled rows in file order, at most `limit` valid ones; bad rows are counted."""
    result = LabelFile(items=[], rows_read=0, invalid=0, invalid_examples=[], truncated=0)
    try:
        options = dict(config.input.storage_options)
        handle = fsspec.open(path, "rb", compression="infer", **options).open()
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot open labels {path}: {exc}") from None
    with handle:
        for line_number, raw in enumerate(handle, start=1):
            if limit is not None and len(result.items) >= limit:
                break
            if not raw.strip():
                continue
            result.rows_read += 1
            try:
                try:
                    row = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise InputError(f"not valid JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise InputError("expected a JSON object")
                item, truncated = _labelled_item(row, line_number, config, min_grade)
            except InputError as exc:
                result.invalid += 1
                if len(result.invalid_examples) < _MAX_INVALID_EXAMPLES:
                    result.invalid_examples.append(f"{path} line {line_number}: {exc}")
                continue
            result.items.append(item)
            result.truncated += int(truncated)
    return result
