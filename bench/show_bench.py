"""Benchmark of `ctxprec show` and the report's drilled items on published runs of 20K and 1M items.

    .venv/bin/python -m bench.show_bench --items 20000 1000000

Writes two synthetic runs (a baseline and a candidate whose retriever swapped the first two
passages of 5% of the items and whose judge flipped a verdict on 5% others) the way the job
publishes them: each run's input as Parquet (the texts), its scores and verdicts tables through
the publisher's own writer (`_ParquetFile`, row groups as the job writes them) a shard of
`--shard-size` items at a time in input order, its summary and its manifest (the run's config,
so `show` reads the input back as the run did). Query ids are hash-like and unordered, as most
real ids are. Then, each in a fresh process: `ctxprec show` of a few query ids beside the
baseline (wall time, peak RSS), and `ctxprec report --baseline` (wall time, peak RSS, page
size). Also counts, for each asked id, the verdicts table's row groups whose query_id min/max
statistics hold it (the groups a reader cannot skip). Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from bench import common
from jobs.core.config import parse_config
from jobs.core.run_layout import RunLocation
from jobs.core.run_manifest import RunManifest
from jobs.core.schema import PUBLISHED_SCORES, PUBLISHED_VERDICTS
from jobs.core.storage import open_store
from jobs.engine.publish import aggregate
from jobs.engine.publish.aggregate import SummarySpec
from jobs.engine.publish.publisher import _ParquetFile
from tests.support.polars_scores import scores_from_verdicts

SECTION = "## Reading one query: `ctxprec show` and the report's drilled items (issue 29)"
RUN_DATE = "2026-12-01"
PASSAGES = 5
FILLER = " It was described in the archive at some length, with dates and names." * 2


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _items(count: int, changed: bool) -> pl.DataFrame:
    """One row per item: query_id, its passages' texts in retrieved order, their verdicts."""
    n = pl.int_range(0, count, dtype=pl.Int64, eager=True)
    frame = pl.DataFrame({"n": n}).with_columns(
        query_id=pl.format("q-{}", pl.col("n").hash(seed=7).cast(pl.String).str.slice(0, 14)),
        original=pl.int_ranges(0, PASSAGES, dtype=pl.Int32),
    )
    frame = frame.explode("original").with_columns(
        text=pl.format("passage {} of item {}.", "original", "n") + pl.lit(FILLER),
        relevant=(pl.col("n") * 7 + pl.col("original") * 3).hash(seed=1) % 3 == 0,
    )
    if changed:  # 5% reordered (first two swapped), 5% another verdict on the first passage
        swap = (pl.col("n") % 20 == 0) & (pl.col("original") < 2)
        flip = (pl.col("n") % 20 == 10) & (pl.col("original") == 0)
        frame = frame.with_columns(
            position=pl.when(swap).then(1 - pl.col("original")).otherwise("original"),
            relevant=pl.when(flip).then(~pl.col("relevant")).otherwise("relevant"),
        ).sort("n", "position")
    else:
        frame = frame.with_columns(position=pl.col("original"))
    return frame.with_columns(context_hash=pl.Series([_hash(t) for t in frame["text"]]))


def _publish(folder: Path, run_id: str, items: pl.DataFrame, shard_size: int) -> None:
    """The run's input, tables and manifest under `folder`, as the job would write them."""
    source = folder / "inputs" / f"{run_id}.parquet"
    source.parent.mkdir(parents=True, exist_ok=True)
    grouped = items.group_by("n", "query_id", maintain_order=True).agg(
        "text", "relevant", "context_hash"
    )
    inputs = grouped.select(
        "query_id",
        input=pl.format("question of {}", "query_id"),
        output=pl.lit("an answer"),
        context="text",
    )
    pq.write_table(inputs.to_arrow(), source, row_group_size=10_000, compression="zstd")
    config = parse_config(
        {
            "input": {"path": str(source), "format": "parquet"},
            "output": {"path": str(folder / "out")},
            "run": {"id": run_id, "date": RUN_DATE},
        }
    )
    verdicts = items.select(
        "query_id",
        "position",
        context_id=pl.lit(None, pl.String),
        context_hash="context_hash",
        relevant="relevant",
        judge_reason=pl.format("passage {} {} the question", "position", "relevant"),
        cached=pl.lit(False),
    )
    scored = scores_from_verdicts(verdicts.lazy(), 1.0).collect()
    scores = (
        grouped.with_row_index("row")
        .join(scored, on="query_id", maintain_order="left")
        .select(
            "query_id",
            "score",
            reason=pl.lit("synthetic"),
            status=pl.lit("ok"),
            error=pl.lit(None, pl.String),
            relevant_count="relevant_count",
            context_count=pl.lit(PASSAGES, pl.Int32),
            judge_model=pl.lit("lexical"),
            calls=pl.lit(1, pl.Int64),
            prompt_tokens=pl.lit(900, pl.Int64),
            completion_tokens=pl.lit(60, pl.Int64),
            cache_hits=pl.lit(0, pl.Int64),
            source=pl.lit(str(source)),
            row=pl.col("row").cast(pl.Int64),
            truncated=pl.lit(False),
            duplicate_of=pl.lit(None, pl.String),
        )
        .cast(PUBLISHED_SCORES.polars)
    )
    verdicts = verdicts.cast(PUBLISHED_VERDICTS.polars)
    _write_tables(folder / "out", run_id, scores, verdicts, config.redacted(), shard_size)


