"""The job with its input and its output on S3 (moto's real HTTP endpoint on 127.0.0.1), read
back through s3fs: a publish that fails half way and the rerun that completes it, and a missing
bucket. (A whole run read back from S3, as from the other stores, is
tests/integration/test_stores_job.py's.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
import s3fs

from jobs.core.config import JobConfig, parse_config
from jobs.core.run_layout import RunLocation
from jobs.core.storage import Store, s3_options
from jobs.engine.driver import RunFailed
from jobs.run.job import run_job
from jobs.tools.sample_data import generate, write_jsonl
from scorer_core.errors import StorageError
from tests.support.job import COLUMNS, lexical_truth
from tests.support.moto import MotoS3

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("ray_local")]


def s3(moto: MotoS3) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(**s3_options(moto.storage_options))


def upload_items(moto: MotoS3, tmp_path: Path, url: str, count: int) -> list[dict[str, Any]]:
    rows = list(generate(count, seed=29, markers=True))
    local = tmp_path / "items.jsonl"
    write_jsonl(local, iter(rows))
    s3(moto).put_file(str(local), url)
    return rows


def s3_config(moto: MotoS3, source: str, out: str, **run: Any) -> JobConfig:
    return parse_config(
        {
            "input": {
                "path": source,
                "format": "jsonl",
                "columns": COLUMNS,
                "storage_options": moto.storage_options,
            },
            "output": {"path": out, "storage_options": moto.storage_options},
            "judge": {"model": "lexical"},
            "ray": {"shard_size": 40, "workers": 2},
            "run": run,
        }
    )


def read_scores(moto: MotoS3, out: str) -> tuple[int, int, list[str]]:
    """(rows, distinct query ids, run ids) of every published score, via DuckDB over s3fs."""
    con = duckdb.connect()
    con.register_filesystem(s3(moto))
    row = con.execute(
        "select count(*), count(distinct query_id), list(distinct run_id order by run_id) "
        f"from read_parquet('{out}/scores/**/*.parquet', hive_partitioning=true)"
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_failed_publish_leaves_no_scores_and_a_rerun_completes_it(
    moto_s3: MotoS3, s3_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = f"{s3_prefix}/in/items.jsonl"
    out = f"{s3_prefix}/out"
    rows = upload_items(moto_s3, tmp_path, source, 120)
    config = s3_config(moto_s3, source, out, id="s3-publish-1", date="2026-11-30")
    location = RunLocation("s3-publish-1", config.run.date)  # type: ignore[arg-type]
    fs = s3(moto_s3)

    # Publication fails after the verdicts table is uploaded, before summary and scores.
    real_upload = Store.upload_file_atomic
    uploads: list[str] = []

    def failing_upload(store: Store, local_path: str, path: str) -> None:
        table = path.split(f"{out}/"[5:], 1)[-1]  # the path in the output folder
        uploads.append(table)
        if table.startswith("summary/"):
            raise StorageError(f"write {table} failed: injected outage")
        real_upload(store, local_path, path)

    monkeypatch.setattr(Store, "upload_file_atomic", failing_upload)
    with pytest.raises(StorageError, match="injected outage"):
        run_job(config)
    assert uploads == [location.table_file("verdicts"), location.table_file("summary")]

    # Nothing under scores/ and no manifest: readers see no part of the run.
    assert fs.find(f"{out}/scores") == []
    assert not fs.exists(f"{out}/{location.manifest}")
    # The finished shards are still staged, so the rerun has nothing left to judge.
    staged = fs.find(f"{out}/{location.staging}/items")
    assert len(staged) == len(fs.find(f"{out}/{location.staging}/verdicts")) >= 3

    monkeypatch.setattr(Store, "upload_file_atomic", real_upload)
    outcome = run_job(config)
    assert outcome.shards_skipped == outcome.shards_total == len(staged)
    assert read_scores(moto_s3, out) == (120, 120, ["s3-publish-1"])
    with fs.open(f"{out}/{location.table_file('scores')}", "rb") as handle:
        scores = pl.read_parquet(handle)
    assert {r["query_id"]: r["score"] for r in scores.iter_rows(named=True)} == (
        lexical_truth(rows)
    )
    # The verdicts table uploaded by the failed attempt was replaced, not added to.
    assert fs.find(f"{out}/verdicts") == [f"{out}/{location.table_file('verdicts')}"[5:]]
    with fs.open(f"{out}/{location.table_file('verdicts')}", "rb") as handle:
        verdicts = pl.read_parquet(handle)
    assert verdicts.height == sum(len(row["contexts"]) for row in rows)
    assert json.loads(fs.cat_file(f"{out}/{location.manifest}"))["status"] == "complete"
    assert not fs.exists(f"{out}/{location.staging}")


def test_output_in_a_missing_bucket_fails_and_publishes_nothing(
    moto_s3: MotoS3, s3_prefix: str, tmp_path: Path
) -> None:
    source = f"{s3_prefix}/in/items.jsonl"
    upload_items(moto_s3, tmp_path, source, 20)
    out = "s3://ctxprec-no-such-bucket/out"
    config = s3_config(moto_s3, source, out)
    with pytest.raises((StorageError, RunFailed)) as caught:
        run_job(config)
    assert "ctxprec-no-such-bucket" in str(caught.value)
    assert not s3(moto_s3).exists("ctxprec-no-such-bucket")
