"""`ctxprec estimate --config FILE --target-ci W [--run RUN]`: how many items to judge.

From the spread of a previous run's ok scores and its populations, the items a 95% interval of
half-width W needs, overall and per segment of `summary.by` (else `sample.by`), and the
`sample.per_segment` that gives every segment that many (docs/is-the-drop-real.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from jobs.core import formatting as fmt
from jobs.core.config import JobConfig
from jobs.core.formatting import Column, table
from jobs.core.stats import Moments, items_for_half_width, moments_by, t_interval
from jobs.core.storage import open_store
from jobs.tools.published_runs import PublishedRun, list_runs, load_run
from scorer_core.errors import ConfigError


def previous_run(config: JobConfig, run_id: str | None) -> PublishedRun:
    """Run `run_id`, or the latest published run under the config's output path."""
    store = open_store(config.output.path, config.output.storage_options)
    if run_id is None:
        runs = list_runs(store)
        if not runs:
            raise ConfigError(
                f"--target-ci: no published run under {store.url(store.root)} to take the "
                "spread of scores from; run once, or give --run"
            )
        run_id = runs[0].run_id
    return load_run(store, run_id)


def _row(
    by: str | None, segment: str | None, moments: Moments, population: int | None, half_width: float
) -> dict[str, Any]:
    sd = None if moments.variance is None else math.sqrt(moments.variance)
    now = t_interval(moments)
    return {
        "by": by,
        "segment": segment,
        "population": population,
        "judged": moments.n,
        "sd": sd,
        "half_width_now": now.half_width if now else None,
        "needed": None if sd is None else items_for_half_width(sd, half_width, population),
    }


def _moments(scores: pl.LazyFrame, column: str | None) -> dict[str | None, Moments]:
    """The Moments of the ok scores, per value of `column` as text (None: the whole run)."""
    keys = [pl.col(column).cast(pl.String)] if column else []
    found = moments_by(scores.filter(pl.col("status") == "ok"), "score", keys)
    return {key[0] if key else None: moments for key, moments in found.items()}


def target_ci(run: PublishedRun, half_width: float, by: Sequence[str]) -> dict[str, Any]:
    """The items a half-width of `half_width` needs, overall and per segment of `by`."""
    if not 0 < half_width < 1:
        raise ConfigError(f"--target-ci must be between 0 and 1 (a half-width), got {half_width}")
    summary = run.summary
    scores = run.scores()
    columns = [column for column in by if column in scores.collect_schema().names()]
    overall = _row(None, None, _moments(scores, None)[None], summary.population, half_width)
    segments = []
    for column in columns:
        segmented = summary.segments_by(column)
        populations = {segment.value: segment.summary.population for segment in segmented}
        found = _moments(scores, column)
        for value in sorted(found, key=lambda value: (value is None, value or "")):
            segments.append(_row(column, value, found[value], populations.get(value), half_width))
    needed = [segment["needed"] for segment in segments if segment["needed"] is not None]
    return {
        "run": run.run_id,
        "target_half_width": half_width,
        "overall": overall,
        "segments": segments,
        "per_segment": max(needed) if needed else None,
        "total": sum(needed) if needed else overall["needed"],
        "by": columns,
    }


_WIDTHS = {"population": 12, "judged": 7, "sd": 6, "± now": 6, "needed": 7}
_TARGETS = (
    Column(header="segment", align="<", width=26, limit=27),
    *(Column(header=header, width=width) for header, width in _WIDTHS.items()),
)


def format_target(result: dict[str, Any]) -> str:
    """A table of the result: per segment its spread, today's half-width and the items needed."""
    rows = [
        (
            "(whole run)" if row["by"] is None else f"{row['by']}={row['segment']}",
            fmt.integer(row["population"]),
            f"{row['judged']:,}",
            fmt.number(row["sd"], 3),
            fmt.number(row["half_width_now"], 3),
            fmt.integer(row["needed"]),
        )
        for row in [result["overall"], *result["segments"]]
    ]
    title = (
        f"items needed for a 95% interval of half-width {result['target_half_width']:g}, "
        f"from the spread of run {result['run']}:"
    )
    lines = [table(_TARGETS, rows, title=title, indent="  ")]
    if result["per_segment"] is not None:
        lines.append(
            f"sample: {{per_segment: {result['per_segment']}, by: {result['by']}}} gives every "
            f"segment at least that (at most {result['total']:,} items judged)"
        )
    else:
        lines.append(f"sample: judge at least {fmt.integer(result['overall']['needed'])} items")
    return "\n".join(lines)
