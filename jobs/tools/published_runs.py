"""Finding and loading published runs under an output root (a folder or any fsspec URL), and
writing a command's file beside them.

A run whose scores file exists is complete (publishing writes `scores/` last, docs/output.md):

    run = load_run(open_store("results/"), "20261130-1a2b3c4d")
    run.scores().filter(pl.col("status") == "ok").collect()     # lazy frames
    run.summary.mean, run.seconds, run.manifest.judge_model     # the typed RunManifest
"""

from __future__ import annotations

import datetime as dt
import os
import posixpath
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from jobs.core.config import RUN_ID_PATTERN
from jobs.core.formatting import optional_float
from jobs.core.run_layout import RunLocation, published_glob, run_of
from jobs.core.run_manifest import RunManifest, read_manifest
from jobs.core.storage import Store, open_store, scan
from jobs.engine import BANDS, CANARY_METRICS, PositionRate, RunResponseFormat, RunSummary, Segment
from scorer_core.errors import ConfigError, CtxPrecError

_MAX_LISTED_IDS = 30

LEGACY_BAND_LABELS: dict[str, str] = {
    "0": "none",
    "0.1-0.3": "low",
    "0.4-0.6": "moderate",
    "0.7-0.8": "good",
    "0.9-1.0": "excellent",
}
"""The labels of the same bands in summary tables published before the bands had names."""

# The summary's own scalar metrics (`RunSummary.metric_rows`); every other metric row without
# band or position is one of the run's flow metrics (`RunSummary.flow`: in-flight budget,
# latencies), read in published order.
_OWN_SCALARS = frozenset(
    {
        "scale",
        "items",
        "scored",
        "unscored",
        "errors",
        "mean",
        "median",
        "p10",
        "p90",
        "judge_calls",
        "prompt_tokens",
        "completion_tokens",
        "cache_hits",
        "cost_usd",
        # since the 95% intervals, sampled runs and the judge canary (issue 20)
        "population",
        "mean_ci_low",
        "mean_ci_high",
        *CANARY_METRICS,
    }
)


class RunNotFound(ConfigError):
    """No published run with the asked id under the output root (a wrong argument: exit 2)."""


@dataclass(frozen=True)
class PublishedRun:
    """One published run: where it is, its manifest (None: a run published before runs had
    one), and lazy scans of its tables."""

    store: Store
    location: RunLocation
    manifest: RunManifest | None = None

    @property
    def run_id(self) -> str:
        return self.location.run_id

    @property
    def run_date(self) -> dt.date:
        return self.location.run_date

    @property
    def judge_model(self) -> str:
        recorded = self.manifest.judge_model if self.manifest is not None else ""
        return recorded or self.summary.model

    def path(self, table: str) -> str:
        """The filesystem path of `table` (one of `jobs.core.run_layout.TABLES`) of this run."""
        return self.store.join(self.location.table_file(table))

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy scan of one of the run's tables (without the hive partition columns)."""
        return scan(self.store, [self.path(table)])

    def read(self, table: str) -> pl.DataFrame:
        """One of the run's tables, eagerly."""
        return self.scan(table).collect()

    def scores(self) -> pl.LazyFrame:
        return self.scan("scores")

    def verdicts(self) -> pl.LazyFrame:
        return self.scan("verdicts")

    @property
    def summary(self) -> RunSummary:
        """The run summary, rebuilt from the published summary table (read once)."""
        cached: RunSummary | None = self.__dict__.get("_summary")
        if cached is None:
            cached = summary_from_frame(self.read("summary"))
            object.__setattr__(self, "_summary", cached)
        return cached

    @property
    def response_format(self) -> RunResponseFormat | None:
        """The structured-output form the run's judge settled on, from the manifest's
        `judge.response_format` (None for the offline judge, or a run that recorded none)."""
        recorded = self.manifest.judge.response_format if self.manifest is not None else None
        return RunResponseFormat.from_dict(recorded.model_dump()) if recorded else None

    @property
    def seconds(self) -> float | None:
        """Wall-clock seconds of the run, from the manifest (None when unknown)."""
        if self.manifest is None or "seconds" not in self.manifest.model_fields_set:
            return None
        return self.manifest.seconds


