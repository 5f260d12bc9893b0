"""`ctxprec`: the parser of every command, and the dispatch to the command's module.

Each command is a module of this package (its options, and the call of its tool); they import
nothing heavy until a command runs, so `ctxprec --help` never loads Polars, pyarrow, fsspec,
litellm or Ray. Errors and exit codes follow one policy for every command,
`scorer_core.cli.call_handler`: 0 success, 1 failed, 2 bad usage/config/input, 3 no score.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jobs.cli import cache, calibrate, compare, estimate, report, run, score, status
from jobs.cli.arguments import Command
from jobs.core.console import configure_logging
from scorer_core.cli import call_handler

COMMANDS: tuple[Command, ...] = tuple(
    module.COMMAND for module in (score, run, estimate, calibrate, compare, report, status, cache)
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
