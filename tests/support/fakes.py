"""Stand-ins for time (what the tests inject instead of sleeping or reading a real clock), and
the type of the `fake_judge` fixture."""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.fake_judge import FakeJudgeServer

# `fake_judge(**options)`: starts a FakeJudgeServer with those options (tests/conftest.py).
JudgeFactory = Callable[..., FakeJudgeServer]


class RecordingSleep:
    """Injected instead of asyncio.sleep: records the waits, waits for nothing."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


class SleepLog:
    """Injected instead of time.sleep: records the waits, waits for nothing."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class FakeClock:
    """A clock that moves only when told: `clock()` is the time, `advance(s)` moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class NoJitter(random.Random):
    """A random source that always draws 0: no jitter on top of a Retry-After."""

    def random(self) -> float:
        return 0.0
