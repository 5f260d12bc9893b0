"""OTLP JSON trace files written from the specification, with the items they must give.

The encoding is OTLP's JSON (opentelemetry-proto's `ExportTraceServiceRequest`, one per line,
as a Collector's file exporter writes it): trace and span ids as lowercase hex, 64-bit integers
(`startTimeUnixNano`, `intValue`) as decimal strings, attributes as key / typed-value lists. The
spans follow OpenInference's semantic conventions (a CHAIN root with `output.value`, RETRIEVER
spans with `input.value` and `retrieval.documents.{i}.document.content` / `.document.id`, LLM
spans) or, for `genai_retrieval`, the OpenTelemetry GenAI conventions' retrieval span.

`to_proto` parses a line with opentelemetry-proto itself (hex ids turned into the base64 its
json_format expects), so a test can check that what is written here is a valid export.
Every document carries the word RELEVANT or IRRELEVANT, which is what the fake judge keys on.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scorer_core import context_precision

BASE_NS = 1_764_000_000_000_000_000  # 2025-11-24, in ns since the epoch


def any_value(value: Any) -> dict[str, Any]:
    """A Python value as an OTLP JSON AnyValue."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": attributes(value)}}
    raise TypeError(f"no AnyValue for {type(value).__name__}")


def attributes(values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": any_value(value)} for key, value in values.items()]


def span(
    trace_id: str,
    span_id: str,
    parent_id: str | None,
    name: str,
    start_ns: int,
    end_ns: int,
    attrs: Mapping[str, Any],
) -> dict[str, Any]:
    """One span as OTLP JSON (kind INTERNAL, status unset)."""
    out: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": str(end_ns),
        "attributes": attributes(attrs),
        "status": {},
    }
    if parent_id:
        out["parentSpanId"] = parent_id
    return out


def export_line(spans: Sequence[dict[str, Any]], resource: Mapping[str, Any]) -> str:
    """One ExportTraceServiceRequest (one resource, one scope) as a line of JSON."""
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": attributes(resource)},
                "scopeSpans": [
                    {
                        "scope": {"name": "openinference.instrumentation.test", "version": "1"},
                        "spans": list(spans),
                    }
                ],
            }
        ]
    }
    return json.dumps(request)


def to_proto(line: str) -> Any:
    """The line parsed by opentelemetry-proto (after turning hex ids into base64)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    data = json.loads(line)
    for group in data["resourceSpans"]:
        for scope in group["scopeSpans"]:
            for item in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if item.get(key):
                        item[key] = base64.b64encode(bytes.fromhex(item[key])).decode()
    return json_format.ParseDict(data, ExportTraceServiceRequest())


@dataclass
class Expected:
    """An item a retrieval span must become."""

    query_id: str
    trace_id: str
    input: str
    output: str | None
    contexts: list[str]
    context_ids: list[str]
    relevance: list[bool]
    start_ns: int
    carried: dict[str, Any] = field(default_factory=dict)

    @property
    def score(self) -> float:
        return context_precision(self.relevance)


@dataclass
class Trace:
    """A RAG trace's spans (each with the resource it belongs to) and its expected items."""

    trace_id: str
    spans: list[tuple[dict[str, Any], dict[str, Any]]]
    items: list[Expected]


def _hex(rng: random.Random, size: int) -> str:
    return rng.getrandbits(8 * size).to_bytes(size, "big").hex()


