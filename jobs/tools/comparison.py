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
TABLE_COLUMNS = (
    "query_id",
    "presence",
    "score_a",
    "score_b",
    "delta",
    "status_a",
    "status_b",
    "relevant_count_a",
    "relevant_count_b",
    "moved",
)
# Paired by query when the queries ok in both runs are at least 2 and at least this share of
# the queries ok in the run with fewer; else unpaired.
PAIRED_SHARE = 0.5


@dataclass(frozen=True, kw_only=True)
class ScoreStats:
    """count, mean, median, p10 and p90 of a score column (None when there is nothing)."""

    count: int
    mean: float | None
    median: float | None
    p10: float | None
    p90: float | None


@dataclass(frozen=True, kw_only=True)
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
        names = [field.name for field in dataclasses.fields(self) if field.name not in internal]
        return head | {name: getattr(self, name) for name in names}


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What a comparison names of each run: its date, judge and prompt version."""

    run_id: str
    run_date: str
    judge: str  # the model, and "at <endpoint>" when the run set judge.api_base
    prompt_version: str  # "" when the run did not record it

    @classmethod
    def of(cls, run: PublishedRun) -> RunFacts:
        endpoint = f" at {run.judge_endpoint}" if run.judge_endpoint else ""
        return cls(
            run_id=run.run_id,
            run_date=run.run_date.isoformat(),
            judge=run.judge_model + endpoint,
            prompt_version=run.prompt_version,
        )

    def describe(self) -> str:
        prompt = self.prompt_version or "not recorded"
        facts = f"{self.run_date}; judge {self.judge}; prompt {prompt}"
        return terminal_safe(f"{self.run_id} ({facts})")


def differences(
    facts_a: RunFacts, facts_b: RunFacts, names: tuple[str, str] = ("A", "B")
) -> list[str]:
    """A warning per difference of judge or prompt version between the runs (called `names`)."""
    name_a, name_b = names
    found = []
    if facts_a.judge != facts_b.judge:
        judges = f"{name_a} {facts_a.judge}, {name_b} {facts_b.judge}"
        found.append(f"the judges differ ({judges})")
    version_a, version_b = facts_a.prompt_version, facts_b.prompt_version
    if version_a and version_b and version_a != version_b:
        found.append(f"the prompt versions differ ({name_a} {version_a}, {name_b} {version_b})")
    why = "score shifts between these runs may be the judge's, not retrieval's"
    return [terminal_safe(f"WARNING: {difference}: {why}") for difference in found]


@dataclass(frozen=True, kw_only=True)
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
        figures_a = dataclasses.asdict(self.stats_a)
        figures_b = dataclasses.asdict(self.stats_b)
        rows = []
        for name, value_a in figures_a.items():
            value_b = figures_b[name]
            digits = 0 if name == "count" else 3
            rows.append((name, value_a, value_b, _diff(value_a, value_b), digits))
        return rows

    def regressions(self, top: int) -> pl.DataFrame:
        """The `top` queries whose score fell the most (most negative delta first)."""
        return self.table.filter(pl.col("delta") < -_EPSILON).sort(["delta", "query_id"]).head(top)


@dataclass(frozen=True, kw_only=True)
class CanaryChange:
    """Both runs' canary and kappa's change; `failed` when it fell more than `max_drop`."""

    canary_a: CanaryResult
    canary_b: CanaryResult
    kappa_change: float | None
    max_drop: float
    failed: bool

    def to_json(self) -> dict[str, Any]:
        """Each canary figure of run A, then of run B, and the change."""
        figures: dict[str, Any] = {}
        for name in ("items", "kappa", "precision", "recall"):
            figures[f"{name}_a"] = getattr(self.canary_a, name)
            figures[f"{name}_b"] = getattr(self.canary_b, name)
        figures["kappa_change"] = self.kappa_change
        figures["max_drop"] = self.max_drop
        figures["failed"] = self.failed
        return figures


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """What fails the gate: a significant drop of at least `min_effect`, overall or in a
    segment of at least `min_segment_size` queries, or a canary kappa fallen by more than
    `max_canary_drop` (the `ctxprec compare` options of the same names)."""

    min_effect: float = CompareOptions.min_effect
    min_segment_size: int = CompareOptions.min_segment_size
    max_canary_drop: float = CompareOptions.max_canary_drop

    @classmethod
    def of(cls, options: CompareOptions) -> Thresholds:
        return cls(
            min_effect=options.min_effect,
            min_segment_size=options.min_segment_size,
            max_canary_drop=options.max_canary_drop,
        )


@dataclass(frozen=True, kw_only=True)
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
    schema_a = scores_a.collect_schema()
    schema_b = scores_b.collect_schema()
    segments = []  # as they are where both runs' types agree, else as text
    for column in segment_by:
        if schema_a.get(column) == schema_b.get(column):
            segments.append(pl.col(column))
        else:
            segments.append(pl.col(column).cast(pl.String))
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

    in_a = pl.col("_in_a").fill_null(False)
    in_b = pl.col("_in_b").fill_null(False)
    presence = (
        pl.when(in_a & in_b)
        .then(pl.lit("both"))
        .when(in_a)
        .then(pl.lit("only_a"))
        .otherwise(pl.lit("only_b"))
    )
    scored = (
        side(scores_a, "a")
        .join(side(scores_b, "b"), on="query_id", how="full", coalesce=True)
        .with_columns(
            presence.alias("presence"),
            (pl.col("score_b") - pl.col("score_a")).round(6).alias("delta"),
            *(pl.coalesce(f"{column}_b", f"{column}_a").alias(column) for column in segment_by),
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

    ids = [pl.col("context_id_a"), pl.col("context_id_b")]
    every_id = pl.all_horizontal(
        listed.list.drop_nulls().list.len() == listed.list.len() for listed in ids
    )
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
        return ScoreStats(count=0, mean=None, median=None, p10=None, p90=None)
    return ScoreStats(
        count=values.len(),
        mean=fmt.optional_float(values.mean()),
        median=fmt.optional_float(values.median()),
        p10=fmt.optional_float(values.quantile(0.1, interpolation="linear")),
        p90=fmt.optional_float(values.quantile(0.9, interpolation="linear")),
    )


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
    in_both = names[0] & names[1]
    usable = tuple(
        column for column in default if column in in_both and column not in TABLE_COLUMNS
    )
    return usable, tuple(column for column in default if column not in usable)


def _both_ok() -> pl.Expr:
    ok = (pl.col("status_a") == "ok") & (pl.col("status_b") == "ok")
    return ok & pl.col("delta").is_not_null()


def choose_method(table: pl.DataFrame) -> str:
    """Paired when the runs share enough queries ok in both (`PAIRED_SHARE`), else unpaired."""
    ok_a = table.filter(pl.col("status_a") == "ok").height
    ok_b = table.filter(pl.col("status_b") == "ok").height
    both = table.filter(_both_ok()).height
    return "paired" if both >= 2 and both >= PAIRED_SHARE * min(ok_a, ok_b) else "unpaired"


@dataclass(frozen=True, kw_only=True)
class _SegmentMoments:
    """What a segment's shift and test are computed from: the Moments of run A's scores, of
    run B's and of the paired deltas, and its queries counted by how they moved."""

    scores_a: Moments
    scores_b: Moments
    deltas: Moments
    counts: dict[str, int]  # "regressed", "changed", "moved_retrieval", "moved_judge"


