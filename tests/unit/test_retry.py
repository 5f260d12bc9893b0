"""scorer_core.retry: the one full-jitter backoff, and the judge's `RetryPolicy` built on it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scorer_core.errors import ConfigError
from scorer_core.retry import MAX_RETRY_AFTER_S, RetryPolicy, backoff_delay
from tests.support.fakes import NoJitter


def test_backoff_doubles_up_to_the_cap() -> None:
    ceilings = [backoff_delay(a, base=0.5, cap=4.0, rng=lambda: 1.0) for a in range(6)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff_delay(3, base=0.5, cap=4.0, rng=lambda: 0.0) == 0.0
    assert backoff_delay(2, base=0.5, cap=4.0, rng=lambda: 0.25) == 0.5
    # A huge attempt number is the cap, not an OverflowError.
    assert backoff_delay(5000, base=0.5, cap=4.0, rng=lambda: 0.5) == 2.0


@given(
    attempt=st.integers(min_value=0, max_value=3000),
    base=st.floats(min_value=0.0, max_value=10.0),
    extra=st.floats(min_value=0.0, max_value=100.0),
    draw=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_backoff_is_full_jitter_below_the_ceiling(
    attempt: int, base: float, extra: float, draw: float
) -> None:
    cap = base + extra
    delay = backoff_delay(attempt, base=base, cap=cap, rng=lambda: draw)
    assert 0.0 <= delay <= cap
    assert delay <= base * 2.0 ** min(attempt, 1000)


def test_the_judges_backoff_is_the_shared_one() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=30.0, rng=random.Random(7))
    same_draws = random.Random(7)
    for attempt in range(10):
        expected = backoff_delay(attempt, base=0.5, cap=30.0, rng=same_draws.random)
        assert policy.delay_for(attempt, None) == expected


def test_retry_after_is_obeyed_up_to_the_cap() -> None:
    policy = RetryPolicy(rng=NoJitter())
    assert policy.delay_for(0, 3.0) == 3.0
    assert policy.delay_for(0, 10_000.0) == MAX_RETRY_AFTER_S
    assert RetryPolicy(max_retry_after_s=5.0, rng=NoJitter()).delay_for(0, 60.0) == 5.0
    jittered = RetryPolicy(rng=random.Random(3)).delay_for(0, 3.0)
    assert 3.0 <= jittered <= 3.25
    # A negative Retry-After is no Retry-After: plain backoff.
    assert RetryPolicy(rng=NoJitter()).delay_for(2, -1.0) == 0.0


@pytest.mark.parametrize(
    "settings",
    [{"max_retries": -1}, {"max_reasks": -1}, {"base_delay_s": -0.1}, {"max_delay_s": 0.1}],
)
def test_bad_policies_are_config_errors(settings: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**settings)  # type: ignore[arg-type]
