"""jobs.inputs.parquet: row-range shards read every row once, only the needed columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.inputs import (
    ItemRecord,
    list_input_files,
    plan_shards,
    to_item,
)
from tests.support.inputs import (
    item,
    read_all,
    spec_for,
    write_extractor_module,
    write_parquet,
)


@pytest.mark.parametrize("row_group_size", [1, 7, 64, 1000])
def test_parquet_row_sharding_reads_every_row_once(tmp_path: Path, row_group_size: int) -> None:
    rows = [item(i, extra_col=i) for i in range(150)]
    path = write_parquet(tmp_path / "f.parquet", rows, row_group_size)
    spec = spec_for(path)
    files = list_input_files(spec)
    for shard_size in (1, 3, 7, 10, 64, 149, 1000):
        shards = plan_shards(spec, files, shard_size)
        assert all(s.kind == "rows" for s in shards)
        got = read_all(spec, shards)
        assert [r.row for r in got] == list(range(150))
        assert all(r.unit == "row" and r.source == str(path) for r in got)
        # only the configured columns are read
        assert [r.data for r in got] == [
            {k: v for k, v in r.items() if k != "extra_col"} for r in rows
        ]
        assert max(s.end - s.start for s in shards) <= max(shard_size, row_group_size)


def test_parquet_extractor_gets_every_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    extractor_module = write_extractor_module(tmp_path, monkeypatch)
    rows = [{"query_id": "a", "input": "q", "output": "o", "docs": "x|y", "other": 1}]
    path = write_parquet(tmp_path / "f.parquet", rows, 10)
    spec = spec_for(path, context_extractor=f"{extractor_module}:split_docs")
    got = read_all(spec, plan_shards(spec, list_input_files(spec), 10))
    assert got[0].data == rows[0]
    record = to_item(spec, got[0])
    assert isinstance(record, ItemRecord) and record.contexts == ("x", "y")
