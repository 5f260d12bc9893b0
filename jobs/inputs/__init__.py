"""Input files: find them, check their columns, plan shards without loading them, read a shard.

Flow, one module per step:

1. `listing.list_input_files` -> the files of a path, folder or glob, each with its format
   (by `InputSpec.format` or else by suffix; `_`/`.` names are skipped in folders).
2. `columns.inspect_input` -> fail fast, before any judging, when a configured column is
   missing; decide the types of the carried columns (`carry`).
3. `planning.plan_shards` -> shards of about `shard_size` rows, from Parquet footers and a
   64 KiB sample of each JSONL file only; shard ids are stable for the same files.
4. On workers, `records.read_items` -> `read_shard` (streaming, by `jsonl` or `parquet`) ->
   `to_item` (normalise, truncate) -> `validate_record`.

`spec` holds what to read (`InputSpec`, `ColumnMap`), `rows` the row at each stage (`RawRow`,
`ItemRecord`, `RowError`), `opening` how every step opens a file.

Formats, and what a shard and `RawRow.row` are in each:

- Parquet (`.parquet`): a row range `[start, end)` of one file, cut at row-group boundaries
  where possible; `row` is the 0-based row number within the file.
- JSON Lines (`.jsonl`, `.ndjson`): a byte range `[start, end)` of one file. A line belongs to
  the range it *starts* in (the Hadoop rule: a reader skips the partial first line and reads
  the last one past `end`), so every line is read by exactly one shard; `row` is the byte
  offset of the line's first byte, exact without scanning earlier bytes.
- Gzipped JSON Lines (`.jsonl.gz`, `.ndjson.gz`): never split (gzip cannot be entered
  mid-stream), the whole file is one shard; `row` is the offset in the decompressed stream.

OpenTelemetry traces (`input.format: otlp`) are not read shard by shard: `otlp` reads the
OTLP JSON files and `traces` joins their spans into item Parquet first, which the run then
reads as a Parquet input (`jobs.engine.trace_staging`, docs/traces.md).

Row policies (see `records.to_item`): duplicate query ids are *not* handled here (the job
decides); contexts must be a list of strings; over-long contexts are truncated and flagged;
context ids must be as many as the contexts; carried values must have their column's type
(`carry`).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.inputs.columns import InputSchema, check_schema, inspect_input
    from jobs.inputs.listing import FileInfo, list_input_files
    from jobs.inputs.planning import plan_shards
    from jobs.inputs.records import read_items, read_shard, to_item, validate_record
    from jobs.inputs.rows import ItemRecord, RawRow, RowError
    from jobs.inputs.shard import Shard
    from jobs.inputs.spec import ColumnMap, InputSpec

# Imported on first use: a process that only passes shards around (the run's coordinator)
# imports `jobs.inputs.shard` without pulling in pyarrow and fsspec through this package.
_WHERE = {
    "InputSchema": "columns",
    "check_schema": "columns",
    "inspect_input": "columns",
    "FileInfo": "listing",
    "list_input_files": "listing",
    "plan_shards": "planning",
    "read_items": "records",
    "read_shard": "records",
    "to_item": "records",
    "validate_record": "records",
    "ItemRecord": "rows",
    "RawRow": "rows",
    "RowError": "rows",
    "Shard": "shard",
    "ColumnMap": "spec",
    "InputSpec": "spec",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'jobs.inputs' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"jobs.inputs.{module}"), name)


__all__ = [
    "ColumnMap",
    "FileInfo",
    "InputSchema",
    "InputSpec",
    "ItemRecord",
    "RawRow",
    "RowError",
    "Shard",
    "check_schema",
    "inspect_input",
    "list_input_files",
    "plan_shards",
    "read_items",
    "read_shard",
    "to_item",
    "validate_record",
]
