"""`ctxprec report` on published runs written by tests/support/published.py (no Ray).

The run of the real job, reported on, is in tests/integration/test_real_runs.py.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from markupsafe import escape

from jobs.cli import build_parser, options_of
from jobs.cli import main as ctxprec
from jobs.core import formatting as fmt
from jobs.core.run_manifest import DroppedFormRecord, ErrorRateRecord, ResponseFormatRecord
from jobs.core.storage import open_store
from jobs.engine.publish.aggregate import BANDS
from jobs.tools.published_runs import load_run
from jobs.tools.report import charts
from jobs.tools.report.page import DRILLED
from jobs.tools.report.report_queries import WORST_QUERIES
from jobs.tools.tool_options import ReportOptions
from scorer_core.prompt import PROMPT_VERSION
from tests.support.published import (
    BAD_ID,
    FLIPPED,
    SCRIPT_ID,
    UNSCORED_ID,
    WORSE,
    Query,
    Runs,
    local_base_and_candidate,
    publish,
    run_report,
    segmented_runs,
    two_causes,
)

CHARTS = 3  # score histogram, score bands, relevance rate by position
# Verdicts scoring 1.0, 0.75, 0.5, 0.33 and 0: one item in each band.
ONE_PER_BAND = ([True], [True, False, False, True], [False, True], [False, False, True], [False])
BASELINE_CHARTS = 2  # rate by position of both runs, change by position


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return local_base_and_candidate(tmp_path_factory.mktemp("published"))


def _report(runs: Runs, *argv: str) -> tuple[str, str]:
    """Run the report handler; returns (page, printed)."""
    return run_report(runs.output, *argv)


@pytest.fixture(scope="module")
def page(runs: Runs) -> str:
    text, _ = _report(runs, runs.cand)
    return text


@pytest.fixture(scope="module")
def compared_page(runs: Runs) -> str:
    text, _ = _report(runs, runs.cand, "--baseline", runs.base)
    return text


def test_default_path_is_one_file_under_reports(runs: Runs, page: str) -> None:
    reports = runs.output / "reports"
    assert sorted(p.name for p in reports.iterdir()) == [f"{runs.cand}.html"]
    assert page.startswith("<!doctype html>")
    assert page.rstrip().endswith("</html>")
    assert "<link" not in page and "<iframe" not in page and "<img" not in page


def test_header_shows_run_and_counts(runs: Runs, page: str) -> None:
    summary = load_run(open_store(str(runs.output)), runs.cand).summary
    assert f"run {runs.cand}</h1>" in page
    assert "2026-01-02" in page and "lexical" in page
    for label in ("items", "scored", "unscored", "errors", "mean", "median"):
        assert f'<div class="k">{label}</div>' in page
    assert f'<div class="v">{summary.items:,}</div>' in page
    assert f'<div class="v">{summary.mean:.2f}</div>' in page


def test_bands_by_name_and_the_structured_output_form_in_the_header(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    queries = [Query(f"q{n}", flags) for n, flags in enumerate(ONE_PER_BAND)]
    negotiated = ResponseFormatRecord(
        endpoint="http://127.0.0.1:8080/v1",
        setting="auto",
        in_use="json_object",
        confirmed=True,
        dropped=[
            DroppedFormRecord(
                form="json_schema", reason="HTTP 500: 1 validation error " + "x" * 300
            )
        ],
        shards=1,
    )
    publish(store, "llama", queries, response_format=negotiated)
    publish(store, "offline", queries)
    runs = Runs(tmp_path, "offline", "llama")
    llama, _ = _report(runs, "llama")
    bands = llama.split("Score bands", 1)[1].split("</svg>", 1)[0]
    for name, _, _ in BANDS:
        assert f">{name}<" in bands, name
    for text in ("&gt; 0, &lt; 0.35", "0.35-0.65", "&gt;= 0.85"):  # each band's range under it
        assert f">{text}</text>" in bands, text
    header = llama.split("</header>", 1)[0]
    assert "structured output" in header
    assert "json_object (json_schema rejected: HTTP 500: 1 validation error" in header
    assert "x" * 200 not in header  # cut: the manifest has the server's whole answer
    offline, _ = _report(runs, "offline")
    assert "structured output" in offline.split("</header>", 1)[0]


def test_one_svg_per_chart_with_axis_labels(page: str) -> None:
    assert page.count("<svg") == CHARTS
    assert page.count("</svg>") == CHARTS
    assert "share judged relevant" in page  # y axis of the position chart
    assert "position in the retrieved order" in page
    assert "<rect" in page and "<polyline" in page


def test_worst_queries_are_listed_with_verdict_chips(runs: Runs, page: str) -> None:
    worst = (
        load_run(open_store(str(runs.output)), runs.cand)
        .read("scores")
        .filter(pl.col("status") == "ok")
        .sort(["score", "context_count", "query_id"], descending=[False, True, False])
        .head(WORST_QUERIES)
    )
    section = page.split('<section id="worst">', 1)[1].split("</section>", 1)[0]
    for query_id in worst["query_id"]:
        assert escape(query_id) in section
    assert 'class="chip no"' in section
    assert "judge reasons" in section


def test_user_strings_are_escaped(page: str, compared_page: str) -> None:
    for text in (page, compared_page):
        assert "<script" not in text.lower()
        assert "<b>sea</b>" not in text
        assert escape(SCRIPT_ID) in text


def test_no_external_resources(page: str, compared_page: str) -> None:
    for text in (page, compared_page):
        assert not re.search(r"""(src|href|xlink:href)\s*=\s*["']?\s*(https?:)?//""", text)
        assert 'src="http' not in text and 'href="http' not in text
        assert "url(" not in text and "@import" not in text
        assert "http://" not in text and "https://" not in text