def _null_last(key: tuple[Any, ...]) -> list[tuple[bool, Any]]:
    """A segment's sort key: its values in order, a null after every other value."""
    return [(value is None, value or "") for value in key]


def shifts(table: pl.DataFrame, method: str, column: str | None = None) -> list[SegmentShift]:
    """The shift and test of the whole run, or of each value of `column` (sorted, null last)."""
    keys = [pl.col(column).cast(pl.String)] if column else []
    paired = table.filter(_both_ok())
    if method == "paired":  # the queries ok in both runs, on both sides
        scored_a = paired
        scored_b = paired
    else:  # each run's queries ok there
        scored_a = table.filter(pl.col("status_a") == "ok")
        scored_b = table.filter(pl.col("status_b") == "ok")
    scores_a = moments_by(scored_a, "score_a", keys)
    scores_b = moments_by(scored_b, "score_b", keys)
    deltas = moments_by(paired, "delta", keys)
    delta = pl.col("delta")
    moved = pl.col("moved")
    subsets = {
        "regressed": delta < -_EPSILON,
        "changed": delta.abs() > _EPSILON,
        "moved_retrieval": moved == "retrieval",
        "moved_judge": moved == "judge",
    }
    counted = {
        name: moments_by(paired.filter(subset), "delta", keys) for name, subset in subsets.items()
    }
    segments = set(deltas)  # paired: a segment without a pair has nothing to test
    if method != "paired":
        segments |= set(scores_a) | set(scores_b)
    found = []
    for key in sorted(segments, key=_null_last):
        moments = _SegmentMoments(
            scores_a=scores_a.get(key, Moments()),
            scores_b=scores_b.get(key, Moments()),
            deltas=deltas.get(key, Moments()),
            counts={name: queries.get(key, Moments()).n for name, queries in counted.items()},
        )
        found.append(_shift(column or "", key, method, moments))
    return found


