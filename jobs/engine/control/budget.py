"""The run-wide in-flight budget: how many judge requests may be outstanding (configured, or
sized from the provider's limits and the measured latency by Little's law), each worker's
max-min fair allowance of it, and `AdjustableGate`, which enforces an allowance locally."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobs.core.config import RateLimitConfig


@dataclass
class LatencyWindow:
    """The most recent reply latencies (seconds), for percentiles."""

    capacity: int = 2048
    _samples: deque[float] = field(init=False, repr=False)
    count: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._samples = deque(maxlen=self.capacity)

    def add(self, seconds: float) -> None:
        self._samples.append(max(0.0, seconds))
        self.count += 1

    def percentile(self, share: float) -> float | None:
        """Nearest-rank percentile of the window (`share` in [0, 1]); None when empty."""
        if not self._samples:
            return None
        ordered = sorted(self._samples)
        rank = min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))
        return ordered[rank]

    def mean(self) -> float | None:
        return sum(self._samples) / len(self._samples) if self._samples else None


@dataclass(frozen=True, kw_only=True)
class BudgetSettings:
    """How the budget is sized. `explicit` (a configured number) overrides everything else."""

    explicit: int | None = None
    floor: int = 8
    ceiling: int = 4096
    # With no provider limit there is no rate for Little's law; this many is a safe default.
    unlimited: int = 64
    # Size for this latency percentile, times `margin`: the number in flight at a steady rate
    # swings with the latency's spread, and a budget a little too large costs nothing (the
    # pacer, not the budget, decides when requests go).
    quantile: float = 0.95
    margin: float = 1.25

    def __post_init__(self) -> None:
        if self.explicit is not None and self.explicit < 1:
            raise ValueError(f"explicit budget must be >= 1, got {self.explicit}")
        if not 1 <= self.floor <= self.ceiling:
            raise ValueError("budget bounds must satisfy 1 <= floor <= ceiling")


@dataclass
class _Holder:
    demand: int
    in_flight: int
    seen: float


class InFlightBudget:
    """The run's budget and each worker's allowance of it. `request_rate()`: the requests per
    second the provider's limits allow now, a token limit's share included (None: unlimited)."""

    def __init__(
        self,
        settings: BudgetSettings,
        request_rate: Callable[[], float | None],
        *,
        clock: Callable[[], float] = time.monotonic,
        stale_after_s: float = 10.0,
    ) -> None:
        self.settings = settings
        self._request_rate = request_rate
        self._clock = clock
        self._stale_after = stale_after_s
        self.latencies = LatencyWindow()
        self._holders: dict[str, _Holder] = {}
        self.max_in_flight = 0
        self.max_size = 0
        self._completed = 0
        self._first_holder: str | None = None

    def observe(self, latency_s: float | None) -> None:
        """One request finished: a reply after `latency_s` seconds, or (None) a failure whose
        timing says nothing about the judge's latency. Either ends the cold start."""
        self._completed += 1
        if latency_s is not None:
            self.latencies.add(latency_s)

    @property
    def cold(self) -> bool:
        """True until the run's first request has finished."""
        return self._completed == 0 and self.settings.explicit is None

    def size(self) -> int:
        """The run-wide number of requests that may be in flight now."""
        settings = self.settings
        if settings.explicit is not None:
            return settings.explicit
        if self.cold:
            return 1  # the run's first request goes alone
        rate = self._request_rate()
        latency = self.latencies.percentile(settings.quantile)
        if rate is None or rate <= 0 or latency is None:
            size = settings.unlimited
        else:
            size = math.ceil(rate * latency * settings.margin)
        size = max(settings.floor, min(settings.ceiling, size))
        self.max_size = max(self.max_size, size)
        return size

    def allocate(self, worker: str, demand: int, in_flight: int) -> int:
        """Record `worker`'s demand (requests waiting or in flight); its allowance: its demand
        plus an even share of what is left while every demand fits (new work need not wait for
        the next report), else a max-min fair share. While the run's first request is out,
        nobody else gets one."""
        now = self._clock()
        self._holders[worker] = _Holder(
            demand=max(0, demand), in_flight=max(0, in_flight), seen=now
        )
        stale = [
            name for name, holder in self._holders.items() if now - holder.seen > self._stale_after
        ]
        for name in stale:
            del self._holders[name]
        held = sum(holder.in_flight for holder in self._holders.values())
        self.max_in_flight = max(self.max_in_flight, held)
        if self.cold:
            if self._first_holder is None and demand > 0:
                self._first_holder = worker
            return 1 if worker == self._first_holder else 0
        budget = self.size()
        active = {
            name: holder.demand for name, holder in self._holders.items() if holder.demand > 0
        }
        if worker not in active:
            return 0
        total = sum(active.values())
        if total <= budget:
            return active[worker] + (budget - total) // len(active)
        return _water_fill(budget, active)[worker]

    def snapshot(self) -> dict[str, Any]:
        return {
            "budget": self.size(),
            "budget_max": self.max_size,
            "max_in_flight": self.max_in_flight,
            **{
                f"latency_p{percent}_s": self.latencies.percentile(percent / 100)
                for percent in (50, 90, 99)
            },
            "latency_mean_s": self.latencies.mean(),
            "replies": self.latencies.count,
            "completed": self._completed,
        }


def budget_settings(limits: RateLimitConfig) -> BudgetSettings:
    """How the run-wide in-flight budget is sized (`rate_limit.max_concurrency` and bounds)."""
    explicit = limits.max_concurrency if isinstance(limits.max_concurrency, int) else None
    return BudgetSettings(
        explicit=explicit, floor=limits.concurrency_floor, ceiling=limits.concurrency_ceiling
    )


def _water_fill(budget: int, demands: dict[str, int]) -> dict[str, int]:
    """Max-min fair integer shares of `budget`: small demands are met in full, the rest is split
    evenly among the larger ones; everyone with demand gets at least one."""
    shares: dict[str, int] = {}
    left = budget
    ordered = sorted(demands, key=lambda name: demands[name])
    for index, name in enumerate(ordered):
        fair = max(1, left // (len(ordered) - index))
        shares[name] = min(demands[name], fair)
        left -= shares[name]
    return shares


class AdjustableGate:
    """An asyncio semaphore whose capacity can change while requests hold it (a lower one
    interrupts nothing in flight). Waiters go in arrival order, so the shard that started first
    goes first. `on_wait` is called when a request finds the gate full (to ask for more now)."""

    def __init__(self, capacity: int, on_wait: Callable[[], None] | None = None) -> None:
        self._capacity = max(0, capacity)
        self._held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._on_wait = on_wait

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def held(self) -> int:
        return self._held

    @property
    def waiting(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    def resize(self, capacity: int) -> None:
        self._capacity = max(0, capacity)
        self._wake()

    async def acquire(self) -> None:
        if self._held < self._capacity and not self.waiting:
            self._held += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._on_wait is not None:
            self._on_wait()
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed to us as we were cancelled
            raise

    def release(self) -> None:
        self._held -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self._held < self._capacity:
            waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self._held += 1
            waiter.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()
