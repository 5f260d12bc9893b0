"""The engine: plan shards -> run them as Ray tasks under one shared limit -> publish Parquet.

Public API (everything else in the package is the engine's own business; the tools and the
CLI import only these names, from `jobs.engine`):

    run_job(config, parts, out=...) -> RunOutcome   run or resume one scoring run end to end
    RunParts, JudgeMaker, Gate, CanaryJudge
                                  what a run is made of, handed in by jobs.run.factory
    RunOutcome, print_outcome, exit_code_of
                                  run id and date, what was published, timings; its printout
                                  and exit code (1 past run.max_error_rate)
    RunFailed                     the run could not finish (a CtxPrecError); shards already
                                  staged are kept, the same run id resumes
    BatchesStillRunning           judge.mode batch: the wait ended before the batches did
    BudgetSettings, budget_settings, LocalLimiter, PacingState
                                  flow control in one process (estimate, calibrate, score)
    RunSummary, Segment, PositionRate, BANDS, CANARY_METRICS, band_range, relevance_by_position
                                  the published summary's model (jobs.engine.publish.aggregate)
    RunResponseFormat             the structured-output form a run's judge settled on
    BatchLayout, RoundState, BatchPacker, RequestLines, custom_id, item_key
                                  batch mode's staged rounds and request lines (status,
                                  estimate)
    stored_pair_keys              the pairs of an input the verdict store holds (estimate)

Start reading at jobs.engine.driver.run_job; it calls, in order, inputs (files, schema,
shards), lease, ray_runtime, lookahead, fanout (-> worker on each Ray node, with a
coordinator actor: shard board, governor, progress; and the verdict cache), or batch's rounds,
manifest (with response_formats: the structured-output form the workers' judges settled on)
and publish (-> aggregate).

The names above are imported from their modules on first use, not here: importing a light
module of the package (ray_runtime, messages) must not import Polars, pyarrow or fsspec.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.engine.batch.batch_layout import BatchLayout
    from jobs.engine.batch.requests import RequestLines, custom_id, item_key
    from jobs.engine.batch.state import BatchPacker, RoundState
    from jobs.engine.batch_rounds import BatchesStillRunning
    from jobs.engine.control.budget import BudgetSettings, budget_settings
    from jobs.engine.control.limiter import LocalLimiter, PacingState
    from jobs.engine.driver import RunFailed, RunOutcome, exit_code_of, print_outcome, run_job
    from jobs.engine.pairs.lookahead import stored_pair_keys
    from jobs.engine.parts import CanaryJudge, Gate, JudgeMaker, RunParts
    from jobs.engine.publish.aggregate import (
        BANDS,
        CANARY_METRICS,
        PositionRate,
        RunSummary,
        Segment,
        band_range,
        relevance_by_position,
    )
    from jobs.engine.publish.response_formats import RunResponseFormat

_WHERE = {
    "run_job": "driver",
    "RunOutcome": "driver",
    "RunFailed": "driver",
    "print_outcome": "driver",
    "exit_code_of": "driver",
    "RunParts": "parts",
    "CanaryJudge": "parts",
    "JudgeMaker": "parts",
    "Gate": "parts",
    "BatchesStillRunning": "batch_rounds",
    "BudgetSettings": "control.budget",
    "budget_settings": "control.budget",
    "LocalLimiter": "control.limiter",
    "PacingState": "control.limiter",
    "RunSummary": "publish.aggregate",
    "Segment": "publish.aggregate",
    "PositionRate": "publish.aggregate",
    "BANDS": "publish.aggregate",
    "CANARY_METRICS": "publish.aggregate",
    "band_range": "publish.aggregate",
    "relevance_by_position": "publish.aggregate",
    "RunResponseFormat": "publish.response_formats",
    "BatchLayout": "batch.batch_layout",
    "RoundState": "batch.state",
    "BatchPacker": "batch.state",
    "RequestLines": "batch.requests",
    "custom_id": "batch.requests",
    "item_key": "batch.requests",
    "stored_pair_keys": "pairs.lookahead",
}

__all__ = [
    "BANDS",
    "CANARY_METRICS",
    "BatchLayout",
    "BatchPacker",
    "BatchesStillRunning",
    "BudgetSettings",
    "CanaryJudge",
    "Gate",
    "JudgeMaker",
    "LocalLimiter",
    "PacingState",
    "PositionRate",
    "RequestLines",
    "RoundState",
    "RunFailed",
    "RunOutcome",
    "RunParts",
    "RunResponseFormat",
    "RunSummary",
    "Segment",
    "band_range",
    "budget_settings",
    "custom_id",
    "exit_code_of",
    "item_key",
    "print_outcome",
    "relevance_by_position",
    "run_job",
    "stored_pair_keys",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"jobs.engine.{module}"), name)
