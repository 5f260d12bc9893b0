"""How the LLM judge waits and retries: bounded, jittered, and polite to `Retry-After`.

Transport failures (429, 5xx, timeouts, refused connections) are retried up to `max_retries`
times with full-jitter exponential backoff; a 429 that names a `Retry-After` waits that long
instead (capped), and tells the shared `Limiter` so every caller slows down, not just this one.
Replies that break the wire contract are a different budget (`max_reasks`): the request is sent
again with a note saying what was wrong.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from scorer_core.errors import ConfigError


async def real_sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 6
    max_reasks: int = 2
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    # A provider asking for more than this is treated as this: a run must not stall for hours.
    max_retry_after_s: float = 120.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_retries", "max_reasks"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ConfigError("retry delays must satisfy 0 <= base_delay_s <= max_delay_s")

    def backoff(self, attempt: int) -> float:
        """Full-jitter exponential backoff for the `attempt`-th retry (0-based)."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2**attempt))
        return self.rng.uniform(0, ceiling)

    def delay_for(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None and retry_after >= 0:
            # A little jitter on top stops every refused worker from returning at the same instant.
            return min(retry_after, self.max_retry_after_s) + self.rng.uniform(0, 0.25)
        return self.backoff(attempt)
