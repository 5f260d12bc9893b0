"""`ctxprec compare <run A> <run B>`: how scores moved from run A (baseline) to run B.

    ctxprec compare 2026-11-29 2026-11-30 --output s3://evals/cp/ --max-mean-drop 0.02

Writes one row per query_id to `<output>/comparisons/<A>__vs__<B>.parquet` (or --out-table):
query_id, presence (both | only_a | only_b), score_a, score_b, delta (= score_b - score_a, null
unless both are scored), status_a, status_b, relevant_count_a, relevant_count_b, then one column
per segment column (its value in B, else in A). Prints the summary shift, the items per score
band of both runs, the shift per segment, the queries that regressed most and the relevance rate
by position of both runs.

Segments: by default the columns run B's summary is segmented by (`summary.by`), where run A
has them too; `--by COLUMN` (repeatable) picks any carried columns of both runs instead. A query
is in the segment of its value in run B. Each segment's shift is over its queries scored "ok" in
both runs, like the global one.

Exit code 1 when mean(B) < mean(A) - max_mean_drop over the queries scored "ok" in both runs
(or when no query is scored in both), or over those of any segment with at least
`--min-segment-size` of them (smaller segments are shown, not gated: a segment of three queries
moves by chance), else 0: a nightly pipeline can alert on it. Errors exit as with every
`ctxprec` command (2 for an unknown run id or segment column, 1 for a storage failure).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import polars as pl

from jobs import formatting as fmt
from jobs.cli import DEFAULT_MAX_MEAN_DROP as DEFAULT_MAX_MEAN_DROP
from jobs.cli import DEFAULT_MIN_SEGMENT_SIZE as DEFAULT_MIN_SEGMENT_SIZE
from jobs.cli import DEFAULT_TOP as DEFAULT_TOP
from jobs.engine.aggregate import band_range, relevance_by_position
from jobs.text_safety import terminal_safe
from jobs.tools.runs import (
    PublishedRun,
    load_run,
    open_output,
    parse_storage_options,
    write_parquet_file,
)
from scorer_core.errors import ConfigError

# Means are averages of 2-decimal scores; a difference below this is float noise.
_EPSILON = 1e-9
_STATUSES = ("ok", "unscored", "error")
_KEYS = ("score", "status", "relevant_count")

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
)


@dataclass(frozen=True)
class ScoreStats:
    """count, mean, median, p10 and p90 of a score column (None when there is nothing)."""

    count: int
    mean: float | None
    median: float | None
    p10: float | None
    p90: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "count": float(self.count),
            "mean": self.mean,
            "median": self.median,
            "p10": self.p10,
            "p90": self.p90,
        }


@dataclass(frozen=True)
class SegmentShift:
    """How one segment's scores moved: over its queries scored ok in both runs."""

    by: str  # the segment column
    value: str | None  # its value in run B, as text (None: null)
    paired: int
    mean_a: float | None
    mean_b: float | None
    regressed: int

    @property
    def shift(self) -> float | None:
        return _diff(self.mean_a, self.mean_b)

    @property
    def label(self) -> str:
        return f"{self.by}={'(null)' if self.value is None else self.value}"


@dataclass(frozen=True)
class Comparison:
    """Everything `ctxprec compare` (and the report's baseline section) shows."""

    run_a: str
    run_b: str
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
    # Items per score band (name, count) from each run's published summary: all items scored
    # ok in that run, not only the paired ones.
    bands_a: tuple[tuple[str, int], ...] = ()
    bands_b: tuple[tuple[str, int], ...] = ()
    segments: tuple[SegmentShift, ...] = ()  # per segment column, values sorted, null last
    segment_columns: tuple[str, ...] = ()
    unsegmented: tuple[str, ...] = ()  # B's summary columns that run A's scores lack

    def segments_by(self, by: str) -> tuple[SegmentShift, ...]:
        return tuple(segment for segment in self.segments if segment.by == by)

    @property
    def paired(self) -> int:
        return self.stats_delta.count

    @property
    def mean_shift(self) -> float | None:
        if self.stats_a.mean is None or self.stats_b.mean is None:
            return None
        return self.stats_b.mean - self.stats_a.mean

    def regressions(self, top: int) -> pl.DataFrame:
        """The `top` queries whose score fell the most (most negative delta first)."""
        return self.table.filter(pl.col("delta") < -_EPSILON).sort(["delta", "query_id"]).head(top)


