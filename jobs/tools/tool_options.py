"""The typed options of the commands that run a tool: each option's default, command-line flag
and help in one place. `jobs.cli` builds a command's parser from its record and turns the parsed
arguments into one; the tool's `run` takes it. Light on purpose: importing this module loads no
Polars, fsspec or config model, so `ctxprec --help` stays instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from scorer_core.errors import ConfigError

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.core.storage import Store


EXPORT_IN_FLIGHT = 4  # the Phoenix export's requests at a time


def option(default: Any = MISSING, help: str = "", **argument: Any) -> Any:
    """A field with its argument: `help` ("{default}" is the default), `add_argument`'s keywords,
    and ours: `flag`, `positional`, `older` (an older flag) with `older_help`, `minimum`."""
    return field(default=default, metadata={"help": help, **argument})


def flag_of(name: str, metadata: Mapping[str, Any]) -> str:
    """The flag of a field's argument: its `flag`, else --the-field-name."""
    return str(metadata.get("flag") or "--" + name.replace("_", "-"))


def check_minimum(flag: str, value: Any, minimum: float | None) -> None:
    if minimum is not None and value is not None and value < minimum:
        raise ConfigError(f"{flag} must be >= {minimum}, got {value}")


def _json(help: str = "print a JSON object") -> Any:
    return option(False, help, flag="--json", action="store_true")


@dataclass(frozen=True)
class PublishedRoot:
    """Where published runs are (a folder or any fsspec URL) and its storage options."""

    output: str = "results/"
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def store(self) -> Store:
        from jobs.core.storage import open_store

        return open_store(self.output, dict(self.storage_options))


@dataclass(frozen=True)
class ConfigSource:
    """A job config file and its `--set KEY=VALUE` overrides; --config and --set."""

    path: str
    overrides: tuple[str, ...] = ()

    def load(self) -> JobConfig:
        from jobs.core.config import load_config

        return load_config(self.path, list(self.overrides))


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    summary: ClassVar[str] = (
        "compare two published runs; exit 1 on a significant drop or a changed judge"
    )
    run_a: str = option(help="baseline run id", positional=True, metavar="RUN_A")
    run_b: str = option(help="candidate run id", positional=True, metavar="RUN_B")
    root: PublishedRoot = field(default_factory=PublishedRoot)
    out_table: str | None = option(
        None,
        "where to write the per-query table (default <output>/comparisons/A__vs__B.parquet)",
        metavar="PATH",
    )
    min_effect: float = option(
        0.01,
        "exit 1 on a drop of the mean, overall or in a segment, that is significant "
        "(95%%, Holm-corrected across segments) and at least X (default {default})",
        type=float,
        metavar="X",
        older="--max-mean-drop",
        older_help="the same as --min-effect X (its older name)",
        minimum=0,
    )
    max_canary_drop: float = option(
        0.1,
        "exit 1 when the judge canary's kappa fell by more than K: the judge changed "
        "(default {default})",
        type=float,
        metavar="K",
        minimum=0,
    )
    as_json: bool = _json("print one JSON object (gate, overall, segments, canary)")
    by: tuple[str, ...] | None = option(
        None,
        "compare per value of this carried column (repeatable; default: the columns run B's "
        "summary is segmented by, summary.by)",
        action="append",
        metavar="COLUMN",
    )
    min_segment_size: int = option(
        30,
        "gate a segment only when at least N of its queries are scored ok in both runs "
        "(default {default})",
        type=int,
        metavar="N",
        minimum=1,
    )
    top: int = option(
        10, "regressions to list (default {default})", type=int, metavar="N", minimum=0
    )

    def __post_init__(self) -> None:
        for declared in fields(self):
            flag = flag_of(declared.name, declared.metadata)
            check_minimum(flag, getattr(self, declared.name), declared.metadata.get("minimum"))


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    summary: ClassVar[str] = "write a self-contained HTML report of a published run"
    run: str = option(help="run id to report on", positional=True, metavar="RUN")
    baseline: str | None = option(None, "also compare with this run id", metavar="RUN")
    root: PublishedRoot = field(default_factory=PublishedRoot)
    html: str | None = option(
        None, "where to write the page (default <output>/reports/<run>.html)", metavar="PATH"
    )


