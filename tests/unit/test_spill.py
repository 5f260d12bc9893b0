"""jobs.engine.pairs.spill: rows filed by bucket come back whole, by bucket, whatever the runs."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from jobs.engine.pairs.spill import Spill

SCHEMA = pl.Schema({"bucket_of": pl.Int64(), "key": pl.String()})


def _rows(count: int, buckets: int, seed: int) -> pl.DataFrame:
    rng = random.Random(seed)
    return pl.DataFrame(
        {
            "bucket_of": [rng.randrange(buckets) for _ in range(count)],
            "key": [f"{rng.getrandbits(64):016x}" for _ in range(count)],
        },
        schema=SCHEMA,
    )


def _spill(tmp_path: Path, flush_bytes: int) -> Spill:
    return Spill(tmp_path / "spill", pl.col("bucket_of") % 7, SCHEMA, flush_bytes=flush_bytes)


@pytest.mark.parametrize("flush_bytes", [1, 4_000, 10**9])
def test_every_row_comes_back_in_its_bucket_once(tmp_path: Path, flush_bytes: int) -> None:
    spill = _spill(tmp_path, flush_bytes)
    added = [_rows(300, 40, seed) for seed in range(10)]
    for frame in added:
        spill.add(frame)
    buckets = spill.close()
    everything = pl.concat(added)
    expected = sorted(set((everything["bucket_of"] % 7).to_list()))
    assert buckets == expected
    back = []
    for bucket in buckets:
        rows = spill.read(bucket)
        assert rows.schema == SCHEMA
        assert ((rows["bucket_of"] % 7) == bucket).all()
        back.append(rows)
    assert spill.rows == everything.height == sum(frame.height for frame in back)
    assert pl.concat(back).sort("key").equals(everything.sort("key"))


def test_one_file_a_run_not_a_file_a_bucket(tmp_path: Path) -> None:
    """The point of the design: open writers, hence files, do not grow with the buckets."""
    spill = Spill(tmp_path / "spill", pl.col("bucket_of"), SCHEMA, flush_bytes=10**9)
    spill.add(_rows(5_000, 600, seed=1))
    assert len(spill.close()) > 500
    assert len(list((tmp_path / "spill").iterdir())) == 1


def test_chunks_bound_what_is_handed_on(tmp_path: Path) -> None:
    spill = _spill(tmp_path, flush_bytes=2_000)
    for seed in range(20):
        spill.add(_rows(100, 7, seed))
    for bucket in spill.close():
        chunks = list(spill.chunks(bucket, max_rows=150))
        assert len(chunks) > 1
        # a chunk exceeds the bound only by one run's share of the bucket
        assert all(chunk.height <= 150 + 100 for chunk in chunks)
        assert pl.concat(chunks).equals(spill.read(bucket))


def test_nothing_added_reads_empty(tmp_path: Path) -> None:
    spill = _spill(tmp_path, flush_bytes=1)
    spill.add(pl.DataFrame(schema=SCHEMA))
    assert spill.close() == []
    assert spill.read(3).is_empty()
    assert spill.read(3).schema == SCHEMA
    assert list(spill.chunks(3, 10)) == []
