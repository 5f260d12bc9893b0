"""jobs.inputs.columns: a missing column fails the job before any judging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.inputs import ColumnMap, inspect_input, list_input_files
from scorer_core.errors import ConfigError, InputError
from tests.support.inputs import (
    item,
    spec_for,
    write_extractor_module,
    write_jsonl,
    write_parquet,
)


def test_inspect_input_ok_returns_columns(tmp_path: Path) -> None:
    spec = spec_for(write_jsonl(tmp_path / "f.jsonl", [item(0), item(1, ref="r")]))
    assert set(inspect_input(spec, list_input_files(spec)).columns) == {
        "query_id",
        "input",
        "output",
        "context",
        "ref",
    }


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_inspect_input_missing_column_fails_fast(tmp_path: Path, fmt: str) -> None:
    rows = [{k: v for k, v in item(i).items() if k != "context"} for i in range(3)]
    path = tmp_path / f"f.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, rows)
    else:
        write_parquet(path, rows, 10)
    cols = ColumnMap(expected_output="reference")
    spec = spec_for(path, columns=cols)
    with pytest.raises(InputError) as info:
        inspect_input(spec, list_input_files(spec))
    message = str(info.value)
    assert "'reference' (expected_output)" in message
    assert "'context' (context)" in message
    assert str(path) in message
    assert "available columns: ['input', 'output', 'query_id']" in message


def test_inspect_input_skips_empty_first_file_and_broken_lines(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(b"")
    (tmp_path / "b.jsonl").write_bytes(b"not json\n" + json.dumps(item(0)).encode() + b"\n")
    spec = spec_for(tmp_path)
    assert "context" in inspect_input(spec, list_input_files(spec)).columns
    (tmp_path / "b.jsonl").write_bytes(b"garbage\n[1]\n")
    with pytest.raises(InputError, match=r"no valid JSON object .* of .*b.jsonl"):
        inspect_input(spec, list_input_files(spec))


def test_inspect_input_parquet_context_must_be_a_list(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "f.parquet", [item(0, context="one string")], 10)
    spec = spec_for(path)
    with pytest.raises(InputError, match=r"'context' \(context\) in .*f.parquet is string"):
        inspect_input(spec, list_input_files(spec))


def test_inspect_input_with_extractor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extractor_module = write_extractor_module(tmp_path, monkeypatch)
    rows = [{"query_id": "a", "input": "q", "output": "o", "docs": "x|y"}]
    path = write_parquet(tmp_path / "f.parquet", rows, 10)
    spec = spec_for(path, context_extractor=f"{extractor_module}:split_docs")
    inspect_input(spec, list_input_files(spec))  # no context column needed
    bad = spec_for(path, context_extractor="no_such_module_xyz:f")
    with pytest.raises(ConfigError, match=r"'no_such_module_xyz:f'.*cannot import"):
        inspect_input(bad, list_input_files(bad))