def _shift(by: str, key: tuple[Any, ...], method: str, moments: _SegmentMoments) -> SegmentShift:
    """Segment `key`'s shift and test, by `method`, from its `moments`."""
    if method == "paired":
        test = paired_test(moments.deltas)
        queries = moments.deltas.n
        untested_diff = moments.deltas.mean
    else:
        test = welch_test(moments.scores_a, moments.scores_b)
        queries = min(moments.scores_a.n, moments.scores_b.n)
        untested_diff = _diff(moments.scores_a.mean, moments.scores_b.mean)
    counts = moments.counts
    return SegmentShift(
        by=by,
        value=key[0] if key else None,
        paired=queries,
        mean_a=moments.scores_a.mean,
        mean_b=moments.scores_b.mean,
        regressed=counts["regressed"],
        changed=counts["changed"],
        moved_retrieval=counts["moved_retrieval"],
        moved_judge=counts["moved_judge"],
        method=method,
        diff=test.diff if test else untested_diff,
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
    segments: list[SegmentShift] = []
    for column in columns:
        segments.extend(shifts(table, method, column))
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
        segments=tuple(segments),
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
    overall: SegmentShift, segments: Sequence[SegmentShift], thresholds: Thresholds
) -> tuple[SegmentShift, tuple[SegmentShift, ...]]:
    """Holm's adjustment across the run and every segment of `min_segment_size` queries."""
    gated = [
        index
        for index, segment in enumerate(segments)
        if segment.paired >= thresholds.min_segment_size and segment.p_value is not None
    ]
    # the run's p-value first, then each gated segment's
    p_values = [1.0 if overall.p_value is None else overall.p_value]
    p_values += [float(segments[index].p_value or 0.0) for index in gated]
    adjusted = holm(p_values)
    tested = list(segments)
    for rank, index in enumerate(gated, start=1):
        tested[index] = _tested(segments[index], adjusted[rank], thresholds.min_effect)
    return _tested(overall, adjusted[0], thresholds.min_effect), tuple(tested)


def canary_change(
    canary_a: CanaryResult | None, canary_b: CanaryResult | None, max_drop: float
) -> CanaryChange | None:
    """The `CanaryChange` (None when neither run judged a canary)."""
    if canary_a is None and canary_b is None:
        return None
    canary_a = canary_a or CanaryResult()
    canary_b = canary_b or CanaryResult()
    change = None
    if canary_a.kappa is not None and canary_b.kappa is not None:
        change = canary_b.kappa - canary_a.kappa
    return CanaryChange(
        canary_a=canary_a,
        canary_b=canary_b,
        kappa_change=change,
        max_drop=max_drop,
        failed=change is not None and change < -max_drop - _EPSILON,
    )


