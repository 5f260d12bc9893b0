"""Benchmark of the verdict aggregation
(tests.support.polars_scores.scores_from_verdicts) against others.

    .venv/bin/python -m bench.aggregate_bench --rows 10000000

Writes `--rows` synthetic verdict rows (rows / positions queries x `--positions` contexts, seeded
random relevance, unsorted hash-like query ids) as `--shards` Parquet files in a temporary
directory, then runs every formulation `--repeats` times, each run in a fresh subprocess that
reports its wall time for scan + aggregate + collect and its peak RSS (VmHWM, so it includes
the interpreter and the imported libraries).  All formulations must produce the same scores
(an exact integer checksum) or the benchmark fails.  Prints a markdown table and writes it into
docs/benchmarks.md under "## Aggregation (Polars)", replacing only that section.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bench import common

SECTION = "## Aggregation (Polars)"


@dataclass(frozen=True)
class Method:
    """One formulation to measure."""

    name: str
    engine: str
    description: str


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        Method(
            "bitmask",
            "streaming",
            "`scores_from_verdicts` (default): hash group-by ORing 2**position into a UInt64 mask, "
            "AP from popcounts",
        ),
        Method("bitmask-mem", "in-memory", "the same plan on the in-memory engine"),
        Method(
            "window",
            "streaming",
            "`scores_from_verdicts(method='window')`: "
            "`cum_sum().over('query_id', order_by='position')` + group-by",
        ),
        Method("window-mem", "in-memory", "the same plan on the in-memory engine"),
        Method(
            "sort-cumsum",
            "streaming",
            "`sort('query_id', 'position')` + `cum_sum().over('query_id')` + group-by",
        ),
        Method(
            "groupby-sortby",
            "streaming",
            "group-by with `sort_by('position')` + `cum_sum()` inside the aggregation",
        ),
        Method(
            "duckdb-window",
            "duckdb",
            "DuckDB SQL: `sum(relevant::int) over (partition by query_id order by position)` "
            "+ group by, result fetched as Arrow",
        ),
    )
}

DEFAULT_METHODS = [name for name in METHODS if name != "window-mem"]

# ------------------------------------------------------------------------------------------
# data


def generate(directory: Path, rows: int, positions: int, shards: int, seed: int) -> None:
    """Write `rows` verdict rows as `shards` Parquet files, one row group per 1M rows or so."""
    import polars as pl

    queries = rows // positions
    per_shard = -(-queries // shards)
    for shard in range(shards):
        start, stop = shard * per_shard, min(queries, (shard + 1) * per_shard)
        if start >= stop:
            break
        ordinal = pl.col("ordinal")
        key = ordinal * positions + pl.col("position")
        frame = (
            pl.DataFrame({"ordinal": pl.int_range(start, stop, dtype=pl.Int64, eager=True)})
            .with_columns(
                query_id=pl.format(
                    "q-{}", ordinal.hash(seed=seed).cast(pl.String).str.slice(0, 16)
                ),
                position=pl.int_ranges(0, positions, dtype=pl.Int32),
            )
            .explode("position")
            .select(
                "query_id",
                "position",
                relevant=key.hash(seed=seed + 1) % 2 == 0,
                judge_reason=pl.format("context {} supports the answer", pl.col("position")),
                pair_key=key.hash(seed=seed + 2).cast(pl.String),
                cached=key.hash(seed=seed + 3) % 10 == 0,
            )
        )
        frame.write_parquet(directory / f"verdicts-{shard:05d}.parquet")


# ------------------------------------------------------------------------------------------
# formulations


def _polars_plan(name: str, glob: str, scale: float) -> object:
    """The LazyFrame for a Polars formulation (query_id, score, relevant_count, judged_count)."""
    import polars as pl

    from tests.support.polars_scores import round_half_up_expr, scores_from_verdicts

    if name.startswith("bitmask"):
        return scores_from_verdicts(glob, scale, method="bitmask")
    if name.startswith("window"):
        return scores_from_verdicts(glob, scale, method="window")
    judged = (
        pl.scan_parquet(glob)
        .select("query_id", "position", "relevant")
        .filter(pl.col("relevant").is_not_null())
    )

    def finish(lf: pl.LazyFrame) -> pl.LazyFrame:
        average = pl.col("precision_sum") / pl.col("relevant_count") * scale
        return lf.select(
            "query_id",
            round_half_up_expr(
                pl.when(pl.col("relevant_count") > 0).then(average).otherwise(0.0)
            ).alias("score"),
            pl.col("relevant_count").cast(pl.Int32),
            pl.col("judged_count").cast(pl.Int32),
        )

    if name == "sort-cumsum":
        running = pl.col("relevant").cast(pl.Int32).cum_sum().over("query_id")
        precision = running / (pl.col("position") + 1)
        return finish(
            judged.sort("query_id", "position")
            .with_columns(precision=pl.when("relevant").then(precision).otherwise(0.0))
            .group_by("query_id")
            .agg(
                precision_sum=pl.col("precision").sum(),
                relevant_count=pl.col("relevant").sum(),
                judged_count=pl.len(),
            )
        )
    if name == "groupby-sortby":
        relevant = pl.col("relevant").sort_by("position")
        position = pl.col("position").sort_by("position")
        precision = relevant.cast(pl.Int32).cum_sum() / (position + 1)
        return finish(
            judged.group_by("query_id").agg(
                precision_sum=pl.when(relevant).then(precision).otherwise(0.0).sum(),
                relevant_count=pl.col("relevant").sum(),
                judged_count=pl.len(),
            )
        )
    raise SystemExit(f"unknown method {name}")


DUCKDB_SQL = """
with ranked as (
    select query_id, position, relevant,
           sum(relevant::int) over (partition by query_id order by position) as relevant_so_far
    from read_parquet('{glob}')
    where relevant is not null
), items as (
    select query_id,
           sum(case when relevant then relevant_so_far / (position + 1) else 0 end) as psum,
           sum(relevant::int)::int as relevant_count,
           count(*)::int as judged_count
    from ranked group by query_id
)
select query_id,
       case when relevant_count > 0
            then round(floor(psum / relevant_count * {scale} * 100 + 0.5 + 1e-9) / 100, 2)
            else 0.0 end as score,
       relevant_count, judged_count
