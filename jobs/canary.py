"""The judge canary (`canary: {labels: FILE}`): human-labelled items judged in every run.

When a provider silently updates the judge model every score moves, and nothing in the scores
says that the judge changed rather than the retriever. The canary says it: the labelled rows
of `canary.labels` (the format `ctxprec calibrate` reads, `jobs.tools.calibrate.load_labels`)
are judged by the run's judge in the driver process, fresh in every run (calibrate's judging:
no verdict cache, reasons off), and their agreement with the labels goes into the run's
summary: `canary_items` (items the judge scored), `canary_kappa` (Cohen's kappa of the
verdicts against the labels, per context), `canary_precision`, `canary_recall`.
`ctxprec compare` fails when kappa drops more than `--max-canary-drop` between two runs.

The canary is judged before the run's items, so bad labels or a judge that cannot work stop
the run in seconds. It is judged online, also for a run in batch mode (it is small). Its
requests are paced by a limiter of this process only (the run's shared limiter is not up
yet); a canary is small (tens to hundreds of items).
"""

from __future__ import annotations

import asyncio
from typing import TextIO

from jobs.config import JobConfig
from jobs.tools import calibrate
from scorer_core.errors import InputError

CanaryMetrics = tuple[tuple[str, float | None], ...]


def judge_canary(config: JobConfig, out: TextIO | None = None) -> CanaryMetrics:
    """Judge `config.canary.labels` with the run's judge; the summary's canary metrics
    (empty without a canary). `InputError` naming the file when no row is usable."""
    labels = config.canary.labels
    if labels is None:
        return ()
    loaded = calibrate.load_labels(labels, config)
    if not loaded.items:
        detail = f"; first problem: {loaded.invalid_examples[0]}" if loaded.invalid_examples else ""
        raise InputError(f"canary.labels: no usable labelled rows in {labels}{detail}")
    results, _, _ = asyncio.run(calibrate.judge_items(config, loaded.items))
    metrics = canary_metrics(calibrate.agreement(loaded.items, results))
    if out is not None:
        values = dict(metrics)
        kappa = values["canary_kappa"]
        out.write(
            f"canary: {int(values['canary_items'] or 0)} labelled item(s) judged, kappa "
            f"{'-' if kappa is None else f'{kappa:.3f}'}"
            + (f" ({loaded.invalid} invalid row(s) skipped)" if loaded.invalid else "")
            + "\n"
        )
    return metrics


def canary_metrics(report: dict[str, object]) -> CanaryMetrics:
    """The summary's canary metrics from `calibrate.agreement`'s report."""
    items = report["items"]
    per_context = report["per_context"]
    assert isinstance(items, dict) and isinstance(per_context, dict)
    return (
        ("canary_items", float(items["ok"])),
        ("canary_kappa", per_context["cohen_kappa"]),
        ("canary_precision", per_context["precision"]),
        ("canary_recall", per_context["recall"]),
    )
