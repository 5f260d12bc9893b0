"""Is the drop real? The statistics (jobs.core.stats), the significance gate of `ctxprec compare`
and the sampled estimator, on seeded simulations: in-memory tables, no Ray, no clock.

The acceptance of issue 20, measured here over many seeds:

* unchanged pairs judged by a noisy judge (each verdict flipped with probability 3%, afresh in
  each run): the gate fails on at most 5% of them (the old fixed-threshold rule, for
  comparison, fails on most: its 40-query segment moves by chance);
* a true drop of 1.5 points in a 3,000-query segment: caught in at least 95% of seeds;
* 95% intervals cover the true mean in 93-97% of seeds: a run's t interval, and a sampled
  run's stratified interval (per_segment and fraction), against the population's mean.
"""

from __future__ import annotations

import functools
import io
import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import yaml

from jobs.cli import build_parser, options_of
from jobs.core.config import SampleConfig, parse_config
from jobs.core.stats import (
    Moments,
    StratumCell,
    holm,
    items_for_half_width,
    moments_by,
    paired_test,
    stratified_interval,
    t_interval,
    t_quantile,
    t_sf2,
    welch_test,
)
from jobs.core.storage import open_store
from jobs.engine.publish.aggregate import SummarySpec, sampled_estimates, summarize
from jobs.inputs.sampling import plan_from_rows, unit_hash
from jobs.run.canary import CanaryResult, judge_canary
from jobs.tools import calibration as calibrate
from jobs.tools import comparison as compare
from jobs.tools import estimation as estimate
from jobs.tools.published_runs import load_run
from jobs.tools.sample_data import generate, write_jsonl
from jobs.tools.tool_options import EstimateOptions
from scorer_core.errors import InputError
from scorer_core.precision import context_precision
from tests.support.published import (
    PER_RETRIEVER,
    SEG_A,
    WORSE,
    Query,
    publish,
    run_compare,
    run_report,
    segmented_runs,
)


def moments_of(values: Sequence[float]) -> Moments:
    return Moments.from_counts((value, 1) for value in values)


# -- the maths on known values ----------------------------------------------------------------


def test_t_distribution_matches_tables() -> None:
    assert t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-6)
    assert t_quantile(0.975, 1) == pytest.approx(12.706205, abs=1e-5)
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)
    assert t_sf2(2.228139, 10) == pytest.approx(0.05, abs=1e-6)
    assert t_sf2(0.0, 5) == pytest.approx(1.0)


def test_t_interval_from_moments() -> None:
    values = [0.1, 0.5, 0.9, 0.4, 0.6]
    interval = t_interval(moments_of(values))
    assert interval is not None
    # mean 0.5, sd 0.2915, se 0.1304, t(4) 2.7764
    assert interval.estimate == pytest.approx(0.5)
    assert interval.half_width == pytest.approx(2.776445 * 0.291548 / 5**0.5, rel=1e-5)
    assert t_interval(moments_of([0.3])) is None
    assert Moments.from_counts([(0.5, 2), (1.0, 1)]) == Moments(3, 2.0, 1.5)


def test_holm_adjusts_step_down() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([]) == []


def test_paired_and_welch_tests() -> None:
    test = paired_test(moments_of([-0.1, -0.2, 0.0, -0.1, -0.15, -0.05]))
    assert test is not None and test.method == "paired"
    assert test.diff == pytest.approx(-0.1) and test.high < 0 and 0.01 < test.p_value < 0.05
    same = paired_test(moments_of([0.0] * 10))
    assert same is not None and same.p_value == 1.0 and same.low == same.high == 0.0
    welch = welch_test(moments_of([0.5, 0.6, 0.7]), moments_of([0.5, 0.6, 0.7, 0.6]))
    assert welch is not None and welch.method == "unpaired" and welch.p_value > 0.9


