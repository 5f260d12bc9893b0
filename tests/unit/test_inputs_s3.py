"""jobs.inputs end to end through s3:// on the moto server: list, check, plan, read."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path

import pytest
import s3fs

from jobs.inputs import (
    InputSpec,
    ItemRecord,
    inspect_input,
    list_input_files,
    plan_shards,
    to_item,
)
from scorer_core.errors import InputError
from tests.support.inputs import (
    item,
    random_jsonl,
    read_all,
    write_parquet,
)
from tests.support.moto import MotoS3


def test_s3_jsonl_and_parquet_end_to_end(moto_s3: MotoS3, s3_prefix: str, tmp_path: Path) -> None:
    fs = s3fs.S3FileSystem(
        key="testing",
        secret="testing",
        client_kwargs={"endpoint_url": moto_s3.endpoint_url},
        skip_instance_cache=True,
    )
    rng = random.Random(42)
    content, jsonl_rows = random_jsonl(tmp_path / "local.jsonl", rng, 60)
    content = content.replace(b"\n", b"\n\xff bad line\n", 1)  # one broken line
    parquet_rows = [item(i) for i in range(100, 180)]
    write_parquet(tmp_path / "local.parquet", parquet_rows, 16)
    key = s3_prefix.removeprefix("s3://")
    fs.pipe_file(f"{key}/in/a.jsonl", content)
    fs.put_file(str(tmp_path / "local.parquet"), f"{key}/in/b.parquet")
    fs.pipe_file(
        f"{key}/in/c.jsonl.gz",
        gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in parquet_rows[:5])),
    )
    fs.pipe_file(f"{key}/in/_SUCCESS", b"")

    spec = InputSpec(path=f"{s3_prefix}/in/", storage_options=moto_s3.storage_options)
    files = list_input_files(spec)
    assert [f.path for f in files] == [
        f"{s3_prefix}/in/{n}" for n in ("a.jsonl", "b.parquet", "c.jsonl.gz")
    ]
    assert files[0].size == len(content)
    inspect_input(spec, files)
    for shard_size in (1, 9, 1000):
        shards = plan_shards(spec, files, shard_size)
        got = read_all(spec, shards)
        by_file = Counter(r.source for r in got)
        assert by_file[files[0].path] == len(jsonl_rows) + 1
        assert by_file[files[1].path] == 80 and by_file[files[2].path] == 5
        errors = [r for r in got if r.error]
        assert len(errors) == 1 and errors[0].error is not None
        assert errors[0].error.startswith(f"{s3_prefix}/in/a.jsonl line at byte ")
        items = [to_item(spec, r) for r in got if r.data is not None]
        assert all(isinstance(i, ItemRecord) for i in items)
        assert [i.query_id for i in items if isinstance(i, ItemRecord)] == [
            *(r["query_id"] for r in jsonl_rows),
            *(r["query_id"] for r in parquet_rows),
            *(r["query_id"] for r in parquet_rows[:5]),
        ]
    glob = InputSpec(path=f"{s3_prefix}/in/*.parquet", storage_options=moto_s3.storage_options)
    assert [f.path for f in list_input_files(glob)] == [f"{s3_prefix}/in/b.parquet"]
    missing = InputSpec(path=f"{s3_prefix}/nothing/", storage_options=moto_s3.storage_options)
    with pytest.raises(InputError, match=rf"no input files at {s3_prefix}/nothing/"):
        list_input_files(missing)
