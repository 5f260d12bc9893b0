"""`input.format: phoenix` without Phoenix: Phoenix's snake_case OTLP made OTLP JSON that the
OTLP reader reads into the same span row, the window, the config's rules, and a Phoenix that
is not there failing before anything is staged, naming its endpoint and project."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from jobs.core.config import parse_config
from jobs.core.storage import Store, open_store
from jobs.inputs.otlp import RETRIEVER, SpanRow, spans_of_line
from jobs.inputs.phoenix_spans import otlp_json, pull_spans, window
from scorer_core.errors import ConfigError, InputError


def _value(**kind: object) -> dict[str, object]:
    empty = ("array_value", "bool_value", "bytes_value", "double_value", "int_value")
    return dict.fromkeys((*empty, "kvlist_value", "string_value"), None) | kind


# a RETRIEVER span as Phoenix 20.26's spans/otlpv1 returns it (every AnyValue member present)
PHOENIX_SPAN = {
    "attributes": [
        {"key": "retrieval.documents.0.document.id", "value": _value(string_value="d0")},
        {"key": "retrieval.documents.0.document.content", "value": _value(string_value="A")},
        {"key": "retrieval.documents.1.document.id", "value": _value(int_value=7)},
        {"key": "retrieval.documents.1.document.content", "value": _value(string_value="B")},
        {"key": "openinference.span.kind", "value": _value(string_value="RETRIEVER")},
        {"key": "input.value", "value": _value(string_value="q?")},
        {"key": "tenant", "value": _value(string_value="acme")},
    ],
    "dropped_attributes_count": None,
    "end_time_unix_nano": 1796355910451602944,
    "events": None,
    "kind": "SPAN_KIND_INTERNAL",
    "name": "retrieve",
    "parent_span_id": "7916ecb624f35d0a",
    "span_id": "2e5ea5e5f1c2ff63",
    "start_time_unix_nano": 1796355910451576832,
    "status": {"code": 0, "message": None},
    "trace_id": "e0435341e040f9ae384b9cd67e369620",
}


def test_phoenix_spans_become_otlp_json_the_reader_reads() -> None:
    converted = otlp_json(PHOENIX_SPAN)
    assert converted["spanId"] == "2e5ea5e5f1c2ff63" and "dropped_attributes_count" not in converted
    assert converted["attributes"][2] == {
        "key": "retrieval.documents.1.document.id",
        "value": {"intValue": 7},
    }
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [converted]}]}]}).encode()
    [row] = list(spans_of_line(line, "phoenix", 1, ["tenant"]))
    assert isinstance(row, SpanRow), row
    assert (row.role, row.span_id, row.parent_id) == (
        RETRIEVER,
        "2e5ea5e5f1c2ff63",
        "7916ecb624f35d0a",
    )
    assert (row.input, row.documents, row.document_ids) == ("q?", ["A", "B"], ["d0", "7"])
    assert row.start_ns == 1796355910451576832 and row.carried == ('"acme"',)


def _config(**phoenix: object) -> Any:
    source = {"endpoint": "http://127.0.0.1:9", "project": "rag"} | phoenix
    return parse_config({"input": {"format": "phoenix", "phoenix": source}})


def _pull(config: Any, store: Store, folder: str) -> str:
    """The spans of `config`'s Phoenix input pulled as the run pulls them: their URL."""
    return pull_spans(config.input.phoenix, config.input.otlp.output, store, folder)


def test_the_window_is_start_end_or_the_last_hours() -> None:
    now = dt.datetime(2026, 12, 4, 3, 0, tzinfo=dt.UTC)
    config = _config(start="2026-12-01T00:00:00Z")
    assert window(config.input.phoenix, now) == {"start_time": "2026-12-01T00:00:00+00:00"}  # type: ignore[attr-defined]
    nightly = _config(last_hours=24).input.phoenix  # type: ignore[attr-defined]
    assert window(nightly, now) == {
        "start_time": "2026-12-03T03:00:00+00:00",
        "end_time": "2026-12-04T03:00:00+00:00",
    }
    assert window(nightly, now, margin=1) == {  # where the answers of those retrievals are
        "start_time": "2026-12-03T02:00:00+00:00",
        "end_time": "2026-12-04T04:00:00+00:00",
    }


