"""`input.format: otlp` without Ray: OTLP JSON read (jobs.inputs.otlp) and assembled into item
Parquet (jobs.inputs.traces) with the serial mapper, on files written from the specification
(tests/support/otlp.py)."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.core.config import parse_config
from jobs.core.storage import filesystem
from jobs.inputs.otlp import RETRIEVER, Problem, SpanRow, read_otlp_file, spans_of_line
from jobs.inputs.traces import (
    TraceJob,
    TraceReport,
    assemble_traces,
    carried_type,
    partitions_for,
    trace_files,
)
from scorer_core.errors import ConfigError, InputError
from tests.support.otlp import (
    Expected,
    Trace,
    attributes,
    export_line,
    genai_retrieval_trace,
    rag_trace,
    scatter,
    span,
    to_proto,
    write_lines,
)


def _read(path: Path, carry: tuple[str, ...] = ()) -> list[SpanRow | Problem]:
    fs, fs_path, _ = filesystem(str(path), {})
    compression = "gzip" if path.name.endswith(".gz") else None
    return list(read_otlp_file(fs, fs_path, str(path), compression, carry))


def _job(tmp_path: Path, carry: tuple[str, ...] = (), **options: Any) -> TraceJob:
    return TraceJob(
        output_url=str(tmp_path / "out"),
        output_options={},
        folder="_staging/run_id=t/traces",
        input_options={},
        carry=carry,
        parts=options.pop("parts", 3),
        **options,
    )


def _items(tmp_path: Path) -> pl.DataFrame:
    folder = tmp_path / "out" / "_staging" / "run_id=t" / "traces" / "items"
    return pl.concat([pl.read_parquet(p) for p in sorted(folder.glob("*.parquet"))])


def _traces(seed: int = 3) -> tuple[list[Trace], random.Random]:
    rng = random.Random(seed)
    traces = [
        rag_trace(rng, n, retrievals=1 + n % 3, service=f"svc-{n % 2}", session=f"s-{n % 4}")
        for n in range(12)
    ]
    traces += [rag_trace(rng, 100 + n, with_retriever=False) for n in range(3)]
    return traces, rng


def _write_split(tmp_path: Path, traces: list[Trace], rng: random.Random) -> Path:
    """Three files, one of them gzipped, every multi-span trace split across them."""
    folder = tmp_path / "traces"
    for n, lines in enumerate(scatter(traces, 3, rng)):
        name = f"traces-{n}.json" + (".gz" if n == 1 else "")
        write_lines(folder / name, lines, gzipped=n == 1)
    return folder


def _expected(traces: list[Trace]) -> dict[str, Expected]:
    return {item.query_id: item for trace in traces for item in trace.items}


# -- the files written here are OTLP ---------------------------------------------------------


def test_the_generated_lines_parse_with_opentelemetry_proto() -> None:
    traces, rng = _traces()
    lines = [line for file in scatter(traces, 2, rng) for line in file]
    spans = sum(
        len(scope.spans)
        for line in lines
        for group in to_proto(line).resource_spans
        for scope in group.scope_spans
    )
    assert spans == sum(len(trace.spans) for trace in traces)
    first = to_proto(lines[0]).resource_spans[0].scope_spans[0].spans[0]
    assert len(first.trace_id) == 16 and len(first.span_id) == 8
    assert first.start_time_unix_nano > 0


# -- reading ---------------------------------------------------------------------------------


def test_a_retriever_span_gives_its_query_and_documents_in_the_order_of_their_index(
    tmp_path: Path,
) -> None:
    # twelve documents, attributes written in a shuffled order: 10 and 11 come after 9
    attrs: dict[str, Any] = {"openinference.span.kind": "RETRIEVER", "input.value": "q"}
    order = list(range(12))
    random.Random(1).shuffle(order)
    for i in order:
        attrs[f"retrieval.documents.{i}.document.content"] = f"doc {i}"
        attrs[f"retrieval.documents.{i}.document.id"] = i * 10  # an integer id
    item = span("ab" * 16, "cd" * 8, "ef" * 8, "retrieve", 5, 9, attrs)
    line = export_line([item], {"service.name": "api"})
    path = write_lines(tmp_path / "t.json", [line])

    [row] = _read(path, carry=("service.name", "input.value"))

    assert isinstance(row, SpanRow)
    assert (row.role, row.trace_id, row.span_id, row.parent_id) == (
        RETRIEVER,
        "ab" * 16,
        "cd" * 8,
        "ef" * 8,
    )
    assert (row.input, row.start_ns, row.end_ns, row.line) == ("q", 5, 9, 1)
    assert row.documents == [f"doc {i}" for i in range(12)]
    assert row.document_ids == [str(i * 10) for i in range(12)]
    # carried: a resource attribute and a span attribute, JSON-encoded
    assert row.carried == ('"api"', '"q"')


def test_attribute_values_of_every_otlp_kind_are_decoded(tmp_path: Path) -> None:
    values = {
        "s": "text",
        "i": 9007199254740993,  # beyond a double's precision: kept exact (intValue is a string)
        "d": 0.25,
        "b": True,
        "a": ["x", 2],
        "k": {"inner": "v"},
    }
    item = span("01" * 16, "02" * 8, None, "root", 1, 2, values)
    path = write_lines(tmp_path / "t.json", [export_line([item], {})])
    [row] = _read(path, carry=tuple(values))
    assert isinstance(row, SpanRow)
    assert [json.loads(v) for v in row.carried if v is not None] == list(values.values())


def test_a_malformed_line_or_span_is_reported_with_file_and_line_and_the_rest_is_read(
    tmp_path: Path,
) -> None:
    good = span("11" * 16, "22" * 8, None, "root", 1, 2, {"output.value": "a"})
    no_trace = span("11" * 16, "33" * 8, None, "x", 1, 2, {})
    del no_trace["traceId"]
    bad_time = span("11" * 16, "44" * 8, None, "x", 1, 2, {})
    bad_time["startTimeUnixNano"] = "soon"
    lines = [
        export_line([good], {}),
        '{"resourceSpans": [ truncated',
        export_line([no_trace, good | {"spanId": "55" * 8}, bad_time], {}),
        "[1, 2]",
        json.dumps({"resourceMetrics": []}),  # another signal: skipped, not an error
    ]
    path = write_lines(tmp_path / "mixed.json", lines)

    found = _read(path)

    rows = [f for f in found if isinstance(f, SpanRow)]
    problems = [f for f in found if isinstance(f, Problem)]
    assert [(r.span_id, r.line) for r in rows] == [("22" * 8, 1), ("55" * 8, 3)]
    assert [p.line for p in problems] == [2, 3, 3, 4]
    assert problems[0].message.startswith(f"{path} line 2: not JSON")
    assert "traceId is missing" in problems[1].message
    assert f"span {'44' * 8}: startTimeUnixNano 'soon' is not an integer" in problems[2].message
    assert "not an object" in problems[3].message


def test_ids_written_in_base64_are_read_as_hex() -> None:
    import base64

    item = span("00" * 15 + "01", "00" * 7 + "02", None, "r", 1, 2, {})
    item["traceId"] = base64.b64encode(bytes.fromhex("00" * 15 + "01")).decode()
    item["spanId"] = base64.b64encode(bytes.fromhex("00" * 7 + "02")).decode()
    [row] = list(spans_of_line(export_line([item], {}).encode(), "f", 1, ()))
    assert isinstance(row, SpanRow)
    assert (row.trace_id, row.span_id) == ("00" * 15 + "01", "00" * 7 + "02")


# -- assembling ------------------------------------------------------------------------------


def test_traces_split_across_files_children_first_become_one_item_per_retrieval(
    tmp_path: Path,
) -> None:
    traces, rng = _traces()
    folder = _write_split(tmp_path, traces, rng)
    files = trace_files(str(folder), {})
    assert [f.compression for f in files] == [None, "gzip", None]

    carry = ("service.name", "session.id", "user.id", "start_time", "trace_id")
    report = assemble_traces(_job(tmp_path, carry), files)

    expected = _expected(traces)
    items = _items(tmp_path)
    assert sorted(items["query_id"]) == sorted(expected)
    for row in items.iter_rows(named=True):
        want = expected[row["query_id"]]
        assert row["input"] == want.input
        assert row["output"] == want.output  # the root span's output.value
        assert row["context"] == want.contexts
        assert row["context_ids"] == want.context_ids
        assert row["trace_id"] == want.trace_id
        assert row["service.name"] == want.carried["service.name"]  # a resource attribute
        assert row["session.id"] == want.carried["session.id"]  # on the root span only
        assert row["start_time"].timestamp() * 1e9 == pytest.approx(want.start_ns, abs=1e3)
        assert row["otlp_source"].startswith(str(folder))
    assert items.schema["start_time"] == pl.Datetime("us", "UTC")
    spans = sum(len(t.spans) for t in traces)
    assert (report.files, report.spans, report.traces) == (3, spans, len(traces))
    assert report.traces_without_retriever == 3
    assert report.retrievals == report.items == len(expected)
    assert (report.malformed, report.duplicate_spans, report.items_without_output) == (0, 0, 0)
    # nothing but the items (and no span files) stays in the staging folder
    staged = tmp_path / "out" / "_staging" / "run_id=t" / "traces"
    assert [p.name for p in staged.iterdir()] == ["items"]


def test_the_partition_count_does_not_change_the_items(tmp_path: Path) -> None:
    traces, rng = _traces(seed=5)
    folder = _write_split(tmp_path, traces, rng)
    files = trace_files(str(folder), {})
    frames = []
    for parts in (1, 7):
        assemble_traces(_job(tmp_path, ("service.name",), parts=parts), files)
        frames.append(_items(tmp_path).sort("query_id"))
    assert frames[0].equals(frames[1])


def test_output_from_the_next_llm_span_or_none(tmp_path: Path) -> None:
    traces, rng = _traces(seed=8)
    files = trace_files(str(_write_split(tmp_path, traces, rng)), {})
    expected = _expected(traces)

    assemble_traces(_job(tmp_path, output_from="next_llm"), files)
    for row in _items(tmp_path).iter_rows(named=True):
        # the LLM span after retrieval k answers "llm answer <trace>.<k>"
        number, _, k = expected[row["query_id"]].input.removeprefix("question ").partition(" part ")
        assert row["output"] == f"llm answer {number}.{k}"

    assemble_traces(_job(tmp_path, output_from="none"), files)
    assert _items(tmp_path)["output"].null_count() == len(expected)


def test_genai_retrieval_spans_with_document_text_are_items_without_it_skipped(
    tmp_path: Path,
) -> None:
    rng = random.Random(4)
    traces = [genai_retrieval_trace(rng, n, with_content=n % 2 == 0) for n in range(6)]
    traces.append(rag_trace(rng, 50, retrievals=1))
    lines = [export_line([s], r) for t in traces for s, r in t.spans]
    files = trace_files(str(write_lines(tmp_path / "in" / "g.json", lines)), {})

    report = assemble_traces(_job(tmp_path, ("service.name",)), files)

    expected = _expected(traces)
    items = _items(tmp_path)
    assert sorted(items["query_id"]) == sorted(expected)
    for row in items.iter_rows(named=True):
        want = expected[row["query_id"]]
        assert (row["input"], row["context"], row["context_ids"]) == (
            want.input,
            want.contexts,
            want.context_ids,
        )
    assert report.retrievals == 7 and report.retrievals_without_text == 3
    # a GenAI retrieval span is its own root here, with no output.value
    assert report.items_without_output == 3


def test_repeated_spans_and_malformed_lines_are_counted_with_examples(tmp_path: Path) -> None:
    traces, rng = _traces(seed=9)
    lines = [line for file in scatter(traces, 1, rng) for line in file]
    lines = [lines[0], "not json", *lines]  # the first line's spans twice
    files = trace_files(str(write_lines(tmp_path / "in" / "t.json", lines)), {})

    report = assemble_traces(_job(tmp_path), files)

    assert report.malformed == 1
    assert report.malformed_examples == [f"{files[0].path} line 2: not JSON (Expecting value)"]
    assert (
        report.duplicate_spans
        == json.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"].__len__()
    )
    assert report.items == len(_expected(traces))
    assert TraceReport(**dataclasses.asdict(report)) == report
    assert "1 malformed line(s)/span(s) (first:" in report.summary()


def test_no_retrieval_at_all_fails_naming_what_was_read(tmp_path: Path) -> None:
    rng = random.Random(2)
    traces = [rag_trace(rng, n, with_retriever=False) for n in range(2)]
    lines = [export_line([s], r) for t in traces for s, r in t.spans]
    files = trace_files(str(write_lines(tmp_path / "in" / "t.json", lines)), {})
    with pytest.raises(InputError, match=r"no retrieval span with documents in 4 span\(s\)"):
        assemble_traces(_job(tmp_path), files)


def test_carried_attribute_types_are_decided_from_every_value() -> None:
    assert carried_type(["int"]) == "int64"
    assert carried_type(["int", "float"]) == "float64"
    assert carried_type(["bool"]) == "bool"
    assert carried_type(["str", "int"]) == "string"
    assert carried_type(["json"]) == "string"
    assert carried_type([]) == "string"


def test_an_integer_attribute_is_carried_as_int64(tmp_path: Path) -> None:
    rng = random.Random(6)
    trace = rag_trace(rng, 1, retrievals=1)
    retriever = trace.spans[1][0]
    retriever["attributes"] += attributes({"tenant.tier": 3})
    lines = [export_line([s], r) for s, r in trace.spans]
    files = trace_files(str(write_lines(tmp_path / "in" / "t.json", lines)), {})
    assemble_traces(_job(tmp_path, ("tenant.tier",)), files)
    path = next((tmp_path / "out").rglob("items/*.parquet"))
    assert pq.read_schema(path).field("tenant.tier").type == pa.int64()
    assert _items(tmp_path)["tenant.tier"].to_list() == [3]


def test_partitions_grow_with_the_input() -> None:
    from jobs.inputs.listing import FileInfo
    from jobs.inputs.traces import GZIP_RATIO, PART_BYTES

    assert partitions_for([FileInfo(path="a", size=10, format="jsonl")]) == 1
    assert partitions_for([FileInfo(path="a", size=10 * PART_BYTES, format="jsonl")]) == 10
    assert (
        partitions_for([FileInfo(path="a", size=PART_BYTES, format="jsonl", compression="gzip")])
        == GZIP_RATIO
    )


# -- config ----------------------------------------------------------------------------------


def test_otlp_config_refuses_a_column_map_and_otlp_settings_need_the_format() -> None:
    base = {"path": "traces/", "format": "otlp"}
    config = parse_config({"input": {**base, "otlp": {"output": "next_llm"}}})
    assert config.input.otlp.output == "next_llm"
    with pytest.raises(ConfigError, match="format otlp reads spans, not columns: remove columns"):
        parse_config({"input": {**base, "columns": {"input": "q"}}})
    with pytest.raises(ConfigError, match="otlp settings need format: otlp"):
        parse_config({"input": {"path": "x.jsonl", "otlp": {"output": "none"}}})


def test_no_trace_files_fails_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=f"no OTLP trace files at {tmp_path / 'empty'}"):
        trace_files(str(tmp_path / "empty"), {})


def test_a_carried_attribute_no_span_has_fails_naming_it(tmp_path: Path) -> None:
    traces, rng = _traces(seed=12)
    files = trace_files(str(_write_split(tmp_path, traces, rng)), {})
    with pytest.raises(InputError, match=r"carried attribute\(s\) \['sesion.id'\] found on no"):
        assemble_traces(_job(tmp_path, ("service.name", "sesion.id")), files)


def test_carrying_an_item_field_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"carry: \['input'\] are fields of the items"):
        parse_config({"input": {"path": "t/", "format": "otlp", "carry": ["input"]}})


def test_a_damaged_gzip_file_fails_naming_it(tmp_path: Path) -> None:
    traces, rng = _traces(seed=13)
    lines = [line for file in scatter(traces, 1, rng) for line in file]
    path = write_lines(tmp_path / "t.json.gz", lines, gzipped=True)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # cut in the middle
    with pytest.raises(InputError, match=f"{path} is not a readable gzip file"):
        _read(path)


def test_other_commands_than_run_refuse_traces_naming_why() -> None:
    from jobs.inputs.spec import input_spec_of

    config = parse_config({"input": {"path": "t/", "format": "otlp"}})
    with pytest.raises(ConfigError, match="assembled into items by `ctxprec run` only"):
        input_spec_of(config)


def test_the_run_reads_the_assembled_items_with_their_columns() -> None:
    from jobs.inputs.records import ItemReader

    raw: dict[str, Any] = {
        "input": {"path": "s3://b/traces/", "format": "otlp", "carry": ["service.name"]},
        "output": {"path": "s3://b/out/", "storage_options": {"region": "x"}},
    }
    items = "s3://b/out/_staging/run_id=r/traces/items"
    spec = ItemReader.for_config(parse_config(raw), items).spec
    assert (spec.path, spec.format) == (items, "parquet")
    assert spec.storage_options == {"region": "x"}
    assert spec.carry == ("service.name",)
    columns = spec.columns
    assert (columns.query_id, columns.input, columns.output) == ("query_id", "input", "output")
    assert (columns.context, columns.context_ids) == ("context", "context_ids")
    assert spec.context_extractor is None
    raw["input"]["otlp"] = {"output": "none"}
    assert ItemReader.for_config(parse_config(raw), items).spec.columns.output is None
