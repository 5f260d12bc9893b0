"""Batch mode end to end at scale: 100,000 items through the fake Files + Batches API.

    python -m bench.batch_bench --items 100000

The fake judge runs as its own process (tests.fake_judge) with its batches moving one state
each time the driver polls them, so the only waiting is the driver's own poll interval; the
job runs in a fresh Python process (bench.job_bench.run_job: the driver's peak RSS from its
VmHWM, the Ray workers' sampled every 0.5 s). Reported: where the time went (in our code:
building the requests on the workers, building and uploading the batch files, ingesting the
output, the judging pass that stages the shards, publishing; versus waiting between polls and
the fake provider's own answering), peak memory, the files and batches created, and whether
every published score is the true one.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from bench.common import header, write_section
from bench.job_bench import base_config, fake_judge, fake_judge_section, run_job, write_input
from jobs.tools.sample_data import generate
from scorer_core import context_precision

HEADING = "## Batch mode at scale (fake Files + Batches API)"


def batch_stats(url: str) -> dict[str, Any]:
    base = url.removesuffix("/v1")
    with urllib.request.urlopen(f"{base}/admin/batches/stats", timeout=30) as response:
        data: dict[str, Any] = json.load(response)
    return data


def wrong_scores(scores_path: Path, items: int) -> tuple[int, int]:
    """(items not ok, ok items whose score is not the true one)."""
    truth = {
        row["id"]: round(context_precision(row["relevance"]), 2)
        for row in generate(items, markers=True)
    }
    scores = pl.read_parquet(scores_path)
    expected = pl.DataFrame({"query_id": list(truth), "truth": list(truth.values())})
    joined = scores.join(expected, on="query_id", how="inner")
    not_ok = int((scores["status"] != "ok").sum())
    wrong = int(
        joined.filter((pl.col("status") == "ok") & (pl.col("score") != pl.col("truth"))).height
    )
    return not_ok, wrong + (items - joined.height)


def run(items: int, workers: int, shard_size: int, poll_s: float) -> str:
    with (
        fake_judge("--batch-steps-per-retrieve", "1") as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=True)
        judge = fake_judge_section(
            url, mode="batch", batch={"poll_interval_s": poll_s, "max_poll_interval_s": poll_s}
        )
        config = base_config(
            data, Path(tmp) / "out", judge=judge, ray__workers=workers, ray__shard_size=shard_size
        )
        config["cache"] = {"enabled": True}
        result = run_job(config, sample_workers=True)
        stats = batch_stats(url)
        manifest = result["manifest"]
        scores_path = Path(manifest["tables"]["scores"])
        not_ok, wrong = wrong_scores(scores_path, items)
    timings = manifest["timings_s"]
    facts = manifest["judge"]
    wall = result["wall_s"]
    waiting = timings.get("waiting", 0.0)
    provider = stats["answering_s"]
    ours = wall - waiting - provider
    phases = [
        ("plan", "list files, plan shards"),
        ("ray_start", "Ray started (or joined) for the first pass"),
        ("build", "workers judge from the cache, write request lines"),
        ("submit", "batch files built from the shards' lines, uploaded"),
        ("ingest", "output files downloaded, split into replies per shard"),
        ("passes", "workers judge from the replies, stage the shards"),
    ]
    rows = [f"| - {name}: {what} | {timings.get(name, 0.0):,.1f} s |" for name, what in phases]
    lines = [
        HEADING,
        "",
        header(
            f"python -m bench.batch_bench --items {items} --workers {workers} "
            f"--shard-size {shard_size} --poll-s {poll_s:g}"
        ),
        "",
        f"{items:,} items (jobs.tools.sample_data, markers, 3-10 contexts each: one verdict "
        f"request per item), `judge.mode: batch` against the fake judge's Batches API in its own "
        f"process, {workers} workers, shard_size {shard_size}, cache on (cold), poll every "
        f"{poll_s:g} s. The fake moves a batch one state per poll (validating, in_progress, "
        "finalizing, completed) and answers a batch's lines in the poll that starts it; a real "
        "provider takes minutes to hours there, which is waiting, not work.",
        "",
        "| where the time went | seconds |",
        "|---|---|",
        f"| **wall, end to end** (fresh process: imports, Ray start, publish included) | "
        f"{wall:,.1f} s |",
        f"| waiting between polls (the driver asleep) | {waiting:,.1f} s |",
        f"| the fake provider answering the lines (inside the polls) | {provider:,.1f} s |",
        f"| **in our code** (wall minus the two above) | **{ours:,.1f} s** |",
        *rows,
        "",
        "| what | value |",
        "|---|---|",
        f"| driver peak RSS | {result['driver_peak_mib']:,.0f} MiB |",
        f"| worker peak RSS (largest Ray worker) | {result['worker_peak_mib']:,.0f} MiB |",
        f"| files uploaded / batches created | {stats['uploads']} / {stats['batches_created']} |",
        f"| bytes uploaded | {stats['uploaded_bytes'] / 1e6:,.1f} MB |",
        f"| output files downloaded | {stats['downloads']} |",
        f"| batch rounds / requests | {facts.get('rounds')} / {facts.get('requests'):,} |",
        f"| items not ok / wrong or missing scores | {not_ok} / {wrong} |",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_bench", description=__doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shard-size", type=int, default=2000)
    parser.add_argument("--poll-s", type=float, default=2.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    section = run(args.items, args.workers, args.shard_size, args.poll_s)
    print(section)
    if not args.no_write:
        write_section(HEADING, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
