"""How the job waits before trying again: bounded, jittered, polite to `Retry-After`.

`backoff_delay` is the project's one full-jitter exponential backoff, used by the judge's
`RetryPolicy` and the object store (`jobs.core.storage.retry_call`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.utils
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from scorer_core.errors import ConfigError

#: The longest a provider's `Retry-After` is obeyed, in seconds, by one request and by the
#: shared rate limiter alike: a run must not stall for hours on one header.
MAX_RETRY_AFTER_S = 120.0

# 2.0**1024 overflows a float; 2.0**1000 times any sensible base is far past any cap.
_MAX_EXPONENT = 1000


def backoff_delay(
    attempt: int, *, base: float, cap: float, rng: Callable[[], float] = random.random
) -> float:
    """Full-jitter exponential backoff before retry number `attempt` (0-based): uniform in
    [0, min(cap, base * 2**attempt)]. `rng` returns a float in [0, 1); tests inject one."""
    ceiling = min(cap, base * 2.0 ** min(attempt, _MAX_EXPONENT))
    return ceiling * rng()


async def real_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date); None if unreadable."""
    value = (value or "").strip()
    with contextlib.suppress(ValueError):
        seconds = float(value)
        return None if math.isnan(seconds) else max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" dates parse naive; HTTP dates are always GMT
        when = when.replace(tzinfo=dt.UTC)
    return max(0.0, (when - (now or dt.datetime.now(dt.UTC))).total_seconds())


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """The judge's retry budget: `max_retries` transport retries with full-jitter backoff from
    `base_delay_s` up to `max_delay_s` (a 429's `Retry-After` instead, capped at
    `max_retry_after_s`), and `max_reasks` re-asks of unusable replies; `rng` for tests."""

    max_retries: int = 6
    max_reasks: int = 2
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = MAX_RETRY_AFTER_S
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_retries", "max_reasks"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ConfigError("retry delays must satisfy 0 <= base_delay_s <= max_delay_s")

    def delay_for(self, attempt: int, retry_after: float | None) -> float:
        """The wait before retry `attempt` (0-based): a 429's `retry_after`, or backoff."""
        if retry_after is not None and retry_after >= 0:
            # A little jitter on top stops every refused worker from returning at the same instant.
            return min(retry_after, self.max_retry_after_s) + self.rng.uniform(0, 0.25)
        return backoff_delay(
            attempt, base=self.base_delay_s, cap=self.max_delay_s, rng=self.rng.random
        )
