"""jobs.engine.inputs: listing, schema checks, shard planning, streaming reads, row validation."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
import textwrap
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.engine import inputs
from jobs.engine.inputs import (
    ColumnMap,
    FileInfo,
    InputSpec,
    ItemRecord,
    RawRow,
    RowError,
    Shard,
    check_schema,
    jsonl_byte_ranges,
    list_input_files,
    load_extractor,
    parquet_row_ranges,
    plan_shards,
    read_shard,
    to_item,
)
from scorer_core.errors import ConfigError, InputError, StorageError
from tests.conftest import MotoS3

# -- helpers ---------------------------------------------------------------------------------


def item(i: int, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "query_id": f"q{i}",
        "input": f"question {i}",
        "output": f"answer {i}",
        "context": [f"ctx {i}.{k}" for k in range(1 + i % 3)],
    }
    row.update(extra)
    return row


def write_jsonl(path: Path, rows: Sequence[dict[str, Any]], newline: str = "\n") -> Path:
    path.write_text("".join(json.dumps(r) + newline for r in rows), encoding="utf-8", newline="")
    return path


def read_all(spec: InputSpec, shards: Sequence[Shard]) -> list[RawRow]:
    return [raw for shard in shards for raw in read_shard(spec, shard)]


def line_starts(content: bytes) -> list[int]:
    """Offsets of every line with something other than whitespace on it."""
    starts, offset = [], 0
    for line in content.split(b"\n"):
        if line.strip():
            starts.append(offset)
        offset += len(line) + 1
    return starts


def spec_for(path: Path | str, **kwargs: Any) -> InputSpec:
    return InputSpec(path=str(path), **kwargs)


def raw(data: dict[str, Any], row: int = 7) -> RawRow:
    return RawRow("/data/f.parquet", row, data=data)


# -- the line splitter (Hadoop rule) ------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    content=st.lists(
        st.sampled_from([b"a", b"bb", b"\n", b"\r\n", b" ", b"ccccccc"]), max_size=60
    ).map(b"".join),
    cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=8),
    chunk=st.integers(min_value=1, max_value=9),
)
def test_lines_in_range_reads_each_line_once(content: bytes, cuts: list[int], chunk: int) -> None:
    bounds = sorted({0, len(content), *[c for c in cuts if c < len(content)]})
    got: list[tuple[int, bytes]] = []
    for start, end in itertools.pairwise(bounds):
        got.extend(inputs._lines_in_range(io.BytesIO(content), start, end, chunk=chunk))
    expected, offset = [], 0
    pieces = content.split(b"\n")
    for index, line in enumerate(pieces):
        if index < len(pieces) - 1 or line:  # a trailing "" after the last newline is no line
            expected.append((offset, line))
        offset += len(line) + 1
    assert got == expected


# -- JSONL sharding ----------------------------------------------------------------------------


def random_jsonl(path: Path, rng: random.Random, n: int) -> tuple[bytes, list[dict[str, Any]]]:
    rows, parts = [], []
    for i in range(n):
        size = rng.choice([1, 5, 40, 300, 5000, 100_000])  # some lines far longer than a shard
        row = item(i, pad="x" * rng.randrange(size))
        rows.append(row)
        parts.append(json.dumps(row).encode())
        parts.append(rng.choice([b"\n", b"\n", b"\r\n", b"\n\n", b"\n  \n"]))
    content = b"".join(parts)
    if rng.random() < 0.5:
        content = content.rstrip(b"\r\n ")  # last line without a newline
    path.write_bytes(content)
    return content, rows


@pytest.mark.parametrize("seed", range(6))
def test_jsonl_byte_sharding_reads_every_line_once(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / f"data-{seed}.jsonl"
    content, rows = random_jsonl(path, rng, rng.randrange(1, 120))
    spec = spec_for(path)
    files = list_input_files(spec)
    assert files == [FileInfo(str(path), len(content), "jsonl", None)]
    for shard_size in (1, 2, 3, 7, 16, 50, 10_000):
        shards = plan_shards(spec, files, shard_size)
        assert all(s.kind == "bytes" for s in shards)
        assert shards[0].start == 0 and shards[-1].end == len(content)
        assert all(a.end == b.start for a, b in itertools.pairwise(shards))
        got = read_all(spec, shards)
        assert [r.error for r in got if r.error] == []
        assert [r.row for r in got] == line_starts(content), shard_size
        assert [r.data for r in got] == rows
        assert all(r.unit == "offset" and r.source == str(path) for r in got)
    # small shard_size really makes many shards
    assert len(plan_shards(spec, files, 1)) > 1 or len(rows) == 1


def test_jsonl_crlf_bom_empty_lines_and_no_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    lines = [json.dumps(item(i)).encode() for i in range(4)]
    content = b"\xef\xbb\xbf" + lines[0] + b"\r\n\r\n" + lines[1] + b"\n   \n\n" + lines[2]
    content += b"\r\n" + lines[3]
    path.write_bytes(content)
    spec = spec_for(path)
    for shard_size in (1, 2, 100):
        got = read_all(spec, plan_shards(spec, list_input_files(spec), shard_size))
        assert [r.data for r in got] == [item(i) for i in range(4)]
        assert [r.row for r in got] == line_starts(content)


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
    real = inputs._jsonl_sample

    def spy(spec: InputSpec, info: FileInfo) -> bytes:
        data = real(spec, info)
        asked.append((info.size, len(data)))
        return data

    monkeypatch.setattr(inputs, "_jsonl_sample", spy)
    shards = plan_shards(spec, files, 100)
    assert asked == [(files[0].size, inputs.SAMPLE_BYTES)]
    assert 25 <= len(shards) <= 35
    counts = [sum(1 for _ in read_shard(spec, s)) for s in shards]
    assert sum(counts) == 3000
    assert max(counts) <= 110


def test_jsonl_gz_is_one_shard(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl.gz"
    body = "".join(json.dumps(item(i)) + "\n" for i in range(50)).encode()
    path.write_bytes(gzip.compress(body))
    spec = spec_for(path)
    files = list_input_files(spec)
    assert files[0].compression == "gzip" and files[0].format == "jsonl"
    shards = plan_shards(spec, files, 3)
    assert len(shards) == 1
    got = read_all(spec, shards)
    assert [r.data for r in got] == [item(i) for i in range(50)]
    assert [r.row for r in got] == line_starts(body)  # offsets in the decompressed stream


def test_corrupt_gz_is_input_error(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n' * 1000)[:-30])
    spec = spec_for(path)
    with pytest.raises(InputError, match=r"f.jsonl.gz is not a readable gzip file"):
        read_all(spec, plan_shards(spec, list_input_files(spec), 10))


def test_jsonl_bad_lines_name_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    good = [json.dumps(item(i)).encode() for i in range(3)]
    lines = [good[0], b'{"query_id": "q", broken', good[1], b"\xff\xfe{}", b"[1, 2]", b"42"]
    lines += [b'"text"', good[2]]
    content = b"\n".join(lines) + b"\n"
    path.write_bytes(content)
    spec = spec_for(path)
    offsets = line_starts(content)
    for shard_size in (1, 4, 100):
        got = read_all(spec, plan_shards(spec, list_input_files(spec), shard_size))
        assert [r.row for r in got] == offsets
        assert [r.data for r in got if r.data is not None] == [item(i) for i in range(3)]
        errors = {r.row: r.error for r in got if r.error is not None}
        assert set(errors) == {offsets[k] for k in (1, 3, 4, 5, 6)}
        for offset, error in errors.items():
            assert error is not None
            assert error.startswith(f"{path} line at byte {offset}: ")
        assert "invalid JSON" in str(errors[offsets[1]])
        assert "not valid UTF-8 (byte 0xff" in str(errors[offsets[3]])
        assert "a JSON array, expected an object" in str(errors[offsets[4]])
        assert "a JSON number, expected an object" in str(errors[offsets[5]])
        assert "a JSON string, expected an object" in str(errors[offsets[6]])
    bad = next(r for r in got if r.error)
    err = to_item(spec, bad)
    assert isinstance(err, RowError) and err.message == bad.error and err.row == bad.row


# -- Parquet sharding --------------------------------------------------------------------------


def write_parquet(path: Path, rows: Sequence[dict[str, Any]], row_group_size: int) -> Path:
    pq.write_table(pa.Table.from_pylist(list(rows)), path, row_group_size=row_group_size)
    return path


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


def test_parquet_extractor_gets_every_column(tmp_path: Path, extractor_module: str) -> None:
    rows = [{"query_id": "a", "input": "q", "output": "o", "docs": "x|y", "other": 1}]
    path = write_parquet(tmp_path / "f.parquet", rows, 10)
    spec = spec_for(path, context_extractor=f"{extractor_module}:split_docs")
    got = read_all(spec, plan_shards(spec, list_input_files(spec), 10))
    assert got[0].data == rows[0]
    record = to_item(spec, got[0])
    assert isinstance(record, ItemRecord) and record.contexts == ("x", "y")


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


# -- planning ----------------------------------------------------------------------------------


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
    assert [s.file_index for s in first] == sorted(s.file_index for s in first)
    other = {s.shard_id for s in plan_shards(spec, list_input_files(spec), 30)}
    assert other != set(ids)  # another shard_size plans other ids
    write_jsonl(folder / "b.jsonl", [item(i) for i in range(201)])  # the file changed
    changed = {s.shard_id for s in plan_shards(spec, list_input_files(spec), 25) if s.file_index}
    assert changed.isdisjoint(ids)


def test_shard_size_must_be_positive(tmp_path: Path) -> None:
    spec = spec_for(write_jsonl(tmp_path / "f.jsonl", [item(0)]))
    with pytest.raises(ConfigError, match="shard_size"):
        plan_shards(spec, list_input_files(spec), 0)


# -- listing -----------------------------------------------------------------------------------


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
    with pytest.raises(ConfigError, match="input format"):
        spec_for(tmp_path, format="csv")


def test_unreadable_store_is_storage_error() -> None:
    spec = InputSpec("s3://bucket/x.jsonl", storage_options={"key": "a", "username": "b"})
    with pytest.raises(StorageError, match=r"s3://bucket/x.jsonl"):
        list_input_files(spec)


# -- schema check ------------------------------------------------------------------------------


def test_check_schema_ok_returns_columns(tmp_path: Path) -> None:
    spec = spec_for(write_jsonl(tmp_path / "f.jsonl", [item(0), item(1, ref="r")]))
    assert set(check_schema(spec, list_input_files(spec))) == {
        "query_id",
        "input",
        "output",
        "context",
        "ref",
    }


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_check_schema_missing_column_fails_fast(tmp_path: Path, fmt: str) -> None:
    rows = [{k: v for k, v in item(i).items() if k != "context"} for i in range(3)]
    path = tmp_path / f"f.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, rows)
    else:
        write_parquet(path, rows, 10)
    cols = ColumnMap(expected_output="reference")
    spec = spec_for(path, columns=cols)
    with pytest.raises(InputError) as info:
        check_schema(spec, list_input_files(spec))
    message = str(info.value)
    assert "'reference' (expected_output)" in message
    assert "'context' (context)" in message
    assert str(path) in message
    assert "available columns: ['input', 'output', 'query_id']" in message


def test_check_schema_skips_empty_first_file_and_broken_lines(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(b"")
    (tmp_path / "b.jsonl").write_bytes(b"not json\n" + json.dumps(item(0)).encode() + b"\n")
    spec = spec_for(tmp_path)
    assert "context" in check_schema(spec, list_input_files(spec))
    (tmp_path / "b.jsonl").write_bytes(b"garbage\n[1]\n")
    with pytest.raises(InputError, match=r"no valid JSON object .* of .*b.jsonl"):
        check_schema(spec, list_input_files(spec))


def test_check_schema_parquet_context_must_be_a_list(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "f.parquet", [item(0, context="one string")], 10)
    spec = spec_for(path)
    with pytest.raises(InputError, match=r"'context' \(context\) in .*f.parquet is string"):
        check_schema(spec, list_input_files(spec))


def test_check_schema_with_extractor(tmp_path: Path, extractor_module: str) -> None:
    rows = [{"query_id": "a", "input": "q", "output": "o", "docs": "x|y"}]
    path = write_parquet(tmp_path / "f.parquet", rows, 10)
    spec = spec_for(path, context_extractor=f"{extractor_module}:split_docs")
    check_schema(spec, list_input_files(spec))  # no context column needed
    bad = spec_for(path, context_extractor="no_such_module_xyz:f")
    with pytest.raises(ConfigError, match=r"'no_such_module_xyz:f'.*cannot import"):
        check_schema(bad, list_input_files(bad))


# -- context_extractor ---------------------------------------------------------------------------


@pytest.fixture
def extractor_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"ctxprec_extractors_{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "mods"
    folder.mkdir()
    (folder / f"{name}.py").write_text(
        textwrap.dedent(
            """
            IMPORTS = 0
            IMPORTS += 1

            def split_docs(row):
                return row["docs"].split("|")

            def broken(row):
                raise KeyError("docs")

            def not_a_list(row):
                return "a string"

            def with_number(row):
                return ["a", 2]

            NOT_CALLABLE = 3
            """
        )
    )
    monkeypatch.syspath_prepend(str(folder))
    return name


def test_extractor_loaded_once_and_errors_named(extractor_module: str) -> None:
    import sys

    first = load_extractor(f"{extractor_module}:split_docs")
    assert load_extractor(f"{extractor_module}:split_docs") is first
    assert sys.modules[extractor_module].IMPORTS == 1
    for ref, pattern in [
        ("no_colon", "must look like 'package.module:function'"),
        (f"{extractor_module}:", "must look like"),
        (f"{extractor_module}:missing", "has no attribute 'missing'"),
        (f"{extractor_module}:NOT_CALLABLE", "is not callable"),
        ("ctxprec_no_such_mod:f", "cannot import 'ctxprec_no_such_mod'"),
    ]:
        with pytest.raises(ConfigError, match=pattern) as info:
            load_extractor(ref)
        assert repr(ref) in str(info.value)


def test_to_item_with_extractor(extractor_module: str) -> None:
    base = {"query_id": "a", "input": "q", "output": "o", "docs": "x|y|z"}
    spec = InputSpec("x", context_extractor=f"{extractor_module}:split_docs")
    record = to_item(spec, raw(base))
    assert isinstance(record, ItemRecord) and record.contexts == ("x", "y", "z")
    for func, pattern in [
        ("broken", "raised KeyError"),
        ("not_a_list", "is a string, expected a list of strings"),
        ("with_number", "element 1 is a int, expected a string"),
    ]:
        spec = InputSpec("x", context_extractor=f"{extractor_module}:{func}")
        error = to_item(spec, raw(base))
        assert isinstance(error, RowError), func
        assert f"context (from context_extractor '{extractor_module}:{func}')" in error.message
        assert pattern in error.message
        assert error.query_id == "a"


# -- to_item -------------------------------------------------------------------------------------


def test_to_item_ok() -> None:
    spec = InputSpec("x", columns=ColumnMap(query_id="id", input="q", output="a", context="c"))
    data = {"id": 12, "q": "why?", "a": "because", "c": ["one", "", "three"]}
    record = to_item(spec, raw(data))
    assert record == ItemRecord(
        query_id="12",
        input="why?",
        output="because",
        expected_output=None,
        contexts=("one", "", "three"),
        source="/data/f.parquet",
        row=7,
        where="/data/f.parquet row 7",
    )
    assert isinstance(record, ItemRecord)
    scoring = record.to_scoring_item()
    assert scoring.contexts == ("one", "", "three") and scoring.reference_or_output == "because"


def test_to_item_reference_and_empty_output() -> None:
    spec = InputSpec("x", columns=ColumnMap(expected_output="ref"))
    record = to_item(spec, raw(item(1, output="", ref="the reference")))
    assert isinstance(record, ItemRecord)
    assert record.output == "" and record.expected_output == "the reference"
    blank = to_item(spec, raw(item(1, ref="  ")))
    assert isinstance(blank, ItemRecord) and blank.expected_output is None
    null = to_item(spec, raw(item(1, ref=None)))
    assert isinstance(null, ItemRecord) and null.expected_output is None


def test_to_item_derived_query_id() -> None:
    spec = InputSpec("x", columns=ColumnMap(query_id=None))
    record = to_item(spec, RawRow("s3://b/f.jsonl", 1234, data=item(0), unit="offset"))
    assert isinstance(record, ItemRecord) and record.query_id == "s3://b/f.jsonl#1234"


CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "context string",
        {"context": "a context"},
        "context (column 'context') is a string, expected",
    ),
    ("context json", {"context": '["a", "b"]'}, "looks like a JSON-encoded list"),
    ("context null", {"context": None}, "context (column 'context') is null"),
    ("context empty", {"context": []}, "context (column 'context') is an empty list"),
    ("context int elem", {"context": ["a", 3]}, "element 1 is a int, expected a string"),
    ("context null elem", {"context": [None]}, "element 0 is a NoneType, expected a string"),
    ("context dict", {"context": {"a": 1}}, "context (column 'context') is a dict"),
    ("query_id null", {"query_id": None}, "query_id (column 'query_id') is null"),
    ("query_id float", {"query_id": 1.5}, "query_id (column 'query_id') is a float"),
    ("query_id bool", {"query_id": True}, "query_id (column 'query_id') is a bool"),
    ("query_id empty", {"query_id": " "}, "query_id (column 'query_id') is empty"),
    ("input null", {"input": None}, "input (column 'input') is null"),
    ("input empty", {"input": "  "}, "input (column 'input') is empty"),
    ("input number", {"input": 5}, "input (column 'input') is a int, expected a string"),
    ("output null", {"output": None}, "output (column 'output') is null"),
    ("output empty", {"output": ""}, "output (column 'output') is empty and there is no reference"),
    ("output list", {"output": ["a"]}, "output (column 'output') is a list"),
]


@pytest.mark.parametrize(("case", "change", "message"), CASES, ids=[c[0] for c in CASES])
def test_to_item_errors_name_field_and_row(case: str, change: dict[str, Any], message: str) -> None:
    result = to_item(InputSpec("x"), raw(item(3, **change)))
    assert isinstance(result, RowError), case
    assert result.message.startswith("/data/f.parquet row 7: ")
    assert message in result.message
    assert (result.source, result.row) == ("/data/f.parquet", 7)
    if not case.startswith("query_id"):
        assert result.query_id == "q3"


@pytest.mark.parametrize("missing", ["query_id", "input", "output", "context"])
def test_to_item_missing_key(missing: str) -> None:
    data = {k: v for k, v in item(1).items() if k != missing}
    result = to_item(InputSpec("x"), RawRow("f.jsonl", 99, data=data, unit="offset"))
    assert isinstance(result, RowError)
    assert result.message.startswith("f.jsonl line at byte 99: ")
    assert f"(column '{missing}') is missing" in result.message


def test_to_item_reference_wrong_type() -> None:
    spec = InputSpec("x", columns=ColumnMap(expected_output="ref"))
    result = to_item(spec, raw(item(1, ref=3)))
    assert (
        isinstance(result, RowError) and "expected_output (column 'ref') is a int" in result.message
    )


def test_truncation_flags() -> None:
    spec = InputSpec("x")
    long = to_item(spec, raw(item(1, context=["a" * 50, "b" * 10, "c" * 51])), max_context_chars=50)
    assert isinstance(long, ItemRecord)
    assert long.contexts == ("a" * 50, "b" * 10, "c" * 50)
    assert (long.truncated, long.contexts_cut, long.contexts_dropped) == (True, 1, 0)
    many = to_item(spec, raw(item(1, context=[str(i) for i in range(12)])), max_contexts=5)
    assert isinstance(many, ItemRecord)
    assert many.contexts == ("0", "1", "2", "3", "4")
    assert (many.truncated, many.contexts_cut, many.contexts_dropped) == (True, 0, 7)
    fine = to_item(spec, raw(item(1)))
    assert isinstance(fine, ItemRecord) and not fine.truncated
    default = to_item(spec, raw(item(1, context=["x" * 200_001] + ["y"] * 1000)))
    assert isinstance(default, ItemRecord)
    assert len(default.contexts) == 1000 and len(default.contexts[0]) == 200_000
    assert (default.contexts_cut, default.contexts_dropped) == (1, 1)


def test_column_map_from_mapping() -> None:
    cols = ColumnMap.from_mapping({"query_id": "id", "expected_output": "ref"})
    assert cols == ColumnMap(query_id="id", expected_output="ref")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['contexts'\]"):
        ColumnMap.from_mapping({"contexts": "c"})
    with pytest.raises(ConfigError, match=r"columns\.input"):
        ColumnMap.from_mapping({"input": ""})


# -- the same through s3:// on the moto server ----------------------------------------------------


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

    spec = InputSpec(f"{s3_prefix}/in/", storage_options=moto_s3.storage_options)
    files = list_input_files(spec)
    assert [f.path for f in files] == [
        f"{s3_prefix}/in/{n}" for n in ("a.jsonl", "b.parquet", "c.jsonl.gz")
    ]
    assert files[0].size == len(content)
    check_schema(spec, files)
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
    glob = InputSpec(f"{s3_prefix}/in/*.parquet", storage_options=moto_s3.storage_options)
    assert [f.path for f in list_input_files(glob)] == [f"{s3_prefix}/in/b.parquet"]
    missing = InputSpec(f"{s3_prefix}/nothing/", storage_options=moto_s3.storage_options)
    with pytest.raises(InputError, match=rf"no input files at {s3_prefix}/nothing/"):
        list_input_files(missing)


# -- streaming -----------------------------------------------------------------------------------


class CountingHandle(io.RawIOBase):
    """A read handle that counts the bytes it hands out and can fail after some reads."""

    def __init__(self, inner: Any, fail_after: int | None = None) -> None:
        self.inner = inner
        self.bytes_read = 0
        self.reads = 0
        self.fail_after = fail_after

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise ConnectionResetError("connection reset by peer")
        data: bytes = self.inner.read(size)
        self.bytes_read += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self.inner.seek(offset, whence))

    def close(self) -> None:
        self.inner.close()
        super().close()


def test_jsonl_shard_reads_about_its_range(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_jsonl(tmp_path / "f.jsonl", [item(i, pad="p" * 100) for i in range(20_000)])
    spec = spec_for(path)
    shards = plan_shards(spec, list_input_files(spec), 500)
    handles: list[CountingHandle] = []
    real = inputs._open

    def counting(*args: Any, **kwargs: Any) -> Any:
        handles.append(CountingHandle(real(*args, **kwargs)))
        return handles[-1]

    monkeypatch.setattr(inputs, "_open", counting)
    middle = shards[len(shards) // 2]
    rows = list(read_shard(spec, middle))
    assert 450 <= len(rows) <= 550
    span = middle.end - middle.start
    assert handles[0].bytes_read <= span + 64 * 1024 + 1024
    assert handles[0].bytes_read < path.stat().st_size / 10


def test_failure_mid_shard_is_storage_error_naming_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_jsonl(tmp_path / "f.jsonl", [item(i, pad="p" * 1000) for i in range(3000)])
    spec = spec_for(path)
    (shard,) = plan_shards(spec, list_input_files(spec), 100_000)
    real = inputs._open
    monkeypatch.setattr(
        inputs, "_open", lambda *a, **k: CountingHandle(real(*a, **k), fail_after=1)
    )
    got: list[RawRow] = []
    with pytest.raises(StorageError, match=rf"reading {path} \(shard {shard.shard_id}\) failed"):
        got.extend(read_shard(spec, shard))
    assert 0 < len(got) < 3000  # rows before the failure were streamed out