def _write_tables(
    out: Path,
    run_id: str,
    scores: pl.DataFrame,
    verdicts: pl.DataFrame,
    config: dict[str, object],
    shard_size: int,
) -> None:
    store = open_store(str(out))
    location = RunLocation(run_id=run_id, run_date=pl.Series([RUN_DATE]).str.to_date()[0])
    with tempfile.TemporaryDirectory() as tmp:
        files = {
            "scores": _ParquetFile(Path(tmp) / "scores.parquet", PUBLISHED_SCORES.polars),
            "verdicts": _ParquetFile(Path(tmp) / "verdicts.parquet", PUBLISHED_VERDICTS.polars),
        }
        for start in range(0, scores.height, shard_size):  # a shard at a time, as the job
            files["scores"].write(scores.slice(start, shard_size))
            files["verdicts"].write(verdicts.slice(start * PASSAGES, shard_size * PASSAGES))
        for file in files.values():
            file.close()
        summary = aggregate.summarize(
            pl.scan_parquet(files["scores"].path),
            pl.scan_parquet(files["verdicts"].path),
            SummarySpec(model="lexical", scale=1.0),
        )
        summary_path = Path(tmp) / "summary.parquet"
        summary.to_frame().write_parquet(summary_path)
        for table, path in (*((t, f.path) for t, f in files.items()), ("summary", summary_path)):
            store.upload_file_atomic(str(path), store.join(location.table_file(table)))
    manifest = RunManifest(
        run_id=run_id,
        run_date=RUN_DATE,
        judge_model="lexical",
        config=config,
        status="complete",
        summary=summary.to_dict(),
    )
    store.write_bytes_atomic(store.join(location.manifest), manifest.to_json())


# `ctxprec ARGS` that prints its peak RSS (VmHWM: the exec'd process's own; ru_maxrss would
# include this benchmark's, inherited across fork) as the last line of stderr.
CTXPREC = """import sys
from jobs.cli import main
try:
    code = main(sys.argv[1:])
finally:
    print(*(l for l in open("/proc/self/status") if l.startswith("VmHWM")), file=sys.stderr)
sys.exit(code)
"""


