"""What the terminal shows of user values is one printable line each: a carried value with a
terminal escape or CR/LF cannot recolour the screen or forge a row of the printed tables."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl

from jobs.core.formatting import Column, table
from jobs.core.schema import PUBLISHED_SCORES
from jobs.core.storage import open_store
from jobs.engine.publish.aggregate import SummarySpec, summarize
from jobs.engine.publish.summary_table import format_summary_table
from jobs.tools.comparison import compare_runs, format_regressions
from jobs.tools.published_runs import load_run
from tests.support.published import local_base_and_candidate
from tests.unit.test_aggregate import item_row, no_verdicts


def test_the_segment_table_shows_control_characters_escaped() -> None:
    values = ["bm25", "\x1b[31mred\x1b[0m", "dense\r\nq999  forged row", "\u202eevil", "a\x00b"]
    rows = [
        {**item_row(f"q{n}", score=float(n % 3)), "retriever": values[n % len(values)]}
        for n in range(20)
    ]
    scores = pl.DataFrame(rows, schema={**PUBLISHED_SCORES.polars, "retriever": pl.String})
    summary = summarize(
        scores, no_verdicts(), SummarySpec(model="lex\x1bical", scale=1, segment_by=["retriever"])
    )
    text = format_summary_table(summary, "/results/run-1")
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text and "\x00" not in text
    assert "\\x1b[31mred" in text and "dense\\r\\nq999" in text and "\\u202eevil" in text
    assert "lex\\x1bical" in text
    # one line per segment value: nothing forged
    segment_lines = [line for line in text.splitlines() if line.startswith("  ")]
    assert not any(line.lstrip().startswith("q999") for line in segment_lines)
    assert all(len(line) <= 46 for line in text.splitlines()[:-1])


def test_compare_prints_query_ids_escaped(tmp_path: Path) -> None:
    runs = local_base_and_candidate(tmp_path)
    store = open_store(str(runs.output))
    comparison = compare_runs(load_run(store, runs.base), load_run(store, runs.cand))
    ids = comparison.table["query_id"]
    evil = ids.map_elements(lambda q: f"\x1b[2J{q}\r\nFORGED", return_dtype=pl.String)
    forged = dataclasses.replace(comparison, table=comparison.table.with_columns(query_id=evil))
    text = format_regressions(forged, 5)
    assert "\x1b" not in text and "\r" not in text
    assert "\\x1b[2J" in text
    assert not any(line.startswith("FORGED") for line in text.splitlines())


def test_the_table_renderer_aligns_cuts_and_escapes_every_cell() -> None:
    columns = (Column(header="name", align="<", limit=8), Column(header="n", width=3))
    text = table(columns, [("a\x1b[2Jb", 5), ("a-very-long-name", 12345)], title="t:", indent="  ")
    assert text.splitlines() == [
        "t:",
        "  name          n",
        "  a\\x1b[2…      5",  # escaped first, then cut: no escape sequence reaches the screen
        "  a-very-…  12345",  # the widest cell widens its column
    ]


def test_a_fixed_column_keeps_its_width_and_a_long_cell_overflows_its_own_line_only() -> None:
    fixed = (Column(align="<", width=6, grow=False), Column(width=4, grow=False))
    text = table(fixed, [("ab", "x"), ("abcdefgh", "toolong")], header=False, gap="")
    assert text.splitlines() == ["ab       x", "abcdefghtoolong"]


def test_a_markdown_table_is_padded_into_columns() -> None:
    text = table(
        (Column(header="k", align="<"), Column(header="value")),
        [("a", 1), ("bb", 22)],
        markdown=True,
    )
    assert text.splitlines() == [
        "| k  | value |",
        "|----|-------|",
        "| a  |     1 |",
        "| bb |    22 |",
    ]
