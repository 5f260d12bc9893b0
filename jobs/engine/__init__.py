"""The engine: a run's shards judged on Ray under one shared limit, then published as Parquet
(docs/layout.md draws it; start reading at `jobs.engine.driver.run_job`). The tools, the CLI
and `jobs.run` use only the names below, each imported from its module on first use, so that
importing a light module of the package (messages, ray_runtime) loads no Polars or pyarrow."""

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
    from jobs.engine.driver import (
        RunFailed,
        RunInterrupted,
        RunOutcome,
        exit_code_of,
        print_outcome,
        run_job,
    )
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

# where each public name lives, by module of the package
_WHERE = {
    "driver": (
        "RunFailed",
        "RunInterrupted",
        "RunOutcome",
        "exit_code_of",
        "print_outcome",
        "run_job",
    ),
    "parts": ("CanaryJudge", "Gate", "JudgeMaker", "RunParts"),
    "batch_rounds": ("BatchesStillRunning",),
    "control.budget": ("BudgetSettings", "budget_settings"),
    "control.limiter": ("LocalLimiter", "PacingState"),
    "publish.aggregate": (
        *("BANDS", "CANARY_METRICS", "PositionRate", "RunSummary", "Segment"),
        *("band_range", "relevance_by_position"),
    ),
    "publish.response_formats": ("RunResponseFormat",),
    "batch.batch_layout": ("BatchLayout",),
    "batch.state": ("BatchPacker", "RoundState"),
    "batch.requests": ("RequestLines", "custom_id", "item_key"),
    "pairs.lookahead": ("stored_pair_keys",),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

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
    "RunInterrupted",
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
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"jobs.engine.{module}"), name)
