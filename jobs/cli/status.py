"""`ctxprec status RUN`: where a run stands (`jobs.tools.run_status`)."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_output_arguments, published_root
from jobs.tools.tool_options import StatusOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id (published, running or stopped)")
    add_output_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from jobs.tools.run_status import run as status

    return status(StatusOptions(args.run, published_root(args)))


COMMAND = Command(
    "status",
    "where a run stands: shards staged, batches and their counts (asks no judge)",
    add_arguments,
    run,
)
