"""A worker's side of the run governor: `WorkerFlow` is the `Limiter` of the worker's judge
(pace slots from the governor, slept for locally) and holds the worker's allowance of the
in-flight budget (its `gate`), resized by the reports it sends a few times a second."""

from __future__ import annotations

import asyncio
import contextlib

from jobs.engine.control.budget import AdjustableGate
from jobs.engine.control.governor import Completion
from jobs.engine.messages import Governor
from scorer_core.protocols import Sleeper
from scorer_core.retry import real_sleep

# How often a worker tells the governor its demand: often enough that a draining worker's
# share moves within a fraction of a reply's latency, rarely enough to cost nothing.
REPORT_EVERY_S = 0.2


class WorkerFlow:
    """Paces this worker's requests through the run's governor and holds its allowance."""

    def __init__(
        self,
        governor: Governor,
        worker_id: str,
        *,
        paced: bool,
        sleep: Sleeper = real_sleep,
        report_every_s: float = REPORT_EVERY_S,
    ) -> None:
        # A request that finds the gate shut asks for a report at once: at a shard's start
        # the allowance is still the nothing an idle worker had.
        self.gate = AdjustableGate(0, on_wait=self._gate_wait)
        self._governor = governor
        self._worker_id = worker_id
        self._paced = paced
        self._sleep = sleep
        self._every = report_every_s
        self._completions: list[Completion] = []
        self._news = asyncio.Event()
        self._reported_any = False

    async def acquire(self, tokens: int) -> int:
        if not self._paced:
            return tokens
        delay, charged = await self._governor.reserve.remote(tokens)
        if delay > 0:
            await self._sleep(delay)
        return int(charged)

    async def rate_limited(self, retry_after: float | None) -> None:
        await self._governor.refused.remote(retry_after)

    def completed(self, latency_s: float | None, charged_tokens: int, used_tokens: int) -> None:
        self._completions.append((latency_s, charged_tokens, used_tokens))
        if not self._reported_any:
            self._news.set()  # the run's cold start may be waiting for this one

    @property
    def demand(self) -> int:
        """Requests waiting for a slot here or in flight."""
        return self.gate.waiting + self.gate.held

    def _gate_wait(self) -> None:
        if self.gate.capacity == 0:
            self._news.set()

    def wake(self) -> None:
        """Report soon: new work arrived (a worker with no allowance waits for its report)."""
        self._news.set()

    async def report_once(self) -> int:
        """Send the news to the governor and apply the allowance it answers."""
        completions, self._completions = self._completions, []
        self._reported_any = self._reported_any or bool(completions)
        held = self.gate.held
        report = self._governor.report.remote(self._worker_id, self.demand, held, completions)
        allowance = int(await report)
        self.gate.resize(allowance)
        return allowance

    async def run_reports(self) -> None:
        """Report every `report_every_s` (sooner when there is news) until cancelled."""
        while True:
            self._news.clear()
            await self.report_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._news.wait(), self._every)
