"""Input files and rows for the tests of jobs.inputs (tests/unit/test_inputs_*.py)."""

from __future__ import annotations

import json
import random
import textwrap
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.inputs import (
    InputSpec,
    RawRow,
    Shard,
    read_shard,
)


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


def write_parquet(path: Path, rows: Sequence[dict[str, Any]], row_group_size: int) -> Path:
    pq.write_table(pa.Table.from_pylist(list(rows)), path, row_group_size=row_group_size)
    return path


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
    return RawRow(source="/data/f.parquet", row=row, data=data)


def write_extractor_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module of context extractors (good and broken ones); returns its name."""
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
