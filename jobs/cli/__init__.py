"""`ctxprec`: every user command, behind one thin parser.

    ctxprec score [ITEM.json]                     score one item (scorer_core.cli)
    ctxprec run --config FILE [--set K=V]         the scoring job on Ray (jobs.run.job ->
    jobs.engine)
    ctxprec estimate --config FILE                items, calls, tokens, cost, time of a run
    ctxprec calibrate --config FILE --labels F    the configured judge against human labels
    ctxprec compare RUN_A RUN_B                   how scores moved between two runs, and if for real
    ctxprec report RUN [--baseline RUN]           one self-contained HTML page about a run
    ctxprec status RUN                            where a run stands: shards, batches, counts
    ctxprec cache compact --config FILE           the verdict store merged, expired verdicts gone

Every command's options are defined in this module, and this module imports nothing heavy:
`ctxprec --help`, `ctxprec <command> --help` and `ctxprec score` never load Polars, pyarrow,
fsspec, litellm or Ray. A command's own module (its `handler` below) is imported only when
that command runs. Errors and exit codes follow one policy for every command:
scorer_core.cli.call_handler (0 success, 1 failed, 2 bad usage/config/input, 3 no score).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jobs.core.console import configure_logging
from scorer_core.cli import add_score_arguments, call_handler

# The options' defaults. `jobs.tools.estimation.estimate()`, called as a library, has the first
# two as defaults of its own (this module must not import it); tests/unit/test_cli.py checks
# that they agree.
DEFAULT_SAMPLE = 2000
DEFAULT_ASSUMED_LATENCY_S = 2.0
DEFAULT_OUTPUT = "results/"
DEFAULT_MIN_EFFECT = 0.01
DEFAULT_MAX_CANARY_DROP = 0.1
DEFAULT_MIN_SEGMENT_SIZE = 30
DEFAULT_TOP = 10


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
    parser.add_argument(
        "--output",
        default=DEFAULT_OUTPUT,
        metavar="PATH",
        help=f"output root the runs were published to (default {DEFAULT_OUTPUT}; s3://... works)",
    )
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="fsspec storage option, value parsed as YAML (repeatable; dotted keys nest, "
        "e.g. client_kwargs.region_name=us-east-1)",
    )


def add_estimate_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--sample",
        type=int,
        default=DEFAULT_SAMPLE,
        help=f"items whose prompts are tokenized exactly (default {DEFAULT_SAMPLE})",
    )
    parser.add_argument(
        "--assumed-latency",
        type=float,
        default=DEFAULT_ASSUMED_LATENCY_S,
        metavar="SECONDS",
        help="per-request latency assumed when no rate limit bounds the run "
        f"(default {DEFAULT_ASSUMED_LATENCY_S:g})",
    )
    parser.add_argument(
        "--target-ci",
        type=float,
        default=None,
        metavar="W",
        help="instead: how many items per segment a 95%% interval of half-width W needs, from "
        "the spread of a previous run's scores (sample.per_segment)",
    )
    parser.add_argument(
        "--run",
        default=None,
        metavar="RUN",
        help="with --target-ci: the run to take the spread from (default: the latest published "
        "under output.path)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--labels", required=True, help="labelled JSONL (query, contexts, ...)")
    parser.add_argument("--limit", type=int, default=None, help="judge the first N valid rows")
    parser.add_argument(
        "--min-grade",
        type=float,
        default=None,
        metavar="G",
        help="gold = relevance >= G (default: relevance_binary when present, else relevance > 0)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """`ctxprec compare`'s gate: what makes it exit 1."""
    parser.add_argument(
        "--min-effect",
        type=float,
        default=None,
        metavar="X",
        help="exit 1 on a drop of the mean, overall or in a segment, that is significant "
        f"(95%%, Holm-corrected across segments) and at least X (default {DEFAULT_MIN_EFFECT})",
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
        default=DEFAULT_MAX_CANARY_DROP,
        metavar="K",
        help="exit 1 when the judge canary's kappa fell by more than K: the judge changed "
        f"(default {DEFAULT_MAX_CANARY_DROP})",
    )


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="baseline run id")
    parser.add_argument("run_b", metavar="RUN_B", help="candidate run id")
    add_output_arguments(parser)
    parser.add_argument(
        "--out-table",
        metavar="PATH",
        default=None,
        help="where to write the per-query table (default <output>/comparisons/A__vs__B.parquet)",
    )
    add_gate_arguments(parser)
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
        default=DEFAULT_MIN_SEGMENT_SIZE,
        metavar="N",
        help="gate a segment only when at least N of its queries are scored ok in both runs "
        f"(default {DEFAULT_MIN_SEGMENT_SIZE})",
    )
    parser.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"regressions to list (default {DEFAULT_TOP})",
    )


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
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


def add_cache_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=["compact"],
        help="compact: fold the journal, merge each partition's files, drop verdicts older "
        "than cache.max_age_days and duplicates",
    )
    add_config_arguments(parser)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id (published, running or stopped)")
    add_output_arguments(parser)


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    # "module:function", imported only when the command runs; the function takes the parsed
    # arguments and returns the exit code.
    handler: str


COMMANDS = (
    Command(
        "score",
        "score one item given as JSON (a file, or stdin)",
        add_score_arguments,
        "scorer_core.cli:run_score",
    ),
    Command(
        "run",
        "run the scoring job on a dataset (Ray); the same as python -m jobs.context_precision",
        add_config_arguments,
        "jobs.run.job:run_command",
    ),
    Command(
        "estimate",
        "count items, judge calls, tokens, cost and time of a run, without running it",
        add_estimate_arguments,
        "jobs.tools.estimation:run",
    ),
    Command(
        "calibrate",
        "measure the configured judge against human relevance labels",
        add_calibrate_arguments,
        "jobs.tools.calibration:run",
    ),
    Command(
        "compare",
        "compare two published runs; exit 1 on a significant drop or a changed judge",
        add_compare_arguments,
        "jobs.tools.comparison:run",
    ),
    Command(
        "report",
        "write a self-contained HTML report of a published run",
        add_report_arguments,
        "jobs.tools.report:run",
    ),
    Command(
        "status",
        "where a run stands: shards staged, batches and their counts (asks no judge)",
        add_status_arguments,
        "jobs.tools.run_status:run",
    ),
    Command(
        "cache",
        "compact the verdict store: merge small files, drop expired and duplicate verdicts",
        add_cache_arguments,
        "jobs.tools.store_maintenance:run",
    ),
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
        sub.set_defaults(handler=command.handler)
    return parser


def load_handler(spec: str) -> Callable[[argparse.Namespace], int]:
    """The function named by a `Command.handler` ("module:function"), importing its module."""
    module, _, name = spec.partition(":")
    handler: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), name)
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging()
    return call_handler(load_handler(args.handler), args)


if __name__ == "__main__":
    sys.exit(main())
