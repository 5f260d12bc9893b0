"""`ctxprec run --config FILE [--set K=V]`: the scoring job on Ray (`jobs.run.job`)."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_config_arguments


def run(args: argparse.Namespace) -> int:
    from jobs.run.job import run_command

    return run_command(args.config, args.set)


COMMAND = Command(
    "run",
    "run the scoring job on a dataset (Ray); the same as python -m jobs.context_precision",
    add_config_arguments,
    run,
)
