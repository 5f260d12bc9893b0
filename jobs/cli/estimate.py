"""`ctxprec estimate --config FILE`: a run's items, calls, tokens, cost and time, before it runs
(`jobs.tools.estimation`), or with --target-ci the items a sampled run needs."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_config_arguments, config_source
from jobs.tools.tool_options import EstimateOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    sample, latency = EstimateOptions.sample, EstimateOptions.assumed_latency_s
    parser.add_argument(
        "--sample",
        type=int,
        default=sample,
        help=f"items whose prompts are tokenized exactly (default {sample})",
    )
    parser.add_argument(
        "--assumed-latency",
        type=float,
        default=latency,
        metavar="SECONDS",
        help=f"per-request latency assumed when no rate limit bounds the run (default {latency:g})",
    )
    parser.add_argument(
        "--target-ci",
        type=float,
        default=None,
        metavar="W",
        help="instead: how many items per segment a 95%% interval of half-width W needs, from "
        "the spread of a previous run's scores (sample.per_segment)",
    )
    parser.add_argument(
        "--run",
        default=None,
        metavar="RUN",
        help="with --target-ci: the run to take the spread from (default: the latest published "
        "under output.path)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")


def options(args: argparse.Namespace) -> EstimateOptions:
    return EstimateOptions(
        config_source(args),
        sample=args.sample,
        assumed_latency_s=args.assumed_latency,
        target_ci=args.target_ci,
        run=args.run,
        as_json=args.json,
    )


def run(args: argparse.Namespace) -> int:
    from jobs.tools.estimation import run as estimate

    return estimate(options(args))


COMMAND = Command(
    "estimate",
    "count items, judge calls, tokens, cost and time of a run, without running it",
    add_arguments,
    run,
)