def test_failed_items_and_cost_sections(runs: Runs, page: str) -> None:
    failed = page.split('<section id="failed">', 1)[1].split("</section>", 1)[0]
    assert BAD_ID in failed and "error" in failed
    assert UNSCORED_ID in failed and "judge reply unusable" in failed
    assert "1 unscored, 1 errors; the first 2 of 2:" in failed
    cost = page.split('<section id="cost">', 1)[1].split("</section>", 1)[0]
    labels = ("judge calls", "prompt tokens", "estimated cost", "seconds", "items / s")
    for label in (*labels, "judge tokens per item", "cached"):
        assert label in cost
    assert fmt.FREE in cost  # the offline judge's cost, as the summary, status and estimate say
    run = load_run(open_store(str(runs.output)), runs.cand)
    assert run.seconds is not None
    assert f"{run.summary.items / run.seconds:,.1f}" in cost


def test_baseline_section_only_with_baseline(runs: Runs, page: str, compared_page: str) -> None:
    assert 'id="baseline"' not in page
    assert 'id="baseline"' in compared_page
    assert compared_page.count("<svg") == CHARTS + BASELINE_CHARTS
    section = compared_page.split('<section id="baseline">', 1)[1].split("</section>", 1)[0]
    assert f"Compared with baseline {runs.base}" in section
    assert "mean shift" in section and "Largest regressions" in section
    store = open_store(str(runs.output))
    from jobs.tools.comparison import compare_runs

    comparison = compare_runs(load_run(store, runs.base), load_run(store, runs.cand))
    assert f"{comparison.mean_shift:+.3f}" in section
    for query_id in comparison.regressions(5)["query_id"]:
        assert escape(query_id) in section


