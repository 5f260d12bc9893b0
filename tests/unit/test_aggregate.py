"""Tests for jobs.engine.publish.aggregate (the run summary), tests.support.polars_scores (the
Polars scores the tests check the workers' scorer_core scores against), jobs.core.pricing and
jobs.engine.publish.summary_table.

Every table goes through real Parquet files in a temporary directory and is scanned back, the
way publishing reads the tables; rows have the published tables' columns (jobs.core.schema).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.core import formatting as fmt
from jobs.core.pricing import estimate_cost_usd, price_basis
from jobs.core.run_manifest import DroppedFormRecord, ResponseFormatRecord
from jobs.core.schema import PUBLISHED_SCORES, PUBLISHED_SUMMARY, PUBLISHED_VERDICTS, context_hash
from jobs.engine.publish.aggregate import (
    BANDS,
    RunSummary,
    SummarySpec,
    band_range,
    quantiles,
    relevance_by_position,
    summarize,
)
from jobs.engine.publish.summary_table import WIDTH, format_summary_table
from scorer_core.errors import ConfigError
from scorer_core.precision import BANDS as LIBRARY_BANDS
from scorer_core.precision import context_precision, score_band
from tests.support.exact import exact_average_precision
from tests.support.polars_scores import (
    ScoreMethod,
    round_half_up_expr,
    score_mismatches,
    scores_from_verdicts,
)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

METHODS: tuple[ScoreMethod, ...] = ("bitmask", "window")
SCALES = (1, 10, 0, 0.5)

# ---------------------------------------------------------------------------------------------
# reference and helpers


def reference_score(flags: dict[int, bool], scale: float) -> float:
    """Exact context precision with Fractions, ranks from the stored positions."""
    value = exact_average_precision(flags) * Fraction(scale)
    hundredths = math.floor(value * 100 + Fraction(1, 2))
    return round(hundredths / 100, 2)


def verdict_rows(query_id: str, flags: Sequence[bool | None]) -> list[dict[str, object]]:
    """Verdict rows for one item, positions 0..n-1."""
    return [verdict_row(query_id, i, flag) for i, flag in enumerate(flags)]


def verdict_row(query_id: str, position: int, relevant: bool | None) -> dict[str, object]:
    return PUBLISHED_VERDICTS.build_row(
        query_id=query_id,
        position=position,
        context_id=f"doc-{position}",
        context_hash=context_hash(f"context {position} of {query_id}"),
        relevant=relevant,
        judge_reason="" if relevant is None else f"reason {position}",
        cached=False,
    )


def write_verdicts(directory: Path, rows: Iterable[dict[str, object]], shards: int = 1) -> str:
    """Write verdict rows as `shards` Parquet files (round robin) and return their glob."""
    directory.mkdir(parents=True, exist_ok=True)
    frame = pl.DataFrame(list(rows), schema=PUBLISHED_VERDICTS.polars)
    for shard in range(shards):
        part = frame.gather_every(shards, offset=shard) if frame.height else frame
        part.write_parquet(directory / f"verdicts-{shard:03d}.parquet")
    return str(directory / "verdicts-*.parquet")


def item_row(query_id: str, status: str = "ok", **overrides: object) -> dict[str, object]:
    """A row of the published scores table (the worker's score is `score`)."""
    row: dict[str, object] = {
        "query_id": query_id,
        "score": None,
        "reason": f"reason for {query_id}",
        "status": status,
        "error": None if status == "ok" else f"{status}: judge gave up",
        "relevant_count": 0,
        "context_count": 0,
        "judge_model": "openai/gpt-4o-mini",
        "calls": 1,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "cache_hits": 0,
        "cached_prompt_tokens": 0,
        "cache_creation_tokens": 0,
        "source": "input.jsonl",
        "row": 0,
        "truncated": False,
        "duplicate_of": None,
    }
    row.update(overrides)
    return PUBLISHED_SCORES.build_row(**row)


def write_items(directory: Path, rows: Iterable[dict[str, object]]) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "items-000.parquet"
    pl.DataFrame(list(rows), schema=PUBLISHED_SCORES.polars).write_parquet(path)
    return str(path)


def scores_by_id(frame: pl.DataFrame) -> dict[str, tuple[float, int, int]]:
    return {
        row["query_id"]: (row["score"], row["relevant_count"], row["judged_count"])
        for row in frame.iter_rows(named=True)
    }


def final_row(score: float | None, status: str = "ok", **overrides: object) -> dict[str, object]:
    """A published scores row, for summary tests."""
    row = item_row(f"q{overrides.pop('n', 0)}", status, **overrides)
    row["score"] = score
    return row


def sql(query: str) -> list[tuple[Any, ...]]:
    """All rows of a DuckDB query."""
    relation = duckdb.sql(query)
    assert relation is not None
    return relation.fetchall()


def final_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=PUBLISHED_SCORES.polars)


