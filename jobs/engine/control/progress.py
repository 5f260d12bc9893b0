"""Run progress: counters the workers add to (batched, a few actor calls a second) and the
line the driver logs from them (`ProgressLine`, its total from `ExpectedItems`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from jobs.core.console import progress_extra

logger = logging.getLogger(__name__)

COUNTERS = ("items", "ok", "unscored", "errors", "calls", "rate_limited", "retries", "cache_hits")


@dataclass
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


class ExpectedItems:
    """How many items the shards to run hold: the progress line's total, for its bar and ETA.

    `sizes` are the shards' lengths by shard id, in rows when `exact` (Parquet row ranges) or
    in bytes (JSONL byte ranges). Bytes say nothing exact about items, so then the total is
    extrapolated from the items per byte of the shards finished so far (unknown until one is).
    """

    def __init__(self, sizes: Mapping[str, int], *, exact: bool) -> None:
        self._sizes = dict(sizes)
        self._units_total = sum(self._sizes.values())
        self._exact = exact
        self._units_done = 0
        self._items_done = 0

    @property
    def total(self) -> int | None:
        if self._exact:
            return self._units_total
        if not self._units_done:
            return None
        return round(self._items_done / self._units_done * self._units_total)

    def shard_done(self, shard_id: str, items: int) -> None:
        self._units_done += self._sizes.get(shard_id, 0)
        self._items_done += items


def _eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class ProgressLine:
    """`items judged, items/s, 429s, ETA` as one line, logged as the progress record that
    `jobs.core.console.ConsoleHandler` draws (in place on a terminal, plain lines in CI)."""

    def __init__(
        self, total_items: int | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._total = total_items
        self._clock = clock
        self._start = clock()

    def set_total(self, total_items: int | None) -> None:
        """Update the expected number of items (an estimate while input sizes are in bytes)."""
        self._total = total_items

    def render(self, counts: dict[str, int], shards_done: int, shards_total: int) -> str:
        elapsed = max(1e-6, self._clock() - self._start)
        items = counts.get("items", 0)
        rate = items / elapsed
        if self._total:
            share = min(1.0, items / self._total)
            filled = int(share * 24)
            bar = "#" * filled + "." * (24 - filled)
            eta = _eta((self._total - items) / rate if rate > 0 else float("inf"))
            head = f"[{bar}] {items:,}/{self._total:,} items"
        else:
            eta = "--:--"
            head = f"{items:,} items"
        return (
            f"{head} | shards {shards_done}/{shards_total} | {rate:,.1f} items/s | "
            f"calls {counts.get('calls', 0):,} | 429s {counts.get('rate_limited', 0):,} | "
            f"cache {counts.get('cache_hits', 0):,} | unscored {counts.get('unscored', 0):,} | "
            f"errors {counts.get('errors', 0):,} | ETA {eta}"
        )

    def update(
        self, counts: dict[str, int], shards_done: int, shards_total: int, *, final: bool = False
    ) -> None:
        line = self.render(counts, shards_done, shards_total)
        logger.info(line, extra=progress_extra(final))
