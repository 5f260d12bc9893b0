"""`on_request` hooks for the fake judge (tests.fake_judge.FakeJudgeServer): a test acts at
an exact point of a run (the n-th request, once two shards are committed, ...) instead of
sleeping or polling. The server calls a hook in a thread of its own, before it answers the
request, so a hook may block: the request is held, its connection open, until the hook returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from tests.fake_judge import Arrival, FakeJudgeServer

# A hook never holds a request longer than this, so a test that fails before releasing its
# gate cannot leave the server's threads blocked for good.
MAX_HOLD_S = 300.0


class HoldRequests:
    """Holds every request for which `when(arrival)` is true (by default, every request),
    until `release()`; after that, requests pass. `wait_held(n)` waits until n are held."""

    def __init__(self, when: Callable[[Arrival], bool] = lambda arrival: True) -> None:
        self._when = when
        self._changed = threading.Condition()
        self._held: list[Arrival] = []
        self._released = False
        self._gave_up = False

    def __call__(self, arrival: Arrival) -> None:
        with self._changed:
            if self._released or not self._when(arrival):
                return
            self._held.append(arrival)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self._released, MAX_HOLD_S)

    def wait_held(self, count: int, timeout_s: float = 120.0) -> list[Arrival]:
        """The held requests once there are `count` of them."""
        return self.wait_until(lambda held: len(held) >= count, f"{count} held", timeout_s)

    def wait_until(
        self, condition: Callable[[list[Arrival]], bool], what: str, timeout_s: float = 120.0
    ) -> list[Arrival]:
        """The held requests once `condition(held)` is true (checked as each request is held)
        or `give_up()` was called; AssertionError naming `what` when `timeout_s` passes first."""
        with self._changed:
            ready = self._changed.wait_for(
                lambda: self._gave_up or condition(list(self._held)), timeout_s
            )
            if not ready:
                raise AssertionError(f"{what}: not seen in {timeout_s} s")
            return list(self._held)

    def give_up(self) -> None:
        """Wake `wait_held` now (say, the process making the requests has ended)."""
        with self._changed:
            self._gave_up = True
            self._changed.notify_all()

    def release(self) -> None:
        """Let every held request, and every later one, through."""
        with self._changed:
            self._released = True
            self._changed.notify_all()


class MeetAt:
    """The first `count` requests wait for each other: none is answered before all `count` are
    in (so at least `count` were in flight at once); later requests pass."""

    def __init__(self, count: int) -> None:
        self._barrier = threading.Barrier(count)
        self._lock = threading.Lock()
        self._arrived = 0

    def __call__(self, arrival: Arrival) -> None:
        with self._lock:
            self._arrived += 1
            if self._arrived > self._barrier.parties:
                return
        self._barrier.wait(MAX_HOLD_S)


class OutageAt:
    """The server stops listening for `seconds` when its `number`-th request arrives (or the
    first after it that reaches the hook: injected 429s and 5xx are answered before)."""

    def __init__(self, number: int, seconds: float) -> None:
        self.number, self.seconds = number, seconds
        self.server: FakeJudgeServer | None = None  # set once the server is made
        self._lock = threading.Lock()
        self._done = False

    def __call__(self, arrival: Arrival) -> None:
        with self._lock:
            if self._done or arrival.number < self.number:
                return
            self._done = True
        assert self.server is not None, "OutageAt.server was never set"
        self.server.refuse_connections(self.seconds)