def test_stratified_interval_of_one_stratum_is_the_t_interval_with_fpc() -> None:
    values = [0.2, 0.4, 0.9, 0.7, 0.5, 0.1]
    cell = StratumCell(population=60, sampled=6, domain=moments_of(values))
    got = stratified_interval([cell])
    plain = t_interval(moments_of(values), fpc=1 - 6 / 60)
    assert got is not None and plain is not None
    assert got.estimate == pytest.approx(plain.estimate)
    assert got.half_width == pytest.approx(plain.half_width)
    census = stratified_interval([StratumCell(6, 6, moments_of(values))])
    assert census is not None and census.half_width == 0.0  # every item judged: no doubt


def test_items_for_half_width() -> None:
    # sd 0.3, half-width 0.01: (1.96 * 0.3 / 0.01)^2 = 3457.4, t a hair wider
    assert items_for_half_width(0.3, 0.01) == 3460
    assert items_for_half_width(0.3, 0.01, population=1000) < 1000
    assert items_for_half_width(0.3, 0.5) >= 2


# -- simulated runs ---------------------------------------------------------------------------

SEGMENTS = (("seg-40", 40), ("seg-200", 200), ("seg-760", 760), ("seg-3000", 3000))
CONTEXTS = 5
FLIP = 0.03  # the noisy judge flips each verdict with this probability, in each run


def _queries(seed: int = 1) -> list[tuple[str, str, list[bool]]]:
    """(query_id, segment, true verdicts) for 4,000 queries; fixed across the seeds (the same
    queries every night)."""
    rng = random.Random(seed)
    out = []
    for segment, size in SEGMENTS:
        for n in range(size):
            rate = rng.random()
            out.append(
                (f"{segment}/{n:05d}", segment, [rng.random() < rate for _ in range(CONTEXTS)])
            )
    return out


def _judged(flags: Sequence[bool], rng: random.Random) -> float:
    return context_precision([flag != (rng.random() < FLIP) for flag in flags])


# Each of the 2**CONTEXTS verdict patterns (bit i: context i relevant) scored by the library
# once: a simulated run looks its 4,000 scores up (400 runs per test).
PATTERN_SCORES = np.array(
    [context_precision([bool(code >> i & 1) for i in range(CONTEXTS)]) for code in range(32)]
)
BITS = 1 << np.arange(CONTEXTS)


class _Nights:
    """Simulated runs of a fixed set of queries: the columns no seed changes built once."""

    def __init__(self, queries: Sequence[tuple[str, str, list[bool]]]) -> None:
        self.truth = np.array([flags for _, _, flags in queries], dtype=bool)
        self.unscored = pl.DataFrame(
            {
                "query_id": [q for q, _, _ in queries],
                "status": ["ok"] * len(queries),
                "relevant_count": [sum(flags) for _, _, flags in queries],
                "error": [None] * len(queries),
                "segment": [s for _, s, _ in queries],
            },
            schema_overrides={"error": pl.String},
        )

    def scores(self, rng: np.random.Generator) -> pl.LazyFrame:
        """One night's scores: each verdict flipped by the noisy judge with probability FLIP."""
        judged = self.truth ^ (rng.random(self.truth.shape) < FLIP)
        return self.unscored.with_columns(score=PATTERN_SCORES[judged @ BITS]).lazy()


def expected_score(flags: Sequence[bool]) -> float:
    """The noisy judge's expected score of `flags`: over every pattern of flips, exactly. The
    true mean of a run is the mean of these (the judge's score is what the tool measures)."""
    return _expected_score(tuple(flags))


@functools.cache
def _expected_score(flags: tuple[bool, ...]) -> float:
    total = 0.0
    for pattern in itertools.product((False, True), repeat=len(flags)):
        flips = sum(pattern)
        weight = FLIP**flips * (1 - FLIP) ** (len(flags) - flips)
        total += weight * context_precision([f != p for f, p in zip(flags, pattern, strict=True)])
    return total


def _worse(
    queries: Sequence[tuple[str, str, list[bool]]], segment: str, drop: float
) -> list[tuple[str, str, list[bool]]]:
    """The queries with `segment`'s retrieval made worse by `drop` in true mean (as the noisy
    judge scores, `expected_score`): queries whose first context is relevant get it moved to
    the end, one by one, until the segment's true mean fell by `drop`."""
    size = sum(1 for _, s, _ in queries if s == segment)
    budget = drop * size
    out = []
    for query_id, seg, flags in queries:
        if seg == segment and budget > 0 and flags[0]:
            moved = [*flags[1:], flags[0]]
            loss = expected_score(flags) - expected_score(moved)
            if 0 < loss <= budget + 0.005:
                budget -= loss
                flags = moved
        out.append((query_id, seg, flags))
    return out


