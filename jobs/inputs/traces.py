"""Traces in, items out: join the spans of OTLP JSON files (`jobs.inputs.otlp`) into item
Parquet, one item per retrieval span, in bounded memory. `stage_spans` (a task per group of
files) files each span under its trace id's partition, `assemble_part` (a task per partition)
joins each retrieval with its trace's root or next LLM span; `assemble_traces` runs both.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
import resource
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from jobs.core.storage import Store, filesystem, open_store
from jobs.inputs.listing import FileInfo, list_input_files
from jobs.inputs.otlp import LLM, RETRIEVER, Problem, SpanRow, read_otlp_file
from jobs.inputs.spec import InputSpec
from scorer_core.errors import InputError

OutputFrom = Literal["root", "next_llm", "none"]

# Columns of the assembled items besides the item's fields; `input.carry` may name them.
BUILTIN_COLUMNS: tuple[str, ...] = ("trace_id", "span_name", "start_time", "otlp_source")
PART_BYTES = 16 << 20  # input bytes (uncompressed, estimated) per partition: one assembly task
TASK_BYTES = 32 << 20  # input bytes (estimated) one span-staging task reads (at least one file)
GZIP_RATIO = 8  # estimated uncompressed bytes per gzipped byte of OTLP JSON (it does 8-12x)
FLUSH_ROWS = 4096  # span rows a staging task buffers before appending them to partition files
MAX_PARTS = 4096
EXAMPLES = 10  # problems quoted in the report (all are counted)

Mapper = Callable[[Callable[..., Any], Sequence[tuple[Any, ...]]], Iterator[Any]]
"""Runs `fn(*args)` for each args tuple, anywhere, and yields the results in any order."""


@dataclass(frozen=True, kw_only=True)
class TraceJob:
    """What every task needs (pickled): the staging folder and the input."""

    output_url: str
    output_options: dict[str, Any]
    folder: str
    input_options: dict[str, Any]
    carry: tuple[str, ...]
    parts: int
    output_from: OutputFrom = "root"
    row_group_rows: int = 2000

    def store(self) -> Store:
        return open_store(self.output_url, self.output_options)


@dataclass(kw_only=True)
class TraceReport:
    """What the assembly found, for the run's output and manifest; each task adds its share."""

    files: int = 0
    spans: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    duplicate_spans: int = 0
    traces: int = 0
    traces_without_retriever: int = 0
    retrievals: int = 0
    retrievals_without_text: int = 0
    items: int = 0
    items_without_output: int = 0
    partitions: int = 0
    items_path: str = ""
    carried_types: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    peak_rss_mb: dict[str, float] = field(default_factory=dict)

    def add(self, task: TraceReport) -> None:
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(task, name))
        self.malformed_examples = [*self.malformed_examples, *task.malformed_examples][:EXAMPLES]
        for phase, peak in task.peak_rss_mb.items():
            self.peak_rss_mb[phase] = max(self.peak_rss_mb.get(phase, 0.0), peak)

    def summary(self) -> str:
        """One line for the run's output."""
        text = (
            f"traces: {self.spans:,} span(s) in {self.files} file(s), {self.traces:,} trace(s) "
            f"-> {self.items:,} item(s) from {self.retrievals:,} retrieval(s); skipped: "
            f"{self.traces_without_retriever:,} trace(s) without a retrieval, "
            f"{self.retrievals_without_text:,} retrieval(s) without document text, "
            f"{self.duplicate_spans:,} repeated span(s), {self.malformed:,} malformed "
            "line(s)/span(s)"
        )
        if self.malformed_examples:
            text += f" (first: {self.malformed_examples[0]})"
        if self.items_without_output:
            text += f"; {self.items_without_output:,} item(s) without an output (row errors)"
        return text + f"; items at {self.items_path}"


# What the tasks count, each its own share (`partitions` is the driver's).
_COUNTS = [
    field.name
    for field in dataclasses.fields(TraceReport)
    if field.type == "int" and field.name != "partitions"
]


# -- the driver's part ----------------------------------------------------------------------