def _timed(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in MiB, stdout) of `ctxprec argv` run in a fresh process."""
    command = [sys.executable, "-c", CTXPREC, *argv]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ctxprec {shlex.join(argv)}: exit {done.returncode}\n{done.stderr}")
    kib = int(done.stderr.strip().splitlines()[-1].split()[1])
    return seconds, kib / 1024, done.stdout


def _pyarrow_scan(path: Path, query_id: str) -> float:
    """Seconds to read one query's rows of `path` through a pyarrow dataset, the way
    `jobs.core.storage.scan` reads an object store (here from the local file)."""
    started = time.perf_counter()
    found = pl.scan_pyarrow_dataset(ds.dataset(path)).filter(pl.col("query_id") == query_id)
    assert found.collect().height == PASSAGES
    return time.perf_counter() - started


def _groups_holding(path: Path, query_id: str) -> tuple[int, int]:
    """(row groups whose query_id min/max hold `query_id`, row groups) of a Parquet file."""
    meta = pq.ParquetFile(path).metadata
    column = meta.schema.names.index("query_id")
    stats = [meta.row_group(g).column(column).statistics for g in range(meta.num_row_groups)]
    held = sum(1 for s in stats if s is None or not s.has_min_max or s.min <= query_id <= s.max)
    return held, meta.num_row_groups


def _measure(folder: Path, items: int, shard_size: int, queries: int) -> list[tuple[str, ...]]:
    """Publish the two runs of `items` under `folder` (unless there), then one table row per
    command: items, command, query id, wall s, peak RSS MiB, row groups holding the id, the
    pyarrow dataset read s, page bytes."""
    cand = _items(items, changed=True)
    if not (folder / "out").exists():  # else: the runs of an earlier call, reused
        _publish(folder, "show-a", _items(items, changed=False), shard_size)
        _publish(folder, "show-b", cand, shard_size)
    ids = cand.filter(pl.col("n") % 20 == 10)["query_id"].unique(maintain_order=True)
    asked = [*ids[: queries - 1], cand["query_id"][-1]]
    del cand, ids
    out = str(folder / "out")
    verdicts = next((folder / "out" / "verdicts").rglob("*.parquet"))
    rows = []
    for query_id in asked:
        argv = ["show", "show-b", query_id, "--baseline", "show-a", "--output", out, "--json"]
        seconds, rss, printed = _timed(argv)
        assert '"moved"' in printed and '"text": null' not in printed, printed[:500]
        held, groups = _groups_holding(verdicts, query_id)
        scan = f"{_pyarrow_scan(verdicts, query_id):.2f}"
        timed = (f"{seconds:.2f}", f"{rss:,.0f}", f"{held} of {groups}", scan, "")
        rows.append((f"{items:,}", "`show --baseline --json`", f"`{query_id}`", *timed))
    page = folder / "report.html"
    argv = ["report", "show-b", "--baseline", "show-a", "--output", out, "--html", str(page)]
    seconds, rss, _ = _timed(argv)
    timed = (f"{seconds:.2f}", f"{rss:,.0f}", "", "", f"{page.stat().st_size:,}")
    return [*rows, (f"{items:,}", "`report --baseline`", "", *timed)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, nargs="+", default=[20_000, 1_000_000])
    parser.add_argument("--shard-size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=3, help="query ids shown")
    parser.add_argument("--dir", help="where to write the runs (default: a temporary folder)")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args()
    folder = Path(args.dir or tempfile.mkdtemp(prefix="show-bench-"))
    rows = [
        row
        for items in args.items
        for row in _measure(folder / str(items), items, args.shard_size, args.queries)
    ]
    lines = [
        "| items | command | query id | wall s | peak RSS MiB | verdict row groups whose "
        "min/max hold the id | its verdicts through a pyarrow dataset, s | page bytes |",
        "|---|---|---|---|---|---|---|---|",
        *(f"| {' | '.join(row)} |" for row in rows),
    ]
    sizes = " ".join(str(n) for n in args.items)
    section = "\n".join(
        [
            SECTION,
            "",
            common.header(f"python -m bench.show_bench --items {sizes}"),
            "",
            f"For each size, two synthetic published runs ({PASSAGES} passages an item; "
            "hash-like unordered query ids; the candidate's retriever swapped the first two "
            "passages of 5% of the items, its judge flipped a verdict on 5% others), written "
            f"with the publisher's own Parquet writer a shard of {args.shard_size:,} items at "
            "a time, their inputs as Parquet. Each command runs in a fresh process (wall time "
            "includes the interpreter and imports; RSS is the process's peak, VmHWM). Query "
            "ids in input order are rarely sorted, so every row group's query_id min/max holds "
            "any asked id: statistics skip nothing (a smaller row group would not change that; "
            "sorting the tables by query_id would, at the cost of a sort of the whole run when "
            "publishing). `show` is fast anyway, and its memory does not grow with the run: "
            "Polars' scan of a local file decodes the query_id column, and the other columns "
            "only where it matched. The pyarrow column times, in this process, the read of one "
            "query's verdicts through a pyarrow dataset, what `show` uses on an object store "
            "(`jobs.core.storage.scan`), here on the local file. The report compares the two "
            "runs whole (as `ctxprec compare` does), then opens its first 10 regressions onto "
            "their passages: its page stays the same size whatever the run's.",
            "",
            *lines,
        ]
    )
    common.show_and_write(SECTION, section, common.DOCS, not args.no_write)


if __name__ == "__main__":
    main()
