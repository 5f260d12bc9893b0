"""Finding and loading published runs under an output root (a folder or any fsspec URL), and
writing a command's file beside them. A run whose scores file exists is complete (docs/output.md):

    run = load_run(open_store("results/"), "20261130-1a2b3c4d")
    run.scores().filter(pl.col("status") == "ok").collect()     # lazy frames
    run.summary.mean, run.seconds, run.manifest.judge_model     # the typed RunManifest
"""

from __future__ import annotations

import datetime as dt
import io
import posixpath
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import polars as pl

from jobs.core.config import RUN_ID_PATTERN
from jobs.core.run_layout import RunLocation, published_glob, run_of
from jobs.core.run_manifest import ResponseFormatRecord, RunManifest, read_manifest
from jobs.core.storage import Store, open_store, scan
from jobs.engine import BANDS, CANARY_METRICS, PositionRate, RunSummary, Segment
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

# `RunSummary`'s fields published as scalar metric rows (`RunSummary.metric_rows`): the values
# that may be null, the counts; every other scalar metric row is a flow metric (`flow`).
_VALUES = ("mean", "median", "p10", "p90", "mean_ci_low", "mean_ci_high", "cost_usd")
_NOT_COUNTS = {"model", "scale", "bands", "position_rates", "flow", "segments", "canary", *_VALUES}
_COUNTS = tuple(field.name for field in fields(RunSummary) if field.name not in _NOT_COUNTS)
_OWN_SCALARS = frozenset({"scale", *_COUNTS, *_VALUES, *CANARY_METRICS})


class RunNotFound(ConfigError):
    """No published run with the asked id under the output root (a wrong argument: exit 2)."""


@dataclass(frozen=True)
class PublishedRun:
    """One published run: where it is, its manifest (None: published before manifests)."""

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

    @property
    def judge_endpoint(self) -> str:
        """The run's judge.api_base without user, password or query (keys hide there); or ""."""
        judge = self.manifest.config.get("judge", {}) if self.manifest is not None else {}
        parts = urlsplit(str(judge.get("api_base") or ""))
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=host, query="", fragment=""))

    @property
    def prompt_version(self) -> str:
        return self.manifest.prompt_version if self.manifest is not None else ""

    def scan(self, table: str) -> pl.LazyFrame:
        return scan(self.store, [self.store.join(self.location.table_file(table))])

    def read(self, table: str) -> pl.DataFrame:
        return self.scan(table).collect()

    def scores(self) -> pl.LazyFrame:
        return self.scan("scores")

    def verdicts(self) -> pl.LazyFrame:
        return self.scan("verdicts")

    @cached_property
    def summary(self) -> RunSummary:
        return summary_from_frame(self.read("summary"))

    @property
    def response_format(self) -> ResponseFormatRecord | None:
        """The structured-output form the run's judge settled on, as the manifest recorded it."""
        return self.manifest.judge.response_format if self.manifest is not None else None

    @property
    def seconds(self) -> float | None:
        if self.manifest is None or "seconds" not in self.manifest.model_fields_set:
            return None
        return self.manifest.seconds


def list_runs(store: Store) -> list[RunLocation]:
    """Every published run under the store's root (one with a scores file), latest date first."""
    found = {run_of(path) for path in store.list(store.join("scores"))}
    runs = [run for run in found if run is not None]  # paths of a run's scores file
    return sorted(runs, key=lambda run: (run.run_date, run.run_id), reverse=True)


def _available_ids(store: Store) -> str:
    ids = list(dict.fromkeys(location.run_id for location in list_runs(store)))
    if not ids:
        return "no published runs there"
    more = len(ids) - _MAX_LISTED_IDS
    suffix = f" and {more} more" if more > 0 else ""
    return f"available run ids (latest run date first): {', '.join(ids[:_MAX_LISTED_IDS])}{suffix}"


def find_run(store: Store, run_id: str) -> RunLocation:
    """Where run `run_id` is published (its newest date); `RunNotFound` lists the ids there."""
    root = store.url(store.root)
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise RunNotFound(
            f"run {run_id!r} not found under {root}: not a valid run id; {_available_ids(store)}"
        )
    pattern = store.join(published_glob("scores", run_id))
    located = [run_of(path) for path in store.list(pattern)]
    runs = [run for run in located if run is not None and run.run_id == run_id]
    if not runs:
        raise RunNotFound(
            f"run {run_id!r} not found under {root} (no scores/run_date=*/run_id={run_id}/)"
            f"; {_available_ids(store)}"
        )
    return RunLocation(run_id=run_id, run_date=max(run.run_date for run in runs))


