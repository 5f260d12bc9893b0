"""Facts several modules rely on are stated once; here each is checked through its users.

- the Retry-After cap: one request of the judge (`RetryPolicy`) and the run's shared limiter
  (`PacingState`) wait at most the same time;
- the reply tokens per verdict and the characters per token: what the limiter reserves per
  request (`scorer_core.judge.estimate_tokens`) and what `ctxprec estimate` allows for;
- the run-id pattern: the ids `RunConfig` accepts are the ids `ctxprec runs` looks up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from jobs.core.config import RunConfig
from jobs.core.storage import open_store
from jobs.engine.control.limiter import PacingState
from jobs.tools.estimation import OUTPUT_TOKENS_PER_VERDICT
from jobs.tools.published_runs import RunNotFound, find_run
from scorer_core.judge import CHARS_PER_TOKEN, estimate_tokens
from scorer_core.retry import RetryPolicy
from tests.support.fakes import NoJitter


@pytest.mark.parametrize("retry_after", [0.5, 90.0, 10_000.0])
def test_judge_and_limiter_wait_the_same_for_a_retry_after(retry_after: float) -> None:
    now = 1000.0
    state = PacingState(requests_per_minute=60, clock=lambda: now)
    paused_for = state.refused(retry_after) - now
    assert RetryPolicy(rng=NoJitter()).delay_for(0, retry_after) == pytest.approx(paused_for)


def test_estimate_allows_the_reply_tokens_the_limiter_reserves() -> None:
    messages = [{"role": "user", "content": "q" * 1000}]
    reserved_per_verdict = estimate_tokens(messages, 3) - estimate_tokens(messages, 2)
    assert reserved_per_verdict == OUTPUT_TOKENS_PER_VERDICT
    longer = [{"role": "user", "content": "q" * (1000 + 50 * CHARS_PER_TOKEN)}]
    assert estimate_tokens(longer, 1) - estimate_tokens(messages, 1) == 50


@pytest.mark.parametrize(
    "run_id",
    ["nightly-2026.11.30", "a", "A_1", "x" * 100, "x" * 101, "-x", ".x", "_x", "a/b", "a b", ""],
)
def test_config_and_runs_agree_on_run_ids(run_id: str, tmp_path: Path) -> None:
    try:
        RunConfig(id=run_id)
        accepted = True
    except ValidationError:
        accepted = False
    with pytest.raises(RunNotFound) as info:
        find_run(open_store(str(tmp_path), {}), run_id)
    assert ("not a valid run id" not in str(info.value)) == accepted