def _gate(a: pl.LazyFrame, b: pl.LazyFrame) -> tuple[compare.Gate, bool]:
    """The gate on two simulated runs, and the old fixed-threshold rule's verdict (fails when
    a mean, overall or of a segment of 30+ queries, fell by more than 0.02)."""
    table = compare.comparison_table(a, b, ["segment"]).collect()
    method = compare.choose_method(table)
    overall = compare.shifts(table, method)[0]
    segments = compare.shifts(table, method, "segment")
    verdict = compare.decide(overall, segments, method, compare.Thresholds(min_segment_size=30))
    old_fails = any(
        s.shift is not None and s.shift < -0.02 for s in (overall, *segments) if s.paired >= 30
    )
    return verdict, old_fails


def test_unchanged_pairs_with_a_noisy_judge_rarely_fail_the_gate() -> None:
    nights = _Nights(_queries())
    seeds = 200
    alarms = old_alarms = 0
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        verdict, old = _gate(nights.scores(rng), nights.scores(rng))
        alarms += not verdict.passed
        old_alarms += old
    rate = alarms / seeds
    print(f"false alarms: gate {rate:.1%}, old rule {old_alarms / seeds:.1%} over {seeds} seeds")
    assert rate <= 0.05
    assert old_alarms / seeds > 0.1  # what the issue reported: noise alone failed the old gate


def test_a_small_drop_in_a_large_segment_is_caught() -> None:
    queries = _queries()
    worse = _worse(queries, "seg-3000", 0.015)
    true_drop = (
        sum(
            expected_score(f) - expected_score(g)
            for (_, s, f), (_, _, g) in zip(queries, worse, strict=True)
            if s == "seg-3000"
        )
        / 3000
    )
    assert true_drop == pytest.approx(0.015, abs=0.001)
    before, after = _Nights(queries), _Nights(worse)
    seeds = 200
    caught = old_caught = 0
    for seed in range(seeds):
        rng = np.random.default_rng(5000 + seed)
        verdict, old = _gate(before.scores(rng), after.scores(rng))
        caught += any(s.value == "seg-3000" for s in verdict.failed_segments)
        old_caught += old
    print(f"1.5-point drop caught: gate {caught / seeds:.1%}, old rule {old_caught / seeds:.1%}")
    assert caught / seeds >= 0.95
    assert old_caught / seeds < 0.5  # below the old fixed 0.02: it passed


def test_a_t_interval_covers_the_true_mean_in_95_percent_of_seeds() -> None:
    rng = random.Random(3)
    universe = [_judged(flags, rng) for _, _, flags in _queries(seed=3)] * 5  # 20,000 scores
    true_mean = sum(universe) / len(universe)
    seeds, covered = 2000, 0
    for seed in range(seeds):
        draw = random.Random(seed).choices(universe, k=200)
        interval = t_interval(moments_of(draw))
        assert interval is not None
        covered += interval.low <= true_mean <= interval.high
    print(f"t interval coverage: {covered / seeds:.1%} over {seeds} seeds")
    assert 0.93 <= covered / seeds <= 0.97


def _population(seed: int = 4) -> list[tuple[str, str, float]]:
    """A fixed population of 3,000 scored items in 3 strata of different sizes and means."""
    rng = random.Random(seed)
    out = []
    for stratum, size, rate in (("a", 1800, 0.7), ("b", 900, 0.4), ("c", 300, 0.2)):
        for n in range(size):
            flags = [rng.random() < rate for _ in range(CONTEXTS)]
            out.append((f"{stratum}-{n:05d}", stratum, context_precision(flags)))
    return out


CHECKED_SEEDS = 25
"""Seeds whose selection is also made by the job's own plan (`plan_from_rows`, `plan.keep`)
and must be the same item for item; the other seeds hash each query once."""