def test_html_path_and_unknown_baseline(
    runs: Runs, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "out" / "page.html"
    code = ctxprec(["report", runs.base, "--output", str(runs.output), "--html", str(target)])
    assert code == 0
    assert target.read_text(encoding="utf-8").count("<svg") == CHARTS
    code = ctxprec(["report", runs.base, "--baseline", "yesterday", "--output", str(runs.output)])
    assert code == 2
    err = capsys.readouterr().err
    assert "'yesterday' not found" in err and runs.base in err and runs.cand in err


def test_ctxprec_report_parses_the_options_as_the_tool_reads_them() -> None:
    args = build_parser().parse_args(["report", "r1", "--baseline", "r0"])
    assert options_of(ReportOptions, args) == ReportOptions(run="r1", baseline="r0")


def test_long_lists_are_cut_and_ties_are_told(tmp_path: Path) -> None:
    """More than 40 contexts: 40 chips and "+5 more", positions from 40 on not drawn; more
    queries at the lowest score than the table lists: a note says how many."""
    wide = Query("a-wide", [False] * 45)
    zeros = [Query(f"zero-{i:02d}", [False, False]) for i in range(24)]
    publish(open_store(str(tmp_path)), "wide", [wide, *zeros, Query("top", [True])])
    target = tmp_path / "wide.html"
    assert ctxprec(["report", "wide", "--output", str(tmp_path), "--html", str(target)]) == 0
    page = target.read_text(encoding="utf-8")
    worst = page.split('<section id="worst">', 1)[1].split("</section>", 1)[0]
    first_row = worst.split("<tr>")[2].split("</tr>")[0]
    assert "a-wide" in first_row
    assert first_row.count('class="chip no" title=') == 40
    assert '<span class="more">+5 more</span>' in first_row
    assert "25 queries tie at 0.00; showing the 20 with most contexts." in worst
    positions = page.split('<section id="positions">', 1)[1].split("</section>", 1)[0]
    assert "Positions 40 and later are not drawn (5 judged contexts)" in positions
    assert 'id="failed"' not in page  # nothing unscored or failed


def test_the_tools_do_not_import_the_engine_worker_driver_or_ray() -> None:
    code = (
        "import json, sys\n"
        "import jobs.tools.comparison, jobs.tools.report, jobs.tools.published_runs\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    modules = set(json.loads(result.stdout))
    assert "jobs.tools.report.page" in modules  # precondition: the imports happened
    assert not modules & {"jobs.engine.shards.worker", "jobs.engine.driver", "ray"}


def test_segments_section_shows_each_segments_summary_and_shift(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    before, after = segmented_runs(store)
    target = tmp_path / "segments.html"
    argv = [after, "--baseline", before, "--output", str(tmp_path), "--html", str(target)]
    assert ctxprec(["report", *argv]) == 0
    page = target.read_text(encoding="utf-8")
    assert page.count("<svg") == CHARTS + 1 + BASELINE_CHARTS + 1  # + mean and shift by segment
    section = page.split('<section id="segments">', 1)[1].split("</section>", 1)[0]
    assert "By retriever (11 values)" in section
    summary = load_run(store, after).summary
    for segment in summary.segments_by("retriever"):
        row = section.split(f'<span class="qid">{segment.value}</span>', 1)[1].split("</tr>")[0]
        assert f'<td class="num">{segment.summary.items:,}</td>' in row
        assert f'<td class="num">{segment.summary.mean:.2f}</td>' in row
    assert "Mean score by retriever" in section
    shifts = page.split('<section id="baseline">', 1)[1].split("</section>", 1)[0]
    worse_row = shifts.split(f'<span class="qid">{WORSE}</span>', 1)[1].split("</tr>")[0]
    assert worse_row.endswith("<td>FAIL</td>") and '<span class="down">-0.09' in worse_row
    tiny_row = shifts.split('<span class="qid">tiny</span>', 1)[1].split("</tr>")[0]
    assert tiny_row.endswith("<td>small</td>")
    assert "Shift by retriever" in shifts


def test_the_baseline_section_says_why_each_failed_segment_fell(tmp_path: Path) -> None:
    before, after = two_causes(open_store(str(tmp_path)))
    page, _ = run_report(tmp_path, after, "--baseline", before)
    shifts = page.split('<section id="baseline">', 1)[1].split("</section>", 1)[0]
    assert re.findall(r'<p class="alert">([^<]*)</p>', shifts) == [
        "The mean fell: 80 queries scored in both runs changed score (60 fell, 20 rose): 40 "
        "returned other passages, 40 got another verdict on the same ones.",
        "Segment retriever=low fell: 25 queries scored in both runs changed score (25 fell, 0 "
        "rose): 25 returned other passages, 0 got another verdict on the same ones.",
        "Segment retriever=mid fell: 25 queries scored in both runs changed score (20 fell, 5 "
        "rose): 15 returned other passages, 10 got another verdict on the same ones.",
    ]  # retriever=high fell too, but not significantly: no sentence


def test_worst_queries_lowest_score_first_then_most_contexts(tmp_path: Path) -> None:
    zeros = [Query(f"a-zero-{n}", [False] * (1 + n % 3)) for n in range(6)]
    queries = [*zeros, Query("b-low", [False, True]), Query("z-zero-wide", [False] * 9)]
    publish(open_store(str(tmp_path)), "ties", queries)
    page, _ = run_report(tmp_path, "ties")
    worst = page.split('<section id="worst">', 1)[1].split("</section>", 1)[0]
    order = re.findall(r'<span class="qid">([^<]*)</span>', worst)
    assert order == [
        "z-zero-wide",
        "a-zero-2",
        "a-zero-5",
        "a-zero-1",
        "a-zero-4",
        "a-zero-0",
        "a-zero-3",
        "b-low",
    ]
    assert "Lowest score first; among equal scores, most contexts first." in worst
    assert "tie at" not in worst  # all of them are listed


def test_a_failed_runs_report_says_it_failed_and_its_charts_stay_readable(
    tmp_path: Path,
) -> None:
    error = "context (column 'contexts') is null"
    failed = [Query(f"q{n}", status="error", error=f"in.jsonl row {n}: {error}") for n in range(7)]
    rate = ErrorRateRecord.of(items=7, errors=7, limit=0.05, commonest=error, commonest_items=7)
    publish(open_store(str(tmp_path)), "dead", failed, error_rate=rate)
    page, _ = run_report(tmp_path, "dead")
    header = page.split("</header>", 1)[0]
    assert f'<p class="alert"><b>This run FAILED:</b> {escape(rate.describe())}</p>' in header
    assert "over run.max_error_rate 0.05; commonest error (7 items): context" in header
    assert "No item was scored ok: the charts below are empty." in page
    distribution = page.split('<section id="distribution">', 1)[1].split("</section>", 1)[0]
    for svg in re.findall(r"<svg.*?</svg>", distribution, re.S):
        ticks = re.findall(r'<text class="tick" x="54.0"[^>]*>([^<]*)<', svg)
        assert ticks == ["0", "1"], ticks  # was 0, 0, 0, 1, 1, 1: fractions shown as counts
        assert ">no item scored ok</text>" in svg
    assert "<h2>Worst queries</h2>" in page and "No item was scored ok." in page


def test_a_run_within_its_error_rate_says_so_without_failing(runs: Runs, page: str) -> None:
    header = page.split("</header>", 1)[0]
    assert '<p class="muted">1 of 61 items are errors (1.6%), within run.max_error_rate' in header
    assert "FAILED" not in header


def test_the_baseline_section_names_both_runs_and_warns_of_another_judge(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    queries = [Query(f"q{n}", [n % 2 == 0, True]) for n in range(10)]
    publish(store, "before", queries)
    publish(store, "after", queries, model="openai/m2", api_base="http://k:sk-1@127.0.0.1:9/v1")
    page, _ = run_report(tmp_path, "after", "--baseline", "before")
    section = page.split('<section id="baseline">', 1)[1].split("</section>", 1)[0]
    judge = "openai/m2 at http://127.0.0.1:9/v1"
    assert f"<b>baseline</b> before (2026-01-02; judge lexical; prompt {PROMPT_VERSION})" in section
    assert f"<b>this run</b> after (2026-01-02; judge {judge}; prompt {PROMPT_VERSION})" in section
    warning = f"WARNING: the judges differ (baseline lexical, this run {judge})"
    assert f'<p class="alert">{warning}' in section
    assert "sk-1" not in page


# --------------------------------------------------------------------------------------------
# the SVG helpers, without runs


def test_chart_escapes_labels_and_handles_empty_and_negative() -> None:
    svg = charts.chart(
        ["<a>", "b"],
        [charts.Series(name="s&t", values=[-0.5, 0.25], color="#000")],
        charts.ChartSpec(title="t<", x_label="x", y_label="y", y_min=-1, y_max=1, diverging=True),
    )
    assert "&lt;a&gt;" in svg and "<a>" not in svg and "s&amp;t" in svg
    assert charts.COLOR_DOWN in svg and charts.COLOR_UP in svg
    empty = charts.chart([], [], charts.ChartSpec(title="e", x_label="x", y_label="y"))
    assert "no data" in empty and empty.startswith("<svg")


def test_count_axes_tick_at_whole_numbers() -> None:
    for high in (0.0, 2.24, 11.2, 112.0):
        ticks = charts.nice_ticks(0.0, high, min_step=1.0)
        assert ticks[-1] >= high and len(ticks) >= 2
        assert all(t == int(t) for t in ticks), ticks


def test_nice_ticks_cover_the_range() -> None:
    ticks = charts.nice_ticks(0.0, 0.23)
    assert ticks[0] == 0.0 and ticks[-1] >= 0.23
    assert all(b > a for a, b in itertools.pairwise(ticks))
    symmetric = charts.nice_ticks(-0.3, 0.3)
    assert [f"{t:+.1f}" for t in symmetric if t == 0] == ["+0.0"]  # no "-0.0" label


def test_with_a_baseline_each_regression_opens_onto_its_passages_and_both_verdicts(
    tmp_path: Path,
) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    a, b = two_causes(open_store(str(tmp_path / "out")), inputs=inputs)
    page, _ = run_report(tmp_path / "out", b, "--baseline", a)
    regressions = page.split("<h3>Largest regressions", 1)[1].split("</section>", 1)[0]
    assert regressions.count("<details>") == DRILLED
    assert f"The first {DRILLED} open onto their passages" in regressions
    n = min(q for q in FLIPPED if q % 2 == 1)  # its first passage no longer relevant
    drilled = regressions.split(f'<span class="qid">c{n:03d}</span>', 1)[1].split("</details>")[0]
    changed = [row for row in drilled.split("<tr") if 'class="changed"' in row]
    assert len(changed) == 1 and f"doc-{n}-0 of c{n:03d}" in changed[0]
    chips = re.findall(r'<span class="chip (\w+)">', changed[0])
    assert chips == ["no", "yes"] and "<td>flipped</td>" in changed[0]


def test_without_a_baseline_the_worst_queries_open_onto_their_passages(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    _, b = two_causes(open_store(str(tmp_path / "out")), inputs=inputs)
    page, _ = run_report(tmp_path / "out", b)
    worst = page.split('<section id="worst">', 1)[1].split("</section>", 1)[0]
    assert worst.count("passages and verdicts</summary>") == DRILLED
    first = re.search(r'<span class="qid">(c\d+)</span>', worst)
    assert first is not None and f"doc-{int(first[1][1:])}-0 of {first[1]}</div>" in worst


def test_passages_and_query_ids_are_escaped_in_the_drilled_items(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    store = open_store(str(tmp_path / "out"))
    ids = ["<script>alert(2)</script>", "doc-1"]
    hostile = [Query(SCRIPT_ID, [True, False], contexts=ids), Query("q1", [True])]
    publish(store, "hostile-a", hostile, inputs=inputs / "a.jsonl")
    worse = [Query(SCRIPT_ID, [False, True], contexts=ids), Query("q1", [True])]
    publish(store, "hostile-b", worse, inputs=inputs / "b.jsonl")
    page, _ = run_report(tmp_path / "out", "hostile-b", "--baseline", "hostile-a")
    assert "<script" not in page.lower() and page.count("passages and verdicts") >= 1
    assert str(escape(f"<script>alert(2)</script> of {SCRIPT_ID}")) in page  # the text
    assert str(escape(SCRIPT_ID)) in page
