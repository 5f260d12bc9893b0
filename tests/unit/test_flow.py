"""A worker's side of the run governor, and the judge's use of it, without Ray.

The governor is the real `RunGovernor` behind a stand-in that answers like a Ray actor handle
(`.method.remote(...)` returns an awaitable); sleeps are recorded, never waited for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from jobs.engine.control.budget import BudgetSettings
from jobs.engine.control.governor import RunGovernor
from jobs.engine.control.limiter import PacingState
from jobs.engine.control.worker_flow import WorkerFlow
from scorer_core.judge import JudgeRuntime, LLMJudge, LLMJudgeSettings
from scorer_core.protocols import ChatReply
from scorer_core.types import ScoringItem, Usage
from tests.support.fakes import FakeClock, RecordingSleep


class AsActor:
    """Calls a plain object's methods the way a Ray actor handle is called."""

    class _Method:
        def __init__(self, fn: Any) -> None:
            self._fn = fn

        async def remote(self, *args: Any) -> Any:
            return self._fn(*args)

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return AsActor._Method(getattr(self._target, name))


def test_allowance_is_applied_to_the_gate_and_the_first_reply_ends_the_cold_start() -> None:
    clock = FakeClock()
    governor = RunGovernor(None, BudgetSettings(), clock=clock)
    a = WorkerFlow(AsActor(governor), "a", paced=False)
    b = WorkerFlow(AsActor(governor), "b", paced=False)

    async def scenario() -> None:
        holders = []
        for flow in (a, b):  # each has 3 requests waiting at its gate
            for _ in range(3):
                holders.append(asyncio.create_task(flow.gate.acquire()))
        await asyncio.sleep(0)
        assert a.demand == 3 and b.demand == 3
        assert await a.report_once() == 1  # the run's first request goes alone
        assert await b.report_once() == 0
        await asyncio.sleep(0)
        assert a.gate.held == 1 and b.gate.held == 0
        a.completed(0.5, 0, 0)  # its reply came back
        # no limit set: a budget of 64, each worker its demand plus half of what is left
        assert await a.report_once() == 3 + (64 - 6) // 2
        assert await b.report_once() == 3 + (64 - 6) // 2
        await asyncio.sleep(0)
        assert b.gate.held == 3
        for task in holders:
            task.cancel()

    asyncio.run(scenario())
    assert governor.budget.latencies.count == 1


def test_paced_requests_reserve_through_the_governor_and_sleep_locally() -> None:
    clock = FakeClock()
    pacing = PacingState(requests_per_minute=60, headroom=1.0, clock=clock)
    governor = RunGovernor(pacing, BudgetSettings(explicit=10), clock=clock)
    sleep = RecordingSleep()
    flow = WorkerFlow(AsActor(governor), "w", paced=True, sleep=sleep)

    async def scenario() -> None:
        for _ in range(3):
            assert await flow.acquire(100) == 100
        await flow.rate_limited(5.0)
        await flow.acquire(100)

    asyncio.run(scenario())
    # 1 request/s: slots at 0, 1 and 2 s; then everyone waits out the 429's Retry-After.
    assert sleep.waits == pytest.approx([1.0, 2.0, 5.0])


def test_completions_reach_the_governor_in_the_next_report() -> None:
    clock = FakeClock()
    pacing = PacingState(requests_per_minute=0, tokens_per_minute=6000, headroom=1.0, clock=clock)
    governor = RunGovernor(pacing, BudgetSettings(explicit=4), clock=clock)
    flow = WorkerFlow(AsActor(governor), "w", paced=True, sleep=RecordingSleep())

    async def scenario() -> None:
        charged = await flow.acquire(100)
        flow.completed(0.8, charged, 300)  # the provider counted 300
        flow.completed(None, 0, 0)  # an attempt that failed without a reply
        await flow.report_once()

    asyncio.run(scenario())
    snap = governor.snapshot()
    assert snap.completed == 2 and snap.replies == 1
    assert snap.latency_p50_s == 0.8
    assert governor.tokens_used == 300
    assert snap.pace_token_ratio == 3.0  # the provider counted 3x the estimate


class FakeClient:
    """A ChatClient answering every verdict request after `latency` fake seconds."""

    model = "fake"
    endpoint = "http://fake"
    transport = "fake"

    def __init__(self, clock: FakeClock, latency: float) -> None:
        self._clock = clock
        self._latency = latency
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(self, messages: Sequence[dict[str, str]], **_: Any) -> ChatReply:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self._clock.now += self._latency
        self.in_flight -= 1
        text = messages[-1]["content"]
        positions = [int(part.split("]")[0]) for part in text.split("\n[")[1:]]
        verdicts = [{"i": p, "v": "yes", "reason": "r"} for p in positions]
        import json

        tokens = Usage(prompt_tokens=10, completion_tokens=5)
        return ChatReply(json.dumps({"verdicts": verdicts}), tokens)


def test_the_judge_holds_its_gate_reports_latency_and_counts_tokens_its_way() -> None:
    clock = FakeClock()
    governor = RunGovernor(None, BudgetSettings(explicit=2), clock=clock)
    flow = WorkerFlow(AsActor(governor), "w", paced=False)
    client = FakeClient(clock, latency=0.25)
    counted: list[int] = []

    def counter(messages: Sequence[dict[str, str]]) -> int:
        counted.append(len(messages))
        return 7

    runtime = JudgeRuntime(
        limiter=flow, max_in_flight=flow.gate, first_alone=False, token_counter=counter, clock=clock
    )
    judge = LLMJudge(client, runtime=runtime)
    item = ScoringItem(input="q", output="a", contexts=("c0", "c1"))

    async def scenario() -> None:
        calls = asyncio.gather(*(judge.judge(item, [0, 1]) for _ in range(6)))
        await asyncio.sleep(0)
        # One request reaches the gate (the others wait until the endpoint has accepted the
        # structured-output form once), and the gate has no allowance yet.
        assert flow.demand == 1 and flow.gate.held == 0
        assert await flow.report_once() == 2  # the explicit budget, all for this worker
        batches = await calls
        assert all(len(b.verdicts) == 2 for b in batches)
        await flow.report_once()

    asyncio.run(scenario())
    assert client.max_in_flight <= 2
    assert counted  # prompt tokens came from the injected counter
    snap = governor.snapshot()
    assert snap.replies == 6 and snap.latency_p50_s == pytest.approx(0.25)
    assert governor.tokens_used == 6 * 15


def test_a_requests_max_tokens_counts_whole_against_the_limit() -> None:
    # OpenAI-style limits charge a request's max_tokens at admission, however short the
    # reply: the pace settles on that count, not on the reply's completion tokens.
    clock = FakeClock()
    governor = RunGovernor(None, BudgetSettings(explicit=2), clock=clock)
    flow = WorkerFlow(AsActor(governor), "w", paced=False)
    judge = LLMJudge(
        FakeClient(clock, latency=0.25),
        settings=LLMJudgeSettings(completion_budget=40),
        runtime=JudgeRuntime(limiter=flow, max_in_flight=flow.gate, first_alone=False, clock=clock),
    )

    async def scenario() -> None:
        calls = asyncio.gather(
            *(
                judge.judge(ScoringItem(input="q", output="a", contexts=("c",)), [0])
                for _ in range(3)
            )
        )
        await asyncio.sleep(0)  # the first request reaches the gate: the report sees demand
        await flow.report_once()
        await calls
        await flow.report_once()

    asyncio.run(scenario())
    assert governor.tokens_used == 3 * (10 + 40)  # prompt 10 + max_tokens 40 (the reply used 5)
