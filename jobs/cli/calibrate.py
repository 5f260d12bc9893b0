"""`ctxprec calibrate --config FILE --labels FILE`: the configured judge against human labels
(`jobs.tools.calibration`)."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_config_arguments, config_source
from jobs.tools.tool_options import CalibrateOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--labels", required=True, help="labelled JSONL (query, contexts, ...)")
    parser.add_argument("--limit", type=int, default=None, help="judge the first N valid rows")
    parser.add_argument(
        "--min-grade",
        type=float,
        default=None,
        metavar="G",
        help="gold = relevance >= G (default: relevance_binary when present, else relevance > 0)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")


def options(args: argparse.Namespace) -> CalibrateOptions:
    return CalibrateOptions(
        config_source(args),
        args.labels,
        limit=args.limit,
        min_grade=args.min_grade,
        as_json=args.json,
    )


def run(args: argparse.Namespace) -> int:
    from jobs.tools.calibration import run as calibrate

    return calibrate(options(args))


COMMAND = Command(
    "calibrate",
    "measure the configured judge against human relevance labels",
    add_arguments,
    run,
)