def _p_value(value: float | None) -> str:
    """A p-value as the tables print it: two digits, "<1e-4" below that, "-" for none."""
    if value is None:
        return "-"
    if value >= 1e-4:
        return f"{value:.2g}"
    return "<1e-4"


def _interval(shift: SegmentShift) -> str:
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


def _overall_line(overall: SegmentShift, failed: bool, min_effect: float) -> str:
    stats = (
        f"(from {overall.mean_a:.4f} to {overall.mean_b:.4f}; 95% CI {_interval(overall)}, "
        f"p {_p_value(overall.p_adjusted)} after Holm, {overall.method} over "
        f"{overall.paired:,} queries)"
    )
    why = _why(overall, min_effect)
    diff = overall.diff or 0.0
    if overall.failed:
        return f"FAIL: mean fell by {-diff:.4f} {stats}: {why}"
    verdict = "FAIL" if failed else "OK"
    return f"{verdict}: mean shift {diff:+.4f} {stats}: {why}"


def _segment_line(segment: SegmentShift, min_effect: float) -> str:
    """The line of a segment that failed the gate."""
    name = terminal_safe(f"{segment.by}={_name(segment.value)}")
    fell = -(segment.diff or 0.0)
    return (
        f"FAIL: segment {name}: mean fell by {fell:.4f} (from {segment.mean_a:.4f} to "
        f"{segment.mean_b:.4f}) over {segment.paired:,} queries; 95% CI {_interval(segment)}, "
        f"p {_p_value(segment.p_adjusted)} after Holm: {_why(segment, min_effect)}"
    )


def _canary_line(canary: CanaryChange) -> str:
    kappa_a = canary.canary_a.kappa
    kappa_b = canary.canary_b.kappa
    if kappa_a is None and kappa_b is None:
        return "canary: neither run has a canary kappa; the judge is not compared"
    if kappa_a is None or kappa_b is None:
        which = "run A" if kappa_b is None else "run B"
        return f"canary: kappa only in {which}; the judge is not compared"
    items = int(canary.canary_b.items or 0)
    if canary.failed:
        return (
            f"FAIL: the judge changed: canary kappa fell by {kappa_a - kappa_b:.3f} (from "
            f"{kappa_a:.3f} to {kappa_b:.3f}, {items:,} labelled items), more than "
            f"--max-canary-drop {canary.max_drop:.3f}; score shifts between these runs may be "
            "the judge's, not retrieval's"
        )
    return (
        f"canary: kappa {kappa_a:.3f} -> {kappa_b:.3f} ({kappa_b - kappa_a:+.3f}, {items:,} "
        "labelled items): judge steady"
    )


def gate(comparison: Comparison, thresholds: Thresholds) -> Gate:
    """Fail on a significant drop (Holm) of at least `min_effect`, overall or in a segment of
    `min_segment_size` queries, or when the canary's kappa fell more than `max_canary_drop`."""
    canary = canary_change(comparison.canary_a, comparison.canary_b, thresholds.max_canary_drop)
    return decide(comparison.overall, comparison.segments, comparison.method, thresholds, canary)


