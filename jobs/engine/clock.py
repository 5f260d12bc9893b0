"""The run's time: the clocks it reads (`RunClock`, injected by tests) and the seconds each of
its phases took (`Timings`, the manifest's `timings_s`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from scorer_core.protocols import Sleeper
from scorer_core.retry import real_sleep


@dataclass(frozen=True, kw_only=True)
class RunClock:
    """The clocks of a run: batch mode's waits (`sleep`), its pace (`monotonic`), and the wall
    clock in epoch seconds (`wall`: the run's date, `judge.batch.deadline`)."""

    sleep: Sleeper = real_sleep
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


@dataclass
class Timings:
    """Seconds per phase of a run: `timed` measures one, `add` adds to one."""

    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Add the time the block takes to `phase`."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.add(phase, time.monotonic() - started)

    def rounded(self) -> dict[str, float]:
        """The phases' seconds to the millisecond, as the manifest records them."""
        return {phase: round(value, 3) for phase, value in self.seconds.items()}