def items_url(store: Store, folder: str) -> str:
    """The URL of the items assembled under `folder` (a run's `RunLocation.traces`)."""
    return store.url(store.join(folder, "items"))


def trace_files(path: str, storage_options: dict[str, Any]) -> list[FileInfo]:
    """Every OTLP JSON file at `path` whatever its suffix (gzipped when it ends in `.gz`)."""
    try:
        return list_input_files(
            InputSpec(path=path, format="jsonl", storage_options=storage_options)
        )
    except InputError as exc:
        if not str(exc).startswith("no input files"):
            raise
        raise InputError(f"no OTLP trace files at {path}") from None


def partitions_for(files: Sequence[FileInfo]) -> int:
    """Partitions of about `PART_BYTES` of (uncompressed, estimated) input each."""
    return max(1, min(MAX_PARTS, math.ceil(sum(_estimated(file) for file in files) / PART_BYTES)))


def assemble_traces(
    job: TraceJob, files: Sequence[FileInfo], mapper: Mapper = itertools.starmap
) -> TraceReport:
    """Stage the spans of `files`, then assemble the items; `InputError` when there are none."""
    started = time.monotonic()
    store = job.store()
    # a previous attempt's files (another split of the input) must not be mixed in
    store.rm(store.join(job.folder), recursive=True)
    report = TraceReport(partitions=job.parts)
    kinds: dict[str, set[str]] = {name: set() for name in _attributes(job.carry)}
    groups = list(_task_groups(files))
    for staged, found in mapper(
        stage_spans, [(job, number, group) for number, group in enumerate(groups)]
    ):
        report.add(staged)
        for name, values in found.items():
            kinds[name].update(values)
    missing = [name for name, found in kinds.items() if not found]
    if missing and report.spans:  # a typo, most likely, as a missing carried column would be
        raise InputError(
            f"carried attribute(s) {missing} found on no retrieval or root span (nor on their "
            f"resources) in {report.spans:,} span(s); check input.carry (docs/traces.md)"
        )
    report.carried_types = {name: carried_type(found) for name, found in kinds.items()}
    for part in mapper(
        assemble_part, [(job, number, report.carried_types) for number in range(job.parts)]
    ):
        report.add(part)
    store.rm(store.join(job.folder, "spans"), recursive=True)
    report.items_path = items_url(store, job.folder)
    report.seconds = round(time.monotonic() - started, 3)
    if report.items == 0:
        raise InputError(
            f"no retrieval span with documents in {report.spans:,} span(s) of "
            f"{report.traces:,} trace(s) in {len(files)} file(s); "
            + report.summary().split("; items at")[0]
            + " (docs/traces.md says which spans become items)"
        )
    return report


def carried_type(kinds: Iterable[str]) -> str:
    """A carried attribute's column type from its kinds of value (else JSON text)."""
    found = set(kinds)
    if found and found <= {"int"}:
        return "int64"
    if found and found <= {"int", "float"}:
        return "float64"
    return "bool" if found == {"bool"} else "string"


def _attributes(carry: Sequence[str]) -> list[str]:
    return [name for name in carry if name not in BUILTIN_COLUMNS]


def _estimated(info: FileInfo) -> int:
    return info.size * (GZIP_RATIO if info.compression else 1)


def _task_groups(files: Sequence[FileInfo]) -> Iterator[list[FileInfo]]:
    group: list[FileInfo] = []
    size = 0
    for info in files:
        if group and size + _estimated(info) > TASK_BYTES:
            yield group
            group, size = [], 0
        group.append(info)
        size += _estimated(info)
    if group:
        yield group