@dataclass(frozen=True, kw_only=True)
class ShowOptions:
    summary: ClassVar[str] = (
        "one query as the judge saw it: passages, verdicts, reasons; with --baseline beside "
        "another run's, changes marked"
    )
    run: str = option(help="run id", positional=True, metavar="RUN")
    query_id: str = option(help="the query's query_id", positional=True, metavar="QUERY_ID")
    baseline: str | None = option(
        None,
        "the baseline run: show its position and verdict beside each passage, and mark the "
        "passages moved, flipped, added or removed since it",
        metavar="RUN",
    )
    root: PublishedRoot = field(default_factory=PublishedRoot)
    as_json: bool = _json("print one JSON object (texts whole)")


@dataclass(frozen=True)
class StatusOptions:
    summary: ClassVar[str] = (
        "where a run stands: shards staged, batches and their counts (asks no judge)"
    )
    run: str = option(help="run id (published, running or stopped)", positional=True, metavar="RUN")
    root: PublishedRoot = field(default_factory=PublishedRoot)


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    summary: ClassVar[str] = (
        "count items, judge calls, tokens, cost and time of a run, without running it"
    )
    config: ConfigSource
    sample: int = option(
        2000, "items whose prompts are tokenized exactly (default {default})", type=int
    )
    assumed_latency_s: float = option(
        2.0,
        "per-request latency assumed when no rate limit bounds the run (default {default:g})",
        flag="--assumed-latency",
        type=float,
        metavar="SECONDS",
    )
    target_ci: float | None = option(
        None,
        "instead: how many items per segment a 95%% interval of half-width W needs, from the "
        "spread of a previous run's scores (sample.per_segment)",
        type=float,
        metavar="W",
    )
    run: str | None = option(
        None,
        "with --target-ci: the run to take the spread from (default: the latest published "
        "under output.path)",
        metavar="RUN",
    )
    as_json: bool = _json()


@dataclass(frozen=True, kw_only=True)
class CalibrateOptions:
    summary: ClassVar[str] = "measure the configured judge against human relevance labels"
    config: ConfigSource
    labels: str = option(help="labelled JSONL (query, contexts, ...)", required=True)
    limit: int | None = option(None, "judge the first N valid rows", type=int)
    min_grade: float | None = option(
        None,
        "gold = relevance >= G (default: relevance_binary when present, else relevance > 0)",
        type=float,
        metavar="G",
    )
    as_json: bool = _json()


@dataclass(frozen=True)
class CacheOptions:
    summary: ClassVar[str] = (
        "compact the verdict store: merge small files, drop expired and duplicate verdicts"
    )
    config: ConfigSource
    action: Literal["compact"] = option(
        "compact",
        "compact: fold the journal, merge each partition's files, drop verdicts older than "
        "cache.max_age_days and duplicates",
        positional=True,
        choices=["compact"],
    )


@dataclass(frozen=True, kw_only=True)
class ExportOptions:
    summary: ClassVar[str] = (
        "send a published run's verdicts and scores to Phoenix as annotations on their spans"
    )
    target: Literal["phoenix"] = option(
        help="where to send them: phoenix (the only target)", positional=True, choices=["phoenix"]
    )
    run: str = option(help="run id", positional=True, metavar="RUN")
    endpoint: str = option(help="Phoenix's URL, e.g. http://127.0.0.1:6006", required=True)
    project: str = option(help="the Phoenix project holding the spans", required=True)
    root: PublishedRoot = field(default_factory=PublishedRoot)
    name: str = option(
        "context_precision_relevance",
        "the document annotations' name (one per verdict); the span annotations' (one per "
        "score) is it without _relevance, else it with _precision added (default {default}, "
        "so context_precision)",
    )
    span_id_column: str = option(
        "query_id",
        "the column holding the span id, in the scores and verdicts (default {default}: the "
        "span id for OTLP and Phoenix inputs; for other inputs a column carried into both "
        "tables, input.carry and input.carry_to_verdicts)",
        metavar="COLUMN",
    )
    batch_size: int = option(
        500,
        f"annotations per request to Phoenix (default {{default}}; {EXPORT_IN_FLIGHT} requests "
        "at a time)",
        type=int,
        metavar="N",
        minimum=1,
    )
    api_key_env: str = option(
        "PHOENIX_API_KEY",
        "NAME of the environment variable holding Phoenix's API key, sent as a bearer token, "
        "never the key itself (default {default})",
        metavar="NAME",
    )
    as_json: bool = _json("print one JSON object (the counts)")