@dataclass(frozen=True)
class Gate:
    passed: bool
    message: str
    failed_segments: tuple[SegmentShift, ...] = ()


# --------------------------------------------------------------------------------------------
# computation


def _one_row_per_query(scores: pl.LazyFrame, extra: Sequence[str] = ()) -> pl.LazyFrame:
    """The scored row of each query_id: later duplicates (status error, "duplicate query_id")
    are dropped so a join cannot multiply rows."""
    is_duplicate = pl.col("error").fill_null("").str.starts_with("duplicate query_id")
    return (
        scores.filter(~is_duplicate)
        .select("query_id", *_KEYS, *extra)
        .unique(subset="query_id", keep="first", maintain_order=True)
    )


def comparison_table(
    scores_a: pl.LazyFrame, scores_b: pl.LazyFrame, segment_by: Sequence[str] = ()
) -> pl.LazyFrame:
    """Per query_id: both runs' scores, statuses and relevant counts, delta and presence, and
    the value of each `segment_by` column (B's, else A's; as text when the runs' types differ)."""
    schema_a = scores_a.collect_schema()
    schema_b = scores_b.collect_schema()
    same_type = {c: schema_a.get(c) == schema_b.get(c) for c in segment_by}

    def side(scores: pl.LazyFrame, suffix: str) -> pl.LazyFrame:
        return _one_row_per_query(scores, segment_by).select(
            "query_id",
            *(pl.col(k).alias(f"{k}_{suffix}") for k in _KEYS),
            *(
                (pl.col(c) if same_type[c] else pl.col(c).cast(pl.String)).alias(f"{c}_{suffix}")
                for c in segment_by
            ),
            pl.lit(True).alias(f"_in_{suffix}"),
        )

    a = side(scores_a, "a")
    b = side(scores_b, "b")
    in_a = pl.col("_in_a").fill_null(False)
    in_b = pl.col("_in_b").fill_null(False)
    presence = (
        pl.when(in_a & in_b)
        .then(pl.lit("both"))
        .when(in_a)
        .then(pl.lit("only_a"))
        .otherwise(pl.lit("only_b"))
    )
    return (
        a.join(b, on="query_id", how="full", coalesce=True)
        .with_columns(
            presence.alias("presence"),
            (pl.col("score_b") - pl.col("score_a")).round(6).alias("delta"),
            *(pl.coalesce(f"{c}_b", f"{c}_a").alias(c) for c in segment_by),
        )
        .select(*TABLE_COLUMNS, *segment_by)
        .sort("query_id")
    )


def score_stats(scores: pl.Series) -> ScoreStats:
    """Statistics of the non-null values of `scores` (percentiles interpolate linearly)."""
    values = scores.drop_nulls().cast(pl.Float64)
    if values.is_empty():
        return ScoreStats(0, None, None, None, None)

    def number(value: Any) -> float | None:
        return None if value is None else float(value)

    return ScoreStats(
        count=values.len(),
        mean=number(values.mean()),
        median=number(values.median()),
        p10=number(values.quantile(0.1, interpolation="linear")),
        p90=number(values.quantile(0.9, interpolation="linear")),
    )


def status_counts(table: pl.DataFrame, column: str) -> dict[str, int]:
    """Rows per status value in `column` (ok, unscored, error first; nulls not counted)."""
    counts = {status: 0 for status in _STATUSES}
    for status, count in table.get_column(column).drop_nulls().value_counts().iter_rows():
        counts[str(status)] = int(count)
    return counts


