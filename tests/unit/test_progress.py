"""The progress line's item total: exact for row ranges, extrapolated from finished shards for
byte ranges."""

from __future__ import annotations

from jobs.engine.control.progress import ProgressLine


def test_row_ranges_give_the_exact_total_from_the_start() -> None:
    line = ProgressLine({"a": 100, "b": 50}, exact=True)
    assert line.total == 150
    line.shard_done("a", 100)
    assert line.total == 150


def test_byte_ranges_extrapolate_from_the_finished_shards() -> None:
    line = ProgressLine({"a": 4000, "b": 4000, "c": 2000}, exact=False)
    assert line.total is None  # bytes say nothing about items until a shard finished
    line.shard_done("a", 20)  # 200 bytes per item
    assert line.total == 50
    line.shard_done("b", 30)  # 8000 bytes for 50 items: 160 per item
    assert line.total == round(50 / 8000 * 10_000)


def test_the_line_shows_the_total_and_the_eta_once_known() -> None:
    now = [0.0]
    line = ProgressLine({"a": 1000, "b": 1000}, exact=False, clock=lambda: now[0])
    now[0] = 10.0
    line.counts = {"items": 5}
    assert "ETA --:--" in line.render()
    line.shard_done("a", 10)
    line.counts = {"items": 10}
    assert line.render().startswith("[############............] 10/20 items | shards 1/2")
    assert "ETA 00:10" in line.render()