def decide(
    overall: SegmentShift | None,
    segments: Sequence[SegmentShift],
    method: str,
    thresholds: Thresholds,
    canary: CanaryChange | None = None,
) -> Gate:
    """`gate` on the tests themselves (`shifts`, `canary_change`)."""
    if overall is None or overall.diff is None or overall.mean_a is None or overall.mean_b is None:
        message = "FAIL: no query is scored ok in both runs; nothing to compare"
        return Gate(passed=False, message=message, segments=tuple(segments), canary=canary)
    overall, tested = adjust(overall, segments, thresholds)
    failed = tuple(segment for segment in tested if segment.failed)
    passed = not overall.failed and not failed and not (canary and canary.failed)
    min_effect = thresholds.min_effect
    lines = [_overall_line(overall, not passed, min_effect)]
    if overall.failed:
        lines.append(f"  {overall.moves()}")
    if method == "unpaired":
        lines.append(
            f"compared UNPAIRED (Welch): the runs share too few queries scored ok in both "
            f"(fewer than {PAIRED_SHARE:.0%} of the smaller run's)"
        )
    for segment in failed:
        lines.append(_segment_line(segment, min_effect))
        lines.append(f"  {segment.moves()}")
    small = sum(1 for segment in tested if not segment.gated)
    if small:
        lines.append(
            f"{small} segment(s) with fewer than {thresholds.min_segment_size} queries ok in "
            "both runs not gated (--min-segment-size)"
        )
    if canary is not None:
        lines.append(_canary_line(canary))
    return Gate(
        passed=passed,
        message="\n".join(lines),
        failed_segments=failed,
        overall=overall,
        segments=tested,
        canary=canary,
    )


def _name(value: str | None) -> str:
    return "(null)" if value is None else value


def _diff(value_a: float | None, value_b: float | None) -> float | None:
    """B - A, or None when either is missing."""
    if value_a is None or value_b is None:
        return None
    return value_b - value_a


def _change_columns(first: Column) -> tuple[Column, ...]:
    return (
        first,
        Column(header="A", width=12),
        Column(header="B", width=12),
        Column(header="B-A", width=12),
    )


def _counts(label: str, count_a: int, count_b: int) -> tuple[str, str, str, str]:
    return label, f"{count_a:,}", f"{count_b:,}", f"{count_b - count_a:+,}"


def format_shift(comparison: Comparison) -> str:
    """Status counts and score statistics of A and B, with B - A."""
    columns = _change_columns(Column(align="<", width=24))
    labels = {"ok": "scored (ok)", "unscored": "unscored", "error": "errors"}
    status_a = comparison.status_a
    status_b = comparison.status_b
    counts = [_counts("items", sum(status_a.values()), sum(status_b.values()))]
    for status in _STATUSES:
        counts.append(_counts(labels[status], status_a.get(status, 0), status_b.get(status, 0)))
    stats = []
    for name, value_a, value_b, change, digits in comparison.stat_rows():
        stats.append(
            (
                f"  {name}",
                fmt.number(value_a, digits),
                fmt.number(value_b, digits),
                fmt.number(change, digits, signed=True),
            )
        )
    deltas = comparison.stats_delta
    presence = comparison.presence
    over = f"scores over the {comparison.paired:,} queries scored ok in both runs:"
    return "\n".join(
        [
            f"A = {comparison.facts_a.describe()}",
            f"B = {comparison.facts_b.describe()}",
            table(columns, counts, gap=""),
            table(columns, stats, title=over, header=False, gap=""),
            f"per-query delta: median {fmt.number(deltas.median, 3, signed=True)}, "
            f"p10 {fmt.number(deltas.p10, 3, signed=True)}, "
            f"p90 {fmt.number(deltas.p90, 3, signed=True)}; "
            f"improved {comparison.improved:,}, unchanged {comparison.unchanged:,}, "
            f"regressed {comparison.regressed:,}",
            f"queries: in both {presence['both']:,}, only in A {presence['only_a']:,}, "
            f"only in B {presence['only_b']:,}; ok in A but not in B {comparison.lost:,}",
        ]
    )


def format_bands(comparison: Comparison) -> str:
    """Items per score band in A and B (each run's summary), with B - A."""
    bands_a = dict(comparison.bands_a)
    bands_b = dict(comparison.bands_b)
    rows = []
    for name in bands_a | bands_b:
        scores = band_range(name)  # the band's range of score / scale ("" for an unknown one)
        label = f"{name} ({scores})" if scores else name
        rows.append(_counts(label, bands_a.get(name, 0), bands_b.get(name, 0)))
    title = "score bands (score / scale; all items scored ok in each run):"
    return table(
        _change_columns(Column(header="band", align="<", width=22)),
        rows,
        title=title,
        indent="  ",
        gap="",
    )


def _count_cell(count: int | None) -> str:
    return "-" if count is None else str(count)