def position_change(verdicts_a: pl.LazyFrame, verdicts_b: pl.LazyFrame) -> pl.LazyFrame:
    """Relevance rate by position in both runs: position, judged_a, rate_a, judged_b, rate_b,
    delta (rate_b - rate_a; null where a run has no judged context at that position)."""

    def side(verdicts: pl.LazyFrame, suffix: str) -> pl.LazyFrame:
        return relevance_by_position(verdicts).select(
            "position",
            pl.col("judged").alias(f"judged_{suffix}"),
            pl.col("rate").alias(f"rate_{suffix}"),
        )

    return (
        side(verdicts_a, "a")
        .join(side(verdicts_b, "b"), on="position", how="full", coalesce=True)
        .with_columns((pl.col("rate_b") - pl.col("rate_a")).alias("delta"))
        .sort("position")
    )


def segment_columns(
    run_a: PublishedRun, run_b: PublishedRun, asked: Sequence[str] | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(columns to compare segments by, B's summary columns skipped because A lacks them).

    `asked` (--by): those columns, each of which both runs' scores must have (`ConfigError`
    naming the run that lacks it); None: the columns B's summary is segmented by.
    """
    columns_a = set(run_a.scores().collect_schema().names())
    columns_b = set(run_b.scores().collect_schema().names())
    if asked:
        for column in asked:
            if column in TABLE_COLUMNS:
                raise ConfigError(
                    f"--by {column}: a column of the comparison table itself; segment by a "
                    "carried column (input.carry)"
                )
            for run, columns in ((run_a, columns_a), (run_b, columns_b)):
                if column not in columns:
                    raise ConfigError(
                        f"--by {column}: run {run.run_id}'s scores have no column {column!r} "
                        "(segment by a column both runs carry, input.carry)"
                    )
        return tuple(dict.fromkeys(asked)), ()
    default = run_b.summary.segment_columns
    usable = tuple(
        c for c in default if c in columns_a and c in columns_b and c not in TABLE_COLUMNS
    )
    return usable, tuple(c for c in default if c not in usable)


def segment_shifts(table: pl.DataFrame, segment_by: Sequence[str]) -> tuple[SegmentShift, ...]:
    """Per value of each column (as text, sorted, null last): the shift over its queries
    scored ok in both runs. Segments with no such query are left out."""
    paired = table.filter(
        (pl.col("status_a") == "ok") & (pl.col("status_b") == "ok") & pl.col("delta").is_not_null()
    )
    shifts: list[SegmentShift] = []
    for column in segment_by:
        groups = (
            paired.group_by(pl.col(column).cast(pl.String).alias("segment"))
            .agg(
                paired=pl.len(),
                mean_a=pl.col("score_a").mean(),
                mean_b=pl.col("score_b").mean(),
                regressed=(pl.col("delta") < -_EPSILON).sum(),
            )
            .sort("segment", nulls_last=True)
        )
        shifts.extend(
            SegmentShift(
                by=column,
                value=row["segment"],
                paired=int(row["paired"]),
                mean_a=row["mean_a"],
                mean_b=row["mean_b"],
                regressed=int(row["regressed"]),
            )
            for row in groups.iter_rows(named=True)
        )
    return tuple(shifts)


def compare_runs(
    run_a: PublishedRun, run_b: PublishedRun, segment_by: Sequence[str] | None = None
) -> Comparison:
    """Compare two published runs (A is the baseline, B the candidate), overall and per
    segment (`segment_columns` says which)."""
    columns, unsegmented = segment_columns(run_a, run_b, segment_by)
    table, positions = pl.collect_all(
        [
            comparison_table(run_a.scores(), run_b.scores(), columns),
            position_change(run_a.verdicts(), run_b.verdicts()),
        ]
    )
    both_ok = (pl.col("status_a") == "ok") & (pl.col("status_b") == "ok")
    paired = table.filter(both_ok & pl.col("delta").is_not_null())
    deltas = paired.get_column("delta")
    lost = table.filter(
        (pl.col("presence") == "both") & (pl.col("status_a") == "ok") & (pl.col("status_b") != "ok")
    ).height
    presence = {
        name: table.filter(pl.col("presence") == name).height
        for name in ("both", "only_a", "only_b")
    }
    return Comparison(
        run_a=run_a.run_id,
        run_b=run_b.run_id,
        table=table,
        positions=positions,
        status_a=status_counts(table, "status_a"),
        status_b=status_counts(table, "status_b"),
        presence=presence,
        stats_a=score_stats(paired.get_column("score_a")),
        stats_b=score_stats(paired.get_column("score_b")),
        stats_delta=score_stats(deltas),
        improved=int((deltas > _EPSILON).sum()),
        unchanged=int((deltas.abs() <= _EPSILON).sum()),
        regressed=int((deltas < -_EPSILON).sum()),
        lost=lost,
        bands_a=run_a.summary.bands,
        bands_b=run_b.summary.bands,
        segments=segment_shifts(table, columns),
        segment_columns=columns,
        unsegmented=unsegmented,
    )


def _dropped(a: float | None, b: float | None, max_mean_drop: float) -> bool:
    return a is not None and b is not None and b < a - max_mean_drop - _EPSILON


def gate(
    comparison: Comparison,
    max_mean_drop: float,
    min_segment_size: int = DEFAULT_MIN_SEGMENT_SIZE,
) -> Gate:
    """Pass unless mean(B) < mean(A) - max_mean_drop over the queries ok in both runs, or over
    those of a segment with at least `min_segment_size` of them."""
    a, b = comparison.stats_a.mean, comparison.stats_b.mean
    if a is None or b is None:
        return Gate(False, "FAIL: no query is scored ok in both runs; nothing to compare")
    shift = b - a
    failed = tuple(
        s
        for s in comparison.segments
        if s.paired >= min_segment_size and _dropped(s.mean_a, s.mean_b, max_mean_drop)
    )
    if _dropped(a, b, max_mean_drop):
        lines = [
            f"FAIL: mean fell by {-shift:.4f} (from {a:.4f} to {b:.4f}), more than the allowed "
            f"{max_mean_drop:.4f}"
        ]
    else:
        verdict = "FAIL" if failed else "OK"
        lines = [
            f"{verdict}: mean shift {shift:+.4f} (from {a:.4f} to {b:.4f}), allowed drop "
            f"{max_mean_drop:.4f}"
        ]
    lines += [
        f"FAIL: segment {terminal_safe(s.label)}: mean fell by {-(s.shift or 0.0):.4f} "
        f"(from {s.mean_a:.4f} to {s.mean_b:.4f}) over {s.paired:,} queries, more than the "
        f"allowed {max_mean_drop:.4f}"
        for s in failed
    ]
    small = sum(1 for s in comparison.segments if s.paired < min_segment_size)
    if small:
        lines.append(
            f"{small} segment(s) with fewer than {min_segment_size} queries ok in both runs "
            "not gated (--min-segment-size)"
        )
    return Gate(not failed and not _dropped(a, b, max_mean_drop), "\n".join(lines), failed)


# --------------------------------------------------------------------------------------------
# text output


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a


def format_shift(comparison: Comparison) -> str:
    """Status counts and score statistics of A and B, with B - A."""
    c = comparison
    width = 12
    head = f"{'':<24}{'A':>{width}}{'B':>{width}}{'B-A':>{width}}"
    lines = [f"A = {c.run_a}   B = {c.run_b}", head]
    items_a, items_b = sum(c.status_a.values()), sum(c.status_b.values())
    lines.append(
        f"{'items':<24}{items_a:>{width},}{items_b:>{width},}{items_b - items_a:>+{width},}"
    )
    for status in _STATUSES:
        a, b = c.status_a.get(status, 0), c.status_b.get(status, 0)
        label = {"ok": "scored (ok)", "unscored": "unscored", "error": "errors"}[status]
        lines.append(f"{label:<24}{a:>{width},}{b:>{width},}{b - a:>+{width},}")
    lines.append(f"scores over the {c.paired:,} queries scored ok in both runs:")
    for name in ("count", "mean", "median", "p10", "p90"):
        a_value = c.stats_a.as_dict()[name]
        b_value = c.stats_b.as_dict()[name]
        digits = 0 if name == "count" else 3
        lines.append(
            f"  {name:<22}{fmt.number(a_value, digits):>{width}}"
            f"{fmt.number(b_value, digits):>{width}}"
            f"{fmt.number(_diff(a_value, b_value), digits, signed=True):>{width}}"
        )
    d = c.stats_delta
    lines += [
        f"per-query delta: median {fmt.number(d.median, 3, signed=True)}, "
        f"p10 {fmt.number(d.p10, 3, signed=True)}, p90 {fmt.number(d.p90, 3, signed=True)}; "
        f"improved {c.improved:,}, unchanged {c.unchanged:,}, "
        f"regressed {c.regressed:,}",
        f"queries: in both {c.presence['both']:,}, only in A {c.presence['only_a']:,}, "
        f"only in B {c.presence['only_b']:,}; ok in A but not in B {c.lost:,}",
    ]
    return "\n".join(lines)


def format_bands(comparison: Comparison) -> str:
    """Items per score band in A and B (each run's summary), with B - A."""
    c = comparison
    a, b = dict(c.bands_a), dict(c.bands_b)
    names = list(dict.fromkeys([*a, *b]))
    width = 12
    lines = [
        "score bands (score / scale; all items scored ok in each run):",
        f"  {'band':<22}{'A':>{width}}{'B':>{width}}{'B-A':>{width}}",
    ]
    for name in names:
        count_a, count_b = a.get(name, 0), b.get(name, 0)
        label = f"{name} ({band_range(name)})" if band_range(name) else name
        lines.append(
            f"  {label:<22}{count_a:>{width},}{count_b:>{width},}{count_b - count_a:>+{width},}"
        )
    return "\n".join(lines)


def format_regressions(comparison: Comparison, top: int) -> str:
    rows = comparison.regressions(top)
    if rows.is_empty():
        return "regressions: none"
    longest = max((len(terminal_safe(q)) for q in rows.get_column("query_id").to_list()), default=8)
    width = max(8, min(40, longest))
    lines = [
        f"top {rows.height} regressions (most negative delta first):",
        f"  {'query_id':<{width}}{'score A':>9}{'score B':>9}{'delta':>9}{'rel A':>7}{'rel B':>7}",
    ]
    for row in rows.iter_rows(named=True):
        query = terminal_safe(row["query_id"])  # no terminal escapes, no forged rows
        query = query if len(query) <= width else query[: width - 1] + "…"
        lines.append(
            f"  {query:<{width}}{fmt.number(row['score_a'], 2):>9}"
            f"{fmt.number(row['score_b'], 2):>9}"
            f"{fmt.number(row['delta'], 2, signed=True):>9}"
            f"{_count(row['relevant_count_a']):>7}{_count(row['relevant_count_b']):>7}"
        )
    return "\n".join(lines)


def _count(value: object) -> str:
    return "-" if value is None else str(value)


def format_positions(comparison: Comparison, limit: int = 20) -> str:
    rows = comparison.positions
    lines = [
        "relevance rate by position:",
        f"  {'position':<10}{'rate A':>9}{'rate B':>9}{'delta':>9}{'judged A':>10}{'judged B':>10}",
    ]
    for row in rows.head(limit).iter_rows(named=True):
        lines.append(
            f"  {row['position']:<10}{fmt.number(row['rate_a'], 3):>9}"
            f"{fmt.number(row['rate_b'], 3):>9}"
            f"{fmt.number(row['delta'], 3, signed=True):>9}"
            f"{_count(row['judged_a']):>10}{_count(row['judged_b']):>10}"
        )
    if rows.height > limit:
        lines.append(f"  ... {rows.height - limit} more positions (all are in the table)")
    return "\n".join(lines)


_MAX_SEGMENT_LINES = 40


def format_segments(comparison: Comparison, verdict: Gate, min_segment_size: int) -> str:
    """Per segment column: each value's queries ok in both runs, means, shift, and whether the
    gate failed it ("FAIL"), checked it ("ok") or left it out for its size ("small")."""
    failed = {(s.by, s.value) for s in verdict.failed_segments}
    blocks = []
    for column in comparison.segment_columns:
        segments = comparison.segments_by(column)
        width = max([len(column) + 3, *(len(terminal_safe(s.value)) + 2 for s in segments)])
        width = min(max(width, 12), 32)
        lines = [
            f"by {column} (a query's value in B; over the queries scored ok in both runs):",
            f"  {'value':<{width}}{'queries':>9}{'mean A':>9}{'mean B':>9}{'shift':>9}"
            f"{'regressed':>11}{'gate':>7}",
        ]
        for s in segments[:_MAX_SEGMENT_LINES]:
            name = "(null)" if s.value is None else terminal_safe(s.value)
            name = name if len(name) <= width - 2 else name[: width - 3] + "…"
            status = (
                "FAIL"
                if (s.by, s.value) in failed
                else "small"
                if s.paired < min_segment_size
                else "ok"
            )
            lines.append(
                f"  {name:<{width}}{s.paired:>9,}{fmt.number(s.mean_a, 3):>9}"
                f"{fmt.number(s.mean_b, 3):>9}{fmt.number(s.shift, 3, signed=True):>9}"
                f"{s.regressed:>11,}{status:>7}"
            )
        hidden = len(segments) - _MAX_SEGMENT_LINES
        if hidden > 0:
            lines.append(f"  ... {hidden} more values (all are gated; see the per-query table)")
        blocks.append("\n".join(lines))
    if comparison.unsegmented:
        blocks.append(
            "not compared by "
            + ", ".join(comparison.unsegmented)
            + f": run {comparison.run_a}'s scores do not have the column"
        )
    return "\n\n".join(blocks)


def format_comparison(
    comparison: Comparison,
    *,
    top: int,
    verdict: Gate,
    min_segment_size: int = DEFAULT_MIN_SEGMENT_SIZE,
) -> str:
    segments = format_segments(comparison, verdict, min_segment_size)
    return "\n\n".join(
        [
            format_shift(comparison),
            format_bands(comparison),
            *([segments] if segments else []),
            format_regressions(comparison, top),
            format_positions(comparison),
            verdict.message,
        ]
    )


# --------------------------------------------------------------------------------------------
# command: `run` is what `ctxprec compare` calls (its options are defined in jobs.cli);
# `main` is `python -m jobs.tools.compare`


def table_name(run_a: str, run_b: str) -> str:
    return f"comparisons/{run_a}__vs__{run_b}.parquet"


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The handler of `ctxprec compare`: 1 when the mean dropped too far, else 0."""
    out = out if out is not None else sys.stdout
    if args.max_mean_drop < 0:
        raise ConfigError(f"--max-mean-drop must be >= 0, got {args.max_mean_drop}")
    if args.top < 0:
        raise ConfigError(f"--top must be >= 0, got {args.top}")
    if args.min_segment_size < 1:
        raise ConfigError(f"--min-segment-size must be >= 1, got {args.min_segment_size}")
    store = open_output(args)
    run_a = load_run(store, args.run_a)
    run_b = load_run(store, args.run_b)
    comparison = compare_runs(run_a, run_b, args.by)
    written = write_parquet_file(
        store,
        args.out_table,
        table_name(run_a.run_id, run_b.run_id),
        comparison.table,
        parse_storage_options(args.storage_option),
    )
    verdict = gate(comparison, args.max_mean_drop, args.min_segment_size)
    out.write(
        format_comparison(
            comparison, top=args.top, verdict=verdict, min_segment_size=args.min_segment_size
        )
        + "\n"
    )
    out.write(f"per-query table: {written}\n")
    return 0 if verdict.passed else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m jobs.tools.compare`: `ctxprec compare` on its own."""
    from jobs.cli import main as ctxprec

    return ctxprec(["compare", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
