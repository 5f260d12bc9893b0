"""The Phoenix export's parts without Phoenix: the batches read from a published run, the
bisection that finds unknown spans against an in-process sink, a refusal or an outage midway
(never counted as sent), and the retry decisions of `PhoenixSink` over an `httpx.MockTransport`
that answers what the test tells it to (tests/integration/test_phoenix.py: the real Phoenix)."""

from __future__ import annotations

import io
import json
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx
import pytest

from jobs.core.storage import open_store
from jobs.tools.phoenix_export import (
    Annotation,
    ExportReport,
    PhoenixSink,
    SinkFailed,
    _command,
    deliver,
    export_run,
    run,
    span_annotation_name,
)
from jobs.tools.published_runs import PublishedRun, load_run
from jobs.tools.tool_options import ExportOptions, PublishedRoot
from scorer_core.errors import ConfigError
from scorer_core.retry import RetryPolicy
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
    return replace(base, **{"batch_size": 7, **changes})


@pytest.fixture
def run_store(tmp_path: Path) -> Iterator[PublishedRun]:
    store = open_store(str(tmp_path / "out"), {})
    publish(store, "r1", QUERIES)
    yield load_run(store, "r1")


def test_every_verdict_and_score_reaches_the_sink_and_unknown_spans_are_listed(
    run_store: PublishedRun,
) -> None:
    unknown = {_span(3), _span(17), _span(29)}
    sink = FakeSink({_span(n) for n in range(42)} - unknown)
    report = ExportReport(target="fake")
    found = export_run(run_store, sink, report, _options())

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
    batch = [
        Annotation(span_id=_span(n // 2), name="x", score=1.0, explanation=None, position=n % 2)
        for n in range(128)
    ]
    sink = FakeSink({_span(n) for n in range(64) if n != 37})
    sent, unknown = deliver(sink, batch)
    assert (sent, unknown) == (126, [_span(37)])
    assert len(sink.received) == 126
    assert sink.requests <= 2 * 7 + 1  # one path down the halves, not one request per span


def test_an_outage_midway_counts_what_was_not_sent_as_left(run_store: PublishedRun) -> None:
    sink = FakeSink({_span(n) for n in range(42)}, fail_after=5)
    report = ExportReport(target="fake")
    export_run(run_store, sink, report, _options())
    sent = report.documents_sent + report.spans_sent
    # never more counted sent than arrived; what is not counted sent is left
    assert sent <= len(sink.received) == 5 * 7
    assert report.left == 40 * 3 + 40 - sent and report.error is not None
    assert "fake://here" in report.error and f"NOT SENT: {report.left}" in report.summary()


def test_a_span_id_column_the_run_lacks_is_named(run_store: PublishedRun) -> None:
    with pytest.raises(ConfigError, match="--span-id-column span: run r1's verdicts table"):
        export_run(
            run_store, FakeSink(set()), ExportReport(target="f"), _options(span_id_column="span")
        )


def test_the_span_annotation_name_is_derived_from_the_documents() -> None:
    assert span_annotation_name("context_precision_relevance") == "context_precision"
    assert span_annotation_name("nightly") == "nightly_precision"
    assert span_annotation_name("_relevance") == "_relevance_precision"


@dataclass
class Phoenix:
    """Phoenix's API as the sink sees it, over `httpx.MockTransport`: each POST is answered
    with the next of `statuses` (then 200), the project check with 200; every request seen."""

    statuses: list[int] = field(default_factory=list)
    headers: dict[int, dict[str, str]] = field(default_factory=dict)  # by status: sent with it
    seen: list[tuple[str, str | None, object]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: httpx.Request) -> httpx.Response:
        key = request.headers.get("Authorization")
        with self.lock:
            if request.method == "GET":  # the project check: it is there
                self.seen.append((request.url.path, key, None))
                return httpx.Response(200, json={"data": {"name": "p"}})
            self.seen.append((request.url.path, key, json.loads(request.content)))
            status = self.statuses.pop(0) if self.statuses else 200
        return httpx.Response(status, json={"data": []}, headers=self.headers.get(status, {}))

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.answer)


class _Halves(random.Random):
    """An rng whose every draw is 0.5: full-jitter waits at half their ceiling."""

    def random(self) -> float:
        return 0.5


URL = "http://phoenix.test:6006"


def _sink(
    transport: httpx.BaseTransport,
    headers: dict[str, str] | None = None,
    clock: list[float] | None = None,
) -> tuple[PhoenixSink, list[float]]:
    """A sink whose waits are recorded (and, with a `clock`, move it on) instead of slept."""
    waits: list[float] = []
    now = clock if clock is not None else [0.0]

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    sink = PhoenixSink(
        endpoint=URL,
        project="p",
        headers={"Authorization": "Bearer k"} if headers is None else headers,
        metadata={"run_id": "r1"},
        retry_seconds=30.0,
        retry=RetryPolicy(base_delay_s=0.25, max_delay_s=5.0, rng=_Halves()),
        sleep=sleep,
        clock=lambda: now[0],
        transport=transport,
    )
    return sink, waits


def _document(position: int | None = 2) -> Annotation:
    return Annotation(
        span_id="00000000000000aa", name="n", score=0.0, explanation="why", position=position
    )


def test_the_sink_retries_429_and_5xx_then_sends() -> None:
    phoenix = Phoenix(statuses=[503, 429, 502])
    sink, waits = _sink(phoenix.transport())
    sink.send([_document()])
    assert waits == [0.125, 0.25, 0.5]  # the policy's backoff: half of 0.25, 0.5, 1.0
    path, key, body = phoenix.seen[-1]
    assert path == "/v1/document_annotations" and key == "Bearer k" and len(phoenix.seen) == 4
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


def test_a_429s_retry_after_is_obeyed() -> None:
    phoenix = Phoenix(statuses=[429], headers={429: {"Retry-After": "7"}})
    sink, waits = _sink(phoenix.transport())
    sink.send([_document(position=None)])
    assert len(waits) == 1 and 7.0 <= waits[0] <= 7.25  # Retry-After, a little jitter on top
    assert phoenix.seen[-1][0] == "/v1/span_annotations"


def test_the_sink_gives_up_once_its_retry_seconds_are_spent() -> None:
    phoenix = Phoenix(statuses=[503] * 100)
    clock = [0.0]
    sink, waits = _sink(phoenix.transport(), clock=clock)
    with pytest.raises(SinkFailed, match=f"Phoenix at {URL} unreachable for 30s .*HTTP 503"):
        sink.send([_document()])
    assert sum(waits) <= 30.0 and clock[0] == sum(waits) and len(waits) > 5


def test_the_sink_stops_at_once_on_401_and_raises_unknown_spans_on_404() -> None:
    phoenix = Phoenix(statuses=[401])
    sink, waits = _sink(phoenix.transport())
    with pytest.raises(SinkFailed, match=f"Phoenix at {URL} refused POST /v1/span_annotations"):
        sink.send([_document(position=None)])
    phoenix.statuses[:] = [422]
    with pytest.raises(SinkFailed, match=f"{URL}/v1/span_annotations: HTTP 422"):
        sink.send([_document(position=None)])
    phoenix.statuses[:] = [404]
    with pytest.raises(LookupError):
        sink.send([_document(position=None)])
    assert waits == []


def test_a_refusal_names_the_variable_the_key_is_read_from() -> None:
    phoenix = Phoenix(statuses=[403, 401])
    sink, _ = _sink(phoenix.transport())
    sink.api_key_env = "TEAM_PHOENIX_KEY"
    with pytest.raises(SinkFailed, match="check the API key in the environment variable TEAM_"):
        sink.send([_document()])
    keyless, _ = _sink(phoenix.transport(), headers={})
    with pytest.raises(SinkFailed, match="no API key was sent, as the environment variable PHO"):
        keyless.send([_document()])


def test_an_unreachable_endpoint_is_named_at_the_check_without_waiting() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    sink, waits = _sink(httpx.MockTransport(refuse))
    with pytest.raises(SinkFailed, match=f"Phoenix at {URL} unreachable .*ConnectError"):
        sink.check()
    assert waits == []


def test_the_command_sends_the_key_of_the_variable_it_names_and_says_it_to_resume(
    run_store: PublishedRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PHOENIX_API_KEY", "not-this-one")
    monkeypatch.setenv("TEAM_PHOENIX_KEY", "team-key")
    phoenix = Phoenix()
    root = PublishedRoot(str(tmp_path / "out"))
    options = _options(endpoint=URL, root=root, api_key_env="TEAM_PHOENIX_KEY")
    assert run(options, io.StringIO(), phoenix.transport()) == 0
    assert len(phoenix.seen) > 2
    assert {key for _, key, _ in phoenix.seen} == {"Bearer team-key"}
    phoenix.statuses[:] = [401] * 50
    printed = io.StringIO()
    assert run(options, printed, phoenix.transport()) == 1
    said = printed.getvalue()
    assert "environment variable TEAM_PHOENIX_KEY" in said
    assert "--span-id-column query_id --api-key-env TEAM_PHOENIX_KEY" in said


def test_the_command_to_send_the_rest_says_what_it_cannot_carry() -> None:
    root = PublishedRoot("s3://bucket/out", {"key": "secret-key"})
    options = _options(root=root, span_id_column="span_id")
    command = _command(options, {"Authorization": "Bearer k", "X-Team": "rag"})
    assert command.startswith("ctxprec export phoenix r1 --output s3://bucket/out --endpoint ")
    assert "--span-id-column span_id" in command and "--batch-size 7" in command
    assert "secret-key" not in command and "add a --storage-option for each" in command
    assert "the headers X-Team of export.phoenix.headers" in command and "Bearer" not in command
    plain = _command(_options(batch_size=500), {"Authorization": "Bearer k"})
    assert "(" not in plain and "--batch-size" not in plain
