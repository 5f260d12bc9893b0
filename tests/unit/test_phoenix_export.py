"""The Phoenix export's parts without Phoenix: the batches read from a published run, the
bisection that finds unknown spans against an in-process sink, a refusal or an outage midway
(never counted as sent), and the retry decisions of `PhoenixSink` against a real HTTP server
on 127.0.0.1 that answers what the test tells it to."""

from __future__ import annotations

import http.server
import io
import json
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from jobs.core.storage import open_store
from jobs.tools.phoenix_export import (
    Annotation,
    ExportReport,
    PhoenixSink,
    SinkFailed,
    deliver,
    export_run,
    run,
    span_annotation_name,
)
from jobs.tools.published_runs import load_run
from jobs.tools.tool_options import ExportOptions, PublishedRoot
from scorer_core.errors import ConfigError
from tests.support.published import Query, publish


@dataclass
class FakeSink:
    """Holds `spans`; a batch naming another is refused whole, as Phoenix does."""

    spans: set[str]
    fail_after: int | None = None  # batches accepted before it becomes unreachable
    received: list[Annotation] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self) -> None:
        pass

    def send(self, annotations: Sequence[Annotation]) -> None:
        with self.lock:
            self.requests += 1
            if self.fail_after is not None and self.requests > self.fail_after:
                raise SinkFailed("fake sink at fake://here unreachable")
            if any(a.span_id not in self.spans for a in annotations):
                raise LookupError("unknown")
            self.received.extend(annotations)


def _span(n: int) -> str:
    return f"{n + 1:016x}"


QUERIES = [
    Query(_span(n), verdicts=[n % 2 == 0, True, n % 3 == 0], judge_reasons=["a", "b", f"c{n}"])
    for n in range(40)
] + [
    Query(_span(40), verdicts=[None, None], status="unscored", error="judge gave up"),
    Query(_span(41), status="error", error="context is null"),
]


def _options(**changes: object) -> ExportOptions:
    base = ExportOptions(target="phoenix", run="r1", endpoint="http://x", project="p")
    return replace(base, **{"batch_size": 7, **changes})  # type: ignore[arg-type]


@pytest.fixture
def run_store(tmp_path: Path) -> Iterator[object]:
    store = open_store(str(tmp_path / "out"), {})
    publish(store, "r1", QUERIES)
    yield load_run(store, "r1")


def test_every_verdict_and_score_reaches_the_sink_and_unknown_spans_are_listed(
    run_store: object,
) -> None:
    unknown = {_span(3), _span(17), _span(29)}
    sink = FakeSink({_span(n) for n in range(42)} - unknown)
    report = ExportReport("fake")
    found = export_run(run_store, sink, report, _options())  # type: ignore[arg-type]

    assert set(found) == unknown and report.unknown_spans == 3
    documents = {(a.span_id, a.position): a for a in sink.received if a.position is not None}
    for query in QUERIES[:40]:
        for position, verdict in enumerate(query.verdicts):
            got = documents.pop((query.query_id, position), None)
            if query.query_id in unknown:
                assert got is None
                continue
            assert got is not None and got.name == "context_precision_relevance"
            assert got.score == (1.0 if verdict else 0.0)
            assert got.explanation == (query.judge_reasons or [])[position]
    assert not documents
    spans = {a.span_id: a for a in sink.received if a.position is None}
    assert set(spans) == {q.query_id for q in QUERIES[:40]} - unknown
    assert {a.name for a in spans.values()} == {"context_precision"}
    assert spans[_span(0)].score == pytest.approx(QUERIES[0].score(1.0))
    # the unscored item's two verdicts and its score, the error item's score: skipped, counted
    assert (report.skipped_verdicts, report.skipped_scores) == (2, 2)
    assert report.documents_sent == 37 * 3 and report.spans_sent == 37 and report.left == 0


def test_bisection_sends_the_known_spans_of_a_refused_batch_in_few_requests() -> None:
    batch = [Annotation(_span(n), "x", 1.0, None, p) for n in range(64) for p in (0, 1)]
    sink = FakeSink({_span(n) for n in range(64) if n != 37})
    sent, unknown = deliver(sink, batch)
    assert (sent, unknown) == (126, [_span(37)])
    assert len(sink.received) == 126
    assert sink.requests <= 2 * 7 + 1  # one path down the halves, not one request per span


def test_an_outage_midway_counts_what_was_not_sent_as_left(run_store: object) -> None:
    sink = FakeSink({_span(n) for n in range(42)}, fail_after=5)
    report = ExportReport("fake")
    export_run(run_store, sink, report, _options())  # type: ignore[arg-type]
    sent = report.documents_sent + report.spans_sent
    # never more counted sent than arrived; what is not counted sent is left
    assert sent <= len(sink.received) == 5 * 7
    assert report.left == 40 * 3 + 40 - sent and report.error is not None
    assert "fake://here" in report.error and f"NOT SENT: {report.left}" in report.summary()


