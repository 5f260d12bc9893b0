"""The user commands on the real, human-labelled files in ../shared/data (skipped without them).

`estimate` and the job (offline lexical judge) run on each file; `compare` and `report` run on
two runs of its human labels written directly (tests/support/published.py), as a user would
after a nightly run. `calibrate` on these files is in tests/test_calibrate.py.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.config import parse_config
from jobs.engine.driver import run_job
from jobs.engine.storage import open_store
from jobs.tools import compare, estimate, report
from tests.support.published import Query, publish

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FILES = {
    # HotpotQA has a reference answer per query; TREC DL has none (the query stands in for the
    # output) and one row per retriever, so its row_id is the unique id.
    "hotpotqa_ctxprec.jsonl": {
        "query_id": "query_id",
        "input": "query",
        "output": "expected_answer",
        "expected_output": "expected_answer",
        "context": "contexts",
    },
    "trecdl_passage_ctxprec.jsonl": {
        "query_id": "row_id",
        "input": "query",
        "output": "query",
        "context": "contexts",
    },
}

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not present in this clone"),
]


def read_rows(name: str) -> list[dict[str, Any]]:
    # Not splitlines(): passages contain U+2028 and other characters it would split on.
    with (DATA / name).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def config_for(name: str, out: Path, run_id: str, **judge: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(DATA / name), "columns": FILES[name]},
        "output": {"path": str(out)},
        "judge": {"model": "lexical", "lexical": judge},
        "run": {"id": run_id},
        "ray": {"shard_size": 200, "workers": 2},
    }


@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("name", sorted(FILES))
def test_estimate_and_run_on_labelled_data(name: str, tmp_path: Path) -> None:
    rows = read_rows(name)
    out = tmp_path / "out"
    config_path = tmp_path / "job.json"
    config_path.write_text(json.dumps(config_for(name, out, "base")))

    printed = io.StringIO()
    with redirect_stdout(printed):
        assert estimate.main(["--config", str(config_path), "--json"]) == 0
    counted = json.loads(printed.getvalue())
    assert counted["items"]["valid"] == len(rows) and counted["items"]["invalid"] == 0
    assert counted["context_pairs"] == sum(len(row["contexts"]) for row in rows)
    assert counted["prompt_tokens"]["estimate"] > 0

    run_job(parse_config(config_for(name, out, "base")), out=io.StringIO())
    scores = pl.read_parquet(f"{out}/scores/**/*.parquet", hive_partitioning=True)
    assert scores.filter(pl.col("run_id") == "base").height == len(rows)
    assert scores.filter(pl.col("status") != "ok").height == 0


def labelled_queries(name: str, rows: list[dict[str, Any]], *, reverse: bool) -> list[Query]:
    """One query per row, judged as the human labels say, its contexts in the file's order
    or reversed; the reason is the query text."""
    queries = []
    for row in rows:
        labels = [bool(label) for label in row.get("relevance_binary") or row["relevance"]]
        queries.append(
            Query(
                str(row[FILES[name]["query_id"]]),
                labels[::-1] if reverse else labels,
                reason=str(row["query"]),
            )
        )
    return queries


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
        code = compare.main(
            [
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
            report.main(
                ["reversed", "--baseline", "base", "--output", str(out), "--html", str(html)]
            )
            == 0
        )
    page = html.read_text(encoding="utf-8")
    assert page.count("<svg") >= 5
    assert "http://" not in page and "https://" not in page
