"""`ctxprec report RUN [--baseline RUN]`: one self-contained HTML page about a run
(`jobs.tools.report`)."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_output_arguments, published_root
from jobs.tools.tool_options import ReportOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id to report on")
    parser.add_argument(
        "--baseline", metavar="RUN", default=None, help="also compare with this run id"
    )
    add_output_arguments(parser)
    parser.add_argument(
        "--html",
        metavar="PATH",
        default=None,
        help="where to write the page (default <output>/reports/<run>.html)",
    )


def options(args: argparse.Namespace) -> ReportOptions:
    return ReportOptions(args.run, args.baseline, published_root(args), args.html)


def run(args: argparse.Namespace) -> int:
    from jobs.tools.report import run as report

    return report(options(args))


COMMAND = Command(
    "report", "write a self-contained HTML report of a published run", add_arguments, run
)
