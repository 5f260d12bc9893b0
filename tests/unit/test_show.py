"""`ctxprec show` (jobs.tools.drilldown) on published runs whose input is on disk.

The runs are tests/support/published.py's two-cause pair: the retriever swapped the first two
passages of REORDERED queries, the judge flipped one verdict on FLIPPED ones; each run's input
is written beside it, so the passages' texts can be read back. That `show` works on a run the
real job published is tests/integration/test_real_runs.py's.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.cli import main as ctxprec
from jobs.core.storage import open_store
from jobs.tools.drilldown import (
    ItemView,
    Passage,
    _readable,
    format_view,
    item_views,
    passages,
)
from jobs.tools.published_runs import load_run
from tests.support.moto import MotoS3
from tests.support.published import FLIPPED, REORDERED, Runs, run_compare, two_causes

CONTEXT_KEYS = {"position", "context_id", "text", "verdict", "reason"}
CONTEXT_KEYS |= {"baseline_position", "baseline_verdict", "change"}


@pytest.fixture(scope="module", params=[True, False], ids=["by-context-id", "by-context-hash"])
def causes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    output = tmp_path_factory.mktemp("causes")
    inputs = tmp_path_factory.mktemp("inputs")
    a, b = two_causes(open_store(str(output)), context_ids=request.param, inputs=inputs)
    return Runs(output, a, b)


def _show(
    output: Path | str, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str, str]:
    code = ctxprec(["show", *argv, "--output", str(output)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(runs: Runs, capsys: pytest.CaptureFixture[str], query_id: str) -> dict[str, Any]:
    argv = (runs.cand, query_id, "--baseline", runs.base, "--json")
    code, out, _ = _show(runs.output, capsys, *argv)
    assert code == 0
    result: dict[str, Any] = json.loads(out)
    return result


def test_a_judge_moved_item_marks_exactly_the_flipped_passage(
    causes: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    n = min(q for q in FLIPPED if q % 2 == 0)  # its second passage newly found relevant
    shown = _json(causes, capsys, f"c{n:03d}")
    contexts = shown["contexts"]
    assert shown["moved"] == "judge" and shown["score"] > shown["baseline_score"]
    assert [c["change"] for c in contexts] == ["", "flipped", "", "", ""]
    assert [c["position"] for c in contexts] == [c["baseline_position"] for c in contexts]
    assert (contexts[1]["baseline_verdict"], contexts[1]["verdict"]) == ("no", "yes")
    assert [c["text"] for c in contexts] == [f"doc-{n}-{p} of c{n:03d}" for p in range(5)]
    assert shown["query"] == f"question of c{n:03d}" and shown["texts"] is None


def test_a_retrieval_moved_item_has_the_same_verdicts_at_other_positions(
    causes: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    n = min(REORDERED)
    shown = _json(causes, capsys, f"c{n:03d}")
    contexts = shown["contexts"]
    assert shown["moved"] == "retrieval"
    assert [c["change"] for c in contexts] == ["moved", "moved", "", "", ""]
    assert [(c["position"], c["baseline_position"]) for c in contexts[:2]] == [(0, 1), (1, 0)]
    assert all(c["verdict"] == c["baseline_verdict"] for c in contexts)
    assert [c["text"] for c in contexts[:2]] == [f"doc-{n}-1 of c{n:03d}", f"doc-{n}-0 of c{n:03d}"]


def test_the_json_has_the_issues_shape(causes: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _show(causes.output, capsys, causes.cand, "c001", "--json")
    shown = json.loads(out)
    assert code == 0 and {"query_id", "score", "baseline_score", "contexts"} <= set(shown)
    assert shown["query_id"] == "c001" and shown["baseline_score"] is None
    assert all(set(c) == CONTEXT_KEYS for c in shown["contexts"])
    assert {c["baseline_verdict"] for c in shown["contexts"]} == {None}


def test_the_terminal_view_lists_each_passage_with_both_verdicts(
    causes: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    n = min(q for q in FLIPPED if q % 2 == 0)
    code, out, _ = _show(causes.output, capsys, causes.cand, f"c{n:03d}", "--baseline", causes.base)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"query c{n:03d} in run {causes.cand} (ok, score")
    assert "moved (judge): the judge gave another verdict on the same passages" in lines[1]
    flipped = [line for line in lines if "flipped" in line]
    assert len(flipped) == 1 and f"doc-{n}-1 of c{n:03d}" in flipped[0]


def test_long_texts_are_cut_in_the_terminal_and_whole_in_the_json() -> None:
    passage = Passage(
        position=0, context_id="p", text="word " * 200, verdict="yes", reason="because " * 50
    )
    view = ItemView(
        query_id="q",
        run_id="r",
        status="ok",
        score=1.0,
        query="why " * 100,
        answer="",
        reference=None,
        contexts=(passage,),
        texts="",
    )
    printed = format_view(view, chars=60)
    assert max(len(line) for line in printed.splitlines()) < 200 and "…" in printed
    assert asdict(view)["contexts"][0]["text"] == "word " * 200


def test_a_passage_only_one_run_has_gets_nulls_for_the_other_side() -> None:
    def row(position: int, name: str, relevant: bool) -> dict[str, Any]:
        return {
            "position": position,
            "context_id": name,
            "context_hash": name,
            "relevant": relevant,
            "judge_reason": f"{name}?",
        }

    ours = [row(0, "x", True), row(1, "new", False)]
    theirs = [row(0, "x", True), row(1, "old", True)]
    shown = passages(ours, theirs, {"x": "text x"})
    assert [(p.context_id, p.change) for p in shown] == [
        ("x", ""),
        ("new", "added"),
        ("old", "removed"),
    ]
    assert (shown[1].baseline_position, shown[1].baseline_verdict) == (None, None)
    assert (shown[2].position, shown[2].verdict, shown[2].reason) == (None, None, None)
    assert (shown[2].baseline_position, shown[2].baseline_verdict) == (1, "yes")
    assert [p.text for p in shown] == ["text x", None, None]


def test_an_unknown_query_id_names_it_and_the_run_and_exits_2(
    causes: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _show(causes.output, capsys, causes.cand, "c999")
    assert code == 2 and "'c999' not found in run causes-b (its scores table has no such" in err
    code, _, err = _show(causes.output, capsys, "nope", "c001")
    assert code == 2 and "'nope' not found" in err and "available run ids" in err


def test_a_changed_or_missing_input_shows_no_text_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    _, b = two_causes(open_store(str(tmp_path)), inputs=inputs)
    source = inputs / f"{b}.jsonl"
    source.write_text(source.read_text().replace("doc-1-2 of c001", "doc-1-2 of c001, edited"))
    shown = json.loads(_show(tmp_path, capsys, b, "c001", "--json")[1])
    assert {c["text"] for c in shown["contexts"]} == {None} and shown["query"] is None
    assert "changed since run causes-b" in shown["texts"]
    assert [c["verdict"] for c in shown["contexts"]] != [None] * 5  # verdicts still shown

    source.unlink()
    code, out, _ = _show(tmp_path, capsys, b, "c001")
    assert code == 0 and "texts unavailable: run causes-b: the run's input cannot be read" in out
    assert out.count("(unavailable)") == 5
    shown = json.loads(_show(tmp_path, capsys, b, "c002", "--json")[1])
    assert shown["score"] is not None and {c["text"] for c in shown["contexts"]} == {None}


def test_show_says_why_each_query_moved_as_compare_does(causes: Runs) -> None:
    code, _ = run_compare(causes.output, causes.base, causes.cand)
    table = pl.read_parquet(causes.output / "comparisons" / "causes-a__vs__causes-b.parquet")
    store = open_store(str(causes.output))
    run, baseline = load_run(store, causes.cand), load_run(store, causes.base)
    views = item_views(run, table["query_id"].to_list(), baseline)
    assert code == 1 and len(views) == table.height == 400
    assert {v.query_id: v.moved for v in views} == dict(table.select("query_id", "moved").rows())


@pytest.mark.parametrize("traces", ["otlp", "phoenix"])
def test_a_run_of_traces_shows_its_verdicts_and_says_its_texts_are_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], traces: str
) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    _, b = two_causes(open_store(str(tmp_path)), inputs=inputs)
    manifest = next(tmp_path.glob(f"manifests/*/run_id={b}/manifest.json"))
    recorded = json.loads(manifest.read_text())
    recorded["config"]["input"] |= {"format": traces, "otlp": {"output": "root"}}
    manifest.write_text(json.dumps(recorded))
    shown = json.loads(_show(tmp_path, capsys, b, "c001", "--json")[1])
    assert {c["text"] for c in shown["contexts"]} == {None} and shown["query"] is None
    assert shown["texts"] == (
        f"run {b}: the run read traces (input.format {traces}), whose items publishing removed: "
        "only the verdicts, reasons and the passages' hashes are kept"
    )
    assert [c["verdict"] for c in shown["contexts"]] != [None] * 5


def test_an_input_row_gone_or_unreadable_is_told_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    _, b = two_causes(open_store(str(tmp_path)), inputs=inputs)
    source = inputs / f"{b}.jsonl"
    lines = source.read_text().splitlines(keepends=True)
    number = next(n for n, line in enumerate(lines) if '"c001"' in line)
    edited = [*lines[:number], "{not json" + " " * (len(lines[number]) - 10) + "\n"]
    source.write_text("".join([*edited, *lines[number + 1 :]]))  # the same row, unreadable
    shown = json.loads(_show(tmp_path, capsys, b, "c001", "--json")[1])
    assert shown["texts"].startswith(f"run {b}: the row is no longer a valid item: {source}")
    assert "invalid JSON" in shown["texts"]
    source.write_text("".join(lines[:number]))  # the file ends before the row
    shown = json.loads(_show(tmp_path, capsys, b, "c001", "--json")[1])
    assert re.fullmatch(
        rf"run {b}: {re.escape(str(source))} has no row \d+ any more", shown["texts"]
    )


def test_show_reads_a_run_published_on_an_object_store(
    moto_s3: MotoS3, s3_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tables on S3 (moto) are read through a pyarrow dataset, filtered on query_id."""
    a, b = two_causes(open_store(s3_prefix, moto_s3.storage_options), inputs=tmp_path)
    options = [
        f"{key}={value}" for key, value in moto_s3.storage_options.items() if key != "client_kwargs"
    ]
    argv = [b, "c001", "--baseline", a, "--json", *(f"--storage-option={o}" for o in options)]
    code, out, err = _show(s3_prefix, capsys, *argv)
    assert code == 0, err
    shown = json.loads(out)
    assert [c["text"] for c in shown["contexts"]] == [f"doc-1-{p} of c001" for p in range(5)]


def test_a_scores_row_naming_no_input_says_so(causes: Runs) -> None:
    run = load_run(open_store(str(causes.output)), causes.cand)
    row = {"source": None, "row": None, "query_id": "c001"}
    assert _readable(run, row, []) == "the scores row names no input file (source is null)"
