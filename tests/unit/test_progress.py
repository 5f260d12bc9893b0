"""The progress line's item total (`ExpectedItems`): exact for row ranges, extrapolated from
finished shards for byte ranges."""

from __future__ import annotations

from jobs.engine.control.progress import ExpectedItems, ProgressLine


def test_row_ranges_give_the_exact_total_from_the_start() -> None:
    expected = ExpectedItems({"a": 100, "b": 50}, exact=True)
    assert expected.total == 150
    expected.shard_done("a", 100)
    assert expected.total == 150


def test_byte_ranges_extrapolate_from_the_finished_shards() -> None:
    expected = ExpectedItems({"a": 4000, "b": 4000, "c": 2000}, exact=False)
    assert expected.total is None  # bytes say nothing about items until a shard finished
    expected.shard_done("a", 20)  # 200 bytes per item
    assert expected.total == 50
    expected.shard_done("b", 30)  # 8000 bytes for 50 items: 160 per item
    assert expected.total == round(50 / 8000 * 10_000)


def test_the_line_shows_the_total_and_the_eta_once_known() -> None:
    now = [0.0]
    expected = ExpectedItems({"a": 1000, "b": 1000}, exact=False)
    line = ProgressLine(expected.total, clock=lambda: now[0])
    now[0] = 10.0
    assert "ETA --:--" in line.render({"items": 5}, 0, 2)
    expected.shard_done("a", 10)
    line.set_total(expected.total)
    assert line.render({"items": 10}, 1, 2).startswith("[############............] 10/20 items")
    assert "ETA 00:10" in line.render({"items": 10}, 1, 2)
