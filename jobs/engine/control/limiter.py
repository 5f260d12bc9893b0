"""One rate limit for the whole run: `PacingState`, a GCRA-style pacer handing out
reservations against requests- and tokens-per-minute (a 429 pauses everyone and cuts the
pace, which creeps back), and `LocalLimiter`, the same pace inside one process."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from jobs.core.config import RateLimitConfig
from scorer_core.protocols import Sleeper
from scorer_core.retry import MAX_RETRY_AFTER_S, real_sleep


@dataclass(kw_only=True)
class PacingState:
    """Reservations against requests-per-minute and tokens-per-minute budgets (0 = no limit)."""

    requests_per_minute: float
    tokens_per_minute: float = 0.0
    headroom: float = 0.98
    # Seconds of budget that may be spent at once after an idle spell; 0: strict pacing (a
    # burst overflows short windows, and providers may enforce a minute's limit per second).
    burst_s: float = 0.0
    # Rate multiplier after 429s, and the recovery per quiet `recover_every_s`. The pace is cut
    # only when 429s are at least `cut_share` of the requests of the last `share_window_s`:
    # a provider's sporadic 429s (overload on its side) pause everyone for Retry-After but do
    # not drag the pace down; a limit set above the provider's real one does.
    cut: float = 0.9
    cut_share: float = 0.05
    share_window_s: float = 10.0
    recover_every_s: float = 10.0
    recover_step: float = 0.02
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        now = self.clock()
        self._request_tat = now  # theoretical arrival time of the next request
        self._token_tat = now
        self._paused_until = now
        self._factor = 1.0
        self._last_cut = float("-inf")
        self._granted = 0
        self._refusals = 0
        self._recent_grants: deque[float] = deque()
        self._recent_refusals: deque[float] = deque()
        # Token reservations are estimates that `settle` corrects by each reply's usage (not
        # rescaled by a learned ratio, which fed back on itself: docs/design-notes-engine.md).
        # `_mean_tokens` (recent replies weighted most) turns a token limit into a request
        # rate for the in-flight budget.
        self._mean_tokens = 0.0
        self._tokens_reserved = 0
        self._tokens_used = 0

    def _rate(self, per_minute: float) -> float:
        """Allowed events per second right now."""
        return per_minute / 60.0 * self.headroom * self._factor

    def _recover(self, now: float) -> None:
        if self._factor < 1.0 and now - self._last_cut >= self.recover_every_s:
            steps = int((now - self._last_cut) // self.recover_every_s)
            self._factor = min(1.0, self._factor + self.recover_step * steps)
            self._last_cut = now

    def _forget_before(self, horizon: float) -> None:
        for recent in (self._recent_grants, self._recent_refusals):
            while recent and recent[0] < horizon:
                recent.popleft()

    def _slot(self, start: float, tat: float, cost: float) -> tuple[float, float]:
        """The earliest slot from `start` on a pace whose next arrival is at `tat`, and the
        pace's next arrival after it (`burst_s` of budget may be spent at once)."""
        slot = max(start, tat - max(0.0, self.burst_s - cost))
        return slot, max(tat, slot) + cost

    def reserve(self, tokens: int = 0) -> float:
        """Reserve a slot for one request of `tokens` tokens; returns seconds to wait first."""
        now = self.clock()
        self._recover(now)
        start = max(now, self._paused_until)
        if self.requests_per_minute > 0:
            interval = 1.0 / self._rate(self.requests_per_minute)
            start, self._request_tat = self._slot(start, self._request_tat, interval)
        if self.tokens_per_minute > 0 and tokens > 0:
            cost = tokens / self._rate(self.tokens_per_minute)
            start, self._token_tat = self._slot(start, self._token_tat, cost)
        self._granted += 1
        self._recent_grants.append(now)
        if len(self._recent_grants) > 4096:
            self._forget_before(now - self.share_window_s)
        return max(0.0, start - now)

    def charge(self, estimated_tokens: int) -> int:
        """The tokens to reserve for a request estimated at `estimated_tokens`."""
        if estimated_tokens <= 0:
            return 0
        if not self._mean_tokens:  # no reply yet: the estimate is all there is to go on
            self._mean_tokens = float(estimated_tokens)
        return estimated_tokens

    def settle(self, reserved_tokens: int, used_tokens: int) -> None:
        """A request that reserved `reserved_tokens` used `used_tokens` (the provider's count):
        move the token pace by the difference."""
        if self.tokens_per_minute <= 0 or reserved_tokens <= 0 or used_tokens <= 0:
            return
        self._token_tat += (used_tokens - reserved_tokens) / self._rate(self.tokens_per_minute)
        self._tokens_reserved += reserved_tokens
        self._tokens_used += used_tokens
        self._mean_tokens = 0.99 * self._mean_tokens + 0.01 * used_tokens

    def request_rate(self) -> float | None:
        """Requests per second the limits allow at steady state now (None: no limit). A token
        limit counts at the mean size of recent requests."""
        rates = []
        if self.requests_per_minute > 0:
            rates.append(self._rate(self.requests_per_minute))
        if self.tokens_per_minute > 0 and self._mean_tokens > 0:
            rates.append(self._rate(self.tokens_per_minute) / self._mean_tokens)
        return min(rates) if rates else None

    def refused(self, retry_after: float | None) -> float:
        """Record a 429: pause everyone and slow down. Returns the pause end (clock time)."""
        now = self.clock()
        self._refusals += 1
        self._recent_refusals.append(now)
        self._forget_before(now - self.share_window_s)
        share = len(self._recent_refusals) / max(1, len(self._recent_grants))
        # Several workers report the same burst of 429s: cut the pace once per burst.
        if share >= self.cut_share and now - self._last_cut > 1.0:
            self._factor = max(0.25, self._factor * self.cut)
            self._last_cut = now
        pause = retry_after if retry_after is not None else 1.0
        self._paused_until = max(self._paused_until, now + min(pause, MAX_RETRY_AFTER_S))
        return self._paused_until

    def snapshot(self) -> dict[str, float]:
        # how far the estimates ran from the provider's counts (used / reserved)
        ratio = self._tokens_used / self._tokens_reserved if self._tokens_reserved else 1.0
        rate = self._rate(self.requests_per_minute) if self.requests_per_minute else 0.0
        return {
            "granted": self._granted,
            "refusals": self._refusals,
            "factor": self._factor,
            "token_ratio": ratio,
            "requests_per_second": rate,
        }


def pacing_for(limits: RateLimitConfig) -> PacingState | None:
    """The pace of `rate_limit` (None when no limit is set)."""
    if not (limits.requests_per_minute or limits.tokens_per_minute):
        return None
    return PacingState(
        requests_per_minute=limits.requests_per_minute,
        tokens_per_minute=limits.tokens_per_minute,
        headroom=limits.headroom,
    )


class LocalLimiter:
    """The run's pacing inside one process (calibration, single-process use): a `Limiter`."""

    def __init__(self, state: PacingState, sleep: Sleeper = real_sleep) -> None:
        self._state = state
        self._sleep = sleep

    async def acquire(self, tokens: int) -> int:
        charged = self._state.charge(tokens) if self._state.tokens_per_minute > 0 else tokens
        delay = self._state.reserve(charged)
        if delay > 0:
            await self._sleep(delay)
        return charged

    async def rate_limited(self, retry_after: float | None) -> None:
        self._state.refused(retry_after)

    def completed(self, latency_s: float | None, charged_tokens: int, used_tokens: int) -> None:
        self._state.settle(charged_tokens, used_tokens)