def rag_trace(
    rng: random.Random,
    number: int,
    *,
    retrievals: int = 2,
    service: str = "rag-api",
    session: str = "s-1",
    documents: int = 3,
    with_retriever: bool = True,
) -> Trace:
    """A trace: CHAIN root (answer in output.value, session.id) -> `retrievals` x (RETRIEVER,
    then an LLM span that answers after it), every span an OpenInference span."""
    trace_id = _hex(rng, 16)
    root_id = _hex(rng, 8)
    start = BASE_NS + number * 60_000_000_000
    answer = f"answer {number}"
    resource = {"service.name": service, "deployment.environment": "test"}
    root = span(
        trace_id,
        root_id,
        None,
        "rag",
        start,
        start + 50_000_000,
        {
            "openinference.span.kind": "CHAIN",
            "input.value": f"question {number}",
            "output.value": answer,
            "session.id": session,
            "user.id": f"u-{number % 3}",
        },
    )
    spans = [(root, resource)]
    items: list[Expected] = []
    clock = start + 1_000_000
    for k in range(retrievals if with_retriever else 0):
        retriever_id = _hex(rng, 8)
        relevance = [rng.random() < 0.5 for _ in range(documents)]
        contents = [
            f"passage {number}.{k}.{i} {'RELEVANT' if rel else 'IRRELEVANT'}"
            for i, rel in enumerate(relevance)
        ]
        ids = [f"doc-{number}-{k}-{i}" for i in range(documents)]
        doc_attrs: dict[str, Any] = {}
        for i, (content, doc_id) in enumerate(zip(contents, ids, strict=True)):
            doc_attrs[f"retrieval.documents.{i}.document.id"] = doc_id
            doc_attrs[f"retrieval.documents.{i}.document.content"] = content
            doc_attrs[f"retrieval.documents.{i}.document.score"] = 1.0 - i / 10
        query = f"question {number} part {k}"
        retriever = span(
            trace_id,
            retriever_id,
            root_id,
            "retrieve",
            clock,
            clock + 2_000_000,
            {"openinference.span.kind": "RETRIEVER", "input.value": query, **doc_attrs},
        )
        llm_output = f"llm answer {number}.{k}"
        llm = span(
            trace_id,
            _hex(rng, 8),
            root_id,
            "llm",
            clock + 3_000_000,
            clock + 9_000_000,
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-test",
                "llm.token_count.total": 120 + k,
                "output.value": llm_output,
            },
        )
        spans += [(retriever, resource), (llm, resource)]
        items.append(
            Expected(
                query_id=retriever_id,
                trace_id=trace_id,
                input=query,
                output=answer,
                contexts=contents,
                context_ids=ids,
                relevance=relevance,
                start_ns=clock,
                carried={"service.name": service, "session.id": session},
            )
        )
        clock += 10_000_000
    embedding = span(
        trace_id,
        _hex(rng, 8),
        root_id,
        "embed",
        start + 500_000,
        start + 900_000,
        {"openinference.span.kind": "EMBEDDING", "embedding.model_name": "e"},
    )
    spans.append((embedding, resource))
    return Trace(trace_id, spans, items)


def genai_retrieval_trace(rng: random.Random, number: int, *, with_content: bool) -> Trace:
    """A trace whose retrieval span follows the OpenTelemetry GenAI conventions
    (`gen_ai.operation.name` retrieval, query in `gen_ai.retrieval.query.text`, documents in
    `gen_ai.retrieval.documents` as a list of {id, score, content}); no root output."""
    trace_id = _hex(rng, 16)
    span_id = _hex(rng, 8)
    start = BASE_NS + number * 60_000_000_000
    relevance = [True, False]
    documents: list[dict[str, Any]] = []
    for i, rel in enumerate(relevance):
        document: dict[str, Any] = {"id": f"g-{number}-{i}", "score": 0.9 - i / 10}
        if with_content:
            document["content"] = f"genai {number}.{i} {'RELEVANT' if rel else 'IRRELEVANT'}"
        documents.append(document)
    retrieval = span(
        trace_id,
        span_id,
        None,
        "retrieval",
        start,
        start + 1_000_000,
        {
            "gen_ai.operation.name": "retrieval",
            "gen_ai.data_source.id": "kb-1",
            "gen_ai.retrieval.query.text": f"genai question {number}",
            "gen_ai.retrieval.documents": documents,
        },
    )
    items = (
        [
            Expected(
                query_id=span_id,
                trace_id=trace_id,
                input=f"genai question {number}",
                output=None,
                contexts=[d["content"] for d in documents],
                context_ids=[d["id"] for d in documents],
                relevance=relevance,
                start_ns=start,
                carried={"service.name": "genai-svc"},
            )
        ]
        if with_content
        else []
    )
    return Trace(trace_id, [(retrieval, {"service.name": "genai-svc"})], items)


def write_lines(path: Path, lines: Iterable[str], *, gzipped: bool = False) -> Path:
    text = "".join(line + "\n" for line in lines).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text) if gzipped else text)
    return path


def scatter(
    traces: Sequence[Trace], files: int, rng: random.Random, per_line: int = 4
) -> list[list[str]]:
    """The traces' spans spread over `files` files, every trace split across files where it
    has several spans, children before their parents (each file's spans in reverse), grouped
    `per_line` spans to a line by resource."""
    buckets: list[list[tuple[dict[str, Any], dict[str, Any]]]] = [[] for _ in range(files)]
    for trace in traces:
        for n, pair in enumerate(trace.spans):
            buckets[(n + rng.randrange(files)) % files].append(pair)
    out: list[list[str]] = []
    for bucket in buckets:
        bucket.reverse()  # roots were appended first: now children come first
        lines = []
        for i in range(0, len(bucket), per_line):
            chunk = bucket[i : i + per_line]
            by_resource: dict[str, list[dict[str, Any]]] = {}
            resources: dict[str, dict[str, Any]] = {}
            for item, resource in chunk:
                key = json.dumps(resource, sort_keys=True)
                by_resource.setdefault(key, []).append(item)
                resources[key] = resource
            lines += [export_line(items, resources[key]) for key, items in by_resource.items()]
        out.append(lines)
    return out