from items
"""


def peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM) in MiB.

    Not ru_maxrss: on Linux that survives exec, so a child started by a parent that once held
    the generated data would report the parent's peak.
    """
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _checksum(scores: list[float], relevant: int, judged: int, rows: int) -> str:
    """An exact fingerprint of a result: integer hundredths, counts and row count."""
    hundredths = sum(round(s * 100) for s in scores)
    return f"{rows}:{hundredths}:{relevant}:{judged}"


def worker(name: str, glob: str, scale: float) -> dict[str, object]:
    """Run one formulation once in this process; time and peak RSS of scan+aggregate+collect."""
    method = METHODS[name]
    if method.engine == "duckdb":
        import duckdb

        con = duckdb.connect()
        con.execute("SET enable_progress_bar = false")
        baseline = peak_rss_mib()
        start = time.perf_counter()
        table = con.sql(DUCKDB_SQL.format(glob=glob, scale=scale)).arrow()
        table = table.read_all() if hasattr(table, "read_all") else table
        seconds = time.perf_counter() - start
        scores = table.column("score").to_pylist()
        relevant = sum(table.column("relevant_count").to_pylist())
        judged = sum(table.column("judged_count").to_pylist())
        rows = table.num_rows
    else:
        import polars as pl

        plan = _polars_plan(name, glob, scale)
        assert isinstance(plan, pl.LazyFrame)
        baseline = peak_rss_mib()
        start = time.perf_counter()
        engine: Literal["in-memory", "streaming"] = (
            "in-memory" if method.engine == "in-memory" else "streaming"
        )
        frame = plan.collect(engine=engine)
        seconds = time.perf_counter() - start
        scores = frame["score"].to_list()
        relevant = int(frame["relevant_count"].sum())
        judged = int(frame["judged_count"].sum())
        rows = frame.height
    return {
        "seconds": seconds,
        "peak_rss_mib": peak_rss_mib(),
        "baseline_rss_mib": baseline,
        "checksum": _checksum(scores, relevant, judged, rows),
    }


# ------------------------------------------------------------------------------------------
# driver


@dataclass(frozen=True)
class Measured:
    method: Method
    seconds: list[float]
    peak_rss_mib: float
    baseline_rss_mib: float
    checksum: str


def _child_env() -> dict[str, str]:
    """The environment for child processes: this checkout first on the import path."""
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not path else f"{root}{os.pathsep}{path}"}


