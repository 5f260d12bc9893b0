"""jobs.inputs.planning: shards from footers and samples, with stable ids."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.inputs import (
    FileInfo,
    InputSpec,
    list_input_files,
    plan_shards,
    planning,
    read_shard,
)
from jobs.inputs.planning import jsonl_byte_ranges, parquet_row_ranges
from scorer_core.errors import ConfigError, InputError
from tests.support.inputs import (
    item,
    spec_for,
    write_jsonl,
    write_parquet,
)


def test_jsonl_shard_ranges_cover_file() -> None:
    assert jsonl_byte_ranges(0, b"", 10) == []
    sample = b'{"a": 1}\n' * 10  # 9 bytes per row
    assert jsonl_byte_ranges(100, sample, 5) == [(0, 45), (45, 90), (90, 100)]
    assert jsonl_byte_ranges(5000, b"x" * 4096, 1) == [(0, 4096), (4096, 5000)]  # no newline


def test_jsonl_planning_reads_only_a_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_jsonl(tmp_path / "f.jsonl", [item(i, pad="p" * 200) for i in range(3000)])
    spec = spec_for(path)
    files = list_input_files(spec)
    asked: list[tuple[int, int]] = []
    real = planning._jsonl_sample

    def spy(spec: InputSpec, info: FileInfo) -> bytes:
        data = real(spec, info)
        asked.append((info.size, len(data)))
        return data

    monkeypatch.setattr(planning, "_jsonl_sample", spy)
    shards = plan_shards(spec, files, 100)
    assert asked == [(files[0].size, planning.SAMPLE_BYTES)]
    assert 25 <= len(shards) <= 35
    counts = [sum(1 for _ in read_shard(spec, s)) for s in shards]
    assert sum(counts) == 3000
    assert max(counts) <= 110


def test_parquet_row_ranges() -> None:
    assert parquet_row_ranges([], 10) == []
    assert parquet_row_ranges([3, 3, 3, 3], 7) == [(0, 6), (6, 12)]
    assert parquet_row_ranges([3, 0, 3], 10) == [(0, 6)]
    assert parquet_row_ranges([10], 4) == [(0, 3), (3, 6), (6, 10)]
    assert parquet_row_ranges([2, 10, 2], 5) == [(0, 2), (2, 7), (7, 12), (12, 14)]
    for sizes in ([1] * 17, [5, 100, 1, 1, 33], [7] * 9):
        for shard_size in (1, 2, 6, 50, 1000):
            ranges = parquet_row_ranges(sizes, shard_size)
            assert ranges[0][0] == 0 and ranges[-1][1] == sum(sizes)
            assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(ranges))


def test_parquet_empty_and_corrupt(tmp_path: Path) -> None:
    empty = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist([item(0)]).slice(0, 0), empty)
    spec = spec_for(empty)
    assert plan_shards(spec, list_input_files(spec), 10) == []
    broken = tmp_path / "b.parquet"
    broken.write_bytes(b"not parquet at all" * 10)
    spec = spec_for(broken)
    with pytest.raises(InputError, match=rf"{broken} is not a readable Parquet file"):
        plan_shards(spec, list_input_files(spec), 10)


def test_planning_is_deterministic(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "b.jsonl", [item(i) for i in range(200)])
    write_parquet(folder / "a.parquet", [item(i) for i in range(90)], 20)
    spec = spec_for(folder)
    first = plan_shards(spec, list_input_files(spec), 25)
    second = plan_shards(spec_for(folder), list_input_files(spec_for(folder)), 25)
    assert first == second
    ids = [s.shard_id for s in first]
    assert len(set(ids)) == len(ids)
    assert ids[0].startswith("00000-000000000000-")
    assert ids == sorted(ids)  # in file order, and in each file by position
    other = {s.shard_id for s in plan_shards(spec, list_input_files(spec), 30)}
    assert other != set(ids)  # another shard_size plans other ids
    write_jsonl(folder / "b.jsonl", [item(i) for i in range(201)])  # the file changed
    shards = plan_shards(spec, list_input_files(spec), 25)
    changed = {s.shard_id for s in shards if s.path.endswith("b.jsonl")}
    assert changed.isdisjoint(ids)


def test_shard_size_must_be_positive(tmp_path: Path) -> None:
    spec = spec_for(write_jsonl(tmp_path / "f.jsonl", [item(0)]))
    with pytest.raises(ConfigError, match="shard_size"):
        plan_shards(spec, list_input_files(spec), 0)
