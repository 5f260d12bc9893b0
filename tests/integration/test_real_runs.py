"""Real runs of the job read by the tools: two runs published by the job (offline lexical
judge) have the columns and types of the runs tests/support/published.py writes for the unit
tests of compare and report, and compare and report work on them; `estimate` and the job on
the human-labelled files of ../shared/data (skipped without them).
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from markupsafe import escape

from jobs.cli import main as ctxprec
from jobs.core.config import parse_config
from jobs.core.run_layout import TABLES
from jobs.core.storage import open_store
from jobs.run.job import run_job
from jobs.tools import comparison as compare
from jobs.tools.published_runs import load_run
from jobs.tools.sample_data import generate
from tests.support.job import COLUMNS
from tests.support.labelled import FILES, lexical_job_config, needs_the_files, read_rows
from tests.support.paths import SHARED_DATA
from tests.support.published import (
    ADDED_ID,
    BAD_ID,
    REMOVED_ID,
    RUN_DATE,
    SCRIPT_ID,
    local_base_and_candidate,
    run_compare,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("ray_local")]


E2E_ITEMS = 40


def _e2e_rows(*, for_candidate: bool) -> list[dict[str, Any]]:
    rows = list(generate(E2E_ITEMS, seed=11))
    rows[0] = {
        **rows[0],
        "id": SCRIPT_ID,
        "question": "Where was <script>alert(1)</script> born?",
        "contexts": ["Visitors often mention the mild weather.", "Fish swim in the <b>sea</b>."],
    }
    rows.append({**rows[1], "id": BAD_ID, "contexts": None})
    if for_candidate:
        rows = [r for r in rows if r["id"] != REMOVED_ID]
        rows.append({**rows[2], "id": ADDED_ID})
    return rows


def _e2e_config(input_path: Path, output: Path, run_id: str, threshold: float | None) -> Any:
    judge: dict[str, Any] = {"model": "lexical"}
    if threshold is not None:
        judge["lexical"] = {"threshold": threshold}
    return parse_config(
        {
            "input": {"path": str(input_path), "format": "jsonl", "columns": COLUMNS},
            "output": {"path": str(output)},
            "judge": judge,
            "run": {"id": run_id, "date": RUN_DATE.isoformat()},
            "ray": {"shard_size": 25, "workers": 2},
        }
    )


def test_real_job_publishes_what_the_support_module_writes(tmp_path: Path) -> None:
    """Two runs of the real job (the offline lexical judge, stricter in "cand"), then compare
    and report on them; their tables have the support module's columns and types."""
    runs = local_base_and_candidate(tmp_path / "written")
    output = tmp_path / "out"
    for run_id, candidate, threshold in (("base", False, None), ("cand", True, 0.35)):
        input_path = tmp_path / f"{run_id}.jsonl"
        rows = _e2e_rows(for_candidate=candidate)  # the candidate's stay in `rows`
        input_path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        run_job(_e2e_config(input_path, output, run_id, threshold))

    store = open_store(str(output))
    real = load_run(store, "cand")
    written = load_run(open_store(str(runs.output)), runs.cand)
    for name in TABLES:
        assert real.read(name).schema == written.read(name).schema, name
    assert real.manifest is not None and written.manifest is not None
    assert real.manifest.model_fields_set == written.manifest.model_fields_set
    assert real.summary.to_record() == real.manifest.summary

    code, text = run_compare(output, "base", "cand")
    assert code == 1 and "FAIL: mean fell by" in text
    assert "only in A 1, only in B 1" in text
    table = pl.read_parquet(output / "comparisons" / "base__vs__cand.parquet")
    assert tuple(table.columns) == compare.TABLE_COLUMNS
    assert table.height == E2E_ITEMS + 2
    bad = table.filter(pl.col("query_id") == BAD_ID).row(0, named=True)
    assert (bad["status_a"], bad["status_b"]) == ("error", "error")

    page_path = tmp_path / "report.html"
    argv = ["cand", "--baseline", "base", "--output", str(output), "--html", str(page_path)]
    assert ctxprec(["report", *argv]) == 0
    page = page_path.read_text(encoding="utf-8")
    assert page.count("<svg") == 5  # 3 charts of the run, 2 of the comparison
    assert escape(SCRIPT_ID) in page and "<script" not in page.lower()
    assert "<b>sea</b>" not in page
    assert 'id="failed"' in page and BAD_ID in page
    # the largest regression opens onto its passages, their texts read back from the input
    worst = table.drop_nulls("delta").sort("delta").row(0, named=True)["query_id"]
    texts = next(row for row in rows if row["id"] == worst)["contexts"]
    assert all(str(escape(text)) in page for text in texts)
    _show_reads_the_real_runs_texts_back(output, rows, table)