def test_a_span_id_column_the_run_lacks_is_named(run_store: object) -> None:
    with pytest.raises(ConfigError, match="--span-id-column span: run r1's verdicts table"):
        export_run(run_store, FakeSink(set()), ExportReport("f"), _options(span_id_column="span"))  # type: ignore[arg-type]


def test_the_span_annotation_name_is_derived_from_the_documents() -> None:
    assert span_annotation_name("context_precision_relevance") == "context_precision"
    assert span_annotation_name("nightly") == "nightly_precision"
    assert span_annotation_name("_relevance") == "_relevance_precision"


class _Answers(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next status of the server's `statuses` (then 200)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server = self.server
        server.seen.append((self.headers.get("Authorization"), body))  # type: ignore[attr-defined]
        status = server.statuses.pop(0) if server.statuses else 200  # type: ignore[attr-defined]
        self._answer(status, b'{"data": []}')

    def do_GET(self) -> None:  # the project check: it is there
        self.server.seen.append((self.headers.get("Authorization"), None))  # type: ignore[attr-defined]
        self._answer(200, b'{"data": {"name": "p"}}')

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    server.statuses, server.seen = [], []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _sink(url: str, retry_seconds: float = 30.0) -> tuple[PhoenixSink, list[float]]:
    waits: list[float] = []
    sink = PhoenixSink(
        url, "p", {"Authorization": "Bearer k"}, {"run_id": "r1"}, retry_seconds, waits.append
    )
    return sink, waits


def test_the_sink_retries_429_and_5xx_then_sends(answers: http.server.ThreadingHTTPServer) -> None:
    answers.statuses[:] = [503, 429, 502]  # type: ignore[attr-defined]
    sink, waits = _sink(f"http://127.0.0.1:{answers.server_address[1]}")
    sink.send([Annotation("00000000000000aa", "n", 0.0, "why", 2)])
    assert waits == [0.25, 0.5, 1.0]
    key, body = answers.seen[-1]  # type: ignore[attr-defined]
    assert key == "Bearer k" and len(answers.seen) == 4  # type: ignore[attr-defined]
    assert body == {
        "data": [
            {
                "span_id": "00000000000000aa",
                "name": "n",
                "annotator_kind": "LLM",
                "result": {"label": "unrelated", "score": 0.0, "explanation": "why"},
                "document_position": 2,
                "metadata": {"run_id": "r1"},
            }
        ]
    }


def test_the_sink_stops_at_once_on_401_and_raises_unknown_spans_on_404(
    answers: http.server.ThreadingHTTPServer,
) -> None:
    url = f"http://127.0.0.1:{answers.server_address[1]}"
    sink, waits = _sink(url)
    answers.statuses[:] = [401]  # type: ignore[attr-defined]
    with pytest.raises(SinkFailed, match=f"Phoenix at {url} refused POST /v1/span_annotations"):
        sink.send([Annotation("00000000000000aa", "n", 0.5, None)])
    answers.statuses[:] = [422]  # type: ignore[attr-defined]
    with pytest.raises(SinkFailed, match=f"{url}/v1/span_annotations: HTTP 422"):
        sink.send([Annotation("00000000000000aa", "n", 0.5, None)])
    answers.statuses[:] = [404]  # type: ignore[attr-defined]
    with pytest.raises(LookupError):
        sink.send([Annotation("00000000000000aa", "n", 0.5, None)])
    assert waits == []


def _free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_endpoint_is_named_once_the_deadline_passes() -> None:
    port = _free_port()
    sink, waits = _sink(f"http://127.0.0.1:{port}", retry_seconds=0.0)
    with pytest.raises(SinkFailed, match=f"Phoenix at http://127.0.0.1:{port} unreachable"):
        sink.check()
    assert waits == []


def test_the_command_sends_the_key_of_the_variable_it_names_and_says_it_to_resume(
    answers: http.server.ThreadingHTTPServer,
    run_store: object,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PHOENIX_API_KEY", "not-this-one")
    monkeypatch.setenv("TEAM_PHOENIX_KEY", "team-key")
    url = f"http://127.0.0.1:{answers.server_address[1]}"
    root = PublishedRoot(str(tmp_path / "out"))
    options = _options(endpoint=url, root=root, api_key_env="TEAM_PHOENIX_KEY")
    assert run(options, io.StringIO()) == 0
    assert len(answers.seen) > 2  # type: ignore[attr-defined]
    assert {key for key, _ in answers.seen} == {"Bearer team-key"}  # type: ignore[attr-defined]
    answers.statuses[:] = [401] * 50  # type: ignore[attr-defined]
    printed = io.StringIO()
    assert run(options, printed) == 1
    assert "--api-key-env TEAM_PHOENIX_KEY" in printed.getvalue()