def no_verdicts() -> pl.LazyFrame:
    return pl.LazyFrame(schema=PUBLISHED_VERDICTS.polars)


# ---------------------------------------------------------------------------------------------
# scores_from_verdicts: table cases

CASES: list[tuple[list[bool], float, float]] = [
    ([True, False, True, False], 1, 0.83),
    ([False, True, True], 1, 0.58),
    ([False, False, True], 1, 0.33),
    ([False] * 7 + [True], 1, 0.13),
    ([True, False, True, False], 10, 8.33),
    ([False, True, True], 10, 5.83),
    ([True, False, True, False], 0, 0.0),
    ([True, True, True], 0, 0.0),
    ([False, False, False], 1, 0.0),
    ([True], 1, 1.0),
    ([True, True], 0.5, 0.5),
    ([False, True], 1, 0.5),
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("flags", "scale", "expected"), CASES)
def test_table_cases(
    tmp_path: Path, method: ScoreMethod, flags: list[bool], scale: float, expected: float
) -> None:
    source = write_verdicts(tmp_path, verdict_rows("q", flags))
    out = scores_from_verdicts(source, scale, method=method).collect()
    assert out.columns == ["query_id", "score", "relevant_count", "judged_count"]
    assert out.schema["score"] == pl.Float64
    assert out.schema["relevant_count"] == pl.Int32
    assert out.schema["judged_count"] == pl.Int32
    assert out.rows() == [("q", expected, sum(flags), len(flags))]
    assert reference_score(dict(enumerate(flags)), scale) == expected


@pytest.mark.parametrize("method", METHODS)
def test_many_items_in_sharded_files(tmp_path: Path, method: ScoreMethod) -> None:
    items = {f"q{i}": flags for i, (flags, _, _) in enumerate(CASES)}
    rows = [row for qid, flags in items.items() for row in verdict_rows(qid, flags)]
    source = write_verdicts(tmp_path, rows, shards=3)
    out = scores_by_id(scores_from_verdicts(source, 1, method=method).collect())
    assert out == {
        qid: (reference_score(dict(enumerate(flags)), 1), sum(flags), len(flags))
        for qid, flags in items.items()
    }


@pytest.mark.parametrize("method", METHODS)
def test_empty_verdicts(tmp_path: Path, method: ScoreMethod) -> None:
    source = write_verdicts(tmp_path, [])
    out = scores_from_verdicts(source, 1, method=method).collect()
    assert out.height == 0
    assert out.schema == pl.Schema(
        {
            "query_id": pl.String,
            "score": pl.Float64,
            "relevant_count": pl.Int32,
            "judged_count": pl.Int32,
        }
    )


@pytest.mark.parametrize("method", METHODS)
def test_missing_middle_row_keeps_stored_ranks(tmp_path: Path, method: ScoreMethod) -> None:
    # [yes, no, yes, no] without the row at position 1: positions 0, 2, 3 remain.
    rows = [verdict_row("q", p, r) for p, r in [(0, True), (2, True), (3, False)]]
    source = write_verdicts(tmp_path, rows)
    out = scores_from_verdicts(source, 1, method=method).collect()
    # (1/1 + 2/3) / 2 = 0.83; a row counter would have ranked the second yes 2nd: 1.0.
    assert out.rows() == [("q", 0.83, 2, 3)]


@pytest.mark.parametrize("method", METHODS)
def test_rows_in_any_order_and_positions_beyond_64(tmp_path: Path, method: ScoreMethod) -> None:
    flags = {0: False, 70: True, 5: True, 200: True, 63: False, 64: True}
    rows = [verdict_row("long", p, r) for p, r in flags.items()]
    rows += [verdict_row("short", p, r) for p, r in [(3, True), (1, False), (0, True)]]
    source = write_verdicts(tmp_path, rows, shards=2)
    out = scores_by_id(scores_from_verdicts(source, 10, method=method).collect())
    assert out == {
        "long": (reference_score(flags, 10), 4, 6),
        "short": (reference_score({0: True, 1: False, 3: True}, 10), 2, 3),
    }


@pytest.mark.parametrize("method", METHODS)
def test_null_verdicts_are_ignored(tmp_path: Path, method: ScoreMethod) -> None:
    rows = verdict_rows("unscored", [None, None]) + verdict_rows("ok", [False, True])
    source = write_verdicts(tmp_path, rows)
    out = scores_from_verdicts(source, 1, method=method).collect()
    assert out.rows() == [("ok", 0.5, 1, 2)]


