"""A command's arguments from its options record and back (`jobs.tools.tool_options`): one
argument per field as the field declares it, --config and --set for a `config` field, --output
and --storage-option for a `root` field; and the `Command` record every command is."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from typing import Any, TypeVar

from jobs.tools.tool_options import ConfigSource, PublishedRoot, check_minimum, flag_of
from scorer_core.errors import ConfigError

Options = TypeVar("Options")
# Keywords of `tool_options.option` that are ours, not `ArgumentParser.add_argument`'s.
_OURS = ("help", "flag", "positional", "older", "older_help", "minimum")


@dataclass(frozen=True, kw_only=True)
class Command:
    """A `ctxprec` command: its name, help, arguments, and what runs it (args in, exit code out)."""

    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def tool_command(name: str, options: Any, tool: str) -> Command:
    """The command that runs module `tool`'s `run` on its `options` record (imported when run)."""

    def run(args: argparse.Namespace) -> int:
        return int(importlib.import_module(tool).run(options_of(options, args)))

    return Command(
        name=name, summary=options.summary, add_arguments=partial(add_options, options), run=run
    )


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


def parse_storage_options(assignments: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE strings into fsspec storage options; dotted keys nest, values parsed as YAML."""
    from jobs.core.config import assign_dotted

    options: dict[str, Any] = {}
    for assignment in assignments:
        assign_dotted(options, assignment, "--storage-option", empty="")
    return options


def add_options(options: type, parser: argparse.ArgumentParser) -> None:
    """The arguments the fields of the record `options` declare, in their order."""
    for option in fields(options):
        if option.name == "config":
            add_config_arguments(parser)
            continue
        if option.name == "root":
            add_output_arguments(parser)
            continue
        declared = option.metadata
        argument = {key: value for key, value in declared.items() if key not in _OURS}
        text = declared["help"].format(default=option.default)
        if declared.get("positional"):
            parser.add_argument(option.name, help=text, **argument)
            continue
        # None when not given: the record's default then applies
        flag = flag_of(option.name, declared)
        parser.add_argument(flag, dest=option.name, default=None, help=text, **argument)
        if "older" in declared:
            older = {
                "dest": f"older_{option.name}",
                "default": None,
                "help": declared["older_help"],
            }
            parser.add_argument(declared["older"], **older, **argument)


def options_of(options: type[Options], args: argparse.Namespace) -> Options:
    """The record `options` from the parsed arguments."""
    values: dict[str, Any] = {}
    for option in fields(options):  # type: ignore[arg-type]
        if option.name == "config":
            values["config"] = ConfigSource(path=args.config, overrides=tuple(args.set))
            continue
        if option.name == "root":
            storage_options = parse_storage_options(args.storage_option)
            values["root"] = PublishedRoot(output=args.output, storage_options=storage_options)
            continue
        value = _given(option.name, option.metadata, args)
        if isinstance(value, list):  # a repeatable option's values
            value = tuple(value)
        if value is not None:  # else the record's default
            values[option.name] = value
    return options(**values)


def _given(name: str, declared: Any, args: argparse.Namespace) -> Any:
    """The field's value as given: under its flag or its older one (the same value if both)."""
    older = declared.get("older")
    if older is None:
        return getattr(args, name)
    given = {flag_of(name, declared): getattr(args, name), older: getattr(args, f"older_{name}")}
    given = {flag: value for flag, value in given.items() if value is not None}
    if len(set(given.values())) > 1:
        raise ConfigError(f"{' and '.join(given)} are the same setting; give one")
    for flag, value in given.items():
        check_minimum(flag, value, declared.get("minimum"))
    return next(iter(given.values()), None)