def _show_reads_the_real_runs_texts_back(
    output: Path, rows: list[dict[str, Any]], table: pl.DataFrame
) -> None:
    """`ctxprec show` of the real run's most regressed query: the input's texts as judged, the
    verdicts of the published table, both runs' verdicts side by side."""
    query_id = table.drop_nulls("delta").sort("delta").row(0, named=True)["query_id"]
    out = io.StringIO()
    argv = ["show", "cand", query_id, "--baseline", "base", "--output", str(output), "--json"]
    with redirect_stdout(out):
        assert ctxprec(argv) == 0
    shown = json.loads(out.getvalue())
    row = next(r for r in rows if r["id"] == query_id)
    # judged against the reference (judge.against auto): the judge saw no answer
    seen = (shown["query"], shown["answer"], shown["reference"], shown["texts"])
    assert seen == (row["question"], None, row["ground_truth"], None)
    assert [c["text"] for c in shown["contexts"]] == row["contexts"]
    verdicts = load_run(open_store(str(output)), "cand").verdicts()
    published = verdicts.filter(pl.col("query_id") == query_id).sort("position").collect()
    words = ["yes" if v else "no" for v in published["relevant"]]
    assert [c["verdict"] for c in shown["contexts"]] == words
    assert shown["moved"] == "judge" and shown["score"] < shown["baseline_score"]
    assert any(c["change"] == "flipped" for c in shown["contexts"])


@needs_the_files
@pytest.mark.parametrize("name", sorted(FILES))
def test_estimate_and_run_on_labelled_data(name: str, tmp_path: Path) -> None:
    rows = read_rows(name)
    out = tmp_path / "out"
    config_path = tmp_path / "job.json"
    config_path.write_text(json.dumps(lexical_job_config(name, out, "base")))

    printed = io.StringIO()
    with redirect_stdout(printed):
        assert ctxprec(["estimate", "--config", str(config_path), "--json"]) == 0
    counted = json.loads(printed.getvalue())
    assert counted["items"]["valid"] == len(rows) and counted["items"]["invalid"] == 0
    assert counted["context_pairs"] == sum(len(row["contexts"]) for row in rows)
    assert counted["prompt_tokens"]["estimate"] > 0

    run_job(parse_config(lexical_job_config(name, out, "base")))
    scores = pl.read_parquet(f"{out}/scores/**/*.parquet", hive_partitioning=True)
    assert scores.filter(pl.col("run_id") == "base").height == len(rows)
    assert scores.filter(pl.col("status") != "ok").height == 0


@needs_the_files
def test_per_retriever_summary_equals_calibrate_on_trec_dl(tmp_path: Path) -> None:
    """The job on TREC DL with `carry: [retriever, collection]` and `summary.by: [retriever]`:
    each retriever's mean in the published summary is the mean `ctxprec calibrate` computes
    per retriever from the same (deterministic, offline) verdicts, and the report shows it."""
    from jobs.tools.calibration import calibrate

    name = "trecdl_passage_ctxprec.jsonl"
    rows = read_rows(name)
    raw = lexical_job_config(name, tmp_path / "out", "segments")
    raw["input"]["columns"] = {**FILES[name], "context_ids": "passage_ids"}
    raw["input"]["carry"] = ["retriever", "collection"]
    raw["summary"] = {"by": ["retriever"]}
    config = parse_config(raw)
    run_job(config)

    run = load_run(open_store(str(tmp_path / "out")), "segments")
    segments = {s.value: s.summary for s in run.summary.segments_by("retriever")}
    calibrated = {r.retriever: r for r in calibrate(config, str(SHARED_DATA / name)).retrievers}
    assert set(segments) == set(calibrated) == {row["retriever"] for row in rows}
    for retriever, labelled in calibrated.items():
        assert segments[retriever].scored == labelled.items
        assert segments[retriever].mean == pytest.approx(labelled.mean_judge, abs=1e-12)

    scores = run.read("scores")
    assert scores.schema["collection"] == pl.String
    assert set(scores["collection"]) == {row["collection"] for row in rows}
    verdicts = run.read("verdicts")
    first = rows[0]
    ids = verdicts.filter(pl.col("query_id") == first["row_id"]).sort("position")["context_id"]
    assert ids.to_list() == first["passage_ids"]

    html = tmp_path / "report.html"
    with redirect_stdout(io.StringIO()):
        argv = ["report", "segments", "--output", str(tmp_path / "out"), "--html", str(html)]
        assert ctxprec(argv) == 0
    section = html.read_text(encoding="utf-8").split('<section id="segments">')[1]
    section = section.split("</section>")[0]
    for retriever, summary in segments.items():
        row = section.split(f'<span class="qid">{retriever}</span>', 1)[1].split("</tr>")[0]
        assert f'<td class="num">{summary.mean:.2f}</td>' in row
