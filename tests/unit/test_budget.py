"""The run-wide in-flight budget and the worker-side gate, on a fake clock (no Ray, no waiting)."""

from __future__ import annotations

import asyncio

import pytest

from jobs.engine.control.budget import AdjustableGate, BudgetSettings, InFlightBudget, LatencyWindow
from tests.support.fakes import FakeClock


def budget(rate: float | None = 100.0, **settings: object) -> InFlightBudget:
    return InFlightBudget(BudgetSettings(**settings), lambda: rate, clock=FakeClock(0.0))  # type: ignore[arg-type]


def test_latency_window_percentiles_use_the_recent_samples() -> None:
    window = LatencyWindow(capacity=4)
    assert window.percentile(0.5) is None and window.mean() is None
    for value in (10.0, 1.0, 2.0, 3.0, 4.0):  # 10.0 falls out of the window
        window.add(value)
    assert window.count == 5
    assert window.percentile(0.5) == 2.0
    assert window.percentile(1.0) == 4.0
    assert window.percentile(0.0) == 1.0
    assert window.mean() == 2.5


def test_the_runs_first_request_goes_alone_once() -> None:
    run = budget()
    assert run.allocate("w1", demand=500, in_flight=0) == 1
    assert run.allocate("w2", demand=500, in_flight=0) == 0  # w1 holds the only slot
    assert run.allocate("w1", demand=500, in_flight=1) == 1
    run.observe(2.0)
    # 100 req/s x 2 s x 1.25 margin = 250 run-wide, shared by demand.
    assert run.size() == 250
    assert run.allocate("w1", demand=500, in_flight=1) + run.allocate(
        "w2", demand=500, in_flight=0
    ) in (250, 251)


def test_a_failed_first_request_also_ends_the_cold_start() -> None:
    run = budget()
    run.allocate("w1", demand=5, in_flight=0)
    run.observe(None)
    assert not run.cold
    assert run.size() == 64  # no latency measured yet: the default until there is one
    assert run.allocate("w2", demand=5, in_flight=0) >= 5


def test_size_follows_littles_law_between_floor_and_ceiling() -> None:
    run = budget(rate=200.0, floor=8, ceiling=1000)
    for latency in [1.0] * 95 + [3.0] * 5:
        run.observe(latency)
    # p95 of the window is 1.0: 200/s x 1 s x 1.25
    assert run.size() == 250
    for _ in range(100):
        run.observe(3.0)
    assert run.size() == 750  # p95 is now 3 s
    for _ in range(2000):
        run.observe(10.0)
    assert run.size() == 1000  # ceiling
    fast = budget(rate=10.0, floor=8)
    fast.observe(0.01)
    assert fast.size() == 8  # floor


def test_explicit_number_wins_and_skips_the_cold_start() -> None:
    run = budget(rate=1000.0, explicit=32)
    assert run.size() == 32
    assert run.allocate("w1", demand=100, in_flight=0) == 32


def test_no_provider_limit_uses_the_unlimited_default() -> None:
    run = budget(rate=None, unlimited=64)
    run.observe(0.5)
    assert run.size() == 64


def test_allowances_follow_demand_and_a_draining_worker_lends_its_share() -> None:
    run = budget(rate=100.0, explicit=100)
    assert run.allocate("busy", demand=300, in_flight=0) == 100
    assert run.allocate("draining", demand=100, in_flight=0) == 50  # an even split
    assert run.allocate("busy", demand=300, in_flight=100) == 50
    # The draining worker is down to its last 4 requests: the busy one gets the rest.
    assert run.allocate("draining", demand=4, in_flight=4) == 4
    assert run.allocate("busy", demand=300, in_flight=50) == 96
    assert run.allocate("draining", demand=0, in_flight=0) == 0
    assert run.allocate("busy", demand=300, in_flight=96) == 100


def test_water_filling_meets_small_demands_and_splits_the_rest() -> None:
    run = budget(rate=100.0, explicit=10)
    for name, demand in (("a", 2), ("b", 20), ("c", 20)):
        run.allocate(name, demand=demand, in_flight=0)
    shares = {
        n: run.allocate(n, demand=d, in_flight=0) for n, d in (("a", 2), ("b", 20), ("c", 20))
    }
    assert shares == {"a": 2, "b": 4, "c": 4}
    crowded = budget(rate=100.0, explicit=2)
    for name in ("a", "b", "c"):
        crowded.allocate(name, demand=5, in_flight=0)
    # Everyone with demand gets at least one, even past the budget (a heartbeat's overshoot).
    assert [crowded.allocate(n, demand=5, in_flight=0) for n in ("a", "b", "c")] == [1, 1, 1]


def test_when_demand_fits_each_worker_gets_room_to_grow() -> None:
    run = budget(rate=100.0, explicit=100)
    assert run.allocate("a", demand=10, in_flight=0) == 100
    assert run.allocate("b", demand=30, in_flight=0) == 30 + 30  # 60 spare, two active workers


def test_silent_workers_are_forgotten() -> None:
    clock = FakeClock(0.0)
    run = InFlightBudget(BudgetSettings(explicit=100), lambda: 10.0, clock=clock, stale_after_s=5)
    run.allocate("dead", demand=100, in_flight=50)
    clock.now = 6.0
    assert run.allocate("alive", demand=100, in_flight=0) == 100


def test_snapshot_reports_latency_percentiles_and_max_in_flight() -> None:
    run = budget(rate=50.0)
    run.allocate("w", demand=1, in_flight=0)
    for latency in (0.5, 1.0, 1.5, 2.0):
        run.observe(latency)
    run.allocate("w", demand=40, in_flight=30)
    snap = run.snapshot()
    assert snap["latency_p50_s"] == 1.0
    assert snap["latency_p99_s"] == 2.0
    assert snap["max_in_flight"] == 30
    assert snap["replies"] == 4


def test_settings_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        BudgetSettings(explicit=0)
    with pytest.raises(ValueError):
        BudgetSettings(floor=10, ceiling=5)


async def _hold(gate: AdjustableGate, order: list[int], index: int, release: asyncio.Event) -> None:
    async with gate:
        order.append(index)
        await release.wait()


def test_gate_admits_up_to_capacity_in_arrival_order_and_resizes() -> None:
    async def scenario() -> None:
        gate = AdjustableGate(2)
        order: list[int] = []
        release = asyncio.Event()
        tasks = [asyncio.create_task(_hold(gate, order, i, release)) for i in range(5)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert order == [0, 1] and gate.held == 2 and gate.waiting == 3
        gate.resize(4)
        await asyncio.sleep(0)
        assert order == [0, 1, 2, 3]
        gate.resize(1)  # lowering never interrupts holders; new ones wait
        await asyncio.sleep(0)
        assert gate.held == 4 and order == [0, 1, 2, 3]
        release.set()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4] and gate.held == 0

    asyncio.run(scenario())


def test_gate_slot_is_returned_when_a_waiter_is_cancelled() -> None:
    async def scenario() -> None:
        gate = AdjustableGate(1)
        await gate.acquire()
        waiter = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        gate.release()
        await asyncio.sleep(0)
        assert gate.held == 0
        await gate.acquire()  # still usable
        assert gate.held == 1

    asyncio.run(scenario())
