"""jobs.core.schema: the one definition of every table, its derived Arrow and Polars schemas, the
row builder's key check, and the "Columns" section of docs/output.md kept in step with it."""

from __future__ import annotations

import re

import polars as pl
import pyarrow as pa
import pytest

from jobs.core.schema import (
    PUBLISHED_SCORES,
    PUBLISHED_SUMMARY,
    PUBLISHED_VERDICTS,
    STAGED_ITEMS,
    STAGED_VERDICTS,
    VERDICT_CACHE,
    Column,
    Table,
    duplicate_error,
)
from jobs.core.verdict_cache import encode_entries
from jobs.engine.publish.aggregate import BANDS, PositionRate, RunSummary
from tests.support.paths import REPO

OUTPUT_PAGE = REPO / "docs" / "output.md"
# The tables a reader of the output root sees, by their folder names.
PUBLISHED = (PUBLISHED_SCORES, PUBLISHED_VERDICTS, PUBLISHED_SUMMARY)
ALL_TABLES = (
    STAGED_ITEMS,
    STAGED_VERDICTS,
    PUBLISHED_SCORES,
    PUBLISHED_VERDICTS,
    PUBLISHED_SUMMARY,
    VERDICT_CACHE,
)


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda t: t.name)
def test_arrow_and_polars_schemas_describe_the_same_columns(table: Table) -> None:
    assert table.arrow.names == list(table.names) == table.polars.names()
    # What Polars reads back from a file written with the Arrow schema is the Polars schema.
    assert pl.DataFrame(table.arrow.empty_table()).schema == table.polars


@pytest.mark.parametrize(
    ("published", "staged"),
    [(PUBLISHED_SCORES, STAGED_ITEMS), (PUBLISHED_VERDICTS, STAGED_VERDICTS)],
    ids=["scores", "verdicts"],
)
def test_published_tables_are_projections_of_the_staged_ones(
    published: Table, staged: Table
) -> None:
    assert all(staged.column(column.name) == column for column in published.columns)
    assert set(published.names) < set(staged.names)


def test_the_published_tables_and_their_order() -> None:
    assert [t.name for t in PUBLISHED] == ["scores", "verdicts", "summary"]
    assert PUBLISHED_SCORES.names[-2:] == ("truncated", "duplicate_of")
    assert PUBLISHED_VERDICTS.names == (
        "query_id",
        "position",
        "context_id",
        "context_hash",
        "relevant",
        "judge_reason",
        "cached",
    )
    assert PUBLISHED_SUMMARY.names == (
        "model",
        "segment_by",
        "segment",
        "metric",
        "band",
        "position",
        "value",
    )


def test_the_cache_files_keep_their_format() -> None:
    # Cache files outlive runs: a new schema would make every existing cache file a miss.
    existing = pa.schema(
        [("pair_key", pa.string()), ("relevant", pa.bool_()), ("judge_reason", pa.string())]
    )
    assert VERDICT_CACHE.arrow == existing
    assert encode_entries({}).schema == VERDICT_CACHE.arrow


def test_build_row_orders_by_the_schema_and_rejects_missing_or_unknown_columns() -> None:
    row = PUBLISHED_VERDICTS.build_row(
        cached=False,
        relevant=True,
        position=2,
        context_hash="h",
        context_id=None,
        query_id="q",
        judge_reason="r",
    )
    assert list(row) == list(PUBLISHED_VERDICTS.names)
    assert row == {
        "query_id": "q",
        "position": 2,
        "context_id": None,
        "context_hash": "h",
        "relevant": True,
        "judge_reason": "r",
        "cached": False,
    }
    with pytest.raises(ValueError, match=r"missing columns \['cached'\], unknown \[\]"):
        PUBLISHED_VERDICTS.build_row(**{k: v for k, v in row.items() if k != "cached"})
    with pytest.raises(ValueError, match=r"missing columns \[\], unknown \['pair_key'\]"):
        PUBLISHED_VERDICTS.build_row(**row, pair_key="k")


def test_a_table_cannot_name_a_column_twice() -> None:
    with pytest.raises(ValueError, match="appears twice"):
        Table(name="t", columns=(Column("a", "string", ""), Column("a", "int64", "")))
    with pytest.raises(KeyError, match="table scores has no column 'nope'"):
        PUBLISHED_SCORES.column("nope")


def test_duplicate_error_is_the_message_users_know() -> None:
    assert duplicate_error("q7", "in.parquet row 3") == (
        "duplicate query_id q7: only its first occurrence (in.parquet row 3) is scored"
    )


def test_summary_docs_name_exactly_the_metrics_and_bands_written() -> None:
    summary = RunSummary(
        model="m",
        scale=1,
        items=1,
        scored=1,
        unscored=0,
        errors=0,
        mean=1.0,
        median=1.0,
        p10=1.0,
        p90=1.0,
        bands=tuple((label, 0) for label, _, _ in BANDS),
        position_rates=(PositionRate(position=0, judged=1, relevant=1, rate=1.0),),
        judge_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        cache_hits=0,
        cost_usd=None,
    )
    frame = summary.to_frame()
    metrics = re.findall(r"`([^`]+)`", PUBLISHED_SUMMARY.column("metric").doc)
    assert sorted(metrics) == sorted(frame["metric"].unique().to_list())
    bands = re.findall(r"`([^`]+)`", PUBLISHED_SUMMARY.column("band").doc)
    assert bands == ["band_count", *(label for label, _, _ in BANDS), "scorer_core.score_band"]


# -- the "Columns" section of docs/output.md ---------------------------------------------------


def documented_tables() -> dict[str, list[tuple[str, str, str]]]:
    """Per table named in docs/output.md's Columns section: its (column, type, meaning) rows."""
    text = OUTPUT_PAGE.read_text(encoding="utf-8")
    start = text.index("\n## Columns\n")
    end = text.find("\n## ", start + 1)
    end = len(text) if end == -1 else end
    tables: dict[str, list[tuple[str, str, str]]] = {}
    current: list[tuple[str, str, str]] | None = None
    for line in text[start:end].splitlines():
        heading = re.fullmatch(r"`(\w+)`:", line)
        if heading:
            current = tables.setdefault(heading.group(1), [])
            continue
        row = re.fullmatch(r"\| `(\w+)` \| (\w+) \| (.*) \|", line)
        if row and current is not None:
            current.append((row.group(1), row.group(2), row.group(3)))
    return tables


def test_the_output_page_lists_every_published_column_and_nothing_else() -> None:
    documented = documented_tables()
    assert set(documented) == {table.name for table in PUBLISHED}
    for table in PUBLISHED:
        names = [name for name, _, _ in documented[table.name]]
        assert names == list(table.names), f"docs/output.md's {table.name} columns"


def test_the_output_page_gives_each_column_the_schemas_type_and_meaning() -> None:
    documented = documented_tables()
    for table in PUBLISHED:
        expected = [(c.name, c.type, c.doc) for c in table.columns]
        assert documented[table.name] == expected, f"docs/output.md's {table.name} table"
