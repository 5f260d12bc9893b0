"""jobs.engine.pairs.repeats: the run's later occurrences of query ids, found partition by
partition,
against a one-dictionary reference; with partitions and blocks shrunk so that a few hundred
keys already split partitions (twice) and spread marks over several blocks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.core.schema import duplicate_error
from jobs.engine.pairs import repeats
from jobs.engine.pairs.repeats import (
    KEYS,
    MARKS,
    SEQ_SHIFT,
    RepeatFinder,
    later_occurrences,
    mark_rows,
)


def where(source: str, row: int) -> str:
    """A row's position in the words of the input reader's messages (JSONL rows are known by
    the byte offset of their line)."""
    return f"{source} {'row' if source.endswith('.parquet') else 'line at byte'} {row}"


def reference(keys: list[tuple[str, int, str, int]]) -> dict[int, tuple[str, str]]:
    """item_seq -> (query_id, where the first occurrence is), for every later occurrence."""
    first: dict[str, str] = {}
    later: dict[int, tuple[str, str]] = {}
    for query_id, seq, source, row in sorted(keys, key=lambda key: key[1]):
        if query_id in first:
            later[seq] = (query_id, first[query_id])
        else:
            first[query_id] = where(source, row)
    return later


def run_keys(ids: list[str], shard_size: int) -> list[tuple[str, int, str, int]]:
    """Keys of a run whose rows hold `ids` in order, `shard_size` rows per shard; sources
    alternate between a JSONL and a Parquet file."""
    keys = []
    for index, query_id in enumerate(ids):
        shard, within = divmod(index, shard_size)
        source = "/in/a.parquet" if shard % 2 else "s3://b/in/b.jsonl"
        keys.append((query_id, shard << SEQ_SHIFT | within, source, index * 10))
    return keys


def frame(keys: list[tuple[str, int, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(keys, schema=KEYS, orient="row")


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Partitions of at most 20 keys, 4 per split, blocks of 2 shards."""
    monkeypatch.setattr(repeats, "FAN", 4)
    monkeypatch.setattr(repeats, "PARTITION_ROWS", 20)
    monkeypatch.setattr(repeats, "BLOCK_SHARDS", 2)
    yield


