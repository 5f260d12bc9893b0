"""Benchmarks of the whole job: framework overhead, memory as the input grows, rate limiting.

    python -m bench.job_bench overhead  --items 20000      # zero-latency fake judge, items/s
    python -m bench.job_bench memory    --sizes 10000 100000 1000000   # peak RSS, lexical judge
    python -m bench.job_bench segments  --items 1000000 --segments 100  # the same, summary.by
    python -m bench.job_bench ratelimit --items 2000 --rpm 600 --workers 4
    python -m bench.job_bench compare   --baseline DIR --items 20000 [--cache] # this vs DIR

The fake judge runs as its own process on 127.0.0.1 (tests.fake_judge), the job in a fresh
Python process per measurement, so that Ray, memory peaks and imports start cold every time.
Results go to docs/benchmarks.md (one section per mode).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.common import fake_judge_command, header, load_average, serving, write_section
from jobs.engine.ray_runtime import RAY_ENV

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, **RAY_ENV, "BENCH_JUDGE_KEY": "bench-not-a-secret"}


@contextlib.contextmanager
def fake_judge(*args: str) -> Iterator[str]:
    """A fake judge server process; yields its base URL (…/v1)."""
    with serving(fake_judge_command("3600", *args), "fake judge", ENV) as url:
        yield url


def server_stats(url: str) -> dict[str, Any]:
    base = url.removesuffix("/v1")
    with urllib.request.urlopen(f"{base}/stats", timeout=30) as response:
        data: dict[str, Any] = json.load(response)
    return data


def write_input(path: Path, items: int, markers: bool, segments: int = 0) -> None:
    subprocess.run(
        [sys.executable, "-m", "jobs.tools.sample_data", "--out", str(path), "--items", str(items)]
        + (["--markers"] if markers else [])
        + (["--segments", str(segments)] if segments else []),
        cwd=ROOT,
        check=True,
        env=ENV,
        stderr=subprocess.DEVNULL,
    )


def _ray_worker_rss(driver_pid: int) -> dict[int, tuple[str, int]]:
    """pid -> (role, RSS) of the Ray worker processes under the driver process `driver_pid`
    (its local Ray's raylet starts them; other people's Ray on the machine is not counted).
    The role is the process title Ray sets: run_worker, RunCoordinator, shard_keys, IDLE."""
    import psutil

    found: dict[int, tuple[str, int]] = {}
    try:
        children = psutil.Process(driver_pid).children(recursive=True)
    except psutil.Error:
        return found
    for process in children:
        try:
            cmdline = " ".join(process.cmdline())
            rss = process.memory_info().rss
        except psutil.Error:
            continue
        if cmdline.startswith("ray::"):
            found[process.pid] = (cmdline.split()[0].removeprefix("ray::").split(".")[0], rss)
        elif "default_worker.py" in cmdline:
            found[process.pid] = ("starting", rss)
    return found


def run_job(config: dict[str, Any], sample_workers: bool = False) -> dict[str, Any]:
    """Run the job in a fresh process; returns its manifest, wall time and memory peaks."""
    import yaml

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(config, handle)
        config_path = handle.name
    # The driver's peak resident memory per phase (bench.driver_phases): VmHWM is the
    # process's own peak; ru_maxrss would include the parent's at fork.
    command = [sys.executable, "-m", "bench.driver_phases", "--config", config_path]
    peaks: dict[int, int] = {}
    by_role: dict[str, int] = {}
    stop = threading.Event()
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            command, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=stderr, text=True
        )

        def sample() -> None:
            while not stop.is_set():
                for pid, (role, rss) in _ray_worker_rss(process.pid).items():
                    peaks[pid] = max(peaks.get(pid, 0), rss)
                    by_role[role] = max(by_role.get(role, 0), rss)
                stop.wait(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        if sample_workers:
            sampler.start()
        returncode = process.wait()
        ended = time.monotonic()
        stop.set()
        if sample_workers:
            sampler.join()
        stderr.seek(0)
        err = stderr.read()
    wall = ended - started
    if returncode != 0:
        raise RuntimeError(f"job failed ({returncode}):\n{err[-3000:]}")
    phases_line = next(line for line in err.splitlines() if line.startswith("PHASES "))
    phases = {
        key: int(value) / 1024
        for key, value in (part.split("=") for part in phases_line.split()[1:])
    }
    output = Path(config["output"]["path"])
    manifest_path = next(output.glob("manifests/**/manifest.json"))
    manifest = json.loads(manifest_path.read_text())
    return {
        "manifest": manifest,
        "started_at": started,
        "ended_at": ended,
        "wall_s": wall,
        "driver_peak_mib": phases["peak"],
        "driver_phases_mib": phases,
        "load_average": load_average(),
        "worker_peak_mib": by_role.get("run_worker", 0) / 2**20,
        "process_peaks_mib": {role: rss / 2**20 for role, rss in sorted(by_role.items())},
        "workers_seen": len(peaks),
    }


def fake_judge_section(url: str, **settings: Any) -> dict[str, Any]:
    """The `judge` section of a job against the fake judge at `url` (its key is in `ENV`)."""
    return {
        "model": "openai/fake-judge",
        "api_base": url,
        "api_key_env": "BENCH_JUDGE_KEY",
        **settings,
    }


def base_config(input_path: Path, output: Path, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "input": {
            "path": str(input_path),
            "columns": {
                "query_id": "id",
                "input": "question",
                "output": "answer",
                "expected_output": "ground_truth",
                "context": "contexts",
            },
        },
        "output": {"path": str(output)},
        "judge": {"model": "lexical"},
        "scorer": {"scale": 1, "reason": "template"},
        "cache": {"enabled": False},
        "ray": {"shard_size": 2000, "workers": 2},
    }
    for dotted, value in overrides.items():
        node = config
        *parents, last = dotted.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return config


def plain_client_rate(url: str, seconds: float = 10.0, concurrency: int = 64) -> float:
    """Requests/s of a bare aiohttp loop posting one verdict request: the ceiling."""
    import asyncio

    import aiohttp

    from scorer_core.prompt import VERDICTS_SCHEMA, VERDICTS_SCHEMA_NAME, verdict_messages
    from scorer_core.types import ScoringItem

    item = ScoringItem(
        input="Which river flows through Kalo?",
        output="The Amber.",
        contexts=tuple(f"passage {i} RELEVANT" if i % 3 == 0 else f"passage {i}" for i in range(6)),
        expected_output="Amber",
    )
    body = {
        "model": "fake-judge",
        "messages": verdict_messages(item, range(6)),
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": VERDICTS_SCHEMA_NAME,
                "schema": VERDICTS_SCHEMA,
                "strict": True,
            },
        },
    }

    async def run() -> int:
        done = 0
        deadline = time.monotonic() + seconds
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def loop() -> None:
                nonlocal done
                while time.monotonic() < deadline:
                    async with session.post(f"{url}/chat/completions", json=body) as response:
                        await response.read()
                        done += 1

            await asyncio.gather(*(loop() for _ in range(concurrency)))
        return done

    started = time.monotonic()
    count = asyncio.run(run())
    return count / (time.monotonic() - started)


def overhead(items: int, workers: int, transports: Sequence[str]) -> str:
    rows = []
    with fake_judge() as url, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=True)
        ceiling = plain_client_rate(url)
        for transport in transports:
            out = Path(tmp) / f"out-{transport}"
            judge = fake_judge_section(url, transport=transport)
            config = base_config(data, out, judge=judge, ray__workers=workers)
            config["rate_limit"] = {"max_concurrency": 128}
            result = run_job(config)
            fan_out = result["manifest"]["timings_s"]["fan_out"]
            calls = result["manifest"]["summary"]["judge_calls"]
            rows.append(
                f"| job, {transport} transport, {workers} workers | {items:,} | "
                f"{items / fan_out:,.0f} items/s ({calls / fan_out:,.0f} calls/s) | "
                f"{fan_out:.1f} s | {result['wall_s']:.1f} s |"
            )
    lines = [
        "## Framework overhead (zero-latency judge)",
        "",
        header(f"python -m bench.job_bench overhead --items {items} --workers {workers}"),
        "",
        "The fake OpenAI-compatible judge (tests.fake_judge, its own process) answers at once; "
        "the job's throughput against it is the framework's own cost per item (prompting, "
        "HTTP, parsing, Ray, Parquet). The ceiling is a bare aiohttp loop (64 in flight) posting "
        "one verdict request to the same server. Server, job and client share the 2 cores.",
        "",
        "| what | items | throughput (fan-out) | fan-out time | wall incl. Ray start + publish |",
        "|---|---|---|---|---|",
        f"| bare aiohttp client, 1 process | - | {ceiling:,.0f} requests/s | 10 s | - |",
        *rows,
    ]
    return "\n".join(lines)


def compare(baseline: Path, items: int, workers: int, cache: bool, repeats: int) -> str:
    """The overhead run (http transport) of this tree and of `baseline` (another checkout of
    the code), `repeats` times each, interleaved (the machine's load drifts): a Markdown table
    of the medians, fan-out ranges and what ran before the fan-out."""
    global ROOT, ENV
    trees = {"before": baseline.resolve(), "after": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    here, env = ROOT, ENV
    with fake_judge() as url, tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=True)
        for attempt in range(repeats):
            for name, tree in trees.items():
                judge = fake_judge_section(url, transport="http")
                out = Path(tmp) / f"out-{name}-{attempt}"
                config = base_config(data, out, judge=judge, ray__workers=workers)
                config["rate_limit"] = {"max_concurrency": 128}
                config["cache"] = {"enabled": cache}
                # the job's processes (driver, Ray workers) import the tree's code first
                ROOT, ENV = tree, {**env, "PYTHONPATH": str(tree)}
                try:
                    runs[name].append(run_job(config))
                finally:
                    ROOT, ENV = here, env
    rows = []
    for name, results in runs.items():
        fan_outs = sorted(r["manifest"]["timings_s"]["fan_out"] for r in results)
        before = statistics.median(
            sum(t for k, t in r["manifest"]["timings_s"].items() if k in _LOOKS) for r in results
        )
        rows.append(
            f"| {name} | {items / statistics.median(fan_outs):,.0f} items/s | "
            f"{statistics.median(fan_outs):.1f} s ({fan_outs[0]:.1f}-{fan_outs[-1]:.1f}) | "
            f"{before:.1f} s | {statistics.median(r['wall_s'] for r in results):.1f} s |"
        )
    return "\n".join(
        [
            f"`python -m bench.job_bench compare --baseline DIR --items {items} --workers "
            f"{workers}{' --cache' if cache else ''} --repeats {repeats}` (cache "
            f"{'on' if cache else 'off'}; load average at the end: {load_average()}):",
            "",
            "| code | throughput (fan-out) | fan-out time (range) | passes before it | wall |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )


# The timings of the passes before the fan-out: the look-ahead, and before it its three parts.
_LOOKS = frozenset({"lookahead", "duplicates_first", "cache_lookup"})


def memory(sizes: Sequence[int], workers: int) -> str:
    rows = []
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            data = Path(tmp) / "in.jsonl"
            write_input(data, size, markers=False)
            result = run_job(
                base_config(data, Path(tmp) / "out", ray__workers=workers), sample_workers=True
            )
            manifest = result["manifest"]
            phases = result["driver_phases_mib"]
            timings = manifest["timings_s"]
            rows.append(
                f"| {size:,} | {data.stat().st_size / 2**20:,.0f} MiB | "
                f"**{result['driver_peak_mib']:,.0f} MiB** | {phases.get('start', 0):,.0f} / "
                f"{phases['fan_out']:,.0f} / {phases['publish']:,.0f} MiB | "
                f"{result['worker_peak_mib']:,.0f} / "
                f"{result['process_peaks_mib'].get('RunCoordinator', 0):,.0f} MiB | "
                f"{manifest['shards']} | "
                f"{timings['fan_out']:.1f} s | {timings.get('publish', float('nan')):.1f} s | "
                f"{result['wall_s']:.1f} s | {result['load_average']} |"
            )
            print(rows[-1], flush=True)
    lines = [
        "## Memory as the input grows",
        "",
        header(f"python -m bench.job_bench memory --sizes {' '.join(map(str, sizes))}"),
        "",
        "Offline lexical judge (no server), JSONL input from jobs.tools.sample_data, "
        "shard_size 2000, "
        f"{workers} workers. Driver peak is the driver process's peak RSS (VmHWM), also per "
        "phase (bench.driver_phases resets the peak between phases): start (imports, checks, "
        "planning, joining Ray), fan-out, publish (deduplication, summary, upload). Worker peak "
        "is the largest RSS a worker process (a `run_worker` task) reached, sampled every 0.5 s, "
        "and the coordinator actor's; only the Ray processes under the job's driver count. "
        "Publish is "
        "the manifest's `timings_s.publish`; the load average (1/5/15 min) is taken as each "
        "run ends.",
        "",
        "| items | input size | driver peak RSS | start / fan-out / publish | worker / "
        "coordinator peak RSS "
        "| shards | fan-out | publish | wall | load average |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return "\n".join(lines)


def segments_memory(items: int, segments: int, workers: int) -> str:
    """Driver peak of the same input without and with a `retriever` column of `segments`
    values carried and summarised by (`summary.by`), one after the other."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=False, segments=segments)
        for count in (0, segments):
            config = base_config(data, Path(tmp) / f"out-{count}", ray__workers=workers)
            if count:
                config["input"]["carry"] = ["retriever"]
                config["summary"] = {"by": ["retriever"]}
            result = run_job(config)
            fan_out = result["manifest"]["timings_s"]["fan_out"]
            what = f"{count} (summary.by)" if count else "none (global summary)"
            rows.append(
                f"| {items:,} | {what} | {result['driver_peak_mib']:,.0f} MiB | {fan_out:.1f} s "
                f"| {result['wall_s']:.1f} s |"
            )
    lines = [
        "## Memory with segments (summary.by)",
        "",
        header(f"python -m bench.job_bench segments --items {items} --segments {segments}"),
        "",
        f"The same input (JSONL from jobs.tools.sample_data with a `retriever` column of "
        f"{segments} values), offline lexical judge, shard_size 2000, {workers} workers; run "
        "once with the global summary only, then with `input.carry: [retriever]` and "
        "`summary.by: [retriever]`. Driver peak as in the section above (the publish step "
        "dominates it).",
        "",
        "| items | segments | driver peak RSS | fan-out | wall |",
        "|---|---|---|---|---|",
        *rows,
    ]
    return "\n".join(lines)


def ratelimit(items: int, rpm: int, workers: int, transports: Sequence[str]) -> str:
    rows = [_ratelimit_row(items, rpm, workers, transport) for transport in transports]
    lines = [
        "## Shared rate limit",
        "",
        header(
            f"python -m bench.job_bench ratelimit --items {items} --rpm {rpm} --workers {workers}"
        ),
        "",
        f"The fake judge enforces {rpm} requests per sliding 60 s window and answers 429 beyond "
        f"it; the job is configured with `rate_limit.requests_per_minute: {rpm}` (paced at the "
        f"default headroom of 98%) and {workers} workers (Ray tasks) sharing one limiter actor.",
        "",
        "| transport | items | requests accepted | 429s | max in any 60 s window | rate while "
        "sending (first to last request) | rate over the whole fan-out (incl. worker start-up) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "The difference between the two rates is the time before the first request: Ray starts "
        "the worker processes and each imports its libraries (litellm alone takes seconds on 2 "
        "cores) while no request can be sent yet. It is a fixed cost per run, so the share over "
        "the whole fan-out approaches the sending rate as runs grow.",
    ]
    return "\n".join(lines)


def _ratelimit_row(items: int, rpm: int, workers: int, transport: str) -> str:
    with (
        fake_judge("--rpm", str(rpm), "--window-s", "60") as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        data = Path(tmp) / "in.jsonl"
        write_input(data, items, markers=True)
        judge = fake_judge_section(url, transport=transport)
        config = base_config(
            data, Path(tmp) / "out", judge=judge, ray__workers=workers, ray__shard_size=100
        )
        config["rate_limit"] = {"requests_per_minute": rpm, "max_concurrency": 64}
        result = run_job(config)
        stats = server_stats(url)
    fan_out = result["manifest"]["timings_s"]["fan_out"]
    accepted = stats["accepted"]
    overall = accepted / fan_out * 60
    span = stats["accepted_span_s"]
    sending = (accepted - 1) / span * 60 if span > 0 else 0.0
    return (
        f"| {transport} | {items:,} | {accepted:,} | {stats['rate_limited_429']} | "
        f"{stats['max_in_any_window']} (limit {rpm}) | {sending:,.0f} req/min = "
        f"**{sending / rpm:.1%}** of the limit over {span:.0f} s | {overall:,.0f} req/min = "
        f"{overall / rpm:.1%} over {fan_out:.0f} s |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.job_bench", description=__doc__)
    modes = parser.add_subparsers(dest="mode", required=True)
    over = modes.add_parser("overhead")
    over.add_argument("--items", type=int, default=20000)
    over.add_argument("--workers", type=int, default=2)
    over.add_argument("--transports", nargs="+", default=["litellm", "http"])
    mem = modes.add_parser("memory")
    mem.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    mem.add_argument("--workers", type=int, default=2)
    seg = modes.add_parser("segments")
    seg.add_argument("--items", type=int, default=1_000_000)
    seg.add_argument("--segments", type=int, default=100)
    seg.add_argument("--workers", type=int, default=2)
    rate = modes.add_parser("ratelimit")
    rate.add_argument("--items", type=int, default=2000)
    rate.add_argument("--rpm", type=int, default=600)
    rate.add_argument("--workers", type=int, default=4)
    rate.add_argument("--transports", nargs="+", default=["litellm", "http"])
    versus = modes.add_parser("compare")
    versus.add_argument("--baseline", type=Path, required=True, help="another checkout")
    versus.add_argument("--items", type=int, default=20000)
    versus.add_argument("--workers", type=int, default=2)
    versus.add_argument("--cache", action="store_true")
    versus.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.mode == "compare":  # printed: figures for the overhead section's text
        print(compare(args.baseline, args.items, args.workers, args.cache, args.repeats))
        return 0
    if args.mode == "overhead":
        section = overhead(args.items, args.workers, args.transports)
    elif args.mode == "memory":
        section = memory(args.sizes, args.workers)
    elif args.mode == "segments":
        section = segments_memory(args.items, args.segments, args.workers)
    else:
        section = ratelimit(args.items, args.rpm, args.workers, args.transports)
    print(section)
    if not args.no_write:
        write_section(section.splitlines()[0], section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
