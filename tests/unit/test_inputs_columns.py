"""jobs.inputs.columns: a missing column fails the job before any judging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.inputs import ColumnMap, inspect_input, list_input_files, plan_shards, read_shard
from jobs.inputs.columns import check_every_file
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


# -- files a newcomer gets wrong: each named, with what is wrong (issue 31) ---------------------


@pytest.mark.parametrize("fmt", [None, "jsonl"])
def test_an_empty_file_is_said_to_be_empty(tmp_path: Path, fmt: str | None) -> None:
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    spec = spec_for(tmp_path / "empty.jsonl", format=fmt)
    with pytest.raises(InputError, match=r"empty\.jsonl is empty: it has no JSON Lines"):
        inspect_input(spec, list_input_files(spec))


def test_a_latin1_file_is_said_to_be_in_another_encoding(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    text = json.dumps(item(1) | {"input": "café au lait"}, ensure_ascii=False) + "\n"
    path.write_bytes(text.encode("latin-1"))
    spec = spec_for(path)
    with pytest.raises(InputError) as caught:
        inspect_input(spec, list_input_files(spec))
    message = str(caught.value)
    assert str(path) in message and "not valid UTF-8 (byte 0xe9" in message
    assert "is the file Latin-1 or another encoding? The input must be UTF-8" in message


@pytest.mark.parametrize("fmt", [None, "jsonl"])
def test_a_parquet_file_named_jsonl_says_so(tmp_path: Path, fmt: str | None) -> None:
    path = write_parquet(tmp_path / "items.jsonl", [item(1), item(2)], 10)
    spec = spec_for(path, format=fmt)
    expected = r"items\.jsonl is a Parquet file \(it starts with PAR1\).*rename it to \.parquet"
    with pytest.raises(InputError, match=expected):
        inspect_input(spec, list_input_files(spec))
    with pytest.raises(InputError, match=expected):
        check_every_file(spec, list_input_files(spec))


def test_a_parquet_file_named_jsonl_reads_as_input_format_parquet(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "items.jsonl", [item(1), item(2)], 10)
    spec = spec_for(path, format="parquet")
    files = list_input_files(spec)
    check_every_file(spec, files)
    assert "context" in inspect_input(spec, files).columns
    rows = [r for shard in plan_shards(spec, files, 10) for r in read_shard(spec, shard)]
    assert [r.data["query_id"] for r in rows if r.data] == ["q1", "q2"]
    # a JSON Lines file read as Parquet is still refused by its name
    write_jsonl(tmp_path / "other.jsonl", [item(3)])
    folder = spec_for(tmp_path, format="parquet")
    with pytest.raises(InputError, match=r"other\.jsonl is a jsonl file by its suffix"):
        check_every_file(folder, list_input_files(folder))
