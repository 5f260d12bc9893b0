"""Benchmark of `ctxprec export phoenix`: annotations per second to a loopback Phoenix, and the
exporter's peak memory as the run grows.

    .venv/bin/python -m bench.phoenix_bench --traces 2000 --memory 10000 100000

Throughput: a real `phoenix serve` (tests/support/phoenix.py) on 127.0.0.1 receives `--traces`
RAG traces (a root and a retrieval span of 2-5 documents each) over OTLP/HTTP; a run of those
spans is published as the job publishes one (tests/support/published.py), and `ctxprec export
phoenix` sends its verdicts and scores in a process of its own (wall time, peak RSS).
Memory: runs of 10k, 100k and 1M verdicts (5 per item; tables rewritten in row groups of
10,000 rows as the job's shards write them) exported in a fresh process each to a sink that
accepts everything in-process, so that only the reading and batching are measured.
Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench import common
from jobs.core.storage import open_store
from tests.support import phoenix as ph

# tests.support.published is not type-checked (mypy checks jobs, scorer_core and bench)
published = importlib.import_module("tests.support.published")

HEADING = "## Annotations back to Phoenix (issue 33)"
PROJECT = "bench"
ROW_GROUP = 10_000  # rows a row group of the published tables (a 2,000-item shard's verdicts)

# A process's peak RSS in KiB: VmHWM, which starts again at exec (ru_maxrss keeps the high
# water mark of the process it was forked from, here the benchmark's own).
_PEAK = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])"
# `ctxprec` in a process that prints its peak RSS (KiB) last on stderr
_CTXPREC = (
    "import sys; from jobs.cli.main import main; code = main(sys.argv[1:]); "
    f"print({_PEAK}, file=sys.stderr); sys.exit(code)"
)

_NULL_EXPORT = f"""
import json, sys, time
from jobs.core.storage import open_store
from jobs.tools.phoenix_export import ExportReport, export_run
from jobs.tools.published_runs import load_run
from jobs.tools.tool_options import ExportOptions, PublishedRoot

class NullSink:
    def check(self): pass
    def send(self, annotations): pass

out = sys.argv[1]
started = time.monotonic()
run = load_run(open_store(out, {{}}), "bench")
report = ExportReport(target="null sink")
options = ExportOptions(
    target="phoenix", run="bench", endpoint="http://unused", project="p", root=PublishedRoot(out)
)
export_run(run, NullSink(), report, options)
peak = {_PEAK} / 1024
print(json.dumps({{"sent": report.documents_sent + report.spans_sent,
                  "seconds": time.monotonic() - started, "peak_mb": peak}}))
"""


def _publish(out: Path, span_ids: list[str], relevance: list[list[bool]]) -> None:
    pairs = zip(span_ids, relevance, strict=True)
    queries = [published.Query(span, verdicts=flags) for span, flags in pairs]
    location = published.publish(open_store(str(out), {}), "bench", queries)
    # the job writes its tables a shard at a time (ray.shard_size, 2,000 items): row groups so
    for table in ("scores", "verdicts"):
        path = out / location.table_file(table)
        pq.write_table(pq.read_table(path), path, row_group_size=ROW_GROUP, compression="zstd")


def memory(verdicts: int, folder: Path) -> dict[str, float]:
    """Peak RSS of an export of `verdicts` verdicts (5 an item) to a sink that keeps nothing."""
    rng = random.Random(verdicts)
    items = verdicts // 5
    out = folder / f"mem-{verdicts}"
    _publish(
        out,
        [f"{n + 1:016x}" for n in range(items)],
        [[rng.random() < 0.5] * 5 for _ in range(items)],
    )
    done = subprocess.run(
        [sys.executable, "-c", _NULL_EXPORT, str(out)], capture_output=True, text=True, check=True
    )
    found: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return found | {"verdicts": verdicts}


def throughput(traces: int, folder: Path) -> dict[str, float]:
    """A loopback Phoenix holding `traces` traces; the export of their run, timed."""
    (folder / "phoenix").mkdir()
    server = ph.PhoenixServer(folder / "phoenix").start()
    try:
        sent = ph.send_rag_traces(server.url, PROJECT, traces)
        ph.wait_for_spans(server.url, PROJECT, traces, timeout_s=600)
        out = folder / "run"
        _publish(out, [item.query_id for item in sent], [item.relevance for item in sent])
        argv = ["export", "phoenix", "bench", "--output", str(out), "--endpoint", server.url]
        command = [sys.executable, "-c", _CTXPREC, *argv, "--project", PROJECT, "--json"]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=True)
        seconds = time.monotonic() - started
        peak = int(done.stderr.strip().splitlines()[-1]) / 1024
        report = json.loads(done.stdout.splitlines()[0])
        count = report["documents_sent"] + report["spans_sent"]
        return {"annotations": count, "seconds": seconds, "per_s": count / seconds, "peak_mb": peak}
    finally:
        server.stop()


def section(speed: dict[str, float], sizes: list[dict[str, float]], command: str) -> str:
    rows = "\n".join(
        f"| {int(m['verdicts']):,} | {int(m['sent']):,} | {m['seconds']:.1f} | {m['peak_mb']:.0f} |"
        for m in sizes
    )
    first = sizes[0]
    growth = ", ".join(
        f"+{m['peak_mb'] - first['peak_mb']:.0f} MB from {int(first['verdicts']):,} to "
        f"{int(m['verdicts']):,} verdicts"
        for m in sizes[1:]
    )
    return f"""{HEADING}

{common.header(command)}

`ctxprec export phoenix` to a `phoenix serve` (SQLite) on 127.0.0.1, batches of 500, four
requests in flight: {int(speed["annotations"]):,} annotations (document and span) in
{speed["seconds"]:.1f} s, **{speed["per_s"]:,.0f} annotations/s** including the command's
start-up, peak RSS {speed["peak_mb"]:.0f} MB. Phoenix writes each batch synchronously
(`sync=true`, so that an unknown span is refused): the exporter waits on it.

The exporter alone (a sink that keeps nothing), each in a fresh process, the published tables
in row groups of {ROW_GROUP:,} rows as the job's shards write them, read a record batch at a
time, at most four batches of annotations held: peak RSS {growth}. Measured apart, a bare
Arrow scan of such a file in record batches grows by 16 MB from 10k to 1M rows under
`ARROW_DEFAULT_MEMORY_POOL=jemalloc` (as `make` sets it; 30 MB more with Arrow's default pool):
part of the growth is the reader's, the rest was not traced further. Nothing of the run is held:
the annotations in flight are at most four batches.

| verdicts | annotations | seconds | peak RSS (MB) |
|---:|---:|---:|---:|
{rows}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--memory", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="phoenix-bench-") as tmp:
        sizes = [memory(n, Path(tmp)) for n in args.memory]
        speed = throughput(args.traces, Path(tmp))
    command = "python -m bench.phoenix_bench " + " ".join(sys.argv[1:] if argv is None else argv)
    text = section(speed, sizes, command.strip())
    print(text)
    if not args.no_write:
        common.write_section(HEADING, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
