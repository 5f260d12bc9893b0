"""Fault-injection soak: many items against a judge that misbehaves in every way at once.

    python -m bench.soak --items 20000 --workers 4 --rpm 6000 --fault-rate 0.2   (make soak)

The fake judge (its own process, 127.0.0.1) injects every fault kind it knows, 20% of requests
in all, enforces a requests-per-minute limit, and refuses connections for a few seconds twice
during the run. The job must finish with exactly one row per input item (lost = 0,
duplicates = 0), every `ok` score equal to what the server's verdicts imply, and every other row
saying why. Exit code 1 when any of that fails. The result goes to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from bench.common import header, write_section
from bench.job_bench import (
    base_config,
    fake_judge,
    fake_judge_section,
    run_job,
    server_stats,
    write_input,
)
from scorer_core import context_precision

HEADING = "## Fault-injection soak"


def _refuse(url: str, seconds: float) -> None:
    base = url.removesuffix("/v1")
    request = urllib.request.Request(
        f"{base}/admin/refuse",
        data=json.dumps({"seconds": seconds}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30):
        pass


def soak(items: int, workers: int, rpm: int, fault_rate: float, outages: int) -> tuple[str, bool]:
    kinds = (
        "rate_limit_429,rate_limit_429_no_header,server_error,slow,malformed_json,"
        "truncated_json,code_fence,text_around,wrong_count,unknown_verdict_word,"
        "duplicate_index,out_of_range_index,shuffled,case_and_space"
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        fake_judge(
            "--rpm",
            str(rpm),
            "--window-s",
            "60",
            "--fault-rate",
            str(fault_rate),
            "--fault-kinds",
            kinds,
            "--slow-s",
            "20",
            "--seed",
            "11",
        ) as url,
    ):
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=True)
        truth = {}
        with data.open() as handle:
            for line in handle:
                row = json.loads(line)
                truth[row["id"]] = context_precision(row["relevance"])
        out = Path(tmp) / "out"
        judge = fake_judge_section(url, timeout_s=5, max_retries=8, max_reasks=2)
        config = base_config(data, out, judge=judge, ray__workers=workers, ray__shard_size=500)
        config["rate_limit"] = {"requests_per_minute": rpm, "max_concurrency": 128}

        timers = [threading.Timer(30 + 45 * n, _refuse, args=(url, 4.0)) for n in range(outages)]
        for timer in timers:
            timer.start()
        started = time.monotonic()
        try:
            result = run_job(config)
        finally:
            for timer in timers:
                timer.cancel()
        wall = time.monotonic() - started
        stats = server_stats(url)
        scores = pl.read_parquet(out / "scores" / "**" / "*.parquet")
    counts = Counter(scores["query_id"].to_list())
    lost = len(set(truth) - set(counts))
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    unexpected = len(set(counts) - set(truth))
    ok = scores.filter(pl.col("status") == "ok")
    wrong = sum(
        1 for qid, score in zip(ok["query_id"], ok["score"], strict=True) if truth[qid] != score
    )
    silent = scores.filter((pl.col("status") != "ok") & pl.col("error").is_null()).height
    statuses = dict(Counter(scores["status"].to_list()))
    fan_out = result["manifest"]["timings_s"]["fan_out"]
    ideal = stats["accepted"] / rpm * 60
    passed = lost == 0 and duplicates == 0 and unexpected == 0 and wrong == 0 and silent == 0
    faults = ", ".join(f"{k} {v}" for k, v in sorted(stats["faults"].items()))
    lines = [
        HEADING,
        "",
        header(
            f"python -m bench.soak --items {items} --workers {workers} --rpm {rpm} "
            f"--fault-rate {fault_rate}"
        ),
        "",
        f"Fake judge with every fault kind at a combined {fault_rate:.0%} of requests, a "
        f"{rpm} requests/min sliding-window limit, and {outages} outage(s) of 4 s (connections "
        f"refused). Job: {workers} workers, `requests_per_minute: {rpm}`, timeout 5 s, "
        "max_retries 8, max_reasks 2.",
        "",
        "| result | value |",
        "|---|---|",
        f"| verdict **{'PASS' if passed else 'FAIL'}** | lost {lost}, duplicates {duplicates}, "
        f"unexpected rows {unexpected}, wrong ok scores {wrong}, non-ok rows without an error "
        f"{silent} |",
        f"| items / rows | {items:,} / {scores.height:,} |",
        f"| statuses | {statuses} |",
        f"| requests to the server | {stats['total_requests']:,} "
        f"({stats['accepted']:,} admitted under the limit) |",
        f"| 429s (limit + injected) | {stats['rate_limited_429']:,} "
        f"(by the window: {stats['rate_limited_by_window']:,}) |",
        f"| faults injected | {faults} |",
        f"| max requests in any 60 s window | {stats['max_in_any_window']} (limit {rpm}) |",
        f"| fan-out time | {fan_out:.0f} s, against an ideal of {ideal:.0f} s for "
        f"{stats['accepted']:,} admitted requests at {rpm}/min ({ideal / fan_out:.0%}) |",
        f"| wall time (incl. input generation, Ray start, publish) | {wall:.0f} s |",
        "",
        "Where the time above the ideal goes: every 429 pauses *all* workers until its "
        "Retry-After (by design: a provider's Retry-After speaks for the whole key), so injected "
        "429s on a few percent of requests stop the whole run for a second each; slow replies "
        "hold a connection until the 5 s timeout; and the outages stop everything. The job, the "
        "fake judge and the load generator share 2 cores (see the load average).",
    ]
    return "\n".join(lines), passed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rpm", type=int, default=6000)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--outages", type=int, default=2)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    section, passed = soak(args.items, args.workers, args.rpm, args.fault_rate, args.outages)
    print(section)
    if not args.no_write:
        write_section(HEADING, section)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
