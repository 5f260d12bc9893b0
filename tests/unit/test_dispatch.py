"""The shard board: leases, rejoin after a worker dies, the stop on failure or a fatal report."""

from __future__ import annotations

from collections import deque

from jobs.engine.control.shard_board import WAIT, ShardBoard
from jobs.engine.messages import ShardReport
from jobs.inputs import Shard


def shard(n: int) -> Shard:
    return Shard(
        shard_id=f"s{n}",
        path="in.jsonl",
        format="jsonl",
        start=n,
        end=n + 1,
    )


def board(count: int) -> ShardBoard:
    return ShardBoard(todo=deque((n, shard(n)) for n in range(count)))


def test_shards_go_out_in_order_and_come_back_as_reports() -> None:
    b = board(3)
    assert b.next_shard("w1")[1].shard_id == "s0"  # type: ignore[index]
    assert b.next_shard("w2")[1].shard_id == "s1"  # type: ignore[index]
    assert b.held_by("w1") == ["s0"]
    b.done("w1", ShardReport(shard_id="s0", items=5))
    news = b.poll()
    assert [r.shard_id for r in news.reports] == ["s0"]
    assert news.waiting == 1 and news.assigned == 1 and news.failure is None
    assert b.poll().reports == []  # each report is news once


def test_a_restarted_worker_takes_back_what_it_held_first() -> None:
    b = board(4)
    b.next_shard("w1")
    b.next_shard("w1")
    b.next_shard("w2")
    assert b.rejoin("w1") == 2  # its process died: s0 and s1 are kept for its new attempt
    assert b.held_by("w1") == ["s0", "s1"]
    assert b.poll().waiting == 3
    assert [b.next_shard("w1")[1].shard_id for _ in range(2)] == ["s0", "s1"]  # type: ignore[index]
    assert b.rejoin("w3") == 0


def test_the_shards_of_a_dead_worker_wait_for_its_new_attempt_alone() -> None:
    """Only the new attempt reads its dead attempt's journal: another worker taking one of
    those shards would judge its pairs again."""
    b = board(4)
    for _ in range(2):
        b.next_shard("w1")
    for _ in range(2):
        b.next_shard("w2")
    assert b.rejoin("w1") == 2
    assert b.next_shard("w2") is None  # a free lane of another worker finds nothing to take
    assert b.next_shard("w1")[1].shard_id == "s0"  # type: ignore[index]
    assert b.rejoin("w1") == 2  # died again, holding s0, before taking s1: both kept, in order
    assert [b.next_shard("w1")[1].shard_id for _ in range(2)] == ["s0", "s1"]  # type: ignore[index]
    assert b.next_shard("w1") is None


def test_kept_shards_come_before_the_queue() -> None:
    b = board(3)
    b.next_shard("w1")
    b.rejoin("w1")
    assert [b.next_shard("w1")[1].shard_id for _ in range(3)] == ["s0", "s1", "s2"]  # type: ignore[index]
    assert b.next_shard("w2") is None


def test_a_failure_or_a_fatal_report_stops_handing_out_shards() -> None:
    b = board(5)
    b.next_shard("w1")
    b.failed("w1", "s0", "shard s0 failed: bad file")
    b.failed("w2", "s9", "a later failure")
    assert b.next_shard("w2") is None
    assert b.poll().failure == "shard s0 failed: bad file"  # the first one is reported
    fatal = board(5)
    fatal.next_shard("w1")
    fatal.done("w1", ShardReport(shard_id="s0", fatal="judge refused the key"))
    assert fatal.next_shard("w1") is None


def test_a_shard_awaiting_an_owner_goes_out_once_the_owner_is_staged() -> None:
    """s2 awaits pairs s0 judges first: while s0 runs, lanes get s1, then WAIT."""
    b = ShardBoard(todo=deque((n, shard(n)) for n in range(3)), owners={"s2": frozenset({"s0"})})
    assert b.next_shard("w1")[1].shard_id == "s0"  # type: ignore[index]
    assert b.next_shard("w2")[1].shard_id == "s1"  # type: ignore[index]
    assert b.next_shard("w2") == WAIT
    assert b.poll().waiting == 1
    b.done("w2", ShardReport(shard_id="s1", items=1))
    assert b.next_shard("w2") == WAIT  # s1 was not its owner
    b.done("w1", ShardReport(shard_id="s0", items=1))
    assert b.next_shard("w2")[1].shard_id == "s2"  # type: ignore[index]
    assert b.next_shard("w2") is None


def test_an_owner_staged_by_an_earlier_attempt_is_not_waited_for() -> None:
    """A rerun's board holds only the shards left: an owner outside it is staged already."""
    b = ShardBoard(todo=deque([(2, shard(2))]), owners={"s2": frozenset({"s0"})})
    assert b.next_shard("w1")[1].shard_id == "s2"  # type: ignore[index]


def test_a_batch_pass_left_pending_is_not_staged() -> None:
    b = ShardBoard(todo=deque((n, shard(n)) for n in range(2)), owners={"s1": frozenset({"s0"})})
    b.next_shard("w1")
    b.done("w1", ShardReport(shard_id="s0", pending=3))
    assert b.next_shard("w1") == WAIT
