"""Cut the input files into shards of about `shard_size` rows without reading them: Parquet by
row ranges from the footers, JSON Lines by byte ranges sized from a sample, a gzipped file
whole. Shard ids are stable for the same files.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence

from jobs.core.storage import filesystem, retry_call
from jobs.inputs.listing import FileInfo, open_input
from jobs.inputs.parquet import parquet_file
from jobs.inputs.spec import InputSpec, Shard
from scorer_core.errors import ConfigError

SAMPLE_BYTES = 64 * 1024
"""Bytes read from the start of a JSONL file to estimate bytes per row."""


def plan_shards(spec: InputSpec, files: Sequence[FileInfo], shard_size: int) -> list[Shard]:
    """Shards of about `shard_size` rows each, in file order, from footers and samples only."""
    if shard_size < 1:
        raise ConfigError(f"shard_size must be at least 1, not {shard_size}")
    shards: list[Shard] = []
    for index, info in enumerate(files):
        if info.format == "parquet":
            sizes = _row_group_sizes(spec, info)
            ranges = parquet_row_ranges(sizes, shard_size)
        elif info.compression is not None:
            ranges = [(0, info.size)] if info.size > 0 else []
        else:
            ranges = jsonl_byte_ranges(info.size, _jsonl_sample(spec, info), shard_size)
        shards.extend(_make_shard(index, info, start, end) for start, end in ranges)
    return shards


def parquet_row_ranges(row_group_sizes: Sequence[int], shard_size: int) -> list[tuple[int, int]]:
    """Row ranges covering every row once: small row groups packed, large ones split evenly."""
    ranges: list[tuple[int, int]] = []
    pack_start = pack_rows = offset = 0
    for rows in row_group_sizes:
        if rows == 0:
            continue
        if rows >= shard_size:
            if pack_rows:
                ranges.append((pack_start, pack_start + pack_rows))
            pieces = math.ceil(rows / shard_size)
            bounds = [offset + (rows * piece) // pieces for piece in range(pieces + 1)]
            ranges.extend(itertools.pairwise(bounds))
            offset += rows
            pack_start, pack_rows = offset, 0
            continue
        if pack_rows and pack_rows + rows > shard_size:
            ranges.append((pack_start, pack_start + pack_rows))
            pack_start, pack_rows = offset, 0
        pack_rows += rows
        offset += rows
    if pack_rows:
        ranges.append((pack_start, pack_start + pack_rows))
    return ranges


def jsonl_byte_ranges(size: int, sample: bytes, shard_size: int) -> list[tuple[int, int]]:
    """Byte ranges of about `shard_size` lines each, from the line length in `sample`."""
    if size <= 0:
        return []
    newlines = sample.count(b"\n")
    bytes_per_row = len(sample) / newlines if newlines else max(len(sample), 1)
    step = max(1, math.ceil(bytes_per_row * shard_size))
    return [(start, min(start + step, size)) for start in range(0, size, step)]


def _make_shard(index: int, info: FileInfo, start: int, end: int) -> Shard:
    digest = hashlib.sha1(f"{info.path}\0{info.size}".encode()).hexdigest()[:8]
    return Shard(
        shard_id=f"{index:05d}-{start:012d}-{end:012d}-{digest}",
        path=info.path,
        format=info.format,
        start=start,
        end=end,
        compression=info.compression,
    )


def _row_group_sizes(spec: InputSpec, info: FileInfo) -> list[int]:
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)

    def read() -> list[int]:
        with open_input(fs, fs_path) as handle:
            meta = parquet_file(handle, info.path).metadata
        return [meta.row_group(group).num_rows for group in range(meta.num_row_groups)]

    return retry_call(read, what="read Parquet footer of", url=info.path)


def _jsonl_sample(spec: InputSpec, info: FileInfo) -> bytes:
    if info.size <= 0:
        return b""
    fs, fs_path, _ = filesystem(info.path, spec.storage_options)
    end = min(info.size, SAMPLE_BYTES)
    data = retry_call(lambda: fs.cat_file(fs_path, start=0, end=end), what="read", url=info.path)
    return bytes(data)
