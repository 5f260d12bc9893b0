"""What a run's manifest records about how the run was made.

The driver builds this part; `jobs.engine.publish.publish_run` adds what publishing learns
(counts, summary, publication time) and writes `manifest.json` next to the run's tables.
Readers: `ctxprec compare` / `report` (through jobs.tools.runs) and the benchmarks, which read
`timings_s`.
"""

from __future__ import annotations

from typing import Any

from jobs.config import JobConfig
from jobs.engine.publish import RunLocation
from scorer_core.prompt import PROMPT_VERSION


def run_manifest(
    config: JobConfig,
    location: RunLocation,
    *,
    shards: int,
    shards_reused: int,
    seconds: float,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The run's identity, judge, prompt version, config (secrets redacted) and timings.

    `timings` are seconds per phase (plan, ray_start, fan_out); `seconds` is the whole run so
    far.
    """
    return {
        "run_id": location.run_id,
        "run_date": location.run_date.isoformat(),
        "judge_model": config.judge.model,
        "prompt_version": PROMPT_VERSION,
        "config": config.redacted(),
        "shards": shards,
        "seconds": round(seconds, 3),
        "timings_s": {phase: round(value, 3) for phase, value in timings.items()},
        "shards_reused": shards_reused,
    }
