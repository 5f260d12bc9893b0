"""The typed options of the commands that run a tool, with their defaults in one place.

`jobs.cli` turns each command's parsed arguments into one of these (and shows the defaults in
`--help` from here), and the tool's `run` takes it. Light on purpose: importing this module
loads no Polars, fsspec or config model, so `ctxprec --help` stays instant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from scorer_core.errors import ConfigError

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.core.storage import Store


@dataclass(frozen=True)
class PublishedRoot:
    """Where published runs are: an output root (a folder or any fsspec URL) and its fsspec
    storage options (dotted keys already nested)."""

    output: str = "results/"
    storage_options: Mapping[str, Any] = field(default_factory=dict)

    def store(self) -> Store:
        from jobs.core.storage import open_store

        return open_store(self.output, dict(self.storage_options))


@dataclass(frozen=True)
class ConfigSource:
    """A job config file and its `--set KEY=VALUE` overrides."""

    path: str
    overrides: tuple[str, ...] = ()

    def load(self) -> JobConfig:
        from jobs.core.config import load_config

        return load_config(self.path, list(self.overrides))


@dataclass(frozen=True)
class CompareOptions:
    """`ctxprec compare`: run A (baseline) against run B, and the gate's thresholds."""

    run_a: str
    run_b: str
    root: PublishedRoot = field(default_factory=PublishedRoot)
    out_table: str | None = None  # default <output>/comparisons/A__vs__B.parquet
    min_effect: float = 0.01
    max_canary_drop: float = 0.1
    as_json: bool = False
    by: tuple[str, ...] | None = None  # None: the columns B's summary is segmented by
    min_segment_size: int = 30
    top: int = 10

    def __post_init__(self) -> None:
        # min_effect is checked where its two names (--min-effect, --max-mean-drop) are known
        if self.max_canary_drop < 0:
            raise ConfigError(f"--max-canary-drop must be >= 0, got {self.max_canary_drop}")
        if self.top < 0:
            raise ConfigError(f"--top must be >= 0, got {self.top}")
        if self.min_segment_size < 1:
            raise ConfigError(f"--min-segment-size must be >= 1, got {self.min_segment_size}")


@dataclass(frozen=True)
class ReportOptions:
    """`ctxprec report`: the run, an optional baseline, where the page goes."""

    run: str
    baseline: str | None = None
    root: PublishedRoot = field(default_factory=PublishedRoot)
    html: str | None = None  # default <output>/reports/<run>.html


@dataclass(frozen=True)
class StatusOptions:
    """`ctxprec status`: the run to look at."""

    run: str
    root: PublishedRoot = field(default_factory=PublishedRoot)


@dataclass(frozen=True)
class EstimateOptions:
    """`ctxprec estimate`: the run's cost and time, or with `target_ci` the items a sampled
    run needs for intervals of that half-width (from run `run`'s spread)."""

    config: ConfigSource
    sample: int = 2000  # items whose prompts are tokenized exactly
    assumed_latency_s: float = 2.0  # per request, when no rate limit bounds the run
    target_ci: float | None = None
    run: str | None = None  # default: the latest published under output.path
    as_json: bool = False


@dataclass(frozen=True)
class CalibrateOptions:
    """`ctxprec calibrate`: the config's judge against the labels of `labels`."""

    config: ConfigSource
    labels: str
    limit: int | None = None
    min_grade: float | None = None
    as_json: bool = False


@dataclass(frozen=True)
class CacheOptions:
    """`ctxprec cache`: what to do with the config's verdict store."""

    config: ConfigSource
    action: Literal["compact"] = "compact"
