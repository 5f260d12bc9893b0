"""`ctxprec cache compact --config FILE`: the verdict store compacted
(`jobs.tools.store_maintenance`)."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_config_arguments, config_source
from jobs.tools.tool_options import CacheOptions


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=["compact"],
        help="compact: fold the journal, merge each partition's files, drop verdicts older "
        "than cache.max_age_days and duplicates",
    )
    add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from jobs.tools.store_maintenance import run as maintain

    return maintain(CacheOptions(config_source(args), args.action))


COMMAND = Command(
    "cache",
    "compact the verdict store: merge small files, drop expired and duplicate verdicts",
    add_arguments,
    run,
)
