"""Read OpenTelemetry trace files (OTLP JSON, plain or gzipped) into compact span rows for
`jobs.inputs.traces`: a span's role (by OpenInference's or GenAI's attributes), a retriever's
query and documents, an output, the carried attributes (docs/traces.md). Bad data never
raises: an unreadable line or span is a `Problem` naming the file, line and span.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from jobs.inputs.jsonl import lines_in_range
from jobs.inputs.listing import reading

RETRIEVER = "retriever"
LLM = "llm"
OTHER = "other"

_OI_KIND = "openinference.span.kind"
_GENAI_OPERATION = "gen_ai.operation.name"
_GENAI_LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_DOCS_PREFIX = "retrieval.documents."
_DOCS_ATTRIBUTE = "retrieval.documents"
_GENAI_DOCS = "gen_ai.retrieval.documents"
_GENAI_QUERY = "gen_ai.retrieval.query.text"
_LLM_OUTPUT = "llm.output_messages.0.message.content"
# AnyValue kinds of one value (JSON writes a double's NaN and Infinity as strings: float reads them)
_SCALARS: dict[str, Any] = {
    "stringValue": str,
    "boolValue": bool,
    "intValue": int,
    "doubleValue": float,
    "bytesValue": str,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanRow:
    """One span as assembly needs it; `line`: its 1-based line in `source`."""

    trace_id: str
    span_id: str
    parent_id: str | None
    role: str
    name: str
    start_ns: int
    end_ns: int
    input: str | None
    output: str | None
    documents: list[str | None] | None
    document_ids: list[str | None] | None
    carried: tuple[str | None, ...]
    source: str
    line: int


@dataclass(frozen=True, slots=True)
class Problem:
    """A line or span that could not be read: `message` names the file and line."""

    source: str
    line: int
    message: str


class _Bad(Exception):
    """A span or value is malformed; the message says how."""


def read_otlp_file(
    fs: fsspec.AbstractFileSystem,
    fs_path: str,
    url: str,
    compression: str | None,
    carry: Sequence[str],
) -> Iterator[SpanRow | Problem]:
    """Every span of one OTLP JSON file, a `Problem` for each that cannot be read."""
    with reading(fs, fs_path, url, compression, url) as handle:
        for number, (_, line) in enumerate(lines_in_range(handle, 0, None), start=1):
            yield from spans_of_line(line, url, number, carry)


def spans_of_line(
    line: bytes, source: str, number: int, carry: Sequence[str]
) -> Iterator[SpanRow | Problem]:
    """The spans of one line of an OTLP JSON file."""
    if not line.strip():
        return
    where = f"{source} line {number}"
    try:
        export = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        yield Problem(source, number, f"{where}: not JSON ({reason})")
        return
    if not isinstance(export, dict):
        yield Problem(source, number, f"{where}: a JSON {type(export).__name__}, not an object")
        return
    resource_spans = export.get("resourceSpans")
    if resource_spans is None:
        if not ({"resourceMetrics", "resourceLogs", "resourceProfiles"} & export.keys()):
            yield Problem(source, number, f"{where}: no resourceSpans: not an OTLP trace export")
        return
    if not isinstance(resource_spans, list):
        yield Problem(source, number, f"{where}: resourceSpans is not a list")
        return
    for r_index, group in enumerate(resource_spans):
        try:
            resource, scopes = _resource_and_scopes(group)
        except _Bad as exc:
            yield Problem(source, number, f"{where}: resourceSpans[{r_index}]: {exc}")
            continue
        for scope in scopes:
            spans = scope.get("spans") if isinstance(scope, dict) else None
            if not isinstance(spans, list):
                yield Problem(source, number, f"{where}: a scopeSpans entry without a spans list")
                continue
            for span in spans:
                try:
                    yield _span_row(span, resource, carry, source, number)
                except _Bad as exc:
                    span_id = span.get("spanId") if isinstance(span, dict) else None
                    label = f"span {span_id}" if isinstance(span_id, str) else "a span"
                    yield Problem(source, number, f"{where}: {label}: {exc}")


def _resource_and_scopes(group: Any) -> tuple[dict[str, Any], list[Any]]:
    if not isinstance(group, dict):
        raise _Bad("not an object")
    resource = group.get("resource") or {}
    if not isinstance(resource, dict):
        raise _Bad("resource is not an object")
    # instrumentationLibrarySpans: what OTLP called scopeSpans before 0.15
    scopes = group.get("scopeSpans", group.get("instrumentationLibrarySpans")) or []
    if not isinstance(scopes, list):
        raise _Bad("scopeSpans is not a list")
    return _attribute_map(resource.get("attributes")), scopes


def _attribute_map(attributes: Any) -> dict[str, Any]:
    """key -> the raw OTLP AnyValue, decoded later and only for the keys that are needed."""
    if attributes is None:
        return {}
    if not isinstance(attributes, list):
        raise _Bad("attributes is not a list")
    try:
        return {item["key"]: item.get("value") for item in attributes}
    except (TypeError, KeyError, AttributeError):
        raise _Bad("an attribute is not a {key, value} object") from None


def _span_row(
    span: Any, resource: Mapping[str, Any], carry: Sequence[str], source: str, line: int
) -> SpanRow:
    if not isinstance(span, dict):
        raise _Bad("not an object")
    trace_id = _id(span.get("traceId"), 16, "traceId")
    span_id = _id(span.get("spanId"), 8, "spanId")
    parent = span.get("parentSpanId")
    parent_id = _id(parent, 8, "parentSpanId") if parent else None
    start = _nanos(span.get("startTimeUnixNano"), "startTimeUnixNano", required=True)
    end = _nanos(span.get("endTimeUnixNano"), "endTimeUnixNano", required=False) or start
    attributes = _attribute_map(span.get("attributes"))
    role = _role(attributes)
    query: str | None = None
    output: str | None = None
    documents: list[str | None] | None = None
    ids: list[str | None] | None = None
    if role == RETRIEVER:
        query = _text(attributes, "input.value")
        if _GENAI_DOCS in attributes:
            query = _text(attributes, _GENAI_QUERY) or query
            documents, ids = _genai_documents(decode(attributes[_GENAI_DOCS]))
        else:
            documents, ids = _openinference_documents(attributes)
    elif role == LLM:
        output = _text(attributes, _LLM_OUTPUT) or _text(attributes, "output.value")
    if parent_id is None and output is None:
        output = _text(attributes, "output.value")
    carried: tuple[str | None, ...] = ()
    if carry and (role == RETRIEVER or parent_id is None):
        carried = tuple(_carried(name, attributes, resource) for name in carry)
    name = span.get("name")
    return SpanRow(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        role=role,
        name=name if isinstance(name, str) else "",
        start_ns=start,
        end_ns=end,
        input=query,
        output=output,
        documents=documents,
        document_ids=ids,
        carried=carried,
        source=source,
        line=line,
    )


def _role(attributes: Mapping[str, Any]) -> str:
    kind = _text(attributes, _OI_KIND)
    if kind is not None:
        return {"RETRIEVER": RETRIEVER, "LLM": LLM}.get(kind.upper(), OTHER)
    operation = _text(attributes, _GENAI_OPERATION)
    if operation == "retrieval":
        return RETRIEVER
    return LLM if operation in _GENAI_LLM_OPERATIONS else OTHER


def _id(value: Any, size: int, field: str) -> str:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex; base64 is accepted too."""
    if value is None:
        raise _Bad(f"{field} is missing")
    if not isinstance(value, str) or not value:
        raise _Bad(f"{field} is not a string")
    if len(value) == 2 * size:
        try:
            if int(value, 16):
                return value.lower()
        except ValueError:
            pass
        else:
            raise _Bad(f"{field} is all zeros (invalid)")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == size and any(raw):
        return raw.hex()
    raise _Bad(f"{field} {value!r} is not {size} bytes of hex")


