"""How full the job keeps a provider's limit when replies take seconds.

    python -m bench.flow_bench --latencies 0.05 0.5 1 3 --seconds 60

For each mean reply latency x transport (http, litellm) x binding limit (requests per minute,
or tokens per minute alone), a fake OpenAI-compatible judge (tests.fake_judge, its own
process) answers with a lognormal latency (that mean, a p99 of 4x the mean) and enforces the
limit over a sliding 60 s window. The job runs with default settings and only the provider's
limit set (what a new user does): `rate_limit.max_concurrency: auto`, `judge.transport` as
given. Enough items are sent for about `--seconds` of sending at the limit.

Reported per run, from the server's own counts: the share of the limit used over the sending
span (first to last admitted request) and over the whole fan-out, the most requests in flight
at the server, the in-flight budget the run settled on and its latency percentiles (from the
manifest), 429s as a share of requests, items lost (input rows without a score row), and
whether every score equals the one the ground truth implies. Results go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from jobs.core.config import parse_config
from jobs.tools.estimation import estimate
from scorer_core.precision import context_precision

WINDOW_S = 60.0
# Requests per minute per transport: litellm spends far more CPU per request (see the
# transport benchmark), and the 2 cores are shared by the server and the workers.
RPM = {"http": 12_000, "litellm": 4_800}
# Tokens a sample item's verdict request costs at the server (prompt + reply, 4 characters a
# token; 5,997,333 tokens for 8,000 requests), measured on the sample; the token limit is set to
# allow the same request rate.
TOKENS_PER_REQUEST_GUESS = 750


def _truth(input_path: Path) -> dict[str, float]:
    scores = {}
    with input_path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            scores[str(row["id"])] = context_precision(row["relevance"])
    return scores


def one_run(
    data: Path, tmp: Path, *, latency: float, transport: str, bound: str, items: int
) -> dict[str, Any]:
    rate = RPM[transport] / 60.0
    limit_args = (
        ["--rpm", str(RPM[transport])]
        if bound == "requests"
        else ["--tpm", str(int(RPM[transport] * TOKENS_PER_REQUEST_GUESS))]
    )
    judge_args = [
        "--window-s",
        str(WINDOW_S),
        "--latency-s",
        str(latency),
        "--latency-p99-s",
        str(4 * latency),
        *limit_args,
    ]
    with fake_judge(*judge_args) as url:
        out = tmp / f"out-{transport}-{bound}-{latency}"
        limits = (
            {"requests_per_minute": RPM[transport]}
            if bound == "requests"
            else {"tokens_per_minute": int(RPM[transport] * TOKENS_PER_REQUEST_GUESS)}
        )
        config = base_config(
            data,
            out,
            judge=fake_judge_section(url, transport=transport, timeout_s=max(60.0, 20 * latency)),
            ray__workers=4,
        )
        config["rate_limit"] = limits
        # What `ctxprec estimate` would have said for this run, told the mean latency.
        estimated = estimate(parse_config(config), assumed_latency_s=latency).wall_time
        result = run_job(config, sample_workers=True)
        stats = server_stats(url)
    manifest = result["manifest"]
    fan_out = manifest["timings_s"]["fan_out"]
    span = stats["accepted_span_s"] or 1e-9
    if bound == "requests":
        used = stats["accepted"]
        allowed_per_s = RPM[transport] / 60.0
    else:
        used = stats["tokens_admitted"]
        allowed_per_s = stats["tpm"] / 60.0
    scores = pl.read_parquet(next(out.glob("scores/**/*.parquet")))
    truth = _truth(data)
    got = dict(zip(scores["query_id"].to_list(), scores["score"].to_list(), strict=True))
    lost = len(set(truth) - set(got))
    wrong = sum(1 for q, s in truth.items() if q in got and got[q] != s)
    flow = manifest.get("flow", {})
    return {
        "latency": latency,
        "transport": transport,
        "bound": bound,
        "items": items,
        "rate": rate,
        "sending": used / (span * allowed_per_s),
        "fan_out": used / (fan_out * allowed_per_s),
        "server_max_in_flight": stats["max_in_flight"],
        "budget": flow.get("budget_max"),
        "p50": flow.get("latency_p50_s"),
        "p99": flow.get("latency_p99_s"),
        "share_429": stats["rate_limited_429"] / max(1, stats["total_requests"]),
        "lost": lost,
        "wrong": wrong,
        "transport_used": manifest.get("judge", {}).get("transport"),
        "fan_out_s": fan_out,
        "to_first_request_s": stats["first_accepted_at"] - result["started_at"],
        "after_last_request_s": result["ended_at"] - stats["last_accepted_at"],
        "sending_s": span,
        "worker_peak_mib": result["worker_peak_mib"],
        "estimate_s": estimated.seconds,
    }


def bench(latencies: Sequence[float], transports: Sequence[str], seconds: float) -> str:
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for transport in transports:
            items = int(RPM[transport] / 60.0 * seconds)
            data = tmp / f"in-{transport}.jsonl"
            write_input(data, items, markers=True)
            for bound in ("requests", "tokens"):
                for latency in latencies:
                    r = one_run(
                        data, tmp, latency=latency, transport=transport, bound=bound, items=items
                    )
                    print(json.dumps(r), file=sys.stderr, flush=True)
                    rows.append(
                        f"| {r['latency']:g} s | {r['transport_used']} | {r['bound']} | "
                        f"{r['items']:,} | **{r['sending']:.1%}** | {r['fan_out']:.1%} | "
                        f"{r['server_max_in_flight']:,} | {r['budget'] or '-'} | "
                        f"{(r['p50'] or 0):.2f} / {(r['p99'] or 0):.2f} s | "
                        f"{r['share_429']:.2%} | {r['lost']} | {r['wrong']} | "
                        f"{r['worker_peak_mib']:,.0f} MiB | {r['estimate_s']:.0f} s | "
                        f"{r['fan_out_s']:.0f} s | {r['fan_out_s'] / r['estimate_s'] - 1:+.0%} |"
                    )
    lines = [
        "## Keeping a provider's limit full when replies take seconds",
        "",
        header(
            "python -m bench.flow_bench --latencies "
            + " ".join(f"{x:g}" for x in latencies)
            + f" --seconds {seconds:g}"
        ),
        "",
        "Default settings with only the provider's limit set (`rate_limit.max_concurrency: "
        "auto`, 4 workers). The fake judge replies after a lognormal time (the mean in the "
        "first column, p99 = 4x the mean) and enforces its limit over a sliding 60 s window: "
        f"{RPM['http']:,} requests/min for the http transport, {RPM['litellm']:,} for litellm "
        "(litellm's CPU per request is the bottleneck above that on 2 cores), or the same rate "
        f"in tokens ({TOKENS_PER_REQUEST_GUESS} tokens a request) for the token-bound runs. "
        "'Sending' is the share of the limit used from the first to the last admitted request; "
        "'fan-out' includes Ray start-up of the workers and the run's first request, which "
        "goes alone. Budget and latency percentiles are what the run's governor settled on "
        "(manifest `flow`). Worker peak is the largest RSS of a Ray worker process. Estimate is "
        "`ctxprec estimate`'s wall time for the same config told the mean latency "
        "(`--assumed-latency`), against the run's measured fan-out (manifest "
        "`timings_s.fan_out`: the workers' start, sending, the last replies).",
        "",
        "| mean latency | transport | limit | items | limit used, sending | limit used, fan-out "
        "| max in flight | budget | latency p50 / p99 | 429s | items lost | wrong scores "
        "| worker peak | estimate | fan-out | off by |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_bench", description=__doc__)
    parser.add_argument("--latencies", type=float, nargs="+", default=[0.05, 0.5, 1.0, 3.0])
    parser.add_argument("--transports", nargs="+", default=["http", "litellm"])
    parser.add_argument("--seconds", type=float, default=60.0, help="sending time per run")
    parser.add_argument("--no-write", action="store_true", help="print, do not write the doc")
    args = parser.parse_args(argv)
    section = bench(args.latencies, args.transports, args.seconds)
    print(section)
    if not args.no_write:
        write_section("## Keeping a provider's limit full when replies take seconds", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
