"""`ctxprec`: every command's parser, and the dispatch to the command.

A command that runs a tool is a row of `COMMANDS`: its name, options record (its help and
arguments, `jobs.tools.tool_options`) and tool module, imported only when the command runs.
Every command's errors and exit codes follow `scorer_core.cli.call_handler` (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jobs.cli.arguments import Command, add_config_arguments, tool_command
from jobs.core.console import configure_logging
from jobs.tools.tool_options import (
    CacheOptions,
    CalibrateOptions,
    CompareOptions,
    EstimateOptions,
    ExportOptions,
    ReportOptions,
    ShowOptions,
    StatusOptions,
)
from scorer_core.cli import add_score_arguments, call_handler, run_score


def _run_job(args: argparse.Namespace) -> int:
    from jobs.run.job import run_command
    from jobs.tools.phoenix_export import export_after_run

    return run_command(args.config, args.set, after=export_after_run)


COMMANDS: tuple[Command, ...] = (
    Command(
        name="score",
        summary="score one item given as JSON (a file, or stdin)",
        add_arguments=add_score_arguments,
        run=run_score,
    ),
    Command(
        name="run",
        summary="run the scoring job on a dataset (Ray); the same as python -m "
        "jobs.context_precision",
        add_arguments=add_config_arguments,
        run=_run_job,
    ),
    tool_command("estimate", EstimateOptions, "jobs.tools.estimation"),
    tool_command("calibrate", CalibrateOptions, "jobs.tools.calibration"),
    tool_command("compare", CompareOptions, "jobs.tools.comparison"),
    tool_command("report", ReportOptions, "jobs.tools.report"),
    tool_command("show", ShowOptions, "jobs.tools.drilldown"),
    tool_command("status", StatusOptions, "jobs.tools.run_status"),
    tool_command("cache", CacheOptions, "jobs.tools.store_maintenance"),
    tool_command("export", ExportOptions, "jobs.tools.phoenix_export"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxprec",
        description="Context precision for RAG retrieval, at scale.",
        epilog="exit codes: 0 success, 1 the command failed, 2 bad usage, configuration or "
        "input, 3 `score` produced no score; `run` also exits 1 when the run is published but "
        "its errors exceed run.max_error_rate (docs/exit-codes.md)",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = subcommands.add_parser(
            command.name, help=command.summary, description=command.summary
        )
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `ctxprec` command.

    Args:
        argv: the arguments after the program name (default: the process's).

    Returns:
        The exit code (docs/exit-codes.md).
    """
    args = build_parser().parse_args(argv)
    configure_logging()
    return call_handler(args.handler, args)


if __name__ == "__main__":
    sys.exit(main())