def test_bad_scale_and_method(tmp_path: Path) -> None:
    source = write_verdicts(tmp_path, verdict_rows("q", [True]))
    for scale in (-1, math.nan, math.inf):
        with pytest.raises(ConfigError):
            scores_from_verdicts(source, scale)
    with pytest.raises(ConfigError):
        scores_from_verdicts(source, 1, method="magic")  # type: ignore[arg-type]


def test_methods_agree_on_duplicate_positions(tmp_path: Path) -> None:
    rows = [*verdict_rows("q", [True, False, True]), verdict_row("q", 2, True)]
    rows += verdict_rows("fine", [True])
    source = write_verdicts(tmp_path, rows)
    by_method = [scores_by_id(scores_from_verdicts(source, 1, method=m).collect()) for m in METHODS]
    assert by_method[0] == by_method[1]
    assert by_method[0]["fine"] == (1.0, 1, 1)


# ---------------------------------------------------------------------------------------------
# scores_from_verdicts: property tests against the exact reference

flag_lists = st.lists(st.booleans(), max_size=12)
scales = st.sampled_from(SCALES)


@settings(max_examples=120, deadline=None)
@given(items=st.lists(flag_lists, min_size=1, max_size=15), scale=scales, shards=st.integers(1, 3))
def test_agrees_with_fraction_reference(
    tmp_path_factory: pytest.TempPathFactory,
    items: list[list[bool]],
    scale: float,
    shards: int,
) -> None:
    rows = [row for i, flags in enumerate(items) for row in verdict_rows(f"q{i}", flags)]
    source = write_verdicts(tmp_path_factory.mktemp("v"), rows, shards=shards)
    expected = {
        f"q{i}": (reference_score(dict(enumerate(flags)), scale), sum(flags), len(flags))
        for i, flags in enumerate(items)
        if flags
    }
    for method in METHODS:
        out = scores_from_verdicts(source, scale, method=method).collect()
        assert scores_by_id(out) == expected


sparse_items = st.dictionaries(st.integers(0, 150), st.booleans(), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(items=st.lists(sparse_items, min_size=1, max_size=8), scale=scales)
def test_sparse_positions_agree_with_reference(
    tmp_path_factory: pytest.TempPathFactory, items: list[dict[int, bool]], scale: float
) -> None:
    """Gaps (missing rows) and positions past the 64-bit fast path, in shuffled row order."""
    rows = [
        verdict_row(f"q{i}", position, flag)
        for i, flags in enumerate(items)
        for position, flag in reversed(list(flags.items()))
    ]
    source = write_verdicts(tmp_path_factory.mktemp("v"), rows, shards=2)
    expected = {
        f"q{i}": (reference_score(flags, scale), sum(flags.values()), len(flags))
        for i, flags in enumerate(items)
    }
    for method in METHODS:
        out = scores_from_verdicts(source, scale, method=method).collect()
        assert scores_by_id(out) == expected


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 80), st.booleans()), max_size=40),
    scale=scales,
)
def test_methods_agree_on_any_rows(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int, bool]], scale: float
) -> None:
    """Including duplicated positions, the two formulations give the same output."""
    source = write_verdicts(
        tmp_path_factory.mktemp("v"), [verdict_row(f"q{q}", p, r) for q, p, r in rows]
    )
    bitmask, window = (
        scores_by_id(scores_from_verdicts(source, scale, method=m).collect()) for m in METHODS
    )
    assert bitmask == window


@settings(max_examples=150, deadline=None)
@given(flags=flag_lists, scale=scales)
def test_agrees_with_scorer_core(flags: list[bool], scale: float) -> None:
    # In memory: reading verdict files is what test_agrees_with_fraction_reference covers.
    source = pl.DataFrame(verdict_rows("q", flags), schema=PUBLISHED_VERDICTS.polars)
    expected = context_precision(flags, scale)
    assert expected == reference_score(dict(enumerate(flags)), scale)
    for method in METHODS:
        out = scores_from_verdicts(source, scale, method=method).collect()
        assert out["score"].to_list() == ([expected] if flags else [])


any_scales = st.one_of(
    scales, st.floats(min_value=0, max_value=1000, allow_nan=False, allow_infinity=False)
)


@settings(max_examples=150, deadline=None)
@given(
    items=st.lists(st.lists(st.booleans(), min_size=1, max_size=80), min_size=1, max_size=6),
    scale=any_scales,
)
def test_worker_score_equals_polars_score(items: list[list[bool]], scale: float) -> None:
    """The published score (the worker's, scorer_core) is the one the verdict rows imply.

    Lists longer than 64 take the bitmask method's window fallback; any scale, not just the
    round ones."""
    rows = [row for n, flags in enumerate(items) for row in verdict_rows(f"q{n}", flags)]
    verdicts = pl.DataFrame(rows, schema=PUBLISHED_VERDICTS.polars)
    worker = {f"q{n}": context_precision(flags, scale) for n, flags in enumerate(items)}
    for method in METHODS:
        polars = scores_from_verdicts(verdicts, scale, method=method).collect()
        assert dict(zip(polars["query_id"], polars["score"], strict=True)) == worker