def _selected(
    population: Sequence[tuple[str, str, float]], sample: SampleConfig
) -> tuple[np.ndarray, dict[str, int]]:
    """Which items a sampled run judges (a mask) and each stratum's population: the job's rule
    (a query is kept when `unit_hash(seed, query_id)` is below `fraction`, or among the
    `per_segment` smallest of its stratum), every hash computed once. For the first seeds the
    job's plan decides too, and the two must agree."""
    hashes = np.array([unit_hash(sample.seed, q) for q, _, _ in population])
    strata = np.array([s for _, s, _ in population])
    sizes = {str(s): int(n) for s, n in zip(*np.unique(strata, return_counts=True), strict=True)}
    if sample.fraction is not None:
        kept = hashes < sample.fraction
    else:
        kept = np.zeros(len(population), dtype=bool)
        for stratum in sizes:
            members = np.flatnonzero(strata == stratum)
            kept[members[np.argsort(hashes[members])[: sample.per_segment]]] = True
    if sample.seed < CHECKED_SEEDS:
        plan = plan_from_rows(sample, ((q, {"stratum": s}) for q, s, _ in population))
        assert [plan.keep(q, (s,)) for q, s, _ in population] == kept.tolist()
        assert {s: plan.population[(s,)] for s in sizes} == sizes
    return kept, sizes


def _stratified(
    population: Sequence[tuple[str, str, float]], sample: SampleConfig, domain: np.ndarray
) -> tuple[float, float, int]:
    """The stratified interval of the mean over `domain` (a mask) of one sampled run: its
    items chosen as the job chooses them, then the job's estimator."""
    kept, sizes = _selected(population, sample)
    scores = np.array([v for _, _, v in population])
    strata = np.array([s for _, s, _ in population])
    cells = []
    for stratum, size in sizes.items():
        sampled = kept & (strata == stratum)
        values = scores[sampled & domain].tolist()
        cells.append(StratumCell(size, int(sampled.sum()), moments_of(values)))
    interval = stratified_interval(cells)
    assert interval is not None
    return interval.low, interval.high, int(kept.sum())


@pytest.mark.parametrize(
    "size", [{"per_segment": 60}, {"fraction": 0.05}], ids=["per_segment", "fraction"]
)
def test_a_sampled_runs_interval_covers_the_population_mean(size: dict[str, Any]) -> None:
    population = _population()
    everyone = np.ones(len(population), dtype=bool)
    true_mean = sum(score for _, _, score in population) / len(population)
    seeds, covered = 1000, 0
    for seed in range(seeds):
        sample = SampleConfig(by=["stratum"], seed=seed, **size)
        low, high, judged = _stratified(population, sample, everyone)
        covered += low <= true_mean <= high
    assert judged < len(population) / 10
    print(f"sampled ({size}) coverage: {covered / seeds:.1%} over {seeds} seeds")
    assert 0.93 <= covered / seeds <= 0.97


def test_a_segment_across_strata_is_covered_too() -> None:
    """A `summary.by` segment that is not a stratum (items of every stratum, in different
    shares) is estimated as a domain: its interval covers its population mean as often."""
    population = _population()
    # the domain: about a third of stratum a's items, half of b's, all of c's
    domain = np.array(
        [s == "c" or n % (3 if s == "a" else 2) == 0 for n, (_, s, _) in enumerate(population)]
    )
    true_mean = float(np.array([v for _, _, v in population])[domain].mean())
    seeds, covered = 1000, 0
    for seed in range(seeds):
        sample = SampleConfig(per_segment=90, by=["stratum"], seed=seed)
        low, high, _ = _stratified(population, sample, domain)
        covered += low <= true_mean <= high
    print(f"sampled domain coverage: {covered / seeds:.1%} over {seeds} seeds")
    assert 0.93 <= covered / seeds <= 0.97


# -- sampling decisions -----------------------------------------------------------------------


