"""How much the judge's HTTP client costs: requests/s against a zero-latency fake judge.

    .venv/bin/python -m bench.transport_bench [--seconds 10] [--concurrency 64] [--no-write]

Starts the fake judge (`python -m tests.fake_judge --port 0`) in its own process, then, in this
one client process, sends the same verdict request (4 contexts, the real prompt and schema) for
`--seconds` each, `--concurrency` requests in flight, through:

  (a) a bare aiohttp loop posting the pre-encoded body (the ceiling of a Python client),
  (b) `OpenAIHTTPClient.complete`,
  (c) `LiteLLMClient.complete`,
  (d) `LLMJudge.judge` over `OpenAIHTTPClient` (the whole judge path: prompt, send, parse).

The server answers at once, so the numbers measure client overhead (plus the server's own,
which is a single Python process and caps every row). Import time and resident memory of each
client module are measured in fresh interpreters. Prints a markdown table and writes it into
docs/benchmarks.md under SECTION, replacing only that section.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import importlib.metadata
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from jobs.engine.ray_runtime import RAY_ENV, set_env_defaults

SECTION = "## Judge transport overhead (zero-latency server)"
ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
MODEL = "openai/fake-judge"
CONTEXTS = ("alpha RELEVANT", "beta", "gamma RELEVANT", "delta")


@dataclass(frozen=True)
class Row:
    name: str
    what: str
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p99_ms: float
    cpu_us: float  # client process CPU time per completed request
    all_rps: tuple[float, ...] = ()

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def _env() -> dict[str, str]:
    return {**os.environ, **RAY_ENV, "PYTHONPATH": str(ROOT)}


def start_server(max_seconds: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        common.fake_judge_command(f"{max_seconds}"),
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://127.0.0.1:"):
        proc.kill()
        raise SystemExit(
            f"fake judge did not start: {url!r} {proc.stderr.read() if proc.stderr else ''}"
        )
    return proc, url


def server_stats(url: str) -> dict[str, Any]:
    root = url.rsplit("/v1", 1)[0]
    with urllib.request.urlopen(f"{root}/stats", timeout=10) as response:
        data: dict[str, Any] = json.load(response)
    return data


def reset_server(url: str) -> None:
    root = url.rsplit("/v1", 1)[0]
    request = urllib.request.Request(f"{root}/admin/reset", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


async def drive(
    call: Callable[[], Awaitable[object]], concurrency: int, seconds: float, warmup: float
) -> tuple[int, int, float, float, list[float]]:
    """Run `concurrency` loops of `call` for `warmup` (not counted), then for `seconds`.
    Returns (done, errors, wall seconds, client CPU seconds, latencies)."""
    latencies: list[float] = []
    counting = False
    done = errors = 0

    async def worker(deadline: float) -> None:
        nonlocal done, errors
        clock = time.perf_counter
        while clock() < deadline:
            start = clock()
            try:
                await call()
            except Exception:
                if counting:
                    errors += 1
                continue
            if counting:
                done += 1
                latencies.append(clock() - start)

    if warmup > 0:
        await asyncio.gather(*(worker(time.perf_counter() + warmup) for _ in range(concurrency)))
    counting = True
    cpu = time.process_time()
    begin = time.perf_counter()
    await asyncio.gather(*(worker(begin + seconds) for _ in range(concurrency)))
    elapsed = time.perf_counter() - begin
    return done, errors, elapsed, time.process_time() - cpu, latencies


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def measure(
    name: str,
    what: str,
    make: Callable[[], tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[None]]]],
    args: argparse.Namespace,
) -> Row:
    async def run() -> tuple[int, int, float, float, list[float]]:
        call, close = make()
        try:
            return await drive(call, args.concurrency, args.seconds, args.warmup)
        finally:
            await close()

    done, errors, elapsed, cpu, latencies = asyncio.run(run())
    row = Row(
        name,
        what,
        done,
        errors,
        elapsed,
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        cpu / max(1, done) * 1e6,
    )
    print(
        f"{name}: {row.rps:,.0f} req/s ({done} in {elapsed:.1f} s, {errors} errors, "
        f"p50 {row.p50_ms:.1f} ms, p99 {row.p99_ms:.1f} ms, {row.cpu_us:,.0f} CPU us/req)",
        flush=True,
    )
    return row


def modes(url: str) -> dict[str, tuple[str, Callable[[], Any]]]:
    import aiohttp

    from scorer_core.judge import LLMJudge
    from scorer_core.openai_http import OpenAIHTTPClient
    from scorer_core.prompt import VERDICTS_SCHEMA, VERDICTS_SCHEMA_NAME, verdict_messages
    from scorer_core.protocols import RequestSettings
    from scorer_core.types import ScoringItem

    item = ScoringItem(input="which letters?", output="alpha and gamma", contexts=CONTEXTS)
    positions = list(range(len(CONTEXTS)))
    messages = verdict_messages(item, positions)
    reference = OpenAIHTTPClient(MODEL, RequestSettings(api_base=url))
    settings = RequestSettings(api_base=url, timeout=60)
    body = json.dumps(
        reference.request_body(messages, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA),
        ensure_ascii=False,
    ).encode()

    def bare() -> Any:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        headers = {"Content-Type": "application/json"}
        target = reference.url

        async def call() -> str:
            async with session.post(target, data=body, headers=headers) as response:
                raw = await response.read()
                if response.status != 200:
                    raise RuntimeError(response.status)
            text: str = json.loads(raw)["choices"][0]["message"]["content"]
            return text

        return call, session.close

    def http_client() -> Any:
        client = OpenAIHTTPClient(MODEL, settings)

        async def call() -> object:
            return await client.complete(
                messages, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA
            )

        return call, client.aclose

    def litellm_client() -> Any:
        from scorer_core.litellm_client import LiteLLMClient, import_litellm

        import_litellm()  # the import (seconds) is not part of the measured time
        client = LiteLLMClient(MODEL, settings)

        async def call() -> object:
            return await client.complete(
                messages, schema_name=VERDICTS_SCHEMA_NAME, schema=VERDICTS_SCHEMA
            )

        async def close() -> None:
            return None

        return call, close

    def judge_over_http() -> Any:
        client = OpenAIHTTPClient(MODEL, settings)
        judge = LLMJudge(client)

        async def call() -> object:
            batch = await judge.judge(item, positions)
            if batch.unscored_reason or len(batch.verdicts) != len(positions):
                raise RuntimeError(batch.unscored_reason)
            return batch

        return call, client.aclose

    return {
        "a": ("bare aiohttp loop, pre-encoded body (ceiling)", bare),
        "b": ("`OpenAIHTTPClient.complete`", http_client),
        "c": ("`LiteLLMClient.complete`", litellm_client),
        "d": ("`LLMJudge.judge` over `OpenAIHTTPClient` (prompt + send + parse)", judge_over_http),
    }


def import_cost(module: str) -> tuple[float, float]:
    """(seconds to import, resident MiB afterwards) in a fresh interpreter."""
    code = (
        "import time, resource\n"
        "t = time.perf_counter()\n"
        f"import {module}\n"
        "s = time.perf_counter() - t\n"
        "rss = [l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]\n"
        "print(s, int(rss) / 1024)\n"
    )
    if module == "scorer_core.litellm_client":
        code = code.replace(f"import {module}\n", f"import {module}; {module}.import_litellm()\n")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    seconds, mib = out.stdout.split()
    return float(seconds), float(mib)


def machine() -> str:
    """The shared machine description plus the versions of the clients measured."""
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}" for name in ("aiohttp", "litellm", "httpx")
    )
    return f"{common.machine()}; {versions}"


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def render(
    rows: list[Row],
    imports: dict[str, tuple[float, float]],
    args: argparse.Namespace,
    started: str,
    loads: list[str],
    stats: dict[str, Any],
) -> str:
    ceiling = rows[0].rps if rows and rows[0].name == "a" else None
    lines = [
        SECTION,
        "",
        f"Command: `.venv/bin/python -m bench.transport_bench {_argv()}` · date {started}",
        "",
        f"- Machine: {machine()}",
        "- Load average (1/5/15 min) seen during the run: "
        + "; ".join(loads)
        + ". Other engineers' jobs share these CPUs, so absolute numbers are noisy; compare "
        "rows of the same run.",
        f"- Server: `python -m tests.fake_judge` in its own process (one Python process, no "
        f"faults, no latency), on 127.0.0.1. Client: one process, one event loop, "
        f"{args.concurrency} requests in flight, {args.warmup:g} s warm-up then "
        f"{args.seconds:g} s per run, the same verdict request (4 contexts) every time; "
        f"{args.repeats} round(s) of the lean rows interleaved, then the litellm rounds (once "
        "imported, litellm's ~370k objects make each full garbage collection of the process "
        "take ~0.3 s, which would penalise the rows after it); the median run is shown, p50/p99 "
        "from that run, client CPU per request the median over the runs.",
        f"- The server answered {stats.get('total_requests', '?')} requests, by status "
        f"{stats.get('by_status', {})}.",
        "",
        "| row | client | requests/s (median) | runs | vs (a) | client CPU µs/request | "
        "p50 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        share = f"{row.rps / ceiling:.0%}" if ceiling else "-"
        runs = ", ".join(f"{x:,.0f}" for x in row.all_rps)
        lines.append(
            f"| {row.name} | {row.what} | **{row.rps:,.0f}** | {runs} | {share} | "
            f"{row.cpu_us:,.0f} | {row.p50_ms:.1f} | {row.p99_ms:.1f} | {row.errors} |"
        )
    lines += [
        "",
        "Import cost, each in a fresh interpreter (time to import; resident memory afterwards):",
        "",
        "| module | import s | RSS MiB |",
        "|---|---|---|",
    ]
    for module, (seconds, mib) in imports.items():
        lines.append(f"| `{module}` | {seconds:.2f} | {mib:.0f} |")
    lines += ["", reading(rows, imports), ""]
    return "\n".join(lines)


def reading(rows: list[Row], imports: dict[str, tuple[float, float]]) -> str:
    by = {row.name: row for row in rows}
    text = (
        "Reading: the server is one Python process on the same CPUs as the client, so row (a) "
        "is the ceiling of this setup, not of aiohttp, and when a client is cheap enough the "
        "server (and the machine's load) bounds its rate, not the client. The client CPU time "
        "per request is the less load-sensitive measure of what a transport costs."
    )
    if {"a", "b", "c"} <= by.keys():
        a, b, c = by["a"], by["b"], by["c"]
        text += (
            f" `OpenAIHTTPClient` spends {b.cpu_us:,.0f} µs of client CPU per request "
            f"(bare loop {a.cpu_us:,.0f} µs) and reaches {b.rps / a.rps:.0%} of row (a)'s rate; "
            f"litellm spends {c.cpu_us:,.0f} µs ({c.cpu_us / b.cpu_us:.0f}x) and reaches "
            f"{c.rps / a.rps:.0%}: one process sends {b.rps / c.rps:.0f}x as many requests "
            "with the native transport."
        )
    ratios = [max(r.all_rps) / min(r.all_rps) for r in rows if r.all_rps and min(r.all_rps) > 0]
    spread = max(ratios) if ratios else 1.0
    if spread > 1.3:
        text += (
            f" Runs of the same row differed by up to {spread:.1f}x in rate on this shared "
            "machine, far more than in CPU per request, so read rates as rough and the CPU "
            "column as the comparison."
        )
    if "d" in by and "b" in by:
        text += (
            f" The whole judge path (prompt, send, parse; row d) costs {by['d'].cpu_us:,.0f} µs "
            "per request."
        )
    lite = next((v for k, v in imports.items() if "litellm" in k), None)
    http = imports.get("scorer_core.openai_http")
    if lite and http:
        text += (
            f" Per process litellm also costs {lite[0]:.1f} s of import and {lite[1]:.0f} MiB "
            f"resident, against {http[0]:.2f} s and {http[1]:.0f} MiB (import times are "
            "inflated by the machine's load)."
        )
    text += (
        " Against a hosted provider its rate limit, not the client, is usually the bound; the "
        "difference matters for local servers (vLLM, Ollama), for gateways with high limits, "
        "and for how many processes (and how much memory) a job needs."
    )
    return text


def _argv() -> str:
    return shlex.join(sys.argv[1:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transport_bench")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured time per row")
    parser.add_argument("--warmup", type=float, default=1.0, help="uncounted time per row")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rows", default="a,b,c,d", help="which rows to run, e.g. a,b")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of all rows; median")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args(argv)
    set_env_defaults()

    started = dt.date.today().isoformat()
    loads = [f"{load_average()} at start"]
    imports = {
        module: import_cost(module)
        for module in ("aiohttp", "scorer_core.openai_http", "scorer_core.litellm_client")
    }
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    budget = (args.seconds + args.warmup + 30) * len(wanted) * args.repeats + 60
    proc, url = start_server(budget)
    runs: dict[str, list[Row]] = {name: [] for name in wanted}
    try:
        table = modes(url)
        reset_server(url)
        # litellm stays loaded once imported, and its ~370k objects make every full garbage
        # collection of this process slow (~0.3 s here): the lean rows run first.
        lean = [name for name in wanted if name != "c"]
        for group in (lean, [name for name in wanted if name == "c"]):
            for round_ in range(args.repeats if group else 0):
                for name in group:
                    what, make = table[name]
                    runs[name].append(measure(name, what, make, args))
                loads.append(f"{load_average()} after round {round_ + 1} of {','.join(group)}")
        stats = server_stats(url)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    rows = []
    for measured in runs.values():
        ordered = sorted(measured, key=lambda row: row.rps)
        median = ordered[(len(ordered) - 1) // 2]
        rows.append(
            dataclasses.replace(
                median,
                all_rps=tuple(row.rps for row in measured),
                cpu_us=statistics.median(row.cpu_us for row in measured),
            )
        )
    if imports["scorer_core.litellm_client"][0] > 0:
        imports["litellm (via scorer_core.litellm_client)"] = imports.pop(
            "scorer_core.litellm_client"
        )
    text = render(rows, imports, args, started, loads, stats)
    print()
    print(text)
    if not args.no_write:
        common.write_section(SECTION, text, DOCS)
        print(f"wrote section {SECTION!r} of {DOCS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