def find(tmp_path: Path, keys: list[tuple[str, int, str, int]], batch: int = 37) -> dict:
    """Feed `keys` in shuffled-looking batches; (marks by item_seq from by_shard, from
    for_shard, count)."""
    with RepeatFinder(tmp_path / "scratch") as finder:
        ordered = keys[1::2] + keys[::2]  # not in input order
        for start in range(0, len(ordered), batch):
            finder.add(frame(ordered[start : start + batch]))
        marks = finder.finish()
        by_shard: dict[int, tuple[str, str]] = {}
        for number, piece in marks.by_shard():
            assert piece.schema == MARKS
            assert (piece["item_seq"] // (1 << SEQ_SHIFT)).unique().to_list() == [number]
            assert piece["item_seq"].is_sorted()
            by_shard.update((seq, (query_id, first)) for seq, query_id, first in piece.iter_rows())
        shards = {seq >> SEQ_SHIFT for _, seq, _, _ in keys}
        for_shard: dict[int, tuple[str, str]] = {}
        for number in sorted(shards):
            for seq, query_id, first in marks.for_shard(number).iter_rows():
                assert seq >> SEQ_SHIFT == number
                for_shard[seq] = (query_id, first)
        return {"by_shard": by_shard, "for_shard": for_shard, "count": marks.count}


def test_later_occurrences_name_the_first_in_input_order() -> None:
    keys = [
        ("a", 1 << SEQ_SHIFT | 5, "/in/x.parquet", 7),
        ("a", 0 << SEQ_SHIFT | 9, "/in/x.jsonl", 120),  # the first, though listed second
        ("b", 0 << SEQ_SHIFT | 1, "/in/x.jsonl", 3),
        ("a", 2 << SEQ_SHIFT | 0, "/in/x.parquet", 8),
    ]
    marks = later_occurrences(frame(keys))
    assert marks.schema == MARKS
    assert marks.rows() == [
        (1 << SEQ_SHIFT | 5, "a", "/in/x.jsonl line at byte 120"),
        (2 << SEQ_SHIFT | 0, "a", "/in/x.jsonl line at byte 120"),
    ]
    assert later_occurrences(frame(keys[1:3])).is_empty()


@pytest.mark.usefixtures("small")
def test_partitions_split_twice_and_marks_span_blocks(tmp_path: Path) -> None:
    # 600 keys: 4 partitions of ~150 > 20 split into ~37, split again into ~9.
    ids = [f"q{n % 450}" for n in range(600)]  # the last 150 repeat the first 150
    ids[599] = ids[598] = "q7"  # a third and a fourth occurrence, in the last shard
    keys = run_keys(ids, shard_size=25)
    found = find(tmp_path, keys)
    expected = reference(keys)
    assert len(expected) == 150
    assert found["by_shard"] == found["for_shard"] == expected
    assert found["count"] == 150
    assert not (tmp_path / "scratch").exists()  # removed on close


@pytest.mark.usefixtures("small")
def test_one_id_everywhere_stays_in_one_partition(tmp_path: Path) -> None:
    keys = run_keys(["same"] * 200 + [f"u{n}" for n in range(30)], shard_size=16)
    found = find(tmp_path, keys)
    assert found["by_shard"] == found["for_shard"] == reference(keys)
    assert found["count"] == 199
    assert {first for _, first in found["by_shard"].values()} == {
        "s3://b/in/b.jsonl line at byte 0"
    }


@pytest.mark.usefixtures("small")
def test_no_repeats_no_marks(tmp_path: Path) -> None:
    found = find(tmp_path, run_keys([f"u{n}" for n in range(300)], shard_size=30))
    assert found == {"by_shard": {}, "for_shard": {}, "count": 0}
    assert find(tmp_path, []) == {"by_shard": {}, "for_shard": {}, "count": 0}


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.sampled_from([f"id{n}" for n in range(40)]), max_size=250),
    shard_size=st.integers(1, 40),
)
def test_any_run_matches_the_reference(
    tmp_path_factory: pytest.TempPathFactory, ids: list[str], shard_size: int
) -> None:
    keys = run_keys(ids, shard_size)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(repeats, "FAN", 3)
        patch.setattr(repeats, "PARTITION_ROWS", 15)
        patch.setattr(repeats, "BLOCK_SHARDS", 3)
        found = find(tmp_path_factory.mktemp("run"), keys, batch=13)
    expected = reference(keys)
    assert found["by_shard"] == found["for_shard"] == expected
    assert found["count"] == len(expected)


def test_mark_rows_turns_later_occurrences_into_errors_naming_the_first() -> None:
    items = pl.DataFrame(
        {
            "query_id": ["a", "b", "a"],
            "item_seq": [3 << SEQ_SHIFT | 0, 3 << SEQ_SHIFT | 1, 3 << SEQ_SHIFT | 2],
            "status": ["ok", "ok", "error"],
            "error": [None, None, "duplicate query_id a: only its first occurrence (x) is scored"],
            "score": [0.5, 1.0, None],
            "reason": ["r", "s", ""],
            "duplicate_of": [None, None, "x"],
        }
    )
    first = "/in/f.jsonl line at byte 0"
    marks = pl.DataFrame(
        [(3 << SEQ_SHIFT | 0, "a", first), (3 << SEQ_SHIFT | 2, "a", first)],
        schema=MARKS,
        orient="row",
    )
    marked = mark_rows(items, marks)
    assert marked.columns == items.columns
    assert marked.rows() == [
        ("a", 3 << SEQ_SHIFT | 0, "error", duplicate_error("a", first), None, "r", first),
        ("b", 3 << SEQ_SHIFT | 1, "ok", None, 1.0, "s", None),
        ("a", 3 << SEQ_SHIFT | 2, "error", duplicate_error("a", first), None, "", first),
    ]
    assert mark_rows(items, pl.DataFrame(schema=MARKS)).equals(items)
