"""`ctxprec compare RUN_A RUN_B`: how scores moved from run A (baseline) to run B, overall and
per segment, and whether the move is real: a paired t test per segment (Welch's when the runs
share too few queries), Holm-adjusted across segments, and the judge canary's change; and per
query whose score changed, whether its retrieval or only the judge's verdicts moved. The gate
is the exit code (docs/report.md, docs/is-the-drop-real.md).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TextIO

import polars as pl

from jobs.core import formatting as fmt
from jobs.core.formatting import Column, table
from jobs.core.stats import LEVEL, Moments, holm, moments_by, paired_test, welch_test
from jobs.core.text_safety import terminal_safe
from jobs.engine import band_range, relevance_by_position
from jobs.run.canary import CanaryResult
from jobs.tools.published_runs import PublishedRun, load_run, write_file
from jobs.tools.tool_options import CompareOptions
from scorer_core.errors import ConfigError

_EPSILON = 1e-9  # means are averages of 2-decimal scores: a difference below this is float noise
_STATUSES = ("ok", "unscored", "error")
_KEYS = ("score", "status", "relevant_count")

# The per-query table's columns, then one per segment column.
_PER_RUN = tuple(f"{key}_{x}" for key in ("status", "relevant_count") for x in "ab")
TABLE_COLUMNS = ("query_id", "presence", "score_a", "score_b", "delta", *_PER_RUN, "moved")
# Paired by query when the queries ok in both runs are at least 2 and at least this share of
# the queries ok in the run with fewer; else unpaired.
PAIRED_SHARE = 0.5


@dataclass(frozen=True)
class ScoreStats:
    """count, mean, median, p10 and p90 of a score column (None when there is nothing)."""

    count: int
    mean: float | None
    median: float | None
    p10: float | None
    p90: float | None


@dataclass(frozen=True)
class SegmentShift:
    """How one segment's scores moved (the whole run's: `by` ""), with its test."""

    by: str  # the segment column ("" for the whole run)
    value: str | None  # its value in run B, as text (None: null)
    paired: int  # the queries the test used (pairs; unpaired: the smaller run's count)
    mean_a: float | None
    mean_b: float | None
    regressed: int
    changed: int = 0  # of the queries ok in both runs, those whose score changed
    moved_retrieval: int = 0  # of those, the ones that returned other passages
    moved_judge: int = 0  # the ones with only another verdict on the same passages
    method: str = "paired"
    diff: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    p_adjusted: float | None = None
    significant: bool = False
    gated: bool = False  # big enough to fail the gate
    failed: bool = False

    @property
    def shift(self) -> float | None:
        return self.diff if self.diff is not None else _diff(self.mean_a, self.mean_b)

    def moves(self) -> str:
        """Why its queries moved: how many returned other passages, how many only got another
        verdict on the same passages in the same order."""
        unknown = self.changed - self.moved_retrieval - self.moved_judge
        rest = f"; {unknown:,} have no verdicts to tell" if unknown else ""
        return (
            f"{self.changed:,} queries scored in both runs changed score ({self.regressed:,} "
            f"fell, {self.changed - self.regressed:,} rose): {self.moved_retrieval:,} returned "
            f"other passages, {self.moved_judge:,} got another verdict on the same ones{rest}"
        )

    def to_json(self) -> dict[str, Any]:
        head = {"by": self.by or None, "segment": self.value, "queries": self.paired}
        internal = {"by", "value", "paired", "regressed", "changed", "method", "failed"}
        fields = [f.name for f in dataclasses.fields(self) if f.name not in internal]
        return head | {name: getattr(self, name) for name in fields}


@dataclass(frozen=True)
class RunFacts:
    """What a comparison names of each run: its date, judge and prompt version."""

    run_id: str
    run_date: str
    judge: str  # the model, and "at <endpoint>" when the run set judge.api_base
    prompt_version: str  # "" when the run did not record it

    @classmethod
    def of(cls, run: PublishedRun) -> RunFacts:
        endpoint = f" at {run.judge_endpoint}" if run.judge_endpoint else ""
        date = run.run_date.isoformat()
        return cls(run.run_id, date, run.judge_model + endpoint, run.prompt_version)

    def describe(self) -> str:
        prompt = self.prompt_version or "not recorded"
        facts = f"{self.run_date}; judge {self.judge}; prompt {prompt}"
        return terminal_safe(f"{self.run_id} ({facts})")


def differences(a: RunFacts, b: RunFacts, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """A warning per difference of judge or prompt version between the runs (called `names`)."""
    found = []
    if a.judge != b.judge:
        found.append(f"the judges differ ({names[0]} {a.judge}, {names[1]} {b.judge})")
    if a.prompt_version and b.prompt_version and a.prompt_version != b.prompt_version:
        versions = f"{names[0]} {a.prompt_version}, {names[1]} {b.prompt_version}"
        found.append(f"the prompt versions differ ({versions})")
    why = "score shifts between these runs may be the judge's, not retrieval's"
    return [terminal_safe(f"WARNING: {difference}: {why}") for difference in found]


@dataclass(frozen=True)
class Comparison:
    """Everything `ctxprec compare` (and the report's baseline section) shows."""

    facts_a: RunFacts
    facts_b: RunFacts
    table: pl.DataFrame  # TABLE_COLUMNS + segment columns, one row per query_id, by query_id
    positions: pl.DataFrame  # position, judged_a, rate_a, judged_b, rate_b, delta
    status_a: dict[str, int]
    status_b: dict[str, int]
    presence: dict[str, int]
    stats_a: ScoreStats  # over the queries scored ok in both runs
    stats_b: ScoreStats
    stats_delta: ScoreStats  # of the per-query deltas
    improved: int
    unchanged: int
    regressed: int
    lost: int  # ok in A, present in B but not ok there
    bands_a: tuple[tuple[str, int], ...] = ()  # (band, items) from each run's summary
    bands_b: tuple[tuple[str, int], ...] = ()
    segments: tuple[SegmentShift, ...] = ()  # per segment column, values sorted, null last
    segment_columns: tuple[str, ...] = ()
    unsegmented: tuple[str, ...] = ()  # B's summary columns that run A's scores lack
    overall: SegmentShift | None = None
    method: str = "paired"  # or "unpaired" when the runs share too few queries
    canary_a: CanaryResult | None = None  # each run's judge canary (None: it judged none)
    canary_b: CanaryResult | None = None

    @property
    def paired(self) -> int:
        return self.stats_delta.count

    @property
    def run_a(self) -> str:
        return self.facts_a.run_id

    @property
    def run_b(self) -> str:
        return self.facts_b.run_id

    @property
    def warnings(self) -> list[str]:
        return differences(self.facts_a, self.facts_b)

    @property
    def mean_shift(self) -> float | None:
        return _diff(self.stats_a.mean, self.stats_b.mean)

    def stat_rows(self) -> list[tuple[str, float | None, float | None, float | None, int]]:
        """(statistic, A's, B's, B - A, digits) per `ScoreStats` figure."""
        a, b = dataclasses.asdict(self.stats_a), dataclasses.asdict(self.stats_b)
        return [(n, a[n], b[n], _diff(a[n], b[n]), 0 if n == "count" else 3) for n in a]

    def regressions(self, top: int) -> pl.DataFrame:
        """The `top` queries whose score fell the most (most negative delta first)."""
        return self.table.filter(pl.col("delta") < -_EPSILON).sort(["delta", "query_id"]).head(top)


@dataclass(frozen=True)
class CanaryChange:
    """Both runs' canary and kappa's change; `failed` when it fell more than `max_drop`."""

    a: CanaryResult
    b: CanaryResult
    kappa_change: float | None
    max_drop: float
    failed: bool

    def to_json(self) -> dict[str, Any]:
        names, runs = ("items", "kappa", "precision", "recall"), {"a": self.a, "b": self.b}
        sides = {f"{n}_{x}": getattr(r, n) for n in names for x, r in runs.items()}
        return sides | {n: getattr(self, n) for n in ("kappa_change", "max_drop", "failed")}


@dataclass(frozen=True)
class Gate:
    """The gate's verdict, with the Holm-adjusted tests it made."""

    passed: bool
    message: str
    failed_segments: tuple[SegmentShift, ...] = ()
    overall: SegmentShift | None = None
    segments: tuple[SegmentShift, ...] = ()
    canary: CanaryChange | None = None

    def segments_by(self, by: str) -> tuple[SegmentShift, ...]:
        return tuple(segment for segment in self.segments if segment.by == by)

    def to_json(self) -> dict[str, Any]:
        """The object `ctxprec compare --json` prints."""
        return {
            "gate": "pass" if self.passed else "fail",
            # "paired" by query, or "unpaired" when the runs share too few queries
            "method": self.overall.method if self.overall else None,
            "overall": self.overall.to_json() if self.overall else None,
            "segments": [segment.to_json() for segment in self.segments],
            "canary": self.canary.to_json() if self.canary else None,
        }


def comparison_table(
    scores_a: pl.LazyFrame,
    scores_b: pl.LazyFrame,
    segment_by: Sequence[str] = (),
    verdicts: tuple[pl.LazyFrame, pl.LazyFrame] | None = None,
) -> pl.LazyFrame:
    """Per query_id: both runs' scores, statuses, relevant counts, delta, presence, `moved`
    (null without both runs' `verdicts`) and segment values (B's, else A's); a later duplicate
    query_id is dropped so rows cannot multiply."""
    schema_a, schema_b = scores_a.collect_schema(), scores_b.collect_schema()
    same = {c: schema_a.get(c) == schema_b.get(c) for c in segment_by}
    segments = [pl.col(c) if same[c] else pl.col(c).cast(pl.String) for c in segment_by]
    is_duplicate = pl.col("error").fill_null("").str.starts_with("duplicate query_id")

    def side(scores: pl.LazyFrame, suffix: str) -> pl.LazyFrame:
        return (
            scores.filter(~is_duplicate)
            .unique(subset="query_id", keep="first", maintain_order=True)
            .select(
                "query_id",
                pl.col(*_KEYS).name.suffix(f"_{suffix}"),
                *(segment.name.suffix(f"_{suffix}") for segment in segments),
                pl.lit(True).alias(f"_in_{suffix}"),
            )
        )

    in_a, in_b = pl.col("_in_a").fill_null(False), pl.col("_in_b").fill_null(False)
    presence = pl.when(in_a & in_b).then(pl.lit("both")).when(in_a).then(pl.lit("only_a"))
    scored = (
        side(scores_a, "a")
        .join(side(scores_b, "b"), on="query_id", how="full", coalesce=True)
        .with_columns(
            presence.otherwise(pl.lit("only_b")).alias("presence"),
            (pl.col("score_b") - pl.col("score_a")).round(6).alias("delta"),
            *(pl.coalesce(f"{c}_b", f"{c}_a").alias(c) for c in segment_by),
        )
    )
    if verdicts is None:
        scored = scored.with_columns(moved=pl.lit(None, pl.String))
    else:
        scored = scored.join(moved_queries(scored, *verdicts), on="query_id", how="left")
    return scored.select(*TABLE_COLUMNS, *segment_by).sort("query_id")


def moved_queries(
    table: pl.LazyFrame, verdicts_a: pl.LazyFrame, verdicts_b: pl.LazyFrame
) -> pl.LazyFrame:
    """query_id and `moved` of each query ok in both runs whose score changed: "retrieval" when
    its passages differ in B (added, removed or moved; matched by context_id when both runs give
    every one, else by context_hash), "judge" when only verdicts on the same passages in the
    same order differ; null when a run has no verdict rows for it."""
    changed = table.filter(_both_ok() & (pl.col("delta").abs() > _EPSILON)).select("query_id")

    def passages(verdicts: pl.LazyFrame, suffix: str) -> pl.LazyFrame:
        listed = pl.col("context_id", "context_hash", "relevant").sort_by("position")
        return (
            verdicts.join(changed, on="query_id", how="semi")
            .with_columns(pl.col("relevant").fill_null(False))  # as the score counts it
            .group_by("query_id")
            .agg(listed.name.suffix(f"_{suffix}"))
        )

    def same(column: str) -> pl.Expr:
        return pl.col(f"{column}_a") == pl.col(f"{column}_b")

    ids = [pl.col(f"context_id_{x}") for x in "ab"]
    every_id = pl.all_horizontal(c.list.drop_nulls().list.len() == c.list.len() for c in ids)
    same_passages = pl.when(every_id).then(same("context_id")).otherwise(same("context_hash"))
    moved = pl.when(~same_passages).then(pl.lit("retrieval"))
    return (
        passages(verdicts_a, "a")
        .join(passages(verdicts_b, "b"), on="query_id")
        .select("query_id", moved.when(~same("relevant")).then(pl.lit("judge")).alias("moved"))
    )


def score_stats(scores: pl.Series) -> ScoreStats:
    """Statistics of the non-null values of `scores` (percentiles interpolate linearly)."""
    values = scores.drop_nulls().cast(pl.Float64)
    if values.is_empty():
        return ScoreStats(0, None, None, None, None)
    quantile = [values.quantile(q, interpolation="linear") for q in (0.1, 0.9)]
    figures = [values.mean(), values.median(), *quantile]
    return ScoreStats(values.len(), *(fmt.optional_float(v) for v in figures))


def position_change(verdicts_a: pl.LazyFrame, verdicts_b: pl.LazyFrame) -> pl.LazyFrame:
    """Relevance rate by position in both runs, and its delta (rate_b - rate_a)."""

    def side(verdicts: pl.LazyFrame, suffix: str) -> pl.LazyFrame:
        rates = relevance_by_position(verdicts)
        return rates.select("position", pl.col("judged", "rate").name.suffix(f"_{suffix}"))

    return (
        side(verdicts_a, "a")
        .join(side(verdicts_b, "b"), on="position", how="full", coalesce=True)
        .with_columns((pl.col("rate_b") - pl.col("rate_a")).alias("delta"))
        .sort("position")
    )


def segment_columns(
    run_a: PublishedRun, run_b: PublishedRun, asked: Sequence[str] | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(columns to compare segments by, B's summary columns skipped because A lacks them):
    `asked` (--by; both runs must have them), else those B's summary is segmented by."""
    runs = (run_a, run_b)
    names = [set(run.scores().collect_schema().names()) for run in runs]
    for column in asked or ():
        if column in TABLE_COLUMNS:
            raise ConfigError(
                f"--by {column}: a column of the comparison table itself; segment by a "
                "carried column (input.carry)"
            )
        for run, columns in zip(runs, names, strict=True):
            if column not in columns:
                raise ConfigError(
                    f"--by {column}: run {run.run_id}'s scores have no column {column!r} "
                    "(segment by a column both runs carry, input.carry)"
                )
    if asked:
        return tuple(dict.fromkeys(asked)), ()
    default = run_b.summary.segment_columns
    usable = tuple(c for c in default if c in names[0] & names[1] and c not in TABLE_COLUMNS)
    return usable, tuple(c for c in default if c not in usable)


def _both_ok() -> pl.Expr:
    ok = (pl.col("status_a") == "ok") & (pl.col("status_b") == "ok")
    return ok & pl.col("delta").is_not_null()


def choose_method(table: pl.DataFrame) -> str:
    """Paired when the runs share enough queries ok in both (`PAIRED_SHARE`), else unpaired."""
    ok_a, ok_b = (table.filter(pl.col(f"status_{x}") == "ok").height for x in "ab")
    both = table.filter(_both_ok()).height
    return "paired" if both >= 2 and both >= PAIRED_SHARE * min(ok_a, ok_b) else "unpaired"


def shifts(table: pl.DataFrame, method: str, column: str | None = None) -> list[SegmentShift]:
    """The shift and test of the whole run, or of each value of `column` (sorted, null last)."""
    keys = [pl.col(column).cast(pl.String)] if column else []
    paired = table.filter(_both_ok())
    if method == "paired":
        sides = {"a": (paired, "score_a"), "b": (paired, "score_b")}
    else:
        sides = {x: (table.filter(pl.col(f"status_{x}") == "ok"), f"score_{x}") for x in "ab"}
    sides["d"] = (paired, "delta")
    moments: dict[tuple[Any, ...], dict[str, Moments]] = {}
    for name, (frame, score) in sides.items():
        for key, found in moments_by(frame, score, keys).items():
            moments.setdefault(key, {})[name] = found
    delta, moved = pl.col("delta"), pl.col("moved")
    subsets = {
        "regressed": delta < -_EPSILON,
        "changed": delta.abs() > _EPSILON,
        "moved_retrieval": moved == "retrieval",
        "moved_judge": moved == "judge",
    }
    counted = {name: moments_by(paired.filter(c), "delta", keys) for name, c in subsets.items()}
    shown = [key for key, m in moments.items() if "d" in m or method != "paired"]
    return [
        _shift(
            column or "",
            key,
            method,
            moments[key],
            {name: found.get(key, Moments()).n for name, found in counted.items()},
        )
        for key in sorted(shown, key=lambda key: [(v is None, v or "") for v in key])
    ]


def _shift(
    by: str, key: tuple[Any, ...], method: str, moments: dict[str, Moments], counts: dict[str, int]
) -> SegmentShift:
    """Segment `key`'s shift and test from the Moments of its scores "a", "b" and deltas "d"."""
    a, b, d = (moments.get(x, Moments()) for x in "abd")
    test = paired_test(d) if method == "paired" else welch_test(a, b)
    diff = test.diff if test else (d.mean if method == "paired" else _diff(a.mean, b.mean))
    return SegmentShift(
        by=by,
        value=key[0] if key else None,
        paired=d.n if method == "paired" else min(a.n, b.n),
        mean_a=a.mean,
        mean_b=b.mean,
        regressed=counts["regressed"],
        changed=counts["changed"],
        moved_retrieval=counts["moved_retrieval"],
        moved_judge=counts["moved_judge"],
        method=method,
        diff=diff,
        ci_low=test.low if test else None,
        ci_high=test.high if test else None,
        p_value=test.p_value if test else None,
    )


def _tally(column: pl.Series, names: Sequence[str]) -> dict[str, int]:
    return dict.fromkeys(names, 0) | dict(column.drop_nulls().value_counts().iter_rows())


def compare_runs(
    run_a: PublishedRun, run_b: PublishedRun, segment_by: Sequence[str] | None = None
) -> Comparison:
    """Compare two published runs (A the baseline, B the candidate), overall and per segment."""
    scales = (run_a.summary.scale, run_b.summary.scale)
    if all(scales) and scales[0] != scales[1]:
        raise ConfigError(
            f"runs {run_a.run_id} and {run_b.run_id} were scored on different scales "
            f"(scorer.scale {scales[0]:g} and {scales[1]:g}): compare runs of one scale"
        )
    columns, unsegmented = segment_columns(run_a, run_b, segment_by)
    verdicts = (run_a.verdicts(), run_b.verdicts())
    table_plan = comparison_table(run_a.scores(), run_b.scores(), columns, verdicts)
    table, positions = pl.collect_all([table_plan, position_change(*verdicts)])
    paired = table.filter(_both_ok())
    deltas = paired.get_column("delta")
    method = choose_method(table)
    ok_a_only = (pl.col("status_a") == "ok") & (pl.col("status_b") != "ok")
    return Comparison(
        facts_a=RunFacts.of(run_a),
        facts_b=RunFacts.of(run_b),
        table=table,
        positions=positions,
        status_a=_tally(table["status_a"], _STATUSES),
        status_b=_tally(table["status_b"], _STATUSES),
        presence=_tally(table["presence"], ("both", "only_a", "only_b")),
        stats_a=score_stats(paired.get_column("score_a")),
        stats_b=score_stats(paired.get_column("score_b")),
        stats_delta=score_stats(deltas),
        improved=int((deltas > _EPSILON).sum()),
        unchanged=int((deltas.abs() <= _EPSILON).sum()),
        regressed=int((deltas < -_EPSILON).sum()),
        lost=table.filter(ok_a_only, pl.col("presence") == "both").height,
        bands_a=run_a.summary.bands,
        bands_b=run_b.summary.bands,
        segments=tuple(shift for column in columns for shift in shifts(table, method, column)),
        segment_columns=columns,
        unsegmented=unsegmented,
        overall=shifts(table, method)[0],
        method=method,
        canary_a=CanaryResult.of_metrics(run_a.summary.canary),
        canary_b=CanaryResult.of_metrics(run_b.summary.canary),
    )


def _tested(shift: SegmentShift, p_adjusted: float, min_effect: float) -> SegmentShift:
    significant = p_adjusted < 1.0 - LEVEL
    failed = significant and shift.diff is not None and shift.diff <= -min_effect + _EPSILON
    return replace(shift, p_adjusted=p_adjusted, significant=significant, gated=True, failed=failed)


def adjust(
    overall: SegmentShift,
    segments: Sequence[SegmentShift],
    min_effect: float,
    min_segment_size: int,
) -> tuple[SegmentShift, tuple[SegmentShift, ...]]:
    """Holm's adjustment across the run and every segment of `min_segment_size` queries."""
    testable = [s.paired >= min_segment_size and s.p_value is not None for s in segments]
    gated = [i for i, test in enumerate(testable) if test]
    family = [1.0 if overall.p_value is None else overall.p_value]
    adjusted = holm(family + [float(segments[i].p_value or 0.0) for i in gated])
    out = list(segments)
    for rank, index in enumerate(gated, start=1):
        out[index] = _tested(segments[index], adjusted[rank], min_effect)
    return _tested(overall, adjusted[0], min_effect), tuple(out)


def canary_change(
    a: CanaryResult | None, b: CanaryResult | None, max_drop: float
) -> CanaryChange | None:
    """The `CanaryChange` (None when neither run judged a canary)."""
    if a is None and b is None:
        return None
    a, b = a or CanaryResult(), b or CanaryResult()
    change = None if a.kappa is None or b.kappa is None else b.kappa - a.kappa
    failed = change is not None and change < -max_drop - _EPSILON
    return CanaryChange(a, b, change, max_drop, failed)


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}" if value >= 1e-4 else "<1e-4"


def _ci(shift: SegmentShift) -> str:
    return fmt.interval(shift.ci_low, shift.ci_high, 4, signed=True, missing="-")


def _why(shift: SegmentShift, min_effect: float) -> str:
    if shift.diff == 0 and shift.ci_low == 0 and shift.ci_high == 0:
        return "no change"
    if shift.failed:
        return f"a significant drop of at least --min-effect {min_effect:.4f}"
    if not shift.significant:
        return "not significant"
    if shift.diff is not None and shift.diff < 0:
        return f"significant, smaller than --min-effect {min_effect:.4f}"
    return "significant rise" if shift.diff else "no change"


def _overall_line(o: SegmentShift, failed: bool, min_effect: float) -> str:
    stats = (
        f"(from {o.mean_a:.4f} to {o.mean_b:.4f}; 95% CI {_ci(o)}, p {_p(o.p_adjusted)} after "
        f"Holm, {o.method} over {o.paired:,} queries)"
    )
    if o.failed:
        return f"FAIL: mean fell by {-(o.diff or 0.0):.4f} {stats}: {_why(o, min_effect)}"
    verdict = "FAIL" if failed else "OK"
    return f"{verdict}: mean shift {(o.diff or 0.0):+.4f} {stats}: {_why(o, min_effect)}"


def _canary_line(canary: CanaryChange) -> str:
    a, b = canary.a.kappa, canary.b.kappa
    if a is None or b is None:
        which = "neither" if a is None and b is None else "run A" if b is None else "run B"
        return f"canary: kappa only in {which}; the judge is not compared"
    items = int(canary.b.items or 0)
    if canary.failed:
        return (
            f"FAIL: the judge changed: canary kappa fell by {a - b:.3f} (from {a:.3f} to "
            f"{b:.3f}, {items:,} labelled items), more than --max-canary-drop "
            f"{canary.max_drop:.3f}; score shifts between these runs may be the judge's, "
            "not retrieval's"
        )
    return (
        f"canary: kappa {a:.3f} -> {b:.3f} ({b - a:+.3f}, {items:,} labelled items): judge steady"
    )


def gate(
    comparison: Comparison,
    min_effect: float,
    min_segment_size: int = CompareOptions.min_segment_size,
    max_canary_drop: float = CompareOptions.max_canary_drop,
) -> Gate:
    """Fail on a significant drop (Holm) of at least `min_effect`, overall or in a segment of
    `min_segment_size` queries, or when the canary's kappa fell more than `max_canary_drop`."""
    c = comparison
    canary = canary_change(c.canary_a, c.canary_b, max_canary_drop)
    return decide(c.overall, c.segments, c.method, min_effect, min_segment_size, canary)


def decide(
    overall: SegmentShift | None,
    segments: Sequence[SegmentShift],
    method: str,
    min_effect: float,
    min_segment_size: int = CompareOptions.min_segment_size,
    canary: CanaryChange | None = None,
) -> Gate:
    """`gate` on the tests themselves (`shifts`, `canary_change`)."""
    if overall is None or overall.diff is None or overall.mean_a is None or overall.mean_b is None:
        message = "FAIL: no query is scored ok in both runs; nothing to compare"
        return Gate(False, message, segments=tuple(segments), canary=canary)
    overall, tested = adjust(overall, segments, min_effect, min_segment_size)
    failed = tuple(s for s in tested if s.failed)
    passed = not overall.failed and not failed and not (canary and canary.failed)
    lines = [_overall_line(overall, not passed, min_effect)]
    lines += [f"  {overall.moves()}"] if overall.failed else []
    if method == "unpaired":
        lines.append(
            f"compared UNPAIRED (Welch): the runs share too few queries scored ok in both "
            f"(fewer than {PAIRED_SHARE:.0%} of the smaller run's)"
        )
    for s in failed:
        lines += [
            f"FAIL: segment {terminal_safe(f'{s.by}={_name(s.value)}')}: mean fell by "
            f"{-(s.diff or 0.0):.4f} (from {s.mean_a:.4f} to {s.mean_b:.4f}) over {s.paired:,} "
            f"queries; 95% CI {_ci(s)}, p {_p(s.p_adjusted)} after Holm: {_why(s, min_effect)}",
            f"  {s.moves()}",
        ]
    if small := sum(1 for s in tested if not s.gated):
        lines.append(
            f"{small} segment(s) with fewer than {min_segment_size} queries ok in both runs "
            "not gated (--min-segment-size)"
        )
    if canary is not None:
        lines.append(_canary_line(canary))
    return Gate(passed, "\n".join(lines), failed, overall, tested, canary)


def _name(value: str | None) -> str:
    return "(null)" if value is None else value


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def _change_columns(first: Column) -> tuple[Column, ...]:
    return (first, *(Column(name, width=12) for name in ("A", "B", "B-A")))


def _counts(label: str, a: int, b: int) -> tuple[str, str, str, str]:
    return label, f"{a:,}", f"{b:,}", f"{b - a:+,}"


def format_shift(comparison: Comparison) -> str:
    """Status counts and score statistics of A and B, with B - A."""
    c = comparison
    columns = _change_columns(Column(align="<", width=24))
    labels = {"ok": "scored (ok)", "unscored": "unscored", "error": "errors"}
    counts = [_counts("items", sum(c.status_a.values()), sum(c.status_b.values()))]
    counts += [_counts(labels[s], c.status_a.get(s, 0), c.status_b.get(s, 0)) for s in _STATUSES]
    stats = [
        (f"  {name}", *(fmt.number(v, digits) for v in (a, b)), fmt.number(d, digits, signed=True))
        for name, a, b, d, digits in c.stat_rows()
    ]
    d = c.stats_delta
    over = f"scores over the {c.paired:,} queries scored ok in both runs:"
    return "\n".join(
        [
            f"A = {c.facts_a.describe()}",
            f"B = {c.facts_b.describe()}",
            table(columns, counts, gap=""),
            table(columns, stats, title=over, header=False, gap=""),
            f"per-query delta: median {fmt.number(d.median, 3, signed=True)}, "
            f"p10 {fmt.number(d.p10, 3, signed=True)}, p90 {fmt.number(d.p90, 3, signed=True)}; "
            f"improved {c.improved:,}, unchanged {c.unchanged:,}, regressed {c.regressed:,}",
            f"queries: in both {c.presence['both']:,}, only in A {c.presence['only_a']:,}, "
            f"only in B {c.presence['only_b']:,}; ok in A but not in B {c.lost:,}",
        ]
    )


def format_bands(comparison: Comparison) -> str:
    """Items per score band in A and B (each run's summary), with B - A."""
    a, b = dict(comparison.bands_a), dict(comparison.bands_b)
    labels = {name: f"{name} ({band_range(name)})" if band_range(name) else name for name in a | b}
    rows = [_counts(label, a.get(name, 0), b.get(name, 0)) for name, label in labels.items()]
    title = "score bands (score / scale; all items scored ok in each run):"
    return table(_change_columns(Column("band", "<", 22)), rows, title=title, indent="  ", gap="")


def _change_rows(
    rows: pl.DataFrame, key: str, value: str, count: str, digits: int
) -> list[tuple[object, ...]]:
    """Per row: its `key`, both runs' `value`, the delta, both runs' `count` ("-" for null)."""
    return [
        (
            row[key],
            *(fmt.number(row[f"{value}_{x}"], digits) for x in "ab"),
            fmt.number(row["delta"], digits, signed=True),
            *("-" if row[f"{count}_{x}"] is None else str(row[f"{count}_{x}"]) for x in "ab"),
        )
        for row in rows.iter_rows(named=True)
    ]


_REGRESSIONS = (
    Column("query_id", "<", 8, limit=40),
    *(Column(name, width=9) for name in ("score A", "score B", "delta")),
    *(Column(name, width=7) for name in ("rel A", "rel B")),
)
_POSITIONS = (
    Column("position", "<", 10),
    *(Column(name, width=9) for name in ("rate A", "rate B", "delta")),
    *(Column(name, width=10) for name in ("judged A", "judged B")),
)


def format_regressions(comparison: Comparison, top: int) -> str:
    rows = comparison.regressions(top)
    if rows.is_empty():
        return "regressions: none"
    cells = _change_rows(rows, "query_id", "score", "relevant_count", 2)
    title = f"top {rows.height} regressions (most negative delta first):"
    return table(_REGRESSIONS, cells, title=title, indent="  ", gap="")


def format_positions(comparison: Comparison, limit: int = 20) -> str:
    rows = comparison.positions
    cells = _change_rows(rows.head(limit), "position", "rate", "judged", 3)
    text = table(_POSITIONS, cells, title="relevance rate by position:", indent="  ", gap="")
    if rows.height > limit:
        text += f"\n  ... {rows.height - limit} more positions (all are in the table)"
    return text


_MAX_SEGMENT_LINES = 40
_SEGMENT_FIGURES = (
    Column("queries", width=9),
    *(Column(name, width=7) for name in ("mean A", "mean B", "change")),
    Column("95% CI", width=18),
    Column("p adj", width=6),
    Column("regressed", width=9),
    Column("gate", width=5),
)


def gate_word(shift: SegmentShift) -> str:
    """What the gate did with a segment: failed it, checked it ("ok"), or left it out ("small")."""
    return "FAIL" if shift.failed else "ok" if shift.gated else "small"


def format_segments(comparison: Comparison, verdict: Gate) -> str:
    """Per segment column: each value's means, change, interval, p-value and `gate_word`."""
    over = "scored ok in both runs" if comparison.method == "paired" else "scored ok (unpaired)"
    blocks = []
    for column in comparison.segment_columns:
        segments = verdict.segments_by(column)
        name = Column("value", "<", max(10, min(len(column) + 1, 30)), limit=30)
        rows = [
            (
                _name(s.value),
                f"{s.paired:,}",
                fmt.number(s.mean_a, 3),
                fmt.number(s.mean_b, 3),
                fmt.number(s.shift, 3, signed=True),
                _ci(s),
                _p(s.p_adjusted),
                f"{s.regressed:,}",
                gate_word(s),
            )
            for s in segments[:_MAX_SEGMENT_LINES]
        ]
        title = f"by {column} (a query's value in B; over the queries {over}):"
        blocks.append(table((name, *_SEGMENT_FIGURES), rows, title=title, indent="  "))
        hidden = len(segments) - _MAX_SEGMENT_LINES
        if hidden > 0:
            blocks[-1] += f"\n  ... {hidden} more values (all are gated; see --json)"
    if comparison.unsegmented:
        blocks.append(
            f"not compared by {', '.join(comparison.unsegmented)}: run {comparison.run_a}'s "
            "scores do not have the column"
        )
    return "\n\n".join(blocks)


def format_comparison(comparison: Comparison, *, top: int, verdict: Gate) -> str:
    """What `ctxprec compare` prints, the gate's verdict last."""
    c = comparison
    parts = [format_shift(c), format_bands(c), format_segments(c, verdict)]
    parts += [format_regressions(c, top), format_positions(c), *c.warnings, verdict.message]
    return "\n\n".join(part for part in parts if part)


def run(options: CompareOptions, out: TextIO | None = None) -> int:
    """`ctxprec compare`: compare, write the table, print; returns 1 when the gate fails."""
    out = out or sys.stdout
    store = options.root.store()
    run_a, run_b = load_run(store, options.run_a), load_run(store, options.run_b)
    comparison = compare_runs(run_a, run_b, options.by)
    default = f"comparisons/{run_a.run_id}__vs__{run_b.run_id}.parquet"
    storage_options = options.root.storage_options
    written = write_file(store, options.out_table, default, comparison.table, storage_options)
    thresholds = (options.min_effect, options.min_segment_size, options.max_canary_drop)
    verdict = gate(comparison, *thresholds)
    if options.as_json:
        facts = {"a": comparison.facts_a, "b": comparison.facts_b}
        runs = {side: dataclasses.asdict(run) for side, run in facts.items()}
        extra = {"runs": runs, "warnings": comparison.warnings}
        out.write(json.dumps(verdict.to_json() | extra) + "\n")
    else:
        out.write(format_comparison(comparison, top=options.top, verdict=verdict) + "\n")
        out.write(f"per-query table: {written}\n")
    return 0 if verdict.passed else 1