# --------------------------------------------------------------------------------------------
# locating runs


def list_runs(store: Store) -> list[RunLocation]:
    """Every published run under the store's root (one with a scores file), latest date first."""
    found = {run for path in store.list(store.join("scores")) if (run := run_of(path))}
    return sorted(found, key=lambda run: (run.run_date, run.run_id), reverse=True)


def _available_ids(store: Store) -> str:
    ids = list(dict.fromkeys(location.run_id for location in list_runs(store)))
    if not ids:
        return "no published runs there"
    shown = ", ".join(ids[:_MAX_LISTED_IDS])
    more = len(ids) - _MAX_LISTED_IDS
    suffix = f" and {more} more" if more > 0 else ""
    return f"available run ids (latest run date first): {shown}{suffix}"


def find_run(store: Store, run_id: str, run_date: dt.date | None = None) -> RunLocation:
    """Where run `run_id` is published; the newest date when the id was used on several days.

    Raises `RunNotFound` naming the id and the root, listing the ids that do exist.
    """
    root = store.url(store.root)
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise RunNotFound(
            f"run {run_id!r} not found under {root}: not a valid run id; {_available_ids(store)}"
        )
    day = run_date.isoformat() if run_date else "*"
    pattern = store.join(published_glob("scores", run_id, day))
    dates = sorted(
        {
            run.run_date
            for path in store.list(pattern)
            if (run := run_of(path)) is not None and run.run_id == run_id
        }
    )
    if not dates:
        when = f" on {run_date.isoformat()}" if run_date else ""
        raise RunNotFound(
            f"run {run_id!r}{when} not found under {root} (no scores/run_date=*/run_id={run_id}/)"
            f"; {_available_ids(store)}"
        )
    return RunLocation(run_id=run_id, run_date=dates[-1])


def load_run(store: Store, run_id: str, run_date: dt.date | None = None) -> PublishedRun:
    """Locate run `run_id` in `store` and read its manifest; tables are scanned lazily."""
    location = find_run(store, run_id, run_date)
    return PublishedRun(store=store, location=location, manifest=read_manifest(store, location))


# --------------------------------------------------------------------------------------------
# the summary table back into a RunSummary


def summary_from_frame(frame: pl.DataFrame) -> RunSummary:
    """Rebuild the `RunSummary` from its published tidy table (`RunSummary.to_frame`), its
    segments too. A table published before segments existed has no segment columns."""
    if frame.is_empty():
        raise CtxPrecError("the run's summary table is empty")
    model = str(frame["model"][0])
    if "segment_by" not in frame.columns:
        return _summary_from_rows(frame, model)
    overall = _summary_from_rows(frame.filter(pl.col("segment_by").is_null()), model)
    rows = frame.filter(pl.col("segment_by").is_not_null())
    keys = rows.select("segment_by", "segment").unique(maintain_order=True)
    segments = tuple(
        Segment(
            by=str(by),
            value=value,
            summary=_summary_from_rows(
                rows.filter(
                    (pl.col("segment_by") == by)
                    & (pl.col("segment").is_null() if value is None else pl.col("segment") == value)
                ),
                model,
            ),
        )
        for by, value in keys.iter_rows()
    )
    return replace(overall, segments=segments)


