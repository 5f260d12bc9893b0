"""`ctxprec compare` and `jobs.tools.published_runs` on published runs.

The runs are written directly by tests/support/published.py: "base", and "cand" (the same
queries judged more strictly, so scores fall and a few rise; one query removed, one added,
one unscored; an unreadable row in both). That the real job publishes runs like these is
tests/integration/test_real_runs.py's.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from jobs.cli import build_parser, options_of
from jobs.cli import main as ctxprec
from jobs.cli.arguments import parse_storage_options
from jobs.core.run_layout import RunLocation
from jobs.core.schema import context_hash
from jobs.core.storage import filesystem, open_store
from jobs.engine.publish import aggregate
from jobs.engine.publish.aggregate import Segment, relevance_by_position
from jobs.tools import comparison as compare
from jobs.tools.published_runs import (
    LEGACY_BAND_LABELS,
    RunNotFound,
    load_run,
    summary_from_frame,
)
from jobs.tools.tool_options import CompareOptions, PublishedRoot
from scorer_core.errors import ConfigError
from scorer_core.prompt import PROMPT_VERSION
from tests.support.polars_scores import score_mismatches
from tests.support.published import (
    ADDED_ID,
    BAD_ID,
    CAUSE_SEGMENTS,
    FLIPPED,
    ITEMS,
    PER_RETRIEVER,
    REMOVED_ID,
    REORDERED,
    RUN_DATE,
    TINY,
    UNSCORED_ID,
    WORSE,
    Query,
    Runs,
    base_and_candidate,
    local_base_and_candidate,
    publish,
    run_compare,
    segmented_runs,
    two_causes,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return local_base_and_candidate(tmp_path_factory.mktemp("published"))


def _scores(runs: Runs, run_id: str) -> pl.DataFrame:
    store = open_store(str(runs.output))
    return load_run(store, run_id).read("scores")


def _compare(runs: Runs, *extra: str) -> tuple[int, str]:
    return run_compare(runs.output, *extra)


# --------------------------------------------------------------------------------------------
# jobs.tools.published_runs


def test_load_run_reads_tables_manifest_and_summary(runs: Runs) -> None:
    run = load_run(open_store(str(runs.output)), runs.base)
    assert run.run_date == RUN_DATE
    assert run.judge_model == "lexical"
    assert run.manifest is not None and run.manifest.run_id == runs.base
    assert run.seconds is not None and run.seconds > 0
    scores = run.scores().collect()
    assert scores.height == ITEMS + 1
    assert run.summary.items == ITEMS + 1
    assert run.summary.errors >= 1
    assert run.summary.to_record() == run.manifest.summary
    assert run.verdicts().collect().height > ITEMS


def test_a_summary_table_from_before_segments_still_reads(runs: Runs) -> None:
    run = load_run(open_store(str(runs.output)), runs.base)
    older = run.read("summary").drop("segment_by", "segment")
    assert summary_from_frame(older) == run.summary


def test_the_flow_metrics_and_segments_read_back_as_published(runs: Runs) -> None:
    """Every scalar metric that is not the summary's own is a flow metric, in its order."""
    run = load_run(open_store(str(runs.output)), runs.base)
    flow = (
        ("in_flight_budget", 64.0),
        ("max_in_flight", 17.0),
        ("latency_p50_s", 0.5),
        ("latency_p90_s", None),
        ("latency_p99_s", 2.25),
    )
    with_flow = replace(run.summary, flow=flow)
    segment = Segment(by="retriever", value="bm25", summary=replace(run.summary, flow=flow[:2]))
    published = replace(with_flow, segments=(segment,))
    assert summary_from_frame(published.to_frame()) == published


def test_unknown_run_id_names_it_and_lists_available_ids(runs: Runs) -> None:
    store = open_store(str(runs.output))
    with pytest.raises(RunNotFound) as caught:
        load_run(store, "nightly-42")
    message = str(caught.value)
    assert "nightly-42" in message
    assert str(runs.output) in message
    assert "base" in message and "cand" in message


