"""The run's shared rate limit: `PacingState` on a simulated clock (the Ray actor that shares it
is tests/integration/test_limiter_actor.py's).

The simulation is a discrete-event loop: each caller asks for a reservation at the current
(fake) time, "sends" at `now + delay`, and asks again after a short latency. A provider limit
of `limit` requests per `window` seconds is configured as `limit * 60 / window` per minute,
and every window of that length must hold at most `limit` sends.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

import pytest

from jobs.engine.control.limiter import LocalLimiter, PacingState
from scorer_core.retry import MAX_RETRY_AFTER_S
from tests.support.fakes import FakeClock, RecordingSleep

# ------------------------------------------------------------------------------------------
# helpers


def max_in_window(times: list[float], window: float) -> int:
    """Most events in any half-open window (t - window, t], like the fake server counts."""
    stamps = sorted(times)
    best = lo = 0
    for hi, t in enumerate(stamps):
        while stamps[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def simulate(
    state: PacingState,
    clock: FakeClock,
    *,
    callers: int,
    until: float,
    latency: float = 0.01,
    tokens: Callable[[int], int] = lambda n: 0,
    on_send: Callable[[int, float], None] | None = None,
) -> list[tuple[float, int]]:
    """Run `callers` callers until fake time `until`; returns (send time, tokens) per request
    sent before `until`. `on_send(n, t)` is called for the n-th send (to inject a 429)."""
    queue = [(clock.now, caller) for caller in range(callers)]
    heapq.heapify(queue)
    sent: list[tuple[float, int]] = []
    while queue:
        at, caller = heapq.heappop(queue)
        clock.now = max(clock.now, at)
        if clock.now >= until:
            break
        cost = tokens(len(sent))
        send_at = clock.now + state.reserve(cost)
        if send_at < until:
            sent.append((send_at, cost))
            if on_send is not None:
                on_send(len(sent), send_at)
        heapq.heappush(queue, (send_at + latency, caller))
    return sent


def per_minute(limit: float, window: float) -> float:
    return limit * 60.0 / window


# ------------------------------------------------------------------------------------------
# PacingState on a fake clock


@pytest.mark.parametrize(
    ("limit", "window"),
    [(600, 60.0), (20, 2.0), (100, 10.0), (7, 1.0), (3, 60.0), (5000, 60.0)],
)
@pytest.mark.parametrize("callers", [1, 8, 64])
def test_never_more_than_limit_in_any_window(limit: int, window: float, callers: int) -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=per_minute(limit, window), clock=clock)
    sent = simulate(state, clock, callers=callers, until=clock.now + 10 * window)
    times = [t for t, _ in sent]
    assert max_in_window(times, window) <= limit
    # ...and every window of the limit's own length is nearly full once callers are waiting.
    if callers > 1:
        assert max_in_window(times, window) >= int(limit * 0.95)


def test_no_burst_after_an_idle_spell() -> None:
    """Callers that arrive together after a quiet period are paced, not sent all at once."""
    clock = FakeClock()
    state = PacingState(requests_per_minute=per_minute(20, 2.0), clock=clock)
    simulate(state, clock, callers=4, until=clock.now + 5.0)
    clock.advance(30.0)  # idle
    start = clock.now
    sends = [start + state.reserve() for _ in range(50)]
    assert max_in_window(sends, 2.0) <= 20
    assert sends[0] == pytest.approx(start)
    gaps = [b - a for a, b in itertools.pairwise(sends)]
    assert min(gaps) == pytest.approx(2.0 / (20 * 0.98))


def test_throughput_at_least_95_percent_over_a_long_run() -> None:
    clock = FakeClock()
    limit, window, hours = 600, 60.0, 2
    state = PacingState(requests_per_minute=per_minute(limit, window), clock=clock)
    duration = hours * 3600.0
    sent = simulate(state, clock, callers=16, until=clock.now + duration)
    allowed = duration / window * limit
    assert 0.95 * allowed <= len(sent) <= allowed
    assert max_in_window([t for t, _ in sent], window) <= limit
    assert state.snapshot()["granted"] >= len(sent)


def test_refusal_pushes_every_later_reservation_past_the_pause() -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=6000, clock=clock)
    for _ in range(5):
        state.reserve()
    clock.advance(0.2)
    refused_at = clock.now
    pause_end = state.refused(retry_after=7.0)
    assert pause_end == pytest.approx(refused_at + 7.0)
    # Many callers, asking at different moments during the pause: none may send before its end.
    sends = []
    for step in range(200):
        clock.now = refused_at + step * 0.03  # up to 6 s into the 7 s pause
        sends.append(clock.now + state.reserve())
    assert min(sends) >= pause_end - 1e-9
    # ...and once released they are still paced, not released as one burst.
    assert max_in_window(sends, 1.0) <= 100
    snap = state.snapshot()
    assert snap["refusals"] == 1


def test_refusal_without_retry_after_pauses_briefly_and_long_pauses_are_capped() -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=600, clock=clock)
    assert state.refused(None) == pytest.approx(clock.now + 1.0)
    assert state.reserve() == pytest.approx(1.0)
    clock.advance(5.0)
    assert state.refused(10_000.0) == pytest.approx(clock.now + MAX_RETRY_AFTER_S)
    # A shorter Retry-After later does not shorten the pause already in force.
    clock.advance(1.0)
    assert state.refused(2.0) == pytest.approx(clock.now - 1.0 + MAX_RETRY_AFTER_S)


def test_pace_drops_after_a_429_and_recovers_later() -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=600, clock=clock)
    full = state.snapshot()["requests_per_second"]
    assert full == pytest.approx(10 * 0.98)

    # Steady state before the 429.
    before = simulate(state, clock, callers=8, until=clock.now + 60.0)
    rate_before = len(before) / 60.0

    # One 429 among ~100 requests of the last 10 s is the provider's hiccup: pause, no cut.
    state.refused(retry_after=1.0)
    assert state.snapshot()["factor"] == 1.0
    # A burst of them (over 5% of recent requests) means the limit is too high: cut.
    for _ in range(5):
        state.refused(retry_after=1.0)
    cut = state.snapshot()
    assert cut["factor"] == pytest.approx(0.9)
    assert cut["requests_per_second"] == pytest.approx(full * 0.9)
    # Several workers reporting the same burst of 429s cut the pace only once.
    clock.advance(0.3)
    state.refused(retry_after=1.0)
    clock.advance(0.3)
    state.refused(retry_after=1.0)
    assert state.snapshot()["factor"] == pytest.approx(0.9)

    # Right after the 429 the achieved rate is the cut one.
    start = clock.now
    after = simulate(state, clock, callers=8, until=start + 9.0)
    assert after[0][0] >= start + 1.0 - 1e-9  # paused until 1 s after the last 429
    rate_after = (len(after) - 1) / (after[-1][0] - after[0][0])
    assert rate_after < rate_before * 0.93
    assert rate_after == pytest.approx(full * 0.9, rel=0.05)

    # With no 429 for a while the factor creeps back, step by step, up to 1.
    factors = []
    for _ in range(8):
        simulate(state, clock, callers=8, until=clock.now + 10.0)
        factors.append(state.snapshot()["factor"])
    assert factors == sorted(factors)
    assert factors[0] < 1.0
    assert factors[-1] == pytest.approx(1.0)
    late = simulate(state, clock, callers=8, until=clock.now + 60.0)
    assert len(late) / 60.0 == pytest.approx(rate_before, rel=0.02)


def test_repeated_bursts_of_429s_never_drop_below_a_quarter() -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=600, clock=clock)
    for _ in range(40):
        state.refused(retry_after=0.0)
        clock.advance(1.5)
    assert state.snapshot()["factor"] == pytest.approx(0.25)


def test_tokens_per_minute_limits_too() -> None:
    clock = FakeClock()
    # Token costs are charged when a request is sent, so a window may hold one request's
    # tokens beyond the pace: keep requests far below the headroom (2% of 60k = 1,200 tokens).
    tpm, window = 60_000.0, 60.0
    state = PacingState(requests_per_minute=0, tokens_per_minute=tpm, clock=clock)
    sizes = [50, 200, 10, 400, 120]
    sent = simulate(
        state,
        clock,
        callers=8,
        until=clock.now + 20 * window,
        tokens=lambda n: sizes[n % len(sizes)],
    )
    # Tokens sent in any 60 s window stay within the budget...
    ordered = sorted(sent)
    lo = 0
    in_window = 0
    worst = 0
    for t, cost in ordered:
        in_window += cost
        while ordered[lo][0] <= t - window:
            in_window -= ordered[lo][1]
            lo += 1
        worst = max(worst, in_window)
    assert worst <= tpm
    # ...and the budget is used.
    total = sum(cost for _, cost in sent)
    assert total >= 0.95 * tpm * 20


def test_request_and_token_limits_together_the_stricter_one_wins() -> None:
    clock = FakeClock()
    # 600 requests/min would allow 10/s; 3000 tokens/min at 100 tokens each allows 0.5/s.
    state = PacingState(requests_per_minute=600, tokens_per_minute=3000, clock=clock)
    sent = simulate(state, clock, callers=4, until=clock.now + 600.0, tokens=lambda n: 100)
    assert max_in_window([t for t, _ in sent], 60.0) <= 30
    assert len(sent) >= 0.95 * 300
    # With small requests the request limit is the binding one.
    clock2 = FakeClock()
    state2 = PacingState(requests_per_minute=600, tokens_per_minute=3_000_000, clock=clock2)
    sent2 = simulate(state2, clock2, callers=4, until=clock2.now + 60.0, tokens=lambda n: 100)
    assert 0.95 * 600 <= len(sent2) <= 600


def test_zero_limits_mean_no_waiting() -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=0, tokens_per_minute=0, clock=clock)
    assert all(state.reserve(1000) == 0.0 for _ in range(1000))


def test_local_limiter_sleeps_for_the_reservation(sleep: RecordingSleep) -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=60 / 0.98, clock=clock)  # one per second
    limiter = LocalLimiter(state, sleep=sleep)

    async def go() -> None:
        for _ in range(3):
            await limiter.acquire(0)
        await limiter.rate_limited(4.0)
        await limiter.acquire(0)

    asyncio.run(go())
    assert sleep.waits == pytest.approx([1.0, 2.0, 4.0])


def test_sporadic_429s_pause_but_do_not_cut_the_pace() -> None:
    clock = FakeClock()
    state = PacingState(requests_per_minute=6000, clock=clock)
    paused_until = 0.0
    for n in range(3000):  # about 1% of requests refused, spread out
        clock.advance(state.reserve() + 0.001)
        if n % 100 == 99:
            paused_until = state.refused(retry_after=1.0)
            assert paused_until == pytest.approx(clock.now + 1.0)
            assert state.reserve() >= 1.0 - 1e-9  # everyone waits out the Retry-After
    assert state.snapshot()["factor"] == 1.0
