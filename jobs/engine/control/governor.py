"""The run's flow control in one place, held by the coordinator: the shared pace (`reserve`
before a request, `refused` on a 429) and the in-flight budget (`report`: a worker's demand
and finished requests in, its allowance out). Pure logic with an injected clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from jobs.core.config import RateLimitConfig
from jobs.core.run_manifest import FlowSnapshot
from jobs.engine.control.budget import BudgetSettings, InFlightBudget, budget_settings
from jobs.engine.control.limiter import PacingState, pacing_for

Completion = tuple[float | None, int, int]
"""A finished request as workers report it: (latency in seconds or None when the attempt failed
without a reply, tokens reserved for it, tokens the provider says it used)."""


class RunGovernor:
    """The pace (None: no rate limit) and the in-flight budget of one run."""

    def __init__(
        self,
        pacing: PacingState | None,
        budget: BudgetSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pacing = pacing
        rate: Callable[[], float | None] = pacing.request_rate if pacing else (lambda: None)
        self.budget = InFlightBudget(budget, rate, clock=clock)
        self.requests = 0
        self.tokens_reserved = 0
        self.tokens_used = 0

    @classmethod
    def for_limits(cls, limits: RateLimitConfig) -> RunGovernor:
        """The governor of `rate_limit`: a pace when a limit is set, and the in-flight budget."""
        return cls(pacing_for(limits), budget_settings(limits))

    def reserve(self, estimated_tokens: int) -> tuple[float, int]:
        """(seconds to wait, tokens charged) for one request estimated at `estimated_tokens`."""
        self.requests += 1
        if self.pacing is None:
            return 0.0, estimated_tokens
        charged = self.pacing.charge(estimated_tokens)
        self.tokens_reserved += charged
        return self.pacing.reserve(charged), charged

    def refused(self, retry_after: float | None) -> None:
        if self.pacing is not None:
            self.pacing.refused(retry_after)

    def report(
        self, worker: str, demand: int, in_flight: int, completions: Sequence[Completion]
    ) -> int:
        """Take a worker's news; return its allowance of the in-flight budget."""
        for latency, reserved, used in completions:
            self.budget.observe(latency)
            self.tokens_used += used
            if self.pacing is not None and reserved and used:
                self.pacing.settle(reserved, used)
        return self.budget.allocate(worker, demand, in_flight)

    def snapshot(self) -> FlowSnapshot:
        """What the run settled on, for the summary and the manifest."""
        pace: dict[str, Any] = dict(self.pacing.snapshot()) if self.pacing is not None else {}
        return FlowSnapshot(
            **self.budget.snapshot(),
            budget_mode="explicit" if self.budget.settings.explicit is not None else "auto",
            requests=self.requests,
            **{f"pace_{name}": value for name, value in pace.items()},
        )
