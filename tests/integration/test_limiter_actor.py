"""The run's rate limit shared through one Ray actor (the run's coordinator, holding the
governor): Ray tasks in other processes take their slots from the same pace, and a 429 one of
them reports pauses all of them.

The actor's clock is a FakeClock that never moves and every task sleeps with a RecordingSleep,
so the slots handed out are exact numbers, not timings: one shared pace hands out 0, 1, 2, ...
intervals once each, where a pace per task would hand each task its own 0, 1, 2, .... How close
to a provider's limit the run gets in real time is measured by `python -m bench.job_bench
ratelimit` (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from jobs.engine.control.budget import BudgetSettings
from jobs.engine.control.governor import RunGovernor
from jobs.engine.control.limiter import PacingState
from jobs.engine.control.shard_board import coordinator_actor_class
from tests.fake_judge import FakeJudgeServer, build_verdict_prompt_for_tests
from tests.support.fakes import FakeClock

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]

TASKS, PER_TASK, CONCURRENCY = 3, 20, 4
PER_SECOND = 10.0  # the pace: one slot every 0.1 s


def coordinator(requests_per_minute: float) -> Any:
    """The run's coordinator actor with no shards, pacing at a frozen fake clock."""
    clock = FakeClock()
    pacing = PacingState(requests_per_minute=requests_per_minute, headroom=1.0, clock=clock)
    return coordinator_actor_class().remote([], RunGovernor(pacing, BudgetSettings(), clock=clock))


def verdict_request_body() -> dict[str, Any]:
    return {
        "model": "fake-judge",
        "messages": [
            {"role": "system", "content": "judge"},
            {
                "role": "user",
                "content": build_verdict_prompt_for_tests("q?", "a.", ["x RELEVANT", "y"]),
            },
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "context_precision_verdicts", "schema": {}},
        },
    }


def _send_through(
    url: str, limiter: Any, body: dict[str, Any], requests: int, concurrency: int
) -> tuple[dict[str, int], list[float]]:
    """A Ray task body: `concurrency` coroutines take turns through the shared actor (reserve a
    slot, "sleep" for it) and POST a real verdict request, `requests` in all. Returns the count
    of each HTTP status seen and the waits the slots asked for."""
    import asyncio

    import httpx

    from jobs.engine.control.worker_flow import WorkerFlow
    from tests.support.fakes import RecordingSleep

    sleep = RecordingSleep()
    shared = WorkerFlow(limiter, "task", paced=True, sleep=sleep)
    statuses: dict[str, int] = {}

    async def run() -> None:
        left = [requests]
        async with httpx.AsyncClient(timeout=30.0) as client:

            async def one_caller() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    await shared.acquire(0)
                    reply = await client.post(f"{url}/chat/completions", json=body)
                    key = str(reply.status_code)
                    statuses[key] = statuses.get(key, 0) + 1

            await asyncio.gather(*(one_caller() for _ in range(concurrency)))

    asyncio.run(run())
    return statuses, sleep.waits


def test_ray_tasks_take_their_slots_from_one_pace(ray_local: Any, server: FakeJudgeServer) -> None:
    ray = ray_local
    limiter = coordinator(PER_SECOND * 60)
    try:
        # A 429 someone reported (Retry-After 7 s): every task waits it out before its slot.
        ray.get(limiter.refused.remote(7.0))
        send = ray.remote(_send_through).options(num_cpus=0.5)
        body = verdict_request_body()
        refs = [send.remote(server.url, limiter, body, PER_TASK, CONCURRENCY) for _ in range(TASKS)]
        results = ray.get(refs, timeout=180)
        flow = ray.get(limiter.flow.remote())
        snapshot = {k.removeprefix("pace_"): v for k, v in flow.model_dump().items()}
    finally:
        ray.kill(limiter)

    total = TASKS * PER_TASK
    waits = sorted(wait for _, task_waits in results for wait in task_waits)
    # One slot each, from one pace: 7 s, then one interval more for each slot, handed out
    # across the tasks. (The 429 also cut the pace: the rate is the snapshot's.)
    interval = 1.0 / snapshot["requests_per_second"]
    assert interval >= 1.0 / PER_SECOND
    assert waits == pytest.approx([7.0 + n * interval for n in range(total)])
    assert all(len(task_waits) == PER_TASK for _, task_waits in results)
    assert snapshot["granted"] == total and snapshot["refusals"] == 1
    assert [statuses for statuses, _ in results] == [{"200": PER_TASK}] * TASKS
    assert server.stats()["accepted"] == total


def test_limiter_actor_answers_at_once_while_callers_wait(ray_local: Any) -> None:
    """Reservations are answered at once (the caller sleeps, not the actor): 200 reservations
    at 1 request/s come back with slots 0, 1, ..., 199 s ahead instead of being slept."""
    ray = ray_local
    limiter = coordinator(60.0)
    try:
        answers = ray.get([limiter.reserve.remote(0) for _ in range(200)], timeout=120)
    finally:
        ray.kill(limiter)
    delays = [delay for delay, _ in answers]
    assert sorted(delays) == pytest.approx([float(i) for i in range(200)])
