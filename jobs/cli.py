"""`ctxprec`: the home of every user command.

ctxprec score [item.json]           score one item (see scorer_core.cli)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from jobs.config import add_run_arguments
from jobs.tools import calibrate, compare, estimate, report
from scorer_core.cli import add_score_arguments, run_score
from scorer_core.errors import CtxPrecError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxprec", description="Context precision for RAG retrieval, at scale."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    score = commands.add_parser("score", help="score one item given as JSON")
    add_score_arguments(score)
    score.set_defaults(handler=run_score)

    run = commands.add_parser("run", help="run the scoring job on a dataset (Ray)")
    add_run_arguments(run)
    run.set_defaults(handler=_run_job)

    estimate.register(commands)
    calibrate.register(commands)
    compare.register(commands)
    report.register(commands)
    return parser


def _run_job(args: argparse.Namespace) -> int:
    from jobs.engine.driver import run_command

    return run_command(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.handler(args)
    except CtxPrecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code
