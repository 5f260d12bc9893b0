"""Run progress: counters the workers add to (batched, a few actor calls a second) and the
line the driver logs from them (`ProgressLine`)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from jobs.core.console import progress_extra

logger = logging.getLogger(__name__)

USAGE_COUNTERS = ("calls", "rate_limited", "retries", "cache_hits")  # `Usage` fields
COUNTERS = ("items", "ok", "unscored", "errors", *USAGE_COUNTERS)


@dataclass(kw_only=True)
class BatchedCounter:
    """Worker-side accumulator that flushes to the progress actor at most every `every_s`."""

    flush: Callable[[dict[str, int]], None]
    every_s: float = 0.5
    clock: Callable[[], float] = time.monotonic
    _pending: dict[str, int] = field(default_factory=dict)
    _last: float = 0.0

    def add(self, **increments: int) -> None:
        for key, value in increments.items():
            if value:
                self._pending[key] = self._pending.get(key, 0) + value
        if self.clock() - self._last >= self.every_s:
            self.drain()

    def drain(self) -> None:
        if self._pending:
            self.flush(self._pending)
            self._pending = {}
        self._last = self.clock()


def _eta(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressLine:
    """`items judged, items/s, 429s, ETA` from the last `counts` polled, logged as the progress
    record `jobs.core.console.ConsoleHandler` draws. `sizes`: the shards' lengths, in rows when
    `exact`, else in bytes (the item total then extrapolated from the shards finished)."""

    def __init__(
        self, sizes: Mapping[str, int], *, exact: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._sizes = dict(sizes)
        self._units_total = sum(self._sizes.values())
        self._exact = exact
        self._clock = clock
        self._start = clock()
        self._units_done = self._items_done = self._shards_done = 0
        self.counts: dict[str, int] = {}

    @property
    def total(self) -> int | None:
        """The items the shards hold (an estimate while their sizes are in bytes)."""
        if self._exact:
            return self._units_total
        if not self._units_done:
            return None
        return round(self._items_done / self._units_done * self._units_total)

    def shard_done(self, shard_id: str, items: int) -> None:
        self._shards_done += 1
        self._units_done += self._sizes.get(shard_id, 0)
        self._items_done += items

    def render(self) -> str:
        counts, total = self.counts, self.total
        elapsed = max(1e-6, self._clock() - self._start)
        items = counts.get("items", 0)
        rate = items / elapsed
        if total:
            filled = int(min(1.0, items / total) * 24)
            bar = "#" * filled + "." * (24 - filled)
            eta = _eta((total - items) / rate if rate > 0 else float("inf"))
            head = f"[{bar}] {items:,}/{total:,} items"
        else:
            eta, head = "--:--", f"{items:,} items"
        return (
            f"{head} | shards {self._shards_done}/{len(self._sizes)} | {rate:,.1f} items/s | "
            f"calls {counts.get('calls', 0):,} | 429s {counts.get('rate_limited', 0):,} | "
            f"cache {counts.get('cache_hits', 0):,} | unscored {counts.get('unscored', 0):,} | "
            f"errors {counts.get('errors', 0):,} | ETA {eta}"
        )

    def draw(self, *, final: bool = False) -> None:
        logger.info(self.render(), extra=progress_extra(final))