def _peak_rss_mb(phase: str) -> dict[str, float]:
    # ru_maxrss is in KiB on Linux: this process's peak, tasks before this one included
    return {phase: round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


# -- step 1: spans to partitions -------------------------------------------------------------


def _span_schema(carried: int) -> pa.Schema:
    return pa.schema(
        [
            ("trace_id", pa.string()),
            ("span_id", pa.string()),
            ("parent_id", pa.string()),
            ("role", pa.string()),
            ("name", pa.string()),
            ("start_ns", pa.int64()),
            ("end_ns", pa.int64()),
            ("input", pa.string()),
            ("output", pa.string()),
            ("documents", pa.list_(pa.string())),
            ("document_ids", pa.list_(pa.string())),
            ("source", pa.string()),
            ("line", pa.int64()),
            *((f"carry_{number}", pa.string()) for number in range(carried)),
        ]
    )


_SPAN_FIELDS = tuple(_span_schema(0).names)  # the columns that are `SpanRow` fields


class _PartWriters:
    """Span rows buffered by partition, appended to one local Parquet file per partition."""

    def __init__(self, folder: Path, parts: int, carried: int) -> None:
        self.folder = folder
        self.parts = parts
        self.carried = carried
        self.schema = _span_schema(carried)
        self._rows: dict[int, list[SpanRow]] = {}
        self._buffered = 0
        self._writers: dict[int, pq.ParquetWriter] = {}

    def add(self, row: SpanRow) -> None:
        part = zlib.crc32(row.trace_id.encode()) % self.parts
        self._rows.setdefault(part, []).append(row)
        self._buffered += 1
        if self._buffered >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        for part, rows in self._rows.items():
            if part not in self._writers:
                path = self.folder / f"part-{part:05d}.parquet"
                self._writers[part] = pq.ParquetWriter(path, self.schema, compression="zstd")
            self._writers[part].write_table(self._table(rows))
        self._rows, self._buffered = {}, 0

    def _table(self, rows: list[SpanRow]) -> pa.Table:
        columns = {name: [getattr(row, name) for row in rows] for name in _SPAN_FIELDS}
        for number in range(self.carried):
            columns[f"carry_{number}"] = [
                row.carried[number] if row.carried else None for row in rows
            ]
        return pa.table(columns, schema=self.schema)

    def close(self) -> dict[int, Path]:
        self.flush()
        for writer in self._writers.values():
            writer.close()
        return {part: self.folder / f"part-{part:05d}.parquet" for part in self._writers}


def stage_spans(
    job: TraceJob, task: int, files: Sequence[FileInfo]
) -> tuple[TraceReport, dict[str, set[str]]]:
    """Stage every span of `files` under its partition (a task body); carried value kinds."""
    store = job.store()
    attributes = _attributes(job.carry)
    report = TraceReport(files=len(files))
    kinds: dict[str, set[str]] = {name: set() for name in attributes}
    with tempfile.TemporaryDirectory(prefix="ctxprec-spans-") as tmp:
        writers = _PartWriters(Path(tmp), job.parts, len(attributes))
        for info in files:
            fs, fs_path, _ = filesystem(info.path, job.input_options)
            for found in read_otlp_file(fs, fs_path, info.path, info.compression, attributes):
                if isinstance(found, Problem):
                    report.malformed += 1
                    if len(report.malformed_examples) < EXAMPLES:
                        report.malformed_examples.append(found.message)
                    continue
                report.spans += 1
                for name, value in zip(attributes, found.carried, strict=False):
                    if value is not None:
                        kinds[name].add(_json_kind(value))
                writers.add(found)
        for part, local in sorted(writers.close().items()):
            target = store.join(job.folder, "spans", f"part-{part:05d}", f"t-{task:05d}.parquet")
            store.upload_file_atomic(str(local), target)
    report.peak_rss_mb = _peak_rss_mb("read")
    return report, kinds


def _json_kind(text: str) -> str:
    """The kind of a JSON-encoded value, from its text (cheaper than decoding)."""
    first = text[0]
    if first == '"':
        return "str"
    if first in "tf":
        return "bool"
    if first in "[{":
        return "json"
    return "float" if any(char in text for char in ".eEN") else "int"


# -- step 2: a partition's spans to items ----------------------------------------------------


def assemble_part(job: TraceJob, part: int, types: dict[str, str]) -> TraceReport:
    """Join partition `part`'s spans into items and write its items file (a task body)."""
    store = job.store()
    report = TraceReport(peak_rss_mb=_peak_rss_mb("assemble"))
    paths = store.list(store.join(job.folder, "spans", f"part-{part:05d}"))
    if not paths:
        return report
    staged = pl.concat([pl.read_parquet(io.BytesIO(store.read_bytes(path))) for path in paths])
    spans = staged.unique(subset=["trace_id", "span_id"], keep="first", maintain_order=True)
    report.duplicate_spans = staged.height - spans.height
    report.traces = spans["trace_id"].n_unique()
    retrievals = spans.filter(pl.col("role") == RETRIEVER)
    report.retrievals = retrievals.height
    report.traces_without_retriever = report.traces - retrievals["trace_id"].n_unique()
    items = retrievals.filter(pl.col("documents").is_not_null())
    report.retrievals_without_text = retrievals.height - items.height
    items = _with_output(items, spans, job.output_from)
    report.items = items.height
    if job.output_from != "none":
        report.items_without_output = items["output"].null_count()
    if items.height:
        table = _items_table(items, _attributes(job.carry), types)
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd", row_group_size=job.row_group_rows)
        target = store.join(job.folder, "items", f"part-{part:05d}.parquet")
        store.write_bytes_atomic(target, sink.getvalue())
    report.peak_rss_mb = _peak_rss_mb("assemble")
    return report


def _with_output(items: pl.DataFrame, spans: pl.DataFrame, output_from: OutputFrom) -> pl.DataFrame:
    """The retrievals with `output` and the root span's carried values (`root_carry_N`)."""
    carry = [column for column in spans.columns if column.startswith("carry_")]
    roots = (
        spans.filter(pl.col("parent_id").is_null())
        .sort("start_ns")
        .unique(subset=["trace_id"], keep="first", maintain_order=True)
        .select(
            "trace_id",
            pl.col("output").alias("root_output"),
            *(pl.col(column).alias(f"root_{column}") for column in carry),
        )
    )
    items = items.drop("output").join(roots, on="trace_id", how="left")
    if output_from == "root":
        return items.rename({"root_output": "output"})
    items = items.drop("root_output")
    if output_from == "none":
        return items.with_columns(output=pl.lit(None, dtype=pl.String))
    llms = (
        spans.filter(pl.col("role") == LLM)
        .select("trace_id", pl.col("start_ns").alias("llm_start"), "output")
        .sort("llm_start")
    )
    # the first LLM span of the trace that starts when or after the retrieval ends; both sides
    # are sorted by their key as a whole, so within every trace too (Polars cannot check that)
    return items.sort("end_ns").join_asof(
        llms,
        left_on="end_ns",
        right_on="llm_start",
        by="trace_id",
        strategy="forward",
        check_sortedness=False,
    )


def items_schema(attributes: Sequence[str], types: dict[str, str]) -> pa.Schema:
    """The assembled items' columns: the item's, `BUILTIN_COLUMNS`, then the carried ones."""
    return pa.schema(
        [
            ("query_id", pa.string()),
            ("input", pa.string()),
            ("output", pa.string()),
            ("context", pa.list_(pa.string())),
            ("context_ids", pa.list_(pa.string())),
            ("trace_id", pa.string()),
            ("span_name", pa.string()),
            ("start_time", pa.timestamp("us", tz="UTC")),
            ("otlp_source", pa.string()),
            *((name, pa.type_for_alias(types.get(name, "string"))) for name in attributes),
        ]
    )


def _items_table(items: pl.DataFrame, attributes: Sequence[str], types: dict[str, str]) -> pa.Table:
    items = items.sort("start_ns", "span_id")
    columns = items.select(
        query_id="span_id",
        input="input",
        output="output",
        context="documents",
        context_ids="document_ids",
        trace_id="trace_id",
        span_name="name",
        start_time=pl.col("start_ns") // 1000,
        otlp_source=pl.format("{} line {}", "source", "line"),
    ).to_dict(as_series=False)
    for number, name in enumerate(attributes):
        texts = items.select(pl.coalesce(f"carry_{number}", f"root_carry_{number}")).to_series()
        columns[name] = [_carried_value(text, types.get(name, "string")) for text in texts]
    return pa.table(columns, schema=items_schema(attributes, types))


def _carried_value(text: str | None, kind: str) -> Any:
    if text is None:
        return None
    value = json.loads(text)
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value)
    if kind == "float64":
        return float(value)
    return value