def test_which_items_are_sampled_depends_only_on_seed_and_query_id() -> None:
    rows = [(f"q{n}", {"r": "x" if n % 3 else "y"}) for n in range(3000)]
    sample = SampleConfig(per_segment=50, by=["r"], seed=11)
    plan = plan_from_rows(sample, rows)
    chosen = {q for q, values in rows if plan.keep(q, (values["r"],))}
    assert len(chosen) == 100  # 50 of each stratum, exactly
    again = plan_from_rows(sample, reversed(rows))  # another night, rows in another order
    assert chosen == {q for q, values in rows if again.keep(q, (values["r"],))}
    other = plan_from_rows(SampleConfig(per_segment=50, by=["r"], seed=12), rows)
    assert chosen != {q for q, values in rows if other.keep(q, (values["r"],))}
    small = SampleConfig(fraction=0.1, seed=11)
    large = SampleConfig(fraction=0.3, seed=11)
    ten = {q for q, _ in rows if plan_from_rows(small, []).keep(q, ())}
    thirty = {q for q, _ in rows if plan_from_rows(large, []).keep(q, ())}
    assert ten < thirty and 250 < len(ten) < 350  # a larger fraction keeps the smaller's
    assert 0 <= unit_hash(11, "q1") < 1


def test_sample_config_takes_one_size() -> None:
    with pytest.raises(ValueError, match=r"one of sample\.fraction and sample\.per_segment, not"):
        SampleConfig(fraction=0.1, per_segment=10)
    with pytest.raises(ValueError, match=r"sample\.by needs sample\.fraction or"):
        SampleConfig(by=["retriever"])
    assert not SampleConfig().enabled and SampleConfig(fraction=0.5).enabled


def test_the_summary_of_a_sampled_run_is_the_stratified_estimate() -> None:
    population = _population()
    sample = SampleConfig(per_segment=100, by=["stratum"], seed=2)
    plan = plan_from_rows(
        sample, ((q, {"stratum": s}) for q, s, _ in population), segment_by=["stratum"]
    )
    kept = [(q, s, v) for q, s, v in population if plan.keep(q, (s,))]
    scores = pl.DataFrame(
        {
            "query_id": [q for q, _, _ in kept],
            "score": [v for _, _, v in kept],
            "status": ["ok"] * len(kept),
            "calls": [1] * len(kept),
            "prompt_tokens": [0] * len(kept),
            "completion_tokens": [0] * len(kept),
            "cache_hits": [0] * len(kept),
            "cached_prompt_tokens": [0] * len(kept),
            "cache_creation_tokens": [0] * len(kept),
            "stratum": [s for _, s, _ in kept],
        }
    )
    verdicts = pl.DataFrame(
        {"query_id": [], "position": [], "relevant": []},
        schema={"query_id": pl.String, "position": pl.Int32, "relevant": pl.Boolean},
    )
    summary = summarize(
        scores, verdicts, SummarySpec(model="m", scale=1, segment_by=["stratum"], sample=plan)
    )
    assert (summary.items, summary.population) == (300, 3000)
    low, high, _ = _stratified(population, sample, np.ones(len(population), dtype=bool))
    assert (summary.mean_ci_low, summary.mean_ci_high) == (pytest.approx(low), pytest.approx(high))
    by_value = {s.value: s.summary for s in summary.segments}
    assert by_value["a"].population == 1800 and by_value["a"].items == 100
    a_scores = [v for _, s, v in kept if s == "a"]
    plain = t_interval(moments_of(a_scores), fpc=1 - 100 / 1800)
    assert plain is not None and by_value["a"].mean_ci_low == pytest.approx(plain.low)
    # the unsampled summary's interval is the plain t interval of the same scores
    unsampled = summarize(scores, verdicts, SummarySpec(model="m", scale=1))
    plain_all = t_interval(moments_of([v for _, _, v in kept]))
    assert plain_all is not None and unsampled.mean_ci_high == pytest.approx(plain_all.high)
    assert sampled_estimates(unsampled, scores.lazy(), plan).population == 3000
    json.dumps(summary.to_dict())


# -- ctxprec estimate --target-ci ---------------------------------------------------------------