# ---------------------------------------------------------------------------------------------
# score_mismatches: the worker's scores against their verdicts


def worker_fixture(directory: Path) -> tuple[str, str, dict[str, list[bool]]]:
    """Items and verdicts as the workers would write them, worker scores from the reference."""
    scored = {
        "a": [True, False, True, False],
        "b": [False, True, True],
        "c": [False, False, False],
        "d": [False] * 7 + [True],
    }
    verdicts = [row for qid, flags in scored.items() for row in verdict_rows(qid, flags)]
    verdicts += verdict_rows("u", [None, None, None])
    items = [
        item_row(
            qid,
            score=reference_score(dict(enumerate(flags)), 10),
            context_count=len(flags),
            relevant_count=sum(flags),
            row=n,
        )
        for n, (qid, flags) in enumerate(scored.items())
    ]
    items.append(item_row("u", "unscored", context_count=3, row=4, calls=3, cache_hits=1))
    items.append(item_row("e", "error", context_count=0, row=5, calls=0, prompt_tokens=0))
    items.append(item_row("empty", score=0.0, row=6))  # ok, but no contexts at all
    return write_items(directory, items), write_verdicts(directory, verdicts, shards=2), scored


@pytest.mark.parametrize("method", METHODS)
def test_polars_scores_of_the_worker_fixture(tmp_path: Path, method: ScoreMethod) -> None:
    _, verdicts, scored = worker_fixture(tmp_path)
    out = scores_by_id(scores_from_verdicts(verdicts, 10, method=method).collect())
    assert {qid: score for qid, (score, _, _) in out.items()} == {
        "a": 8.33,
        "b": 5.83,
        "c": 0.0,
        "d": 1.25,
    }
    assert {qid: relevant for qid, (_, relevant, _) in out.items()} == {
        "a": 2,
        "b": 2,
        "c": 0,
        "d": 1,
    }
    assert {qid: judged for qid, (_, _, judged) in out.items()} == {
        qid: len(flags) for qid, flags in scored.items()
    }


@pytest.mark.parametrize("method", METHODS)
def test_no_mismatches_on_worker_data(tmp_path: Path, method: ScoreMethod) -> None:
    items, verdicts, _ = worker_fixture(tmp_path)
    assert score_mismatches(items, verdicts, 10, method=method).collect().height == 0


def test_no_mismatches_with_scorer_core_scores(tmp_path: Path) -> None:
    flags_by_id = {f"q{n}": [(n >> bit) & 1 == 1 for bit in range(n % 9)] for n in range(300)}
    items = [
        item_row(qid, score=context_precision(flags, 10), relevant_count=sum(flags), row=n)
        for n, (qid, flags) in enumerate(flags_by_id.items())
    ]
    rows = [row for qid, flags in flags_by_id.items() for row in verdict_rows(qid, flags)]
    items_path = write_items(tmp_path, items)
    verdicts = write_verdicts(tmp_path, rows, shards=4)
    assert score_mismatches(items_path, verdicts, 10).collect().height == 0


def test_mismatches_are_reported(tmp_path: Path) -> None:
    items_path, verdicts, _ = worker_fixture(tmp_path)
    items = pl.read_parquet(items_path).with_columns(
        score=pl.when(pl.col("query_id") == "b").then(5.84).otherwise(pl.col("score")),
        relevant_count=pl.when(pl.col("query_id") == "c").then(1).otherwise("relevant_count"),
    )
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    items.write_parquet(tampered / "items.parquet")
    out = score_mismatches(tampered / "items.parquet", verdicts, 10).collect()
    assert out.columns == [
        "query_id",
        "source",
        "row",
        "worker_score",
        "polars_score",
        "worker_relevant_count",
        "polars_relevant_count",
    ]
    assert out.rows() == [
        ("b", "input.jsonl", 1, 5.84, 5.83, 2, 2),
        ("c", "input.jsonl", 2, 0.0, 0.0, 1, 0),
    ]


# ---------------------------------------------------------------------------------------------
# summary