def test_unknown_run_id_from_the_command_exits_2(
    runs: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ctxprec(["compare", runs.base, "nope", "--output", str(runs.output)])
    assert code == 2
    err = capsys.readouterr().err
    assert "'nope' not found" in err
    assert "available run ids" in err and runs.cand in err


def test_parse_storage_options_nests_and_parses_values() -> None:
    options = parse_storage_options(
        ["anon=false", "client_kwargs.region_name=eu-west-1", "endpoint_url=http://h:9000"]
    )
    assert options == {
        "anon": False,
        "client_kwargs": {"region_name": "eu-west-1"},
        "endpoint_url": "http://h:9000",
    }
    with pytest.raises(ConfigError):
        parse_storage_options(["no-equals-sign"])


# --------------------------------------------------------------------------------------------
# the comparison table


def test_table_has_delta_b_minus_a_and_presence(runs: Runs) -> None:
    _, text = _compare(runs, runs.base, runs.cand)
    path = runs.output / "comparisons" / "base__vs__cand.parquet"
    assert f"per-query table: {path}" in text
    table = pl.read_parquet(path)
    assert tuple(table.columns) == compare.TABLE_COLUMNS

    a = _scores(runs, runs.base).select("query_id", pl.col("score").alias("a"))
    b = _scores(runs, runs.cand).select("query_id", pl.col("score").alias("b"))
    both = table.filter(pl.col("presence") == "both").join(a, on="query_id").join(b, on="query_id")
    assert both.height == ITEMS  # all but the removed query (the bad row is in both)
    ok = both.filter(pl.col("a").is_not_null() & pl.col("b").is_not_null())
    assert ok.height == ITEMS - 2  # neither the bad row nor the query unscored in cand
    assert (ok["score_a"] == ok["a"]).all() and (ok["score_b"] == ok["b"]).all()
    assert ((ok["delta"] - (ok["b"] - ok["a"])).abs() < 1e-9).all()

    removed = table.filter(pl.col("query_id") == REMOVED_ID).row(0, named=True)
    assert removed["presence"] == "only_a"
    assert removed["score_a"] is not None
    assert removed["score_b"] is None and removed["status_b"] is None
    assert removed["delta"] is None
    added = table.filter(pl.col("query_id") == ADDED_ID).row(0, named=True)
    assert added["presence"] == "only_b" and added["score_a"] is None
    bad = table.filter(pl.col("query_id") == BAD_ID).row(0, named=True)
    assert (bad["status_a"], bad["status_b"], bad["delta"]) == ("error", "error", None)
    unscored = table.filter(pl.col("query_id") == UNSCORED_ID).row(0, named=True)
    assert (unscored["status_a"], unscored["status_b"]) == ("ok", "unscored")
    assert unscored["score_a"] is not None and unscored["delta"] is None
    assert table.height == ITEMS + 2
    assert table["query_id"].is_unique().all()


def test_a_drop_within_the_noise_of_58_queries_passes(runs: Runs) -> None:
    comparison = compare.compare_runs(
        load_run(open_store(str(runs.output)), runs.base),
        load_run(open_store(str(runs.output)), runs.cand),
    )
    assert comparison.mean_shift is not None and comparison.mean_shift < -0.05  # precondition
    assert comparison.improved > 5 and comparison.regressed > 20  # ... but queries go both ways
    code, text = _compare(runs, runs.base, runs.cand, "--max-mean-drop", "0.02")
    assert code == 0
    assert "OK: mean shift -0.0593" in text and "paired over 58 queries): not significant" in text
    overall = compare.gate(comparison, compare.Thresholds(min_effect=0.02)).overall
    assert overall is not None and overall.ci_low is not None and overall.ci_high is not None
    assert overall.ci_low < overall.diff < 0 < overall.ci_high  # the interval holds 0


def test_exit_code_0_when_equal(runs: Runs) -> None:
    code, text = _compare(runs, runs.base, runs.base, "--max-mean-drop", "0")
    assert code == 0
    table = pl.read_parquet(runs.output / "comparisons" / "base__vs__base.parquet")
    assert set(table["presence"]) == {"both"}
    assert table["delta"].drop_nulls().abs().max() == 0
    assert "regressions: none" in text


def test_improvement_passes(runs: Runs) -> None:
    comparison = compare.compare_runs(
        load_run(open_store(str(runs.output)), runs.base),
        load_run(open_store(str(runs.output)), runs.cand),
    )
    assert comparison.improved > 0 and comparison.regressed > 0  # both kinds of change exist
    code, _ = _compare(runs, runs.cand, runs.base, "--max-mean-drop", "0")
    assert code == 0


def test_summary_shift_and_counts_are_printed(runs: Runs) -> None:
    _, text = _compare(runs, runs.base, runs.cand)
    for word in ("items", "scored (ok)", "unscored", "errors", "mean", "median", "p10", "p90"):
        assert word in text
    assert "queries scored ok in both runs" in text
    assert "only in A 1, only in B 1" in text
    assert "ok in A but not in B 1" in text  # the query unscored in cand


def test_regressions_are_sorted_most_negative_first(runs: Runs) -> None:
    store = open_store(str(runs.output))
    comparison = compare.compare_runs(load_run(store, runs.base), load_run(store, runs.cand))
    top = comparison.regressions(10)
    assert 0 < top.height <= 10
    deltas = top["delta"].to_list()
    assert all(d < 0 for d in deltas)
    assert deltas == sorted(deltas)
    worst_possible = comparison.table.filter(pl.col("delta") < 0)["delta"].min()
    assert deltas[0] == worst_possible

    _, text = _compare(runs, runs.base, runs.cand, "--top", "5")
    block = text.split("regressions (most negative delta first):", 1)[1].split("\n\n", 1)[0]
    printed = [line.split()[0] for line in block.strip().splitlines()[1:]]
    assert printed == top["query_id"].head(5).to_list()


def test_position_rates_of_both_runs(runs: Runs) -> None:
    store = open_store(str(runs.output))
    base, cand = load_run(store, runs.base), load_run(store, runs.cand)
    positions = compare.compare_runs(base, cand).positions
    expected_a = relevance_by_position(base.verdicts()).collect()
    assert positions["position"].to_list() == expected_a["position"].to_list()
    assert positions["rate_a"].to_list() == expected_a["rate"].to_list()
    check = positions.drop_nulls(["rate_a", "rate_b"])
    assert ((check["delta"] - (check["rate_b"] - check["rate_a"])).abs() < 1e-12).all()
    _, text = _compare(runs, runs.base, runs.cand)
    assert "relevance rate by position:" in text and "rate A" in text


def test_out_table_path(runs: Runs, tmp_path: Path) -> None:
    target = tmp_path / "nested" / "cmp.parquet"
    code, text = _compare(runs, runs.base, runs.cand, "--out-table", str(target))
    assert code == 0
    assert pl.read_parquet(target).height == ITEMS + 2
    assert str(target) in text


def test_ctxprec_compare_parses_the_options_as_the_tool_reads_them() -> None:
    def parsed(*argv: str) -> CompareOptions:
        return options_of(CompareOptions, build_parser().parse_args(["compare", "a", "b", *argv]))

    assert parsed("--top", "3") == CompareOptions(run_a="a", run_b="b", top=3)
    defaults = parsed()
    assert (defaults.min_effect, defaults.max_canary_drop) == (0.01, 0.1)
    assert (defaults.min_segment_size, defaults.top, defaults.by) == (30, 10, None)
    assert parsed("--max-mean-drop", "0.03").min_effect == 0.03  # the older name of --min-effect
    assert parsed("--by", "x", "--by", "y", "--json").by == ("x", "y")
    storage = parsed("--output", "s3://b/p", "--storage-option", "client_kwargs.region=x").root
    assert storage == PublishedRoot("s3://b/p", {"client_kwargs": {"region": "x"}})
    with pytest.raises(ConfigError, match="--min-effect and --max-mean-drop are the same setting"):
        parsed("--max-mean-drop", "0.03", "--min-effect", "0.02")
    with pytest.raises(ConfigError, match=r"--max-mean-drop must be >= 0, got -0\.1"):
        parsed("--max-mean-drop", "-0.1")
    for argv, message in (
        (["--top", "-1"], "--top must be >= 0"),
        (["--min-segment-size", "0"], "--min-segment-size must be >= 1"),
        (["--max-canary-drop", "-1"], "--max-canary-drop must be >= 0"),
    ):
        with pytest.raises(ConfigError, match=message):
            parsed(*argv)


def test_compare_runs_on_s3(moto_s3: Any, s3_prefix: str) -> None:
    base, cand = base_and_candidate(open_store(s3_prefix, moto_s3.storage_options))
    options = [
        "--storage-option",
        "key=testing",
        "--storage-option",
        "secret=testing",
        "--storage-option",
        f"endpoint_url={moto_s3.endpoint_url}",
        "--storage-option",
        "client_kwargs.region_name=us-east-1",
    ]
    args = build_parser().parse_args(["compare", base, cand, "--output", s3_prefix, *options])
    out = io.StringIO()
    assert compare.run(options_of(CompareOptions, args), out=out) == 0
    written = f"{s3_prefix}/comparisons/base__vs__cand.parquet"
    assert written in out.getvalue()
    fs, _, _ = filesystem(s3_prefix, moto_s3.storage_options)
    with fs.open(written, "rb") as handle:
        assert pl.read_parquet(handle).height == ITEMS + 2


# --------------------------------------------------------------------------------------------
# segments


@pytest.fixture(scope="module")
def segmented(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    output = tmp_path_factory.mktemp("segmented")
    store = open_store(str(output))
    base_and_candidate(store)  # runs without segments, beside them
    a, b = segmented_runs(store)
    return Runs(output, a, b)


def test_one_worse_segment_fails_the_gate_while_the_mean_barely_moves(segmented: Runs) -> None:
    store = open_store(str(segmented.output))
    comparison = compare.compare_runs(
        load_run(store, segmented.base), load_run(store, segmented.cand)
    )
    assert comparison.segment_columns == ("retriever",)
    shift = comparison.mean_shift
    assert shift is not None and -0.02 < shift < 0  # within the allowed drop overall
    shifts = {s.value: s for s in comparison.segments}
    assert shifts[WORSE].shift is not None and shifts[WORSE].shift < -0.05
    assert shifts[WORSE].paired == PER_RETRIEVER
    assert shifts[TINY].paired == 3 and shifts[TINY].shift == pytest.approx(-shifts[TINY].mean_a)
    assert all(s.shift == 0 for value, s in shifts.items() if value not in (WORSE, TINY))

    code, text = _compare(segmented, segmented.base, segmented.cand)
    assert code == 1
    assert "by retriever (a query's value in B" in text
    fails = [line for line in text.splitlines() if line.startswith("FAIL")]
    # 403 paired queries: a drop of 0.016 is significant and above the minimum effect
    assert fails[0].startswith("FAIL: mean fell by 0.0164 (from 0.8440 to 0.8276; 95% CI")
    assert fails[1].startswith(f"FAIL: segment retriever={WORSE}: mean fell by 0.09")
    assert "p 0.00034 after Holm: a significant drop of at least --min-effect 0.0100" in fails[1]
    assert len(fails) == 2  # TINY fell further, but 3 queries are too few to gate
    assert "1 segment(s) with fewer than 30 queries ok in both runs not gated" in text
    rows = {line.split()[0]: line.split()[-1] for line in text.splitlines() if "retriever-" in line}
    assert rows[WORSE] == "FAIL" and rows["retriever-0"] == "ok"
    assert any(line.split()[:1] == [TINY] and line.endswith("small") for line in text.splitlines())

    code, text = _compare(segmented, segmented.base, segmented.cand, "--min-segment-size", "3")
    assert code == 1 and f"FAIL: segment retriever={TINY}" in text
    code, text = _compare(segmented, segmented.base, segmented.cand, "--min-effect", "0.05")
    assert code == 1 and "\nFAIL: mean shift -0.0164" in text  # only the segment fails
    assert "significant, smaller than --min-effect 0.0500" in text
    code, text = _compare(segmented, segmented.base, segmented.cand, "--max-mean-drop", "0.1")
    assert code == 0 and "\nOK: mean shift -0.0164" in text and "FAIL" not in text


def test_the_per_query_table_has_the_segment_column(segmented: Runs) -> None:
    _compare(segmented, segmented.base, segmented.cand)
    table = pl.read_parquet(segmented.output / "comparisons" / "seg-a__vs__seg-b.parquet")
    assert tuple(table.columns) == (*compare.TABLE_COLUMNS, "retriever")
    worse = table.filter(pl.col("retriever") == WORSE)
    assert worse.height == PER_RETRIEVER and (worse["delta"] <= 0).all()


def test_segment_columns_can_be_asked_and_must_exist_in_both_runs(segmented: Runs) -> None:
    code, text = _compare(segmented, segmented.cand, segmented.cand, "--by", "retriever")
    assert code == 0 and "by retriever" in text
    with pytest.raises(ConfigError, match=r"--by tenant: run seg-b's scores have no column"):
        _compare(segmented, segmented.cand, segmented.cand, "--by", "tenant")
    with pytest.raises(ConfigError, match=r"--by retriever: run base's scores have no column"):
        _compare(segmented, "base", segmented.cand, "--by", "retriever")
    with pytest.raises(ConfigError, match="--by delta: a column of the comparison table"):
        _compare(segmented, segmented.cand, segmented.cand, "--by", "delta")
    with pytest.raises(ConfigError, match="--min-segment-size must be >= 1"):
        _compare(segmented, "base", segmented.cand, "--min-segment-size", "0")


def test_a_baseline_without_the_segment_column_is_compared_overall(segmented: Runs) -> None:
    store = open_store(str(segmented.output))
    comparison = compare.compare_runs(load_run(store, "base"), load_run(store, segmented.cand))
    assert comparison.segments == () and comparison.unsegmented == ("retriever",)
    _, text = _compare(segmented, "base", segmented.cand)
    assert "not compared by retriever: run base's scores do not have the column" in text


# --------------------------------------------------------------------------------------------
# the support module's runs against the job's


def test_support_scores_agree_with_the_job_aggregation(runs: Runs) -> None:
    """The scores written from context_precision are what the job's Polars aggregation gets
    from the same verdicts (the job fails a run where they differ)."""
    store = open_store(str(runs.output))
    for run_id in (runs.base, runs.cand):
        run = load_run(store, run_id)
        assert score_mismatches(run.scores(), run.verdicts(), 1.0).collect().is_empty()
        ok = run.scores().filter(pl.col("status") == "ok").select(pl.len()).collect().item()
        assert ok > 0


def test_bands_by_name_also_for_a_run_published_before_bands_had_names(tmp_path: Path) -> None:
    # Verdicts scoring 1.0, 0.75, 0.5, 0.33, 0 and 0: two items in "none", one in each other.
    flags = [[True], [True, False, False, True], [False, True], [False, False, True], [False]]
    store = open_store(str(tmp_path))
    publish(store, "old", [Query(f"q{n}", f) for n, f in enumerate([*flags, [False, False]])])
    publish(store, "new", [Query(f"q{n}", f) for n, f in enumerate(flags)])
    # "old" as an earlier version published it: bands labelled by their seed ranges.
    summary_path = store.join(RunLocation("old", RUN_DATE).table_file("summary"))
    legacy = {name: label for label, name in LEGACY_BAND_LABELS.items()}
    table = pl.read_parquet(summary_path)
    assert set(table["band"].drop_nulls()) == {name for name, _, _ in aggregate.BANDS}
    table.with_columns(pl.col("band").replace(legacy)).write_parquet(summary_path)
    assert set(pl.read_parquet(summary_path)["band"].drop_nulls()) == set(legacy.values())

    old, new = load_run(store, "old"), load_run(store, "new")
    assert old.summary.bands == (
        ("none", 2),
        ("low", 1),
        ("moderate", 1),
        ("good", 1),
        ("excellent", 1),
    )
    comparison = compare.compare_runs(old, new)
    assert comparison.bands_a == old.summary.bands and comparison.bands_b == new.summary.bands
    text = compare.format_bands(comparison)
    rows = {line.split(" (")[0].strip(): line.split()[-3:] for line in text.splitlines()[2:]}
    assert rows == {
        "none": ["2", "1", "-1"],
        "low": ["1", "1", "+0"],
        "moderate": ["1", "1", "+0"],
        "good": ["1", "1", "+0"],
        "excellent": ["1", "1", "+0"],
    }
    assert "excellent (>= 0.85)" in text
    _, printed = run_compare(tmp_path, "old", "new")
    assert text in printed


def test_runs_on_different_scales_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(str(tmp_path))
    queries = [Query(f"q{i}", [True, False, i % 2 == 0]) for i in range(20)]
    publish(store, "on-ten", queries, scale=10.0)
    publish(store, "on-one", queries, scale=1.0)
    code = ctxprec(["compare", "on-ten", "on-one", "--output", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert "on-ten and on-one were scored on different scales" in err
    assert "scorer.scale 10 and 1" in err


def test_compare_names_each_runs_date_judge_and_prompt_and_warns_when_they_differ(
    tmp_path: Path,
) -> None:
    store = open_store(str(tmp_path))
    queries = [Query(f"q{i}", [i % 3 == 0, True, i % 2 == 0]) for i in range(20)]
    publish(store, "monday", queries)
    keyed = "http://judge:sk-in-the-url@127.0.0.1:9/v1?api-key=sk-in-the-query"
    later = dt.date(2026, 1, 3)
    publish(store, "tuesday", queries, run_date=later, model="openai/m2", api_base=keyed)
    publish(store, "retold", queries, run_date=later, prompt_version="cp-2025-01-01.1")

    code, printed = run_compare(tmp_path, "monday", "tuesday")
    assert code == 0
    assert f"A = monday (2026-01-02; judge lexical; prompt {PROMPT_VERSION})" in printed
    judge_b = "openai/m2 at http://127.0.0.1:9/v1"
    assert f"B = tuesday (2026-01-03; judge {judge_b}; prompt {PROMPT_VERSION})" in printed
    warning = f"WARNING: the judges differ (A lexical, B {judge_b}): score shifts between"
    assert warning in printed and "sk-in-the" not in printed
    assert printed.index(warning) < printed.index("OK: mean shift")  # beside the verdict
    assert "prompt versions differ" not in printed

    result = json.loads(run_compare(tmp_path, "monday", "retold", "--json")[1])
    assert result["runs"] == {
        "a": {
            "run_id": "monday",
            "run_date": "2026-01-02",
            "judge": "lexical",
            "prompt_version": PROMPT_VERSION,
        },
        "b": {
            "run_id": "retold",
            "run_date": "2026-01-03",
            "judge": "lexical",
            "prompt_version": "cp-2025-01-01.1",
        },
    }
    assert result["warnings"] == [
        f"WARNING: the prompt versions differ (A {PROMPT_VERSION}, B cp-2025-01-01.1): "
        "score shifts between these runs may be the judge's, not retrieval's"
    ]


def test_runs_of_one_judge_and_prompt_compare_without_a_warning(runs: Runs) -> None:
    _, printed = _compare(runs, runs.base, runs.cand)
    assert "WARNING" not in printed
    assert json.loads(_compare(runs, runs.base, runs.cand, "--json")[1])["warnings"] == []


# --------------------------------------------------------------------------------------------
# why each query moved: its retrieval, or only the judge's verdicts

# (moved_retrieval, moved_judge) of `two_causes`, overall (None) and per retriever segment
CAUSES = {None: (40, 40), "high": (0, 30), "low": (25, 0), "mid": (15, 10)}
WHY_MOVED = {
    "FAIL: mean fell by": "80 queries scored in both runs changed score (60 fell, 20 rose): "
    "40 returned other passages, 40 got another verdict on the same ones",
    "FAIL: segment retriever=low:": "25 queries scored in both runs changed score (25 fell, "
    "0 rose): 25 returned other passages, 0 got another verdict on the same ones",
    "FAIL: segment retriever=mid:": "25 queries scored in both runs changed score (20 fell, "
    "5 rose): 15 returned other passages, 10 got another verdict on the same ones",
}


@pytest.fixture(scope="module", params=[True, False], ids=["by-context-id", "by-context-hash"])
def causes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    output = tmp_path_factory.mktemp("causes")
    a, b = two_causes(open_store(str(output)), context_ids=request.param)
    return Runs(output, a, b)


def test_the_counts_of_each_cause_are_exact_overall_and_per_segment(causes: Runs) -> None:
    assert {
        name: (len(REORDERED & set(numbers)), len(FLIPPED & set(numbers)))
        for name, numbers in CAUSE_SEGMENTS.items()
    } == {name: CAUSES[name] for name in CAUSE_SEGMENTS}  # the numbers below, from the runs
    code, printed = _compare(causes, causes.base, causes.cand, "--json")
    result = json.loads(printed)
    shifts = [result["overall"], *result["segments"]]
    assert {s["segment"]: (s["moved_retrieval"], s["moved_judge"]) for s in shifts} == CAUSES
    assert code == 1 and "changed" not in result["overall"]

    table = pl.read_parquet(causes.output / "comparisons" / "causes-a__vs__causes-b.parquet")
    assert tuple(table.columns) == (*compare.TABLE_COLUMNS, "retriever")
    moved = table.group_by("moved").agg(pl.col("query_id").sort())
    assert dict(moved.iter_rows()) == {
        "retrieval": [f"c{n:03d}" for n in sorted(REORDERED)],
        "judge": [f"c{n:03d}" for n in sorted(FLIPPED)],
        None: sorted(set(table["query_id"]) - {f"c{n:03d}" for n in REORDERED | FLIPPED}),
    }


def test_each_failed_line_is_followed_by_why_its_queries_moved(causes: Runs) -> None:
    code, printed = _compare(causes, causes.base, causes.cand)
    lines = printed.splitlines()
    fails = {line: lines[i + 1] for i, line in enumerate(lines) if line.startswith("FAIL")}
    assert code == 1 and len(fails) == len(WHY_MOVED)  # retriever=high did not fail
    for start, why in WHY_MOVED.items():
        assert [f"  {why}"] == [after for line, after in fails.items() if line.startswith(start)]


def _verdicts(passages: dict[str, tuple[str, list[str | None], list[bool]]]) -> pl.LazyFrame:
    """Verdict rows from {query_id: (texts, context ids, verdicts)}, in position order."""
    rows = [
        (query, position, ids[position], context_hash(text), verdicts[position])
        for query, (texts, ids, verdicts) in passages.items()
        for position, text in enumerate(texts)
    ]
    names = ["query_id", "position", "context_id", "context_hash", "relevant"]
    return pl.LazyFrame(rows, schema=names, orient="row")


def test_a_passage_added_removed_or_replaced_is_retrieval_and_ids_win_over_texts() -> None:
    xy = (["x", "y"], ["id-x", "id-y"], [True, False])
    a = {q: xy for q in ("added", "removed", "replaced", "flipped", "no ids", "edited", "same")}
    b = {
        "added": (["x", "y", "z"], ["id-x", "id-y", "id-z"], [True, False, False]),
        "removed": (["x"], ["id-x"], [True]),
        "replaced": (["x", "w"], ["id-x", "id-w"], [True, False]),
        "flipped": (["x", "y"], ["id-x", "id-y"], [True, True]),
        "no ids": (["x", "y"], [None, None], [False, False]),  # matched by text: B has no ids
        "edited": (["x!", "y!"], ["id-x", "id-y"], [False, False]),  # the same ids: the same
        "same": xy,
    }
    changed = [*a, "missing"]  # "missing" has no verdict rows in either run
    table = pl.LazyFrame({"query_id": changed, "delta": [-0.5] * len(changed)})
    table = table.with_columns(
        pl.when(pl.col("query_id") == "same").then(0.0).otherwise("delta").alias("delta"),
        status_a=pl.lit("ok"),
        status_b=pl.lit("ok"),
    )
    moved = compare.moved_queries(table, _verdicts(a), _verdicts(b)).collect()
    assert dict(moved.iter_rows()) == {
        "added": "retrieval",
        "removed": "retrieval",
        "replaced": "retrieval",
        "flipped": "judge",
        "no ids": "judge",
        "edited": "judge",
    }  # "same" did not change score