def _nanos(value: Any, field: str, *, required: bool) -> int:
    if value is None or value == "":
        if required:
            raise _Bad(f"{field} is missing")
        return 0
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise _Bad(f"{field} {value!r} is not an integer") from None
    if number < 0:
        raise _Bad(f"{field} is negative")
    return number


def decode(value: Any) -> Any:
    """An OTLP AnyValue as a Python value (None when empty); `_Bad` when it is not one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Bad(f"an attribute value is a {type(value).__name__}, not an AnyValue object")
    if not value:
        return None
    kind, inner = next(iter(value.items()))
    try:
        if kind in _SCALARS:
            return _SCALARS[kind](inner)
        if kind == "arrayValue":
            return [decode(item) for item in (inner or {}).get("values") or []]
        if kind == "kvlistValue":
            items = (inner or {}).get("values") or []
            return {item["key"]: decode(item.get("value")) for item in items}
    except (TypeError, ValueError, KeyError, AttributeError):
        raise _Bad(f"an attribute's {kind} {inner!r} cannot be read") from None
    raise _Bad(f"an attribute value of unknown kind {kind!r}")


def _text(attributes: Mapping[str, Any], key: str) -> str | None:
    """A string attribute; a value of another kind is written as JSON (or absent: None)."""
    value = decode(attributes.get(key))
    return value if value is None or isinstance(value, str) else json.dumps(value)


def _openinference_documents(
    attributes: Mapping[str, Any],
) -> tuple[list[str | None], list[str | None]]:
    """`retrieval.documents.{i}.document.content` and `.id`, or the `retrieval.documents` list."""
    if _DOCS_ATTRIBUTE in attributes:
        listed = decode(attributes[_DOCS_ATTRIBUTE])
        if isinstance(listed, list):
            return _document_objects(listed, ("document.content", "content"), ("document.id", "id"))
    found: dict[int, dict[str, Any]] = {}
    for key, raw in attributes.items():
        if not key.startswith(_DOCS_PREFIX):
            continue
        number, _, field = key[len(_DOCS_PREFIX) :].partition(".")
        if field in ("document.content", "document.id") and number.isdigit():
            found.setdefault(int(number), {})[field] = decode(raw)
    documents = [found[index] for index in sorted(found)]
    return _document_objects(documents, ("document.content",), ("document.id",))


def _genai_documents(value: Any) -> tuple[list[str | None] | None, list[str | None]]:
    """Each document's `content` and `id`; no contents when no document has text."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise _Bad(f"{_GENAI_DOCS} is a string that is not JSON") from None
    if not isinstance(value, list):
        raise _Bad(f"{_GENAI_DOCS} is not a list of documents")
    contents, ids = _document_objects(value, ("content",), ("id",))
    if contents and all(content is None for content in contents):
        return None, ids
    return contents, ids


def _document_objects(
    documents: list[Any], content_keys: tuple[str, ...], id_keys: tuple[str, ...]
) -> tuple[list[str | None], list[str | None]]:
    contents: list[str | None] = []
    ids: list[str | None] = []
    for document in documents:
        if not isinstance(document, dict):
            raise _Bad("a retrieved document is not an object")
        content = next((document[key] for key in content_keys if key in document), None)
        contents.append(content if isinstance(content, str) else None)
        ids.append(_as_id(next((document[key] for key in id_keys if key in document), None)))
    return contents, ids


def _as_id(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    return str(value) if isinstance(value, str | int) else json.dumps(value)


def _carried(name: str, attributes: Mapping[str, Any], resource: Mapping[str, Any]) -> str | None:
    raw = attributes.get(name)
    value = decode(resource.get(name) if raw is None else raw)
    return None if value is None else json.dumps(value)