def _change_rows(
    rows: pl.DataFrame, key: str, value: str, count: str, digits: int
) -> list[tuple[object, ...]]:
    """Per row: its `key`, both runs' `value`, the delta, both runs' `count` ("-" for null)."""
    cells: list[tuple[object, ...]] = []
    for row in rows.iter_rows(named=True):
        cells.append(
            (
                row[key],
                fmt.number(row[f"{value}_a"], digits),
                fmt.number(row[f"{value}_b"], digits),
                fmt.number(row["delta"], digits, signed=True),
                _count_cell(row[f"{count}_a"]),
                _count_cell(row[f"{count}_b"]),
            )
        )
    return cells


_REGRESSIONS = (
    Column(header="query_id", align="<", width=8, limit=40),
    *(Column(header=name, width=9) for name in ("score A", "score B", "delta")),
    *(Column(header=name, width=7) for name in ("rel A", "rel B")),
)
_POSITIONS = (
    Column(header="position", align="<", width=10),
    *(Column(header=name, width=9) for name in ("rate A", "rate B", "delta")),
    *(Column(header=name, width=10) for name in ("judged A", "judged B")),
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
    Column(header="queries", width=9),
    *(Column(header=name, width=7) for name in ("mean A", "mean B", "change")),
    Column(header="95% CI", width=18),
    Column(header="p adj", width=6),
    Column(header="regressed", width=9),
    Column(header="gate", width=5),
)


def gate_word(shift: SegmentShift) -> str:
    """What the gate did with a segment: failed it, checked it ("ok"), or left it out ("small")."""
    if shift.failed:
        return "FAIL"
    if shift.gated:
        return "ok"
    return "small"


def format_segments(comparison: Comparison, verdict: Gate) -> str:
    """Per segment column: each value's means, change, interval, p-value and `gate_word`."""
    over = "scored ok in both runs" if comparison.method == "paired" else "scored ok (unpaired)"
    blocks = []
    for column in comparison.segment_columns:
        segments = verdict.segments_by(column)
        name = Column(header="value", align="<", width=max(10, min(len(column) + 1, 30)), limit=30)
        rows = [
            (
                _name(segment.value),
                f"{segment.paired:,}",
                fmt.number(segment.mean_a, 3),
                fmt.number(segment.mean_b, 3),
                fmt.number(segment.shift, 3, signed=True),
                _interval(segment),
                _p_value(segment.p_adjusted),
                f"{segment.regressed:,}",
                gate_word(segment),
            )
            for segment in segments[:_MAX_SEGMENT_LINES]
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
    parts = [
        format_shift(comparison),
        format_bands(comparison),
        format_segments(comparison, verdict),
        format_regressions(comparison, top),
        format_positions(comparison),
        *comparison.warnings,
        verdict.message,
    ]
    return "\n\n".join(part for part in parts if part)


def run(options: CompareOptions, out: TextIO | None = None) -> int:
    """`ctxprec compare`: compare, write the table, print; returns 1 when the gate fails."""
    out = out or sys.stdout
    store = options.root.store()
    run_a = load_run(store, options.run_a)
    run_b = load_run(store, options.run_b)
    comparison = compare_runs(run_a, run_b, options.by)
    default = f"comparisons/{run_a.run_id}__vs__{run_b.run_id}.parquet"
    storage_options = options.root.storage_options
    written = write_file(store, options.out_table, default, comparison.table, storage_options)
    verdict = gate(comparison, Thresholds.of(options))
    if options.as_json:
        facts = {"a": comparison.facts_a, "b": comparison.facts_b}
        runs = {side: dataclasses.asdict(run) for side, run in facts.items()}
        extra = {"runs": runs, "warnings": comparison.warnings}
        out.write(json.dumps(verdict.to_json() | extra) + "\n")
    else:
        out.write(format_comparison(comparison, top=options.top, verdict=verdict) + "\n")
        out.write(f"per-query table: {written}\n")
    return 0 if verdict.passed else 1
