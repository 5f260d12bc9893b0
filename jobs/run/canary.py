"""The judge canary (`canary: {labels: FILE}`): human-labelled items judged in every run.

When a provider silently updates the judge model every score moves, and nothing in the scores
says that the judge changed rather than the retriever. The canary says it: the labelled rows
of `canary.labels` (the format `ctxprec calibrate` reads, `jobs.inputs.labels`) are judged by
the run's judge in the driver process, fresh in every run (no verdict cache, reasons off, as
calibrate judges), and their agreement with the labels goes into the run's summary:
`canary_items` (items the judge scored), `canary_kappa` (Cohen's kappa of the verdicts against
the labels, per context, `scorer_core.metrics.cohen_kappa` as calibrate reports it),
`canary_precision`, `canary_recall`. `ctxprec compare` fails when kappa drops more than
`--max-canary-drop` between two runs.

The factory hands the engine a `CanaryCheck` (`jobs.engine.parts.RunParts.canary`); the driver
runs it before the run's items, so bad labels or a judge that cannot work stop the run in
seconds. It is judged online, also for a run in batch mode (it is small). Its requests are
paced by a limiter of this process only (the run's shared limiter is not up yet).
`judge_labelled` is calibrate's judging too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from jobs.core.config import JobConfig
from jobs.inputs.labels import LabelledItem, load_labels
from jobs.run import factory
from scorer_core.errors import InputError
from scorer_core.metrics import cohen_kappa, precision_recall_f1
from scorer_core.protocols import Judge
from scorer_core.scoring import score_item
from scorer_core.types import ScoreResult, as_verdict_flags

CanaryMetrics = tuple[tuple[str, float | None], ...]
logger = logging.getLogger(__name__)


async def judge_labelled(
    config: JobConfig, items: Sequence[LabelledItem]
) -> tuple[list[ScoreResult], Judge]:
    """Judge every labelled item with `config`'s judge in this process, concurrently (at most
    `rate_limit.max_concurrency` in flight; 64 under auto, which has no run-wide governor to
    size it in a single process), scale 1, no reasons, no cache. The results and the judge."""
    # One process plays every worker: the whole concurrency budget is this judge's.
    in_flight = factory.single_process_concurrency(config)
    judge = factory.build_judge(config, factory.local_limiter(config), max_in_flight=in_flight)
    per_call = config.judge.contexts_per_call
    gate = asyncio.Semaphore(in_flight)

    async def one(labelled: LabelledItem) -> ScoreResult:
        async with gate:
            return await score_item(
                judge, labelled.item, scale=1, reason="none", contexts_per_call=per_call
            )

    results = await asyncio.gather(*(one(i) for i in items))
    return list(results), judge


def canary_metrics(items: Sequence[LabelledItem], results: Sequence[ScoreResult]) -> CanaryMetrics:
    """The summary's canary metrics over the items the judge scored (`ok`)."""
    pred: list[bool] = []
    gold: list[bool] = []
    scored = 0
    for labelled, result in zip(items, results, strict=True):
        if result.status != "ok":
            continue
        scored += 1
        pred.extend(as_verdict_flags(result.verdicts))
        gold.extend(labelled.gold)
    prf = precision_recall_f1(pred, gold)
    return (
        ("canary_items", float(scored)),
        ("canary_kappa", cohen_kappa(pred, gold)),
        ("canary_precision", prf.precision),
        ("canary_recall", prf.recall),
    )


def judge_canary(config: JobConfig) -> CanaryMetrics:
    """Judge `config.canary.labels` with the run's judge: the summary's canary metrics (empty
    without a canary). `InputError` naming the file when no row is usable."""
    labels = config.canary.labels
    if labels is None:
        return ()
    loaded = load_labels(labels, config)
    if not loaded.items:
        detail = f"; first problem: {loaded.invalid_examples[0]}" if loaded.invalid_examples else ""
        raise InputError(f"canary.labels: no usable labelled rows in {labels}{detail}")
    results, _ = asyncio.run(judge_labelled(config, loaded.items))
    metrics = canary_metrics(loaded.items, results)
    values = dict(metrics)
    kappa = values["canary_kappa"]
    logger.info(
        f"canary: {int(values['canary_items'] or 0)} labelled item(s) judged, kappa "
        f"{'-' if kappa is None else f'{kappa:.3f}'}"
        + (f" ({loaded.invalid} invalid row(s) skipped)" if loaded.invalid else "")
    )
    return metrics


@dataclass(frozen=True)
class CanaryCheck:
    """What the engine runs for the canary (picklable, as every run part)."""

    config: JobConfig

    def judge(self) -> CanaryMetrics:
        return judge_canary(self.config)
