"""`compare` and `report` on the real, human-labelled files in ../shared/data (skipped without
them): two runs of a file's human labels written directly (tests/support/published.py), as a
user would compare them after a nightly run. `estimate` and the job on these files are in
tests/integration/test_real_runs.py, `calibrate` in tests/unit/test_calibrate.py.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import polars as pl
import pytest

from jobs.cli import main as ctxprec
from jobs.core.storage import open_store
from tests.support.labelled import FILES, labelled_queries, needs_the_files, read_rows
from tests.support.published import publish

pytestmark = [pytest.mark.timeout(300), needs_the_files]


@pytest.mark.parametrize("name", sorted(FILES))
def test_compare_and_report_on_labelled_data(name: str, tmp_path: Path) -> None:
    """compare and report on two runs of the file's human labels (written directly, no job):
    "base" in the file's order, "reversed" with every row's contexts in reverse order."""
    rows = read_rows(name)
    out = tmp_path / "out"
    store = open_store(str(out))
    publish(store, "base", labelled_queries(name, rows, reverse=False))
    publish(store, "reversed", labelled_queries(name, rows, reverse=True))

    table = tmp_path / "changes.parquet"
    with redirect_stdout(io.StringIO()):
        code = ctxprec(
            [
                "compare",
                "base",
                "reversed",
                "--output",
                str(out),
                "--out-table",
                str(table),
                "--max-mean-drop",
                "1",
            ]
        )
    assert code == 0
    changes = pl.read_parquet(table)
    assert changes.height == len(rows)
    assert (changes["presence"] == "both").all()
    assert (changes["delta"] > 0).any() and (changes["delta"] < 0).any()

    html = tmp_path / "report.html"
    with redirect_stdout(io.StringIO()):
        assert (
            ctxprec(
                [
                    "report",
                    "reversed",
                    "--baseline",
                    "base",
                    "--output",
                    str(out),
                    "--html",
                    str(html),
                ]
            )
            == 0
        )
    page = html.read_text(encoding="utf-8")
    assert page.count("<svg") >= 5
    assert "http://" not in page and "https://" not in page