def test_the_config_needs_format_and_settings_together_and_hides_headers() -> None:
    with pytest.raises(ConfigError, match=r"format phoenix needs input\.phoenix \(endpoint"):
        parse_config({"input": {"format": "phoenix"}})
    settings = {"endpoint": "http://127.0.0.1:9", "project": "rag"}
    with pytest.raises(ConfigError, match=r"input\.phoenix needs format: phoenix"):
        parse_config({"input": {"path": "x.jsonl", "phoenix": settings}})
    with pytest.raises(ConfigError, match="phoenix: give last_hours or start/end, not both"):
        _config(last_hours=24, start="2026-12-01T00:00:00Z")
    with pytest.raises(ConfigError, match=r"input\.phoenix\.endpoint: .*http:// or https:// URL"):
        _config(endpoint="phoenix:6006")
    with pytest.raises(ConfigError, match=r"input\.phoenix\.api_key_env: .*NAME of an environment"):
        _config(api_key_env="sk-not-a-name")
    with pytest.raises(ConfigError, match=r"input: Value error, path: required"):
        parse_config({"input": {"format": "jsonl"}})
    config = _config(headers={"X-Token": "s3cret"})
    assert config.input.phoenix.http_headers() == {"X-Token": "s3cret"}  # type: ignore[attr-defined]
    assert config.redacted()["input"]["phoenix"]["headers"] == {"X-Token": "***"}  # type: ignore[attr-defined]


def test_an_absent_phoenix_fails_naming_it_and_stages_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("PHOENIX_API_KEY", "phx-secret-key")
    config = _config(endpoint=f"http://127.0.0.1:{port}")
    store = open_store(str(tmp_path), {})
    with pytest.raises(InputError) as raised:
        _pull(config, store, "staging/phoenix")
    message = str(raised.value)
    assert f"Phoenix at http://127.0.0.1:{port} (project 'rag') unreachable" in message
    assert "phx-secret-key" not in message
    assert not (tmp_path / "staging" / "phoenix" / "DONE.json").exists()


class _Phoenix(http.server.BaseHTTPRequestHandler):
    """Phoenix's project and spans/otlpv1 endpoints: retrievals in two pages, then a root page
    holding a root and a root that is itself a retrieval (already pulled: left out)."""

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        self.server.asked.append((url.path, query))  # type: ignore[attr-defined]
        root = {**PHOENIX_SPAN, "span_id": "00000000000000a1", "parent_span_id": None}
        if url.path == "/v1/projects/rag":
            page: dict[str, object] = {"data": {"name": "rag"}}
        elif query.get("parent_id") == ["null"]:
            page = {"data": [root, {**root, "attributes": []}], "next_cursor": None}
        elif query.get("cursor") == ["c1"]:
            page = {"data": [{**PHOENIX_SPAN, "span_id": "00000000000000b2"}], "next_cursor": None}
        else:
            page = {"data": [PHOENIX_SPAN], "next_cursor": "c1"}
        body = json.dumps(page).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_spans_are_pulled_page_by_page_once_and_a_resumed_run_asks_nothing(
    tmp_path: Path,
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Phoenix)
    server.asked = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        config = _config(endpoint=url, start="2026-12-01T00:00:00Z")
        store = open_store(str(tmp_path), {})
        pulled = _pull(config, store, "staging/phoenix")
    finally:
        server.shutdown()
        server.server_close()
    folder = tmp_path / "staging" / "phoenix" / "spans"
    assert pulled == str(folder)
    files = sorted(p.name for p in folder.iterdir())
    assert files == [
        "retriever-000000000000.json",
        "retriever-000000000001.json",
        "root-000000000000.json",
    ]
    roots = json.loads((folder / "root-000000000000.json").read_text())
    [kept] = roots["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert "parentSpanId" not in kept and kept["attributes"] == []
    spans_asked = [query for path, query in server.asked if path.endswith("/otlpv1")]  # type: ignore[attr-defined]
    assert [q.get("attribute", q.get("parent_id")) for q in spans_asked] == [
        ["openinference.span.kind:RETRIEVER"],
        ["openinference.span.kind:RETRIEVER"],
        ["null"],
    ]
    # the retrievals from the window's start, their roots from an hour before it
    assert [(q["limit"], q["start_time"]) for q in spans_asked] == [
        (["1000"], ["2026-12-01T00:00:00+00:00"]),
        (["1000"], ["2026-12-01T00:00:00+00:00"]),
        (["1000"], ["2026-11-30T23:00:00+00:00"]),
    ]
    assert json.loads((tmp_path / "staging" / "phoenix" / "DONE.json").read_text()) == {
        "retriever": 2,
        "root": 1,
    }
    # resumed: the marker is there, nothing is asked (the server is gone)
    again = _pull(config, store, "staging/phoenix")
    assert again == pulled
