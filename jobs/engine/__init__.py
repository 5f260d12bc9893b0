"""The engine: a run's shards judged on Ray under one shared limit, then published as Parquet
(docs/layout.md draws it; start reading at `jobs.engine.driver.run_job`). The tools, the CLI
and `jobs.run` use only the names below, each imported from its module on first use, so that
importing a light module of the package (messages, ray_runtime) loads no Polars or pyarrow."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.engine.batch.batch_layout import BatchLayout as BatchLayout
    from jobs.engine.batch.requests import RequestLines as RequestLines
    from jobs.engine.batch.requests import custom_id as custom_id
    from jobs.engine.batch.requests import item_key as item_key
    from jobs.engine.batch.state import BatchPacker as BatchPacker
    from jobs.engine.batch.state import RoundState as RoundState
    from jobs.engine.batch_rounds import BatchesStillRunning as BatchesStillRunning
    from jobs.engine.control.budget import BudgetSettings as BudgetSettings
    from jobs.engine.control.budget import budget_settings as budget_settings
    from jobs.engine.control.limiter import LocalLimiter as LocalLimiter
    from jobs.engine.control.limiter import PacingState as PacingState
    from jobs.engine.control.limiter import pacing_for as pacing_for
    from jobs.engine.driver import RunFailed as RunFailed
    from jobs.engine.driver import RunInterrupted as RunInterrupted
    from jobs.engine.driver import RunOutcome as RunOutcome
    from jobs.engine.driver import exit_code_of as exit_code_of
    from jobs.engine.driver import print_outcome as print_outcome
    from jobs.engine.driver import run_job as run_job
    from jobs.engine.pairs.lookahead import stored_pair_keys as stored_pair_keys
    from jobs.engine.parts import CanaryJudge as CanaryJudge
    from jobs.engine.parts import Gate as Gate
    from jobs.engine.parts import JudgeMaker as JudgeMaker
    from jobs.engine.parts import RunParts as RunParts
    from jobs.engine.publish.aggregate import BANDS as BANDS
    from jobs.engine.publish.aggregate import CANARY_METRICS as CANARY_METRICS
    from jobs.engine.publish.aggregate import PositionRate as PositionRate
    from jobs.engine.publish.aggregate import RunSummary as RunSummary
    from jobs.engine.publish.aggregate import Segment as Segment
    from jobs.engine.publish.aggregate import band_range as band_range
    from jobs.engine.publish.aggregate import relevance_by_position as relevance_by_position


_EXPORTS = {
    "driver": "RunFailed RunInterrupted RunOutcome exit_code_of print_outcome run_job",
    "parts": "CanaryJudge Gate JudgeMaker RunParts",
    "batch_rounds": "BatchesStillRunning",
    "control.budget": "BudgetSettings budget_settings",
    "control.limiter": "LocalLimiter PacingState pacing_for",
    "publish.aggregate": "BANDS CANARY_METRICS PositionRate RunSummary Segment band_range "
    "relevance_by_position",
    "batch.batch_layout": "BatchLayout",
    "batch.state": "BatchPacker RoundState",
    "batch.requests": "RequestLines custom_id item_key",
    "pairs.lookahead": "stored_pair_keys",
}
_WHERE = {
    name: f"jobs.engine.{module}" for module, names in _EXPORTS.items() for name in names.split()
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