def measure(name: str, glob: str, scale: float, repeats: int) -> Measured:
    """Run `name` `repeats` times, each in a fresh interpreter."""
    runs = []
    for _ in range(repeats):
        command = [sys.executable, "-m", "bench.aggregate_bench", "--worker", name]
        command += ["--data", glob, "--scale", str(scale)]
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, env=_child_env()
        )
        if done.returncode != 0:
            raise SystemExit(f"{name} failed:\n{done.stderr}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    checksums = {run["checksum"] for run in runs}
    if len(checksums) != 1:
        raise SystemExit(f"{name} is not deterministic: {checksums}")
    return Measured(
        method=METHODS[name],
        seconds=[float(run["seconds"]) for run in runs],
        peak_rss_mib=max(float(run["peak_rss_mib"]) for run in runs),
        baseline_rss_mib=min(float(run["baseline_rss_mib"]) for run in runs),
        checksum=checksums.pop(),
    )


def machine() -> str:
    """The shared machine description plus the versions of the libraries measured."""
    import duckdb
    import polars as pl

    return f"{common.machine()}; Polars {pl.__version__}, DuckDB {duckdb.__version__}"


def render(results: list[Measured], args: argparse.Namespace, started: str, load: str) -> str:
    """The markdown section."""
    fastest = min(statistics.median(r.seconds) for r in results)
    lines = [
        SECTION,
        "",
        f"`scores_from_verdicts` over {args.rows:,} verdict rows ({args.rows // args.positions:,} "
        f"queries x {args.positions} positions, random relevance, seed {args.seed}) in "
        f"{args.shards} Parquet shards; each figure is one fresh process per run (scan + "
        f"aggregate + collect to a {args.rows // args.positions:,}-row frame), {args.repeats} "
        "runs per formulation.",
        "",
        f"- Command: `.venv/bin/python -m bench.aggregate_bench {_argv()}`",
        f"- Date: {started}",
        f"- Machine: {machine()}",
        f"- Load average (1/5/15 min) at start: {load}; at end: {common.load_average()} "
        "(other jobs share the machine, so absolute times vary from run to run: compare rows "
        "of one run)",
        "- Peak RSS is the process's VmHWM: interpreter + libraries + query. "
        "Import baseline: the RSS just before the query ran.",
        "",
        "| formulation | engine | median s | best s | vs fastest | peak RSS MiB "
        "| import baseline MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        median = statistics.median(r.seconds)
        lines.append(
            f"| {r.method.name} | {r.method.engine} | {median:.2f} | {min(r.seconds):.2f} "
            f"| {median / fastest:.1f}x | {r.peak_rss_mib:.0f} | {r.baseline_rss_mib:.0f} |"
        )
    lines += ["", "Formulations:", ""]
    lines += [f"- **{r.method.name}**: {r.method.description}" for r in results]
    lines += [
        "",
        f"All formulations returned identical scores (checksum `{results[0].checksum}`: "
        "rows:sum of hundredths:relevant:judged).  The job uses `bitmask` with "
        "`collect(engine='streaming')`; queries with a position outside 0..63 or a repeated "
        "position fall back to `window` inside the same plan.",
        "",
    ]
    return "\n".join(lines)


def _argv() -> str:
    return shlex.join(sys.argv[1:]) if len(sys.argv) > 1 else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--positions", type=int, default=10)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help="comma-separated subset of " + ",".join(METHODS),
    )
    parser.add_argument("--docs", type=Path, default=common.DOCS, help="markdown file to update")
    parser.add_argument("--no-docs", action="store_true", help="print only")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.worker, args.data, args.scale)))
        return 0
    if args.generate:
        generate(args.generate, args.rows, args.positions, args.shards, args.seed)
        return 0

    names = [name.strip() for name in args.methods.split(",") if name.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        parser.error(f"unknown methods {unknown}")
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = common.load_average()
    with tempfile.TemporaryDirectory(prefix="aggregate-bench-") as tmp:
        t0 = time.perf_counter()
        # In a child, so that this driver stays small while the measured children run.
        command = [sys.executable, "-m", "bench.aggregate_bench", "--generate", tmp]
        command += [f"--rows={args.rows}", f"--positions={args.positions}"]
        command += [f"--shards={args.shards}", f"--seed={args.seed}"]
        subprocess.run(command, check=True, env=_child_env())
        print(f"generated {args.rows:,} rows in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        glob = str(Path(tmp) / "verdicts-*.parquet")
        results = []
        for name in names:
            results.append(measure(name, glob, args.scale, args.repeats))
            r = results[-1]
            print(
                f"{name:>15}: {', '.join(f'{s:.2f}' for s in r.seconds)} s, "
                f"{r.peak_rss_mib:.0f} MiB",
                file=sys.stderr,
            )
    checksums = {r.checksum for r in results}
    if len(checksums) != 1:
        for r in results:
            print(f"{r.method.name}: {r.checksum}", file=sys.stderr)
        raise SystemExit("formulations disagree")
    text = render(results, args, started, load)
    print(text)
    if not args.no_docs:
        common.write_section(SECTION, text, args.docs)
        print(f"wrote {args.docs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