def test_summarize_end_to_end(tmp_path: Path) -> None:
    scores, verdicts, _ = worker_fixture(tmp_path)
    summary = summarize(scores, verdicts, SummarySpec(model="lexical", scale=10))
    assert (summary.items, summary.scored, summary.unscored, summary.errors) == (7, 5, 1, 1)
    ok_scores = [8.33, 5.83, 0.0, 1.25, 0.0]
    assert summary.mean == pytest.approx(statistics.fmean(ok_scores))
    assert summary.median == 1.25
    assert dict(summary.bands) == {
        "none": 2,
        "low": 1,
        "moderate": 1,
        "good": 1,
        "excellent": 0,
    }
    assert summary.judge_calls == 4 * 1 + 3 + 0 + 1
    assert summary.prompt_tokens == 6 * 100
    assert summary.completion_tokens == 7 * 20
    assert summary.cache_hits == 1
    assert summary.cost_usd is None


@pytest.mark.parametrize("scale", [1, 10, 4])
def test_band_counts(scale: float) -> None:
    normalized = [0.0, 0.01, 0.2, 0.34, 0.35, 0.5, 0.64, 0.65, 0.84, 0.85, 1.0, 0.0]
    rows = [final_row(round(s * scale, 2), n=n) for n, s in enumerate(normalized)]
    rows.append(final_row(None, "unscored", n=99))
    summary = summarize(final_frame(rows), no_verdicts(), SummarySpec(model="x", scale=scale))
    assert summary.bands == (
        ("none", 2),
        ("low", 3),
        ("moderate", 3),
        ("good", 2),
        ("excellent", 2),
    )
    assert sum(count for _, count in summary.bands) == summary.scored == 12
    assert [label for label, _, _ in BANDS] == [label for label, _ in summary.bands]
    # The run's band of every item is the library's band of that item's score.
    named = Counter(score_band(round(s * scale, 2), scale) for s in normalized)
    assert dict(summary.bands) == {name: named.get(name, 0) for name, _, _ in BANDS}


def test_summary_bands_are_the_librarys_names_and_edges() -> None:
    # One definition (scorer_core.precision.BANDS); the summary derives its rows from it.
    assert [name for name, _, _ in BANDS] == ["none", *(n for n, _ in reversed(LIBRARY_BANDS))]
    assert [lower for _, lower, _ in BANDS[1:]] == [b for _, b in reversed(LIBRARY_BANDS)]
    # Every 2-decimal score at a few scales lands in the band score_band names.
    for scale in (1, 3, 10):
        scores = [round(n / 100 * scale, 2) for n in range(101)]
        rows = [final_row(score, n=n) for n, score in enumerate(scores)]
        summary = summarize(final_frame(rows), no_verdicts(), SummarySpec(model="x", scale=scale))
        named = Counter(score_band(score, scale) for score in scores)
        assert dict(summary.bands) == {name: named.get(name, 0) for name, _, _ in BANDS}
    assert [band_range(name) for name, _, _ in BANDS] == [
        "0",
        "> 0, < 0.35",
        "0.35-0.65",
        "0.65-0.85",
        ">= 0.85",
    ]
    assert band_range("0.1-0.3") == ""


def test_band_counts_with_scale_zero() -> None:
    rows = [final_row(0.0, n=n) for n in range(3)]
    summary = summarize(final_frame(rows), no_verdicts(), SummarySpec(model="x", scale=0))
    assert dict(summary.bands)["none"] == 3


def test_percentiles() -> None:
    values = [0.1 * n for n in range(11)]  # 0.0 .. 1.0
    rows = [final_row(round(v, 2), n=n) for n, v in enumerate(values)]
    rows.append(final_row(None, "error", n=50))
    summary = summarize(final_frame(rows), no_verdicts(), SummarySpec(model="x", scale=1))
    assert summary.median == pytest.approx(0.5)
    assert summary.p10 == pytest.approx(0.1)
    assert summary.p90 == pytest.approx(0.9)
    assert summary.mean == pytest.approx(0.5)
    assert (summary.scored, summary.errors, summary.items) == (11, 1, 12)


def test_summary_of_nothing_scored(tmp_path: Path) -> None:
    rows = [final_row(None, "unscored", n=0), final_row(None, "error", n=1)]
    verdicts = write_verdicts(tmp_path, verdict_rows("q0", [None, None]))
    summary = summarize(final_frame(rows), verdicts, SummarySpec(model="lexical", scale=1))
    assert (summary.items, summary.scored, summary.unscored, summary.errors) == (2, 0, 1, 1)
    assert (summary.mean, summary.median, summary.p10, summary.p90) == (None, None, None, None)
    assert all(count == 0 for _, count in summary.bands)
    assert summary.position_rates == ()
    json.dumps(summary.to_dict())
    assert "results: nowhere" in format_summary_table(summary, "nowhere")


