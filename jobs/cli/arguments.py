"""What the commands' parsers share: the `Command` record, and the options of every command that
reads a job config (--config, --set) or published runs (--output, --storage-option)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jobs.tools.tool_options import ConfigSource, PublishedRoot


@dataclass(frozen=True)
class Command:
    """A `ctxprec` command: its name and help, its options, and what runs it (the parsed
    arguments in, the exit code out; it imports the command's tool only when called)."""

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """--config and --set, taken by every command that reads a job config."""
    parser.add_argument("--config", required=True, help="YAML job config (see configs/)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set rate_limit.requests_per_minute=600",
    )


def config_source(args: argparse.Namespace) -> ConfigSource:
    return ConfigSource(args.config, tuple(args.set))


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """--output and --storage-option, taken by every command that reads published runs."""
    default = PublishedRoot.output
    parser.add_argument(
        "--output",
        default=default,
        metavar="PATH",
        help=f"output root the runs were published to (default {default}; s3://... works)",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option, value parsed as YAML (repeatable; dotted keys nest, "
        "e.g. client_kwargs.region_name=us-east-1)",
    )


def published_root(args: argparse.Namespace) -> PublishedRoot:
    return PublishedRoot(args.output, parse_storage_options(args.storage_option))


def parse_storage_options(assignments: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE strings into fsspec storage options; dotted keys nest, values parsed as YAML."""
    from jobs.core.config import assign_dotted

    options: dict[str, Any] = {}
    for assignment in assignments:
        assign_dotted(options, assignment, "--storage-option", empty="")
    return options
