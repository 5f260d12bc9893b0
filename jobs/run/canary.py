"""The judge canary (`canary: {labels: FILE}`): labelled items the run's judge answers fresh in
every run, so that a changed judge shows as a drop of agreement (docs/is-the-drop-real.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jobs.core.config import JobConfig
from jobs.inputs.labels import LabelledItem, load_labels
from jobs.run import factory
from scorer_core.errors import InputError
from scorer_core.metrics import cohen_kappa, precision_recall_f1
from scorer_core.protocols import Judge
from scorer_core.scoring import ScoringSettings, score_item
from scorer_core.types import ScoreResult, as_verdict_flags

logger = logging.getLogger(__name__)

# The canary as a run's summary holds it (`jobs.engine.CANARY_METRICS`): name and value.
CanaryMetrics = tuple[tuple[str, float | None], ...]
_MEASURES = ("items", "kappa", "precision", "recall")


@dataclass(frozen=True, kw_only=True)
class CanaryResult:
    """The canary's agreement with its labels, as `ctxprec calibrate` reports it."""

    items: float | None = None
    kappa: float | None = None
    precision: float | None = None
    recall: float | None = None
    skipped_rows: int = 0  # invalid label rows, not judged

    def metrics(self) -> CanaryMetrics:
        """The summary's canary metrics."""
        return tuple((f"canary_{name}", getattr(self, name)) for name in _MEASURES)

    @classmethod
    def of_metrics(cls, metrics: Iterable[tuple[str, float | None]]) -> CanaryResult | None:
        """From a run summary's canary metrics; None when the run judged no canary."""
        values = dict(metrics)
        if not values:
            return None
        return cls(
            items=values.get("canary_items"),
            kappa=values.get("canary_kappa"),
            precision=values.get("canary_precision"),
            recall=values.get("canary_recall"),
        )

    def describe(self) -> str:
        kappa = "-" if self.kappa is None else f"{self.kappa:.3f}"
        skipped = f" ({self.skipped_rows} invalid row(s) skipped)" if self.skipped_rows else ""
        return f"canary: {int(self.items or 0)} labelled item(s) judged, kappa {kappa}{skipped}"


async def judge_labelled(
    config: JobConfig, items: Sequence[LabelledItem]
) -> tuple[list[ScoreResult], Judge]:
    """Judge every labelled item with `config`'s judge in this process, concurrently, no cache."""
    in_flight = factory.single_process_concurrency(config)
    judge = factory.build_judge(config, factory.local_limiter(config), max_in_flight=in_flight)
    settings = ScoringSettings(reason="none", contexts_per_call=config.judge.contexts_per_call)
    gate = asyncio.Semaphore(in_flight)

    async def one(labelled: LabelledItem) -> ScoreResult:
        async with gate:
            return await score_item(judge, labelled.item, settings)

    results = await asyncio.gather(*(one(labelled) for labelled in items))
    return list(results), judge


def agreement(
    items: Sequence[LabelledItem], results: Sequence[ScoreResult], skipped_rows: int = 0
) -> CanaryResult:
    """The canary's agreement over the items the judge scored (`ok`)."""
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
    return CanaryResult(
        items=float(scored),
        kappa=cohen_kappa(pred, gold),
        precision=prf.precision,
        recall=prf.recall,
        skipped_rows=skipped_rows,
    )


def judge_canary(config: JobConfig) -> CanaryResult | None:
    """Judge `config.canary.labels` (None without); `InputError` when no row is usable."""
    labels = config.canary.labels
    if labels is None:
        return None
    loaded = load_labels(labels, config)
    if not loaded.items:
        detail = f"; first problem: {loaded.invalid_examples[0]}" if loaded.invalid_examples else ""
        raise InputError(f"canary.labels: no usable labelled rows in {labels}{detail}")
    results, _ = asyncio.run(judge_labelled(config, loaded.items))
    return agreement(loaded.items, results, loaded.invalid)


@dataclass(frozen=True)
class CanaryCheck:
    """What the engine runs for the canary (`jobs.engine.parts.CanaryJudge`; picklable)."""

    config: JobConfig

    def judge(self) -> CanaryMetrics:
        result = judge_canary(self.config)
        if result is None:
            return ()
        logger.info(result.describe())
        return result.metrics()
