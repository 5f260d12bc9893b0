"""`ctxprec compare RUN_A RUN_B`: how scores moved between two runs, and whether for real
(`jobs.tools.comparison`); its gate is the exit code."""

from __future__ import annotations

import argparse

from jobs.cli.arguments import Command, add_output_arguments, published_root
from jobs.tools.tool_options import CompareOptions
from scorer_core.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="baseline run id")
    parser.add_argument("run_b", metavar="RUN_B", help="candidate run id")
    add_output_arguments(parser)
    parser.add_argument(
        "--out-table",
        metavar="PATH",
        default=None,
        help="where to write the per-query table (default <output>/comparisons/A__vs__B.parquet)",
    )
    _add_gate_arguments(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (gate, overall, segments, canary)",
    )
    parser.add_argument(
        "--by",
        action="append",
        default=None,
        metavar="COLUMN",
        help="compare per value of this carried column (repeatable; default: the columns run "
        "B's summary is segmented by, summary.by)",
    )
    parser.add_argument(
        "--min-segment-size",
        type=int,
        default=CompareOptions.min_segment_size,
        metavar="N",
        help="gate a segment only when at least N of its queries are scored ok in both runs "
        f"(default {CompareOptions.min_segment_size})",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=CompareOptions.top,
        metavar="N",
        help=f"regressions to list (default {CompareOptions.top})",
    )


def _add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """What makes `ctxprec compare` exit 1."""
    parser.add_argument(
        "--min-effect",
        type=float,
        default=None,
        metavar="X",
        help="exit 1 on a drop of the mean, overall or in a segment, that is significant "
        "(95%%, Holm-corrected across segments) and at least X "
        f"(default {CompareOptions.min_effect})",
    )
    parser.add_argument(
        "--max-mean-drop",
        type=float,
        default=None,
        metavar="X",
        help="the same as --min-effect X (its older name)",
    )
    parser.add_argument(
        "--max-canary-drop",
        type=float,
        default=CompareOptions.max_canary_drop,
        metavar="K",
        help="exit 1 when the judge canary's kappa fell by more than K: the judge changed "
        f"(default {CompareOptions.max_canary_drop})",
    )


def min_effect_of(args: argparse.Namespace) -> float:
    """--min-effect, or --max-mean-drop (its older name); the default when neither is given."""
    given = {
        name: value
        for name, value in (
            ("--min-effect", args.min_effect),
            ("--max-mean-drop", args.max_mean_drop),
        )
        if value is not None
    }
    if len(set(given.values())) > 1:
        raise ConfigError("--min-effect and --max-mean-drop are the same setting; give one")
    for name, value in given.items():
        if value < 0:
            raise ConfigError(f"{name} must be >= 0, got {value}")
    return next(iter(given.values()), CompareOptions.min_effect)


def options(args: argparse.Namespace) -> CompareOptions:
    min_effect = min_effect_of(args)
    return CompareOptions(
        args.run_a,
        args.run_b,
        published_root(args),
        out_table=args.out_table,
        min_effect=min_effect,
        max_canary_drop=args.max_canary_drop,
        as_json=args.json,
        by=tuple(args.by) if args.by else None,
        min_segment_size=args.min_segment_size,
        top=args.top,
    )


def run(args: argparse.Namespace) -> int:
    from jobs.tools.comparison import run as compare

    return compare(options(args))


COMMAND = Command(
    "compare",
    "compare two published runs; exit 1 on a significant drop or a changed judge",
    add_arguments,
    run,
)