def test_estimate_target_ci_from_a_previous_runs_spread(tmp_path: Path) -> None:
    output = tmp_path / "out"
    store = open_store(str(output))
    segmented_runs(store)
    config = tmp_path / "job.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "input": {"path": str(tmp_path / "in.jsonl"), "carry": ["retriever"]},
                "output": {"path": str(output)},
                "summary": {"by": ["retriever"]},
            }
        )
    )
    args = build_parser().parse_args(
        ["estimate", "--config", str(config), "--target-ci", "0.02", "--run", SEG_A, "--json"]
    )
    printed = io.StringIO()
    assert estimate.run(options_of(EstimateOptions, args), out=printed) == 0
    result = json.loads(printed.getvalue())
    assert result["run"] == SEG_A and result["by"] == ["retriever"]
    run = load_run(store, SEG_A)
    scores = run.scores().collect()
    worse = scores.filter(pl.col("retriever") == WORSE)["score"]
    row = next(s for s in result["segments"] if s["segment"] == WORSE)
    assert row["sd"] == pytest.approx(worse.std())
    assert row["needed"] == items_for_half_width(worse.std(), 0.02, PER_RETRIEVER)
    assert row["needed"] <= PER_RETRIEVER  # the population bounds it
    overall = result["overall"]
    assert overall["needed"] == items_for_half_width(scores["score"].std(), 0.02, scores.height)
    assert result["per_segment"] == max(s["needed"] for s in result["segments"])
    args = build_parser().parse_args(["estimate", "--config", str(config), "--target-ci", "0.02"])
    printed = io.StringIO()
    assert estimate.run(options_of(EstimateOptions, args), out=printed) == 0  # the latest run
    assert "items needed for a 95% interval of half-width 0.02" in printed.getvalue()
    assert "sample: {per_segment:" in printed.getvalue()


# -- the report shows the same ------------------------------------------------------------------


def test_the_report_shows_intervals_error_bars_and_the_gates_tests(tmp_path: Path) -> None:
    output = tmp_path / "out"
    store = open_store(str(output))
    a, b = segmented_runs(store)
    page, _ = run_report(output, b, "--baseline", a)
    assert page.count('class="errorbar"') >= 2 * 11  # segment means and changes, each
    summary = load_run(store, b).summary
    assert summary.mean_ci_low is not None and summary.mean_ci_high is not None
    assert f"95% CI [{summary.mean_ci_low:.3f}, {summary.mean_ci_high:.3f}]" in page
    verdict = json.loads(run_compare(output, a, b, "--json")[1])
    worse = next(s for s in verdict["segments"] if s["segment"] == WORSE)
    # the row of the worse retriever: the same change, interval and p-value as compare's
    assert f"[{worse['ci_low']:+.3f}, {worse['ci_high']:+.3f}]" in page
    assert f"{worse['p_adjusted']:.4f}" in page
    assert "Change in mean by retriever" in page and ">FAIL<" in page


