"""jobs.inputs.listing: which files are the input, and their formats."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from jobs.inputs import (
    InputSpec,
    list_input_files,
)
from scorer_core.errors import InputError, StorageError
from tests.support.inputs import (
    item,
    spec_for,
    write_jsonl,
    write_parquet,
)


def test_list_folder_skips_hidden_and_unknown(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write_jsonl(tmp_path / "b.jsonl", [item(0)])
    write_jsonl(tmp_path / "sub" / "a.ndjson", [item(1)])
    write_parquet(tmp_path / "c.parquet", [item(2)], 10)
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    for name in ("_SUCCESS", ".c.parquet.crc", "README.md", "_tmp.jsonl"):
        (tmp_path / name).write_text("x")
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    write_jsonl(tmp_path / "_temporary" / "0" / "part.jsonl", [item(9)])
    files = list_input_files(spec_for(tmp_path))
    assert [(Path(f.path).name, f.format, f.compression) for f in files] == [
        ("b.jsonl", "jsonl", None),
        ("c.parquet", "parquet", None),
        ("d.jsonl.gz", "jsonl", "gzip"),
        ("a.ndjson", "jsonl", None),
    ]
    assert all(f.size == Path(f.path).stat().st_size for f in files)
    globbed = list_input_files(spec_for(tmp_path / "*.jsonl"))
    assert [Path(f.path).name for f in globbed] == ["b.jsonl"]


def test_list_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=rf"no input files at {tmp_path}/missing"):
        list_input_files(spec_for(tmp_path / "missing"))
    with pytest.raises(InputError, match=rf"no input files at {tmp_path}/\*.parquet"):
        list_input_files(spec_for(tmp_path / "*.parquet"))
    (tmp_path / "data.txt").write_text("{}\n")
    with pytest.raises(InputError, match=rf"format of {tmp_path}/data.txt"):
        list_input_files(spec_for(tmp_path / "data.txt"))
    assert list_input_files(spec_for(tmp_path / "data.txt", format="jsonl"))[0].format == "jsonl"


def test_unreadable_store_is_storage_error() -> None:
    spec = InputSpec(path="s3://bucket/x.jsonl", storage_options={"key": "a", "username": "b"})
    with pytest.raises(StorageError, match=r"s3://bucket/x.jsonl"):
        list_input_files(spec)