def _summary_from_rows(frame: pl.DataFrame, model: str) -> RunSummary:
    """The summary of one set of metric rows (the whole run's, or one segment's)."""
    scalars = {
        str(row["metric"]): optional_float(row["value"])
        for row in frame.filter(pl.col("band").is_null() & pl.col("position").is_null()).iter_rows(
            named=True
        )
    }
    band_counts: dict[str, int] = {}
    for row in frame.filter(pl.col("metric") == "band_count").iter_rows(named=True):
        # Summaries published before the bands had names label them "0", "0.1-0.3", ...
        label = LEGACY_BAND_LABELS.get(str(row["band"]), str(row["band"]))
        band_counts[label] = band_counts.get(label, 0) + int(optional_float(row["value"]) or 0)
    known = [label for label, _, _ in BANDS]
    labels = [b for b in known if b in band_counts] + [b for b in band_counts if b not in known]
    positions = frame.filter(pl.col("position").is_not_null())
    if not positions.is_empty():
        positions = positions.pivot(
            on="metric", index="position", values="value", aggregate_function="first"
        ).sort("position")

    def count(name: str) -> int:
        return int(scalars.get(name) or 0)

    return RunSummary(
        model=model,
        scale=scalars.get("scale") or 0.0,
        items=count("items"),
        scored=count("scored"),
        unscored=count("unscored"),
        errors=count("errors"),
        mean=scalars.get("mean"),
        median=scalars.get("median"),
        p10=scalars.get("p10"),
        p90=scalars.get("p90"),
        mean_ci_low=scalars.get("mean_ci_low"),
        mean_ci_high=scalars.get("mean_ci_high"),
        # A run published before populations were recorded judged every item.
        population=count("population") if "population" in scalars else count("items"),
        canary=tuple((name, scalars[name]) for name in CANARY_METRICS if name in scalars),
        bands=tuple((label, band_counts.get(label, 0)) for label in labels),
        position_rates=tuple(
            PositionRate(
                position=int(row["position"]),
                judged=int(optional_float(row.get("position_judged")) or 0),
                relevant=int(optional_float(row.get("position_relevant")) or 0),
                rate=optional_float(row.get("position_rate")) or 0.0,
            )
            for row in positions.iter_rows(named=True)
        ),
        judge_calls=count("judge_calls"),
        prompt_tokens=count("prompt_tokens"),
        completion_tokens=count("completion_tokens"),
        cache_hits=count("cache_hits"),
        cost_usd=scalars.get("cost_usd"),
        flow=tuple((name, value) for name, value in scalars.items() if name not in _OWN_SCALARS),
    )


# --------------------------------------------------------------------------------------------
# a command's file


def resolve_target(
    store: Store, path: str | None, default: str, storage_options: Mapping[str, Any]
) -> tuple[Store, str]:
    """Where to write a command's file: `path` (any local path or URL, opened with
    `storage_options`) or, when `path` is None, `default` under the store's root.
    Returns (store, filesystem path in it)."""
    if path is None:
        return store, store.join(default)
    parent, name = posixpath.split(path)
    if not name:
        raise ConfigError(f"{path}: expected a file path, not a folder")
    target_store = open_store(parent or ".", dict(storage_options))
    return target_store, target_store.join(name)


def write_file(
    store: Store, path: str | None, default: str, data: bytes, storage_options: Mapping[str, Any]
) -> str:
    """Write `data` all-or-nothing to `resolve_target(...)`; returns the written URL."""
    target_store, target = resolve_target(store, path, default, storage_options)
    target_store.write_bytes_atomic(target, data)
    return target_store.url(target)


def write_parquet_file(
    store: Store,
    path: str | None,
    default: str,
    frame: pl.DataFrame,
    storage_options: Mapping[str, Any],
) -> str:
    """Write `frame` as zstd Parquet, all-or-nothing, to `resolve_target(...)` (through a local
    temp file and `Store.upload_file_atomic`); returns the written URL."""
    target_store, target = resolve_target(store, path, default, storage_options)
    with tempfile.TemporaryDirectory(prefix="ctxprec-runs-") as tmp:
        local = os.path.join(tmp, "table.parquet")
        frame.write_parquet(local, compression="zstd")
        target_store.upload_file_atomic(local, target)
    return target_store.url(target)
