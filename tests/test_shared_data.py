"""The user commands on the real, human-labelled files in ../shared/data (skipped without them).

Each file is scored by the job (offline lexical judge), then `estimate`, `compare` and `report`
run on it, as a user would after a nightly run. `calibrate` on these files is in
tests/test_calibrate.py.
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
from jobs.tools import compare, estimate, report

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
    pytest.mark.usefixtures("ray_local"),
    pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data is not present in this clone"),
]


def config_for(name: str, out: Path, run_id: str, **judge: Any) -> dict[str, Any]:
    return {
        "input": {"path": str(DATA / name), "columns": FILES[name]},
        "output": {"path": str(out)},
        "judge": {"model": "lexical", "lexical": judge},
        "run": {"id": run_id},
        "ray": {"shard_size": 200, "workers": 2},
    }


@pytest.mark.parametrize("name", sorted(FILES))
def test_run_estimate_compare_and_report_on_labelled_data(name: str, tmp_path: Path) -> None:
    # Not splitlines(): passages contain U+2028 and other characters it would split on.
    with (DATA / name).open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
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
    run_job(parse_config(config_for(name, out, "strict", threshold=0.4)), out=io.StringIO())
    scores = pl.read_parquet(f"{out}/scores/**/*.parquet", hive_partitioning=True)
    assert scores.filter(pl.col("run_id") == "base").height == len(rows)
    assert scores.filter(pl.col("status") != "ok").height == 0

    table = tmp_path / "changes.parquet"
    with redirect_stdout(io.StringIO()):
        code = compare.main(
            [
                "base",
                "strict",
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

    html = tmp_path / "report.html"
    with redirect_stdout(io.StringIO()):
        assert (
            report.main(["strict", "--baseline", "base", "--output", str(out), "--html", str(html)])
            == 0
        )
    page = html.read_text(encoding="utf-8")
    assert page.count("<svg") >= 5
    assert "http://" not in page and "https://" not in page
