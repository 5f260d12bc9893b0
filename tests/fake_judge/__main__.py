"""Run the fake judge as its own process.

    python -m tests.fake_judge --port 8011 --rpm 600 --fault-rate 0.2 --max-seconds 600

Prints the base URL (http://127.0.0.1:PORT/v1) as the first line of stdout, then serves until
SIGTERM/SIGINT or `--max-seconds` (so a forgotten server stops by itself). Final stats go to
stderr as JSON. At run time: GET /stats, GET /requests?last=N, POST /admin/reset,
POST /admin/fault_plan (FaultPlan fields as JSON), POST /admin/rpm {"rpm": N, "window_s": S},
POST /admin/refuse {"seconds": S}; the fake Batches API's POST /admin/batches/plan (BatchPlan
fields), POST /admin/batches/advance {"steps": N} or {"finish": true}, GET /admin/batches/stats.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tests.fake_judge.batches import BatchPlan
from tests.fake_judge.faults import FAULT_KINDS, FaultPlan
from tests.fake_judge.server import FakeJudgeServer, serve_until_stopped


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fake_judge",
        description="Fake OpenAI-compatible context-precision judge on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    parser.add_argument("--rpm", type=int, default=0, help="requests per window (0 = no limit)")
    parser.add_argument("--tpm", type=int, default=0, help="tokens per window (0 = no limit)")
    parser.add_argument("--window-s", type=float, default=60.0, help="rate-limit window")
    parser.add_argument("--no-retry-after", action="store_true", help="429s without Retry-After")
    parser.add_argument(
        "--fault-rate", type=float, default=0.0, help="total fault probability, spread evenly"
    )
    parser.add_argument(
        "--fault-kinds",
        default=",".join(FAULT_KINDS),
        help="comma-separated kinds that --fault-rate is spread over (default: all)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help="set one fault rate explicitly (repeatable; overrides --fault-rate for KIND)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slow-s", type=float, default=30.0)
    parser.add_argument("--latency-s", type=float, default=0.0, help="mean reply latency")
    parser.add_argument(
        "--latency-p99-s",
        type=float,
        default=0.0,
        help="99th percentile latency: replies take a lognormal time with this tail",
    )
    parser.add_argument("--latency-jitter-s", type=float, default=0.0)
    parser.add_argument("--require-api-key", default=None)
    parser.add_argument("--max-logged-requests", type=int, default=1000)
    parser.add_argument(
        "--batch-steps-per-retrieve",
        type=int,
        default=0,
        help="fake batches move this many states each time a client retrieves them "
        "(0: only POST /admin/batches/advance moves them)",
    )
    parser.add_argument(
        "--batch-in-progress-steps",
        type=int,
        default=1,
        help="steps a fake batch stays in_progress (answering an even share each)",
    )
    parser.add_argument(
        "--prompt-cache",
        choices=("openai", "anthropic"),
        default=None,
        help="report a prompt cache in this provider's usage keys (default: none)",
    )
    parser.add_argument(
        "--cache-min-tokens", type=int, default=1024, help="the prompt cache's minimum prefix"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=1800.0, help="exit after this long (default 30 min)"
    )
    return parser.parse_args(argv)


def _plan_from_args(args: argparse.Namespace) -> FaultPlan:
    kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
    rates: dict[str, Any] = {}
    if args.fault_rate:
        rates.update(FaultPlan.mixed(args.fault_rate, kinds=kinds).rates())
    for item in args.fault:
        kind, sep, rate = item.partition("=")
        if not sep or kind not in FAULT_KINDS:
            raise SystemExit(f"--fault expects KIND=RATE with KIND in {FAULT_KINDS}, got {item!r}")
        rates[kind] = float(rate)
    return FaultPlan(
        **rates,
        seed=args.seed,
        slow_s=args.slow_s,
        latency_s=args.latency_s,
        latency_jitter_s=args.latency_jitter_s,
        latency_p99_s=args.latency_p99_s,
    )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    plan = _plan_from_args(args)
    server = FakeJudgeServer(
        args.port,
        rpm=args.rpm,
        window_s=args.window_s,
        tpm=args.tpm,
        retry_after_header=not args.no_retry_after,
        fault_plan=plan,
        require_api_key=args.require_api_key,
        max_logged_requests=args.max_logged_requests,
        batch_plan=BatchPlan(
            steps_per_retrieve=args.batch_steps_per_retrieve,
            in_progress_steps=args.batch_in_progress_steps,
        ),
        prompt_cache=args.prompt_cache,
        cache_min_tokens=args.cache_min_tokens,
    ).start()
    try:
        serve_until_stopped(server.url, args.max_seconds)
    finally:
        stats = {**server.stats(), "batches": server.batches.stats()}
        server.stop()
        print(json.dumps(stats), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
