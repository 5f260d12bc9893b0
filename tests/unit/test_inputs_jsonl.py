"""jobs.inputs.jsonl: byte-range shards (the Hadoop line rule), gzip, BOM, CRLF, bad
lines, and streaming reads that fetch about their range."""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.inputs import (
    FileInfo,
    RawRow,
    RowError,
    list_input_files,
    listing,
    plan_shards,
    read_shard,
    to_item,
)
from jobs.inputs.jsonl import lines_in_range
from scorer_core.errors import InputError, StorageError
from tests.support.inputs import (
    item,
    line_starts,
    random_jsonl,
    read_all,
    spec_for,
    write_jsonl,
)


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
        got.extend(lines_in_range(io.BytesIO(content), start, end, chunk=chunk))
    expected, offset = [], 0
    pieces = content.split(b"\n")
    for index, line in enumerate(pieces):
        if index < len(pieces) - 1 or line:  # a trailing "" after the last newline is no line
            expected.append((offset, line))
        offset += len(line) + 1
    assert got == expected


@pytest.mark.parametrize("seed", range(6))
def test_jsonl_byte_sharding_reads_every_line_once(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / f"data-{seed}.jsonl"
    content, rows = random_jsonl(path, rng, rng.randrange(1, 120))
    spec = spec_for(path)
    files = list_input_files(spec)
    assert files == [FileInfo(path=str(path), size=len(content), format="jsonl")]
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


class CountingHandle(io.RawIOBase):
    """A read handle that counts the bytes it hands out and can fail after some reads."""

    def __init__(self, inner: Any, fail_after: int | None = None) -> None:
        self.inner = inner
        self.bytes_read = 0
        self.reads = 0
        self.fail_after = fail_after

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise ConnectionResetError("connection reset by peer")
        data: bytes = self.inner.read(len(buffer))
        buffer[: len(data)] = data
        self.bytes_read += len(data)
        return len(data)

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
    real = listing.open_input

    def counting(*args: Any, **kwargs: Any) -> Any:
        handles.append(CountingHandle(real(*args, **kwargs)))
        return handles[-1]

    monkeypatch.setattr(listing, "open_input", counting)
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
    real = listing.open_input
    monkeypatch.setattr(
        listing, "open_input", lambda *a, **k: CountingHandle(real(*a, **k), fail_after=1)
    )
    got: list[RawRow] = []
    with pytest.raises(StorageError, match=rf"reading {path} \(shard {shard.shard_id}\) failed"):
        got.extend(read_shard(spec, shard))
    assert 0 < len(got) < 3000  # rows before the failure were streamed out