def load_run(store: Store, run_id: str) -> PublishedRun:
    """Locate run `run_id` in `store` and read its manifest; tables are scanned lazily."""
    location = find_run(store, run_id)
    return PublishedRun(store=store, location=location, manifest=read_manifest(store, location))


def summary_from_frame(frame: pl.DataFrame) -> RunSummary:
    """The `RunSummary` back from its published table (`RunSummary.to_frame`), segments too."""
    if frame.is_empty():
        raise CtxPrecError("the run's summary table is empty")
    model = str(frame["model"][0])
    frame = frame.with_columns(pl.col("value").fill_nan(None))
    if "segment_by" not in frame.columns:
        return _summary_from_rows(frame, model)
    segmented = frame.filter(pl.col("segment_by").is_not_null())
    groups = segmented.group_by("segment_by", "segment", maintain_order=True)
    segments = tuple(
        Segment(by, value, _summary_from_rows(rows, model)) for (by, value), rows in groups
    )
    overall = _summary_from_rows(frame.filter(pl.col("segment_by").is_null()), model)
    return replace(overall, segments=segments)


def _summary_from_rows(frame: pl.DataFrame, model: str) -> RunSummary:
    is_scalar = pl.col("band").is_null() & pl.col("position").is_null()
    scalars = dict(frame.filter(is_scalar).select("metric", "value").iter_rows())
    values: dict[str, Any] = {name: scalars.get(name) for name in _VALUES}
    values |= {name: int(scalars.get(name) or 0) for name in _COUNTS}
    if "population" not in scalars:  # published before populations: every item was judged
        values["population"] = values["items"]
    return RunSummary(
        model=model,
        scale=scalars.get("scale") or 0.0,
        **values,
        canary=tuple((name, scalars[name]) for name in CANARY_METRICS if name in scalars),
        bands=_bands(frame),
        position_rates=_position_rates(frame),
        flow=tuple((name, value) for name, value in scalars.items() if name not in _OWN_SCALARS),
    )


def _position_rates(frame: pl.DataFrame) -> tuple[PositionRate, ...]:
    rows = frame.filter(pl.col("position").is_not_null())
    if rows.is_empty():
        return ()
    wide = rows.pivot(on="metric", index="position", values="value", aggregate_function="first")
    return tuple(
        PositionRate(
            position=int(row["position"]),
            judged=int(row.get("position_judged") or 0),
            relevant=int(row.get("position_relevant") or 0),
            rate=row.get("position_rate") or 0.0,
        )
        for row in wide.sort("position").iter_rows(named=True)
    )


def _bands(frame: pl.DataFrame) -> tuple[tuple[str, int], ...]:
    """Items per band, the known bands first in their order (older labels renamed)."""
    rows = frame.filter(pl.col("metric") == "band_count").select("band", "value").rows()
    counts: Counter[str] = Counter()
    for band, value in rows:
        counts[LEGACY_BAND_LABELS.get(str(band), str(band))] += int(value or 0)
    known = [label for label, _, _ in BANDS if label in counts]
    others = [band for band in counts if band not in known]
    return tuple((band, counts[band]) for band in [*known, *others])


def write_file(
    store: Store,
    path: str | None,
    default: str,
    data: bytes | pl.DataFrame,
    storage_options: Mapping[str, Any],
) -> str:
    """Write `data` (a frame as Parquet) atomically to `path`, else `default` in the store."""
    if path is not None:
        parent, name = posixpath.split(path)
        if not name:
            raise ConfigError(f"{path}: expected a file path, not a folder")
        store = open_store(parent or ".", dict(storage_options))
        default = name
    if isinstance(data, pl.DataFrame):
        sink = io.BytesIO()
        data.write_parquet(sink, compression="zstd")
        data = sink.getvalue()
    target = store.join(default)
    store.write_bytes_atomic(target, data)
    return store.url(target)