def test_summary_of_empty_run(tmp_path: Path) -> None:
    verdicts = write_verdicts(tmp_path, [])
    summary = summarize(final_frame([]), verdicts, SummarySpec(model="lexical", scale=1))
    assert (summary.items, summary.scored, summary.judge_calls) == (0, 0, 0)
    assert summary.mean is None


def test_position_rates(tmp_path: Path) -> None:
    rows = verdict_rows("a", [True, False, True])
    rows += verdict_rows("b", [True, True])
    rows += verdict_rows("c", [False, None, None])  # nulls are not judged
    rows += [verdict_row("d", 3, True)]
    verdicts = write_verdicts(tmp_path, rows, shards=2)
    summary = summarize(final_frame([]), verdicts, SummarySpec(model="lexical", scale=1))
    got = [(r.position, r.judged, r.relevant, r.rate) for r in summary.position_rates]
    assert got == [(0, 3, 2, 2 / 3), (1, 2, 1, 0.5), (2, 1, 1, 1.0), (3, 1, 1, 1.0)]
    assert relevance_by_position(verdicts).collect()["position"].to_list() == [0, 1, 2, 3]


def test_cost() -> None:
    assert estimate_cost_usd("lexical", 1000, 100) is None
    assert estimate_cost_usd("", 1000, 100) is None
    assert estimate_cost_usd("no-such-provider/no-such-model-xyz", 1000, 100) is None
    # litellm's price for gpt-4o-mini: $0.15 per million prompt tokens, $0.60 per million out
    assert estimate_cost_usd("openai/gpt-4o-mini", 1_000_000, 100_000) == pytest.approx(0.21)
    assert estimate_cost_usd("gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)
    # the name after a provider prefix is priced only when the entry is that provider's
    assert estimate_cost_usd("anthropic/gpt-4o-mini", 1000, 100) is None


def test_pricing_reads_the_price_map_without_importing_litellm() -> None:
    # importing litellm costs a run's driver seconds (issue 30): the price map is a file
    code = (
        "import sys; from jobs.core.pricing import estimate_cost_usd, price_basis; "
        "assert estimate_cost_usd('openai/gpt-4o-mini', 10, 1) > 0; "
        "assert 'batch price' in price_basis('openai/gpt-4o-mini', batch=True); "
        "assert 'litellm' not in sys.modules, 'litellm imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_summary_cost_for_a_priced_model() -> None:
    rows = [final_row(1.0, n=0, prompt_tokens=5000, completion_tokens=500)]
    frame = final_frame(rows)
    empty = no_verdicts()
    priced = summarize(frame, empty, SummarySpec(model="openai/gpt-4o-mini", scale=1))
    assert priced.cost_usd is not None
    assert priced.cost_usd > 0
    assert summarize(frame, empty, SummarySpec(model="lexical", scale=1)).cost_usd is None


def test_a_batch_run_is_priced_at_the_batch_price() -> None:
    frame = final_frame([final_row(1.0, n=0, prompt_tokens=5000, completion_tokens=500)])
    empty = no_verdicts()
    online = summarize(frame, empty, SummarySpec(model="openai/gpt-4o-mini", scale=1))
    batch = summarize(
        frame, empty, SummarySpec(model="openai/gpt-4o-mini", scale=1, batch_price=True)
    )
    assert online.cost_usd is not None and batch.cost_usd is not None
    assert batch.cost_usd == pytest.approx(5000 * 7.5e-08 + 500 * 3e-07)  # litellm's batch rates
    assert batch.cost_usd == pytest.approx(online.cost_usd / 2)
    # No batch price in litellm's map: half the online price, and the basis says ASSUMED.
    assumed = estimate_cost_usd("gpt-3.5-turbo", 5000, 500, batch=True)
    full = estimate_cost_usd("gpt-3.5-turbo", 5000, 500)
    assert assumed is not None and full is not None and assumed == pytest.approx(full / 2)
    assert price_basis("gpt-3.5-turbo", batch=True).startswith("ASSUMED: half")
    assert price_basis("openai/gpt-4o-mini", batch=True) == (
        "at litellm's batch price for openai/gpt-4o-mini"
    )
    assert estimate_cost_usd("openai/no-such-model-xyz", 5000, 500, batch=True) is None
    assert price_basis("openai/no-such-model-xyz", batch=True).startswith("unknown")


def test_summary_table_of_a_batch_run(tmp_path: Path) -> None:
    summary = sample_summary(tmp_path)
    facts = {"mode": "batch", "batches": 3, "rounds": 2, "price": "ASSUMED: half of ..."}
    lines = format_summary_table(summary, "/results/run-1", facts).splitlines()
    assert all(len(line) <= WIDTH for line in lines[:-1])
    assert any(
        line.startswith("mode") and line.endswith("batch: 3 in 2 round(s)") for line in lines
    )
    assert any(
        line.startswith("priced at") and line.endswith("ASSUMED half price") for line in lines
    )


def sample_summary(tmp_path: Path) -> RunSummary:
    scores, verdicts, _ = worker_fixture(tmp_path)
    return summarize(scores, verdicts, SummarySpec(model="lexical", scale=10))


def test_to_dict_is_json_safe(tmp_path: Path) -> None:
    summary = sample_summary(tmp_path)
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["items"] == 7
    assert data["cost_usd"] is None
    assert data["bands"] == {"none": 2, "low": 1, "moderate": 1, "good": 1, "excellent": 0}
    assert data["position_rates"][0] == {"position": 0, "judged": 4, "relevant": 1, "rate": 0.25}


def test_summary_parquet_is_readable_by_duckdb(tmp_path: Path) -> None:
    summary = sample_summary(tmp_path)
    frame = summary.to_frame()
    assert frame.columns == list(PUBLISHED_SUMMARY.names)
    assert frame.schema == PUBLISHED_SUMMARY.polars
    assert frame["segment_by"].is_null().all() and frame["segment"].is_null().all()
    path = tmp_path / "summary.parquet"
    frame.write_parquet(path)
    count = sql(f"select count(*) from read_parquet('{path}')")
    assert count == [(frame.height,)]
    got = dict(
        sql(
            f"select metric, value from read_parquet('{path}') where band is null "
            "and position is null"
        )
    )
    assert got["items"] == 7
    assert got["scored"] == 5
    assert got["cost_usd"] is None
    bands = sql(f"select band, value from read_parquet('{path}') where metric = 'band_count'")
    assert dict(bands) == {"none": 2, "low": 1, "moderate": 1, "good": 1, "excellent": 0}
    rates = sql(
        f"select position, value from read_parquet('{path}') where metric = 'position_rate' "
        "order by position"
    )
    assert rates[0] == (0, 0.25)


def test_summary_table(tmp_path: Path) -> None:
    summary = sample_summary(tmp_path)
    text = format_summary_table(summary, "/results/run-1")
    lines = text.splitlines()
    assert lines[-1] == "results: /results/run-1"
    assert WIDTH == 46
    assert all(len(line) <= 46 for line in lines[:-1])
    assert any(line.startswith("items") and line.endswith("7") for line in lines)
    assert "  excellent (>= 0.85)" in text and "  none (0)" in text
    # the offline judge's cost reads the same here as in estimate, status and the report
    assert any(line.startswith("estimated cost") and line.endswith(fmt.FREE) for line in lines)
    assert "mean / median" in text
    assert "structured output" not in text  # the offline judge negotiates nothing


def test_summary_table_says_which_form_the_judge_used_and_why_others_were_dropped(
    tmp_path: Path,
) -> None:
    refused = "HTTP 500: 1 validation error for Request ('body', 'response_format', 'type') " * 4
    negotiated = ResponseFormatRecord(
        endpoint="http://127.0.0.1:8080/v1",
        setting="auto",
        in_use="json_object",
        confirmed=True,
        dropped=[DroppedFormRecord(form="json_schema", reason=refused.strip())],
        shards=3,
    )
    summary = sample_summary(tmp_path)
    # The form reaches the table as the manifest records it (`judge.response_format`).
    judge = {"transport": "http", "response_format": negotiated.model_dump()}
    lines = format_summary_table(summary, "/results/run-1", judge).splitlines()
    assert all(len(line) <= WIDTH for line in lines[:-1])
    form = lines.index(next(line for line in lines if line.startswith("structured output")))
    assert lines[form].endswith("json_object")
    assert any(line.startswith("transport") and line.endswith("http") for line in lines)
    rejected = " ".join(line.strip() for line in lines[form + 1 : -2])
    assert rejected.startswith("json_schema rejected: HTTP 500: 1 validation error")
    assert rejected.endswith("...") and len(rejected) < len(refused)  # the manifest has it all
    unconfirmed = negotiated.model_copy(
        update={"confirmed": False, "dropped": [], "setting": "json_object"}
    )
    text = format_summary_table(summary, "x", {"response_format": unconfirmed.model_dump()})
    assert "json_object (unconfirmed)" in text and "setting" in text
    record = json.loads(json.dumps(negotiated.model_dump()))
    assert ResponseFormatRecord.model_validate(record) == negotiated


def test_polars_rounding_is_mastras_at_exact_ties() -> None:
    """[1,1,0,1,1] at scale 6: Mastra (and scorer_core) 5.32, a plain half-up nudge 5.33."""
    from scorer_core.precision import round_half_up

    values = [0.835, 0.125, 5.325, 1.005, 2.675, 0.0, 6.0, 0.49999999999999994, 5.324999999999999]
    frame = pl.DataFrame({"x": values})
    rounded = frame.select(round_half_up_expr(pl.col("x"))).to_series().to_list()
    assert rounded == [round_half_up(v) for v in values]
    verdicts = pl.DataFrame(
        {
            "query_id": ["q"] * 5,
            "position": [0, 1, 2, 3, 4],
            "relevant": [True, True, False, True, True],
        },
        schema={"query_id": pl.String, "position": pl.Int32, "relevant": pl.Boolean},
    )
    for method in ("bitmask", "window"):
        score = scores_from_verdicts(verdicts, 6, method=method).collect()["score"][0]
        assert score == context_precision([1, 1, 0, 1, 1], 6) == 5.32, method


def test_summary_by_segment_and_its_terminal_table() -> None:
    """Every value of a `segment_by` column gets the whole summary of its items, as Polars
    computes it directly; the terminal table lists at most 20 values per column."""
    rows = [
        {**item_row(f"q{n:03d}", score=float(n % 7)), "retriever": f"r{n % 23:02d}"}
        for n in range(120)
    ]
    rows.append({**item_row("bad", status="error"), "retriever": None})
    scores = pl.DataFrame(rows, schema={**PUBLISHED_SCORES.polars, "retriever": pl.String})
    summary = summarize(
        scores, no_verdicts(), SummarySpec(model="lexical", scale=10, segment_by=["retriever"])
    )
    segments = summary.segments_by("retriever")
    assert [s.value for s in segments] == [*(f"r{n:02d}" for n in range(23)), None]
    direct = {
        row["retriever"]: row
        for row in scores.group_by("retriever")
        .agg(
            items=pl.len(),
            mean=pl.col("score").filter(pl.col("status") == "ok").mean(),
            p90=pl.col("score").filter(pl.col("status") == "ok").quantile(0.9, "linear"),
        )
        .to_dicts()
    }
    for segment in segments:
        expected = direct[segment.value]
        assert segment.summary.items == expected["items"]
        assert segment.summary.mean == expected["mean"]
        assert segment.summary.p90 == expected["p90"]
    assert segments[-1].summary.errors == 1 and segments[-1].summary.mean is None
    assert sum(s.summary.items for s in segments) == summary.items == 121

    text = format_summary_table(summary, "/results/run-1")
    assert all(len(line) <= 46 for line in text.splitlines()[:-1])
    assert "by retriever" in text
    assert "  r00" in text and "  r19" in text and "  r20" not in text
    assert "... 4 more values" in text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.integers(min_value=0, max_value=1000).map(lambda n: n / 100), min_size=0, max_size=60
    )
)
def test_quantiles_from_counts_are_polars_linear_quantiles(values: list[float]) -> None:
    counts: dict[float, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    got = quantiles(list(counts.items()))
    series = pl.Series(values, dtype=pl.Float64)
    for name, q in (("median", 0.5), ("p10", 0.1), ("p90", 0.9)):
        expected = series.quantile(q, interpolation="linear")
        assert got[name] == (None if expected is None else pytest.approx(expected, abs=1e-12))


@settings(max_examples=60, deadline=None)
@given(
    scores=st.lists(st.integers(0, 1000).map(lambda n: n / 100), min_size=1, max_size=400),
    chunk=st.integers(1, 50),
)
def test_mean_is_exact_whatever_the_files_row_groups(
    tmp_path_factory: pytest.TempPathFactory, scores: list[float], chunk: int
) -> None:
    # The mean of the doubles as rationals, rounded once; the same however the scores file
    # is cut into row groups (a float sum's last bits depend on the order it adds in).
    exact = float(sum(Fraction(score) for score in scores) / len(scores))
    frame = final_frame([final_row(score, n=n) for n, score in enumerate(scores)])
    path = tmp_path_factory.mktemp("scores") / "scores.parquet"
    frame.write_parquet(path, row_group_size=chunk)
    for source in (frame, pl.scan_parquet(path)):
        assert summarize(source, no_verdicts(), SummarySpec(model="x", scale=10)).mean == exact


def test_mean_per_segment_is_exact() -> None:
    scores = [0.1, 0.2, 0.7] * 5  # 0.1 + 0.2 is not 0.3 in floats
    rows = [final_row(score, n=n) for n, score in enumerate(scores)]
    frame = final_frame(rows).with_columns(retriever=pl.lit("bm25"))
    summary = summarize(
        frame, no_verdicts(), SummarySpec(model="x", scale=1, segment_by=["retriever"])
    )
    exact = float(sum(Fraction(score) for score in scores) / len(scores))
    assert summary.mean == summary.segments[0].summary.mean == exact