def test_runs_sharing_few_queries_are_compared_unpaired_and_say_so(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    rng = random.Random(6)

    def queries(first: int, last: int, rate: float) -> list[Query]:
        return [
            Query(f"q{n:04d}", [rng.random() < rate for _ in range(5)]) for n in range(first, last)
        ]

    publish(store, "old", queries(0, 300, 0.5))
    publish(store, "new", queries(250, 550, 0.3))  # 50 queries in common: too few to pair
    code, text = run_compare(tmp_path, "old", "new")
    assert code == 1, text
    assert "compared UNPAIRED (Welch)" in text and "unpaired over 300 queries" in text
    result = json.loads(run_compare(tmp_path, "old", "new", "--json")[1])
    overall = result["overall"]
    assert set(overall) == {
        "by",
        "segment",
        "queries",
        "mean_a",
        "mean_b",
        "moved_retrieval",
        "moved_judge",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "p_adjusted",
        "significant",
        "gated",
    }
    assert set(result) == {"gate", "method", "overall", "segments", "canary", "runs", "warnings"}
    assert result["method"] == "unpaired" and overall["significant"] and overall["diff"] < -0.05
    assert result["gate"] == "fail" and result["segments"] == [] and result["canary"] is None


def test_estimate_counts_only_the_items_a_sampled_run_judges(tmp_path: Path) -> None:
    rows = list(generate(200, seed=2, segments=4))
    source = tmp_path / "in.jsonl"
    write_jsonl(source, iter(rows))
    raw = {
        "input": {
            "path": str(source),
            "columns": {
                "query_id": "id",
                "input": "question",
                "output": "answer",
                "context": "contexts",
            },
            "carry": ["retriever"],
        },
        "output": {"path": str(tmp_path / "out")},
        "sample": {"per_segment": 10, "by": ["retriever"], "seed": 4},
    }
    result = estimate.estimate(parse_config(raw), sample=50)
    assert result.items.valid == 40  # 10 of each of the 4 retrievers
    del raw["sample"]
    assert estimate.estimate(parse_config(raw), sample=50).items.valid == 200


# -- the judge canary ---------------------------------------------------------------------------


def test_the_canary_is_calibrates_agreement_and_bad_labels_name_the_file(tmp_path: Path) -> None:
    labels = tmp_path / "canary.jsonl"
    rows = [
        {
            "query_id": r["id"],
            "query": r["question"],
            "contexts": r["contexts"],
            "relevance": r["relevance"],
        }
        for r in generate(30, seed=9)
    ]
    write_jsonl(labels, iter(rows))
    raw = {
        "input": {"path": str(tmp_path / "unused.jsonl")},
        "canary": {"labels": str(labels)},
    }
    config = parse_config(raw)
    canary = judge_canary(config)
    expected = calibrate.calibrate(config, str(labels))
    assert expected.items.ok == 30
    assert canary == CanaryResult(
        items=float(expected.items.ok),
        kappa=expected.per_context.cohen_kappa,
        precision=expected.per_context.precision,
        recall=expected.per_context.recall,
    )
    # the summary's metrics, and back
    assert dict(canary.metrics()) == {
        "canary_items": 30.0,
        "canary_kappa": canary.kappa,
        "canary_precision": canary.precision,
        "canary_recall": canary.recall,
    }
    assert CanaryResult.of_metrics(canary.metrics()) == canary
    assert CanaryResult.of_metrics(()) is None
    assert canary.describe() == f"canary: 30 labelled item(s) judged, kappa {canary.kappa:.3f}"
    assert judge_canary(parse_config({"input": raw["input"]})) is None  # no canary
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"query": "q"}\n')
    raw["canary"] = {"labels": str(broken)}
    with pytest.raises(InputError, match=r"canary\.labels: no usable labelled rows in .*broken"):
        judge_canary(parse_config(raw))


def test_canary_change_fails_on_a_kappa_drop_beyond_the_allowed() -> None:
    a = CanaryResult(items=80.0, kappa=0.8, precision=0.9, recall=0.9)
    steady = compare.canary_change(a, replace(a, kappa=0.75), 0.1)
    assert steady is not None and not steady.failed
    assert steady.kappa_change == pytest.approx(-0.05)
    changed = compare.canary_change(a, replace(a, kappa=0.6), 0.1)
    assert changed is not None and changed.failed and changed.canary_b.items == 80.0
    assert compare.canary_change(None, None, 0.1) is None
    one_sided = compare.canary_change(None, a, 0.1)
    assert one_sided is not None and not one_sided.failed and one_sided.kappa_change is None
    # --json prints it field for field, in this order
    assert list(compare.Gate(passed=True, message="", canary=changed).to_json()["canary"]) == [
        "items_a",
        "items_b",
        "kappa_a",
        "kappa_b",
        "precision_a",
        "precision_b",
        "recall_a",
        "recall_b",
        "kappa_change",
        "max_drop",
        "failed",
    ]


def test_moments_by_groups_count_sum_and_squares_of_the_non_null_values() -> None:
    frame = pl.DataFrame(
        {"segment": ["a", "a", "b", "b", None], "score": [0.5, None, 1.0, 0.25, 0.75]}
    )
    by_segment = moments_by(frame.lazy(), "score", [pl.col("segment")])
    assert by_segment == {
        ("a",): moments_of([0.5]),
        ("b",): moments_of([1.0, 0.25]),
        (None,): moments_of([0.75]),
    }
    assert moments_by(frame, "score") == {(): moments_of([0.5, 1.0, 0.25, 0.75])}
    assert moments_by(frame.clear(), "score") == {(): Moments()}
