"""`ctxprec export phoenix RUN`: a published run's verdicts as document annotations and its
scores as span annotations, read in bounded batches, sent a few at a time to an
`AnnotationSink` (Phoenix's here; another backend's would implement the same)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, TextIO
from urllib.parse import quote

import httpx
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow.fs import FSSpecHandler, PyFileSystem

from jobs.core.console import progress_extra
from jobs.tools.published_runs import PublishedRun, load_run, write_file
from jobs.tools.tool_options import ExportOptions, PublishedRoot
from scorer_core.errors import ConfigError, CtxPrecError

if TYPE_CHECKING:
    from jobs.core.config import JobConfig
    from jobs.engine import RunOutcome

logger = logging.getLogger(__name__)
IN_FLIGHT = 4  # batches sent at a time


class SinkFailed(CtxPrecError):
    """Refused (credentials, unknown project) or not answering: nothing more is sent."""


class UnknownSpans(Exception):
    """The batch names a span the sink does not hold: the whole batch was refused."""


@dataclass(frozen=True, slots=True)
class Annotation:
    """A result on a span; with a `position`: on that retrieved document of the span."""

    span_id: str
    name: str
    score: float
    label: str | None
    explanation: str | None
    position: int | None = None


class AnnotationSink(Protocol):
    def check(self) -> None: ...

    def send(self, annotations: Sequence[Annotation]) -> None: ...


def retryable(status: int | None) -> bool:
    """No answer (None), too many requests or a server error: worth asking again."""
    return status is None or status == 429 or status >= 500


@dataclass
class PhoenixSink:
    """Phoenix's `POST /v1/document_annotations` and `/v1/span_annotations` (sync)."""

    endpoint: str
    project: str
    headers: dict[str, str]
    metadata: dict[str, str]
    retry_seconds: float = 120.0
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.endpoint, headers=self.headers, timeout=30.0)

    def check(self) -> None:
        if self._request("GET", f"/v1/projects/{quote(self.project, safe='')}").status_code == 404:
            raise SinkFailed(f"Phoenix at {self.endpoint} has no project {self.project!r}")

    def send(self, annotations: Sequence[Annotation]) -> None:
        path = "/v1/span_annotations"
        if annotations[0].position is not None:
            path = "/v1/document_annotations"
        data = [self._record(a) for a in annotations]
        answer = self._request("POST", path, params={"sync": "true"}, json={"data": data})
        if answer.status_code == 404:
            raise UnknownSpans(answer.text[:200])
        if answer.status_code >= 400:
            raise CtxPrecError(f"{self.endpoint}{path}: HTTP {answer.status_code}: {answer.text}")

    def _record(self, a: Annotation) -> dict[str, Any]:
        result = {"label": a.label, "score": a.score, "explanation": a.explanation}
        record: dict[str, Any] = {"span_id": a.span_id, "name": a.name, "annotator_kind": "LLM"}
        if a.position is not None:
            record["document_position"] = a.position
        return record | {"result": result, "metadata": self.metadata}

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        deadline, wait_s = time.monotonic() + self.retry_seconds, 0.25
        while True:
            try:
                answer = self.client.request(method, path, **kwargs)
                why = f"HTTP {answer.status_code}"
                if answer.status_code in (401, 403):
                    raise SinkFailed(
                        f"Phoenix at {self.endpoint} refused {method} {path} ({why}): check "
                        "the API key's variable (api_key_env, default PHOENIX_API_KEY)"
                    )
                if not retryable(answer.status_code):
                    return answer
            except httpx.TransportError as exc:
                why = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + wait_s > deadline:
                raise SinkFailed(
                    f"Phoenix at {self.endpoint} unreachable for {self.retry_seconds:g}s "
                    f"({method} {path}: {why})"
                )
            self.sleep(wait_s)
            wait_s = min(wait_s * 2, 5.0)


def deliver(sink: AnnotationSink, batch: Sequence[Annotation]) -> tuple[int, list[str]]:
    """(annotations sent, spans the sink lacks): a refused batch is halved, between spans,
    until the unknown spans are alone; the rest is sent."""
    try:
        sink.send(batch)
        return len(batch), []
    except UnknownSpans:
        spans = list(dict.fromkeys(a.span_id for a in batch))
        if len(spans) == 1:
            return 0, spans
    cut = next(i for i, a in enumerate(batch) if a.span_id == spans[len(spans) // 2])
    left, right = deliver(sink, batch[:cut]), deliver(sink, batch[cut:])
    return left[0] + right[0], left[1] + right[1]


@dataclass
class ExportReport:
    """What an export did; `left`: sendable annotations not sent (0: all sent)."""

    run_id: str
    target: str
    documents_sent: int = 0
    spans_sent: int = 0
    skipped_verdicts: int = 0
    skipped_items: int = 0
    unknown_spans: int = 0
    left: int = 0
    unknown_spans_file: str | None = None
    error: str | None = None
    seconds: float = 0.0

    def summary(self) -> str:
        listed = f" (listed in {self.unknown_spans_file})" if self.unknown_spans_file else ""
        left = f"; NOT SENT: {self.left:,} annotation(s) ({self.error})" if self.left else ""
        return (
            f"run {self.run_id} to {self.target}: {self.documents_sent:,} document and "
            f"{self.spans_sent:,} span annotation(s) sent; skipped {self.skipped_verdicts:,} "
            f"verdict(s) not obtained, {self.skipped_items:,} item(s) not scored; "
            f"{self.unknown_spans:,} span(s) not found{listed}{left}; {self.seconds:.1f}s"
        )


def _dataset(run: PublishedRun, table: str, span_column: str) -> ds.Dataset:
    fs = None if run.store.is_local else PyFileSystem(FSSpecHandler(run.store.fs))
    path = run.store.join(run.location.table_file(table))
    data = ds.dataset(path, format="parquet", filesystem=fs)
    if span_column not in data.schema.names:
        raise ConfigError(
            f"--span-id-column {span_column}: run {run.run_id}'s {table} table has no such "
            "column (carry it: input.carry and input.carry_to_verdicts)"
        )
    return data


_TABLES = (("verdicts", "relevant", "judge_reason"), ("scores", "score", "reason"))


def annotation_batches(
    run: PublishedRun, names: tuple[str, str], span_column: str, size: int
) -> Iterator[list[Annotation]]:
    """The verdicts, then the scores, as annotations, `size` at a time (record batches of the
    Parquet files: memory stays flat); rows with no verdict or score are left out."""
    for (table, value, reason), name in zip(_TABLES, names, strict=True):
        columns = [span_column, value, reason, *(["position"] if table == "verdicts" else [])]
        data = _dataset(run, table, span_column)
        for batch in data.to_batches(
            columns=columns, filter=pc.field(value).is_valid(), batch_size=size
        ):
            rows = batch.to_pydict()
            positions = rows.get("position", [None] * batch.num_rows)
            labels = [
                ("relevant" if v else "unrelated") if positions[0] is not None else None
                for v in rows[value]
            ]
            yield [
                Annotation(str(span), name, float(v), label, why, at)
                for span, v, label, why, at in zip(
                    rows[span_column], rows[value], labels, rows[reason], positions, strict=True
                )
            ]


def export_run(
    run: PublishedRun, sink: AnnotationSink, report: ExportReport, options: ExportOptions
) -> list[str]:
    """Send the run's annotations to `sink` into `report`, `IN_FLIGHT` batches at a time;
    the spans it lacks. Stops at the first refusal or outage, counting what is left."""
    names = (options.name, span_annotation_name(options.name))
    counts = [
        _dataset(run, table, options.span_id_column).count_rows(filter=pc.field(value).is_null())
        for table, value, _ in _TABLES
    ]
    report.skipped_verdicts, report.skipped_items = counts
    sink.check()
    unknown: dict[str, None] = {}
    with ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="export") as pool:
        pending: dict[Future[tuple[int, list[str]]], list[Annotation]] = {}
        batches = annotation_batches(run, names, options.span_id_column, options.batch_size)
        try:
            for batch in batches:
                report.left += len(batch)
                while len(pending) >= IN_FLIGHT:
                    _collect(pending, report, unknown, wait(pending, return_when="FIRST_COMPLETED"))
                pending[pool.submit(deliver, sink, batch)] = batch
            while pending:
                _collect(pending, report, unknown, wait(pending))
        except SinkFailed as exc:
            report.error = str(exc)
            for future in pending:
                future.cancel()
            report.left += sum(len(batch) for batch in batches)
    report.unknown_spans = len(unknown)
    return list(unknown)


def _collect(
    pending: dict[Future[tuple[int, list[str]]], list[Annotation]],
    report: ExportReport,
    unknown: dict[str, None],
    finished: Any,
) -> None:
    """Count the finished batches into `report` (no longer `left`: sent or on unknown spans)."""
    for future in finished.done:
        batch = pending.pop(future)
        sent, spans = future.result()  # raises the batch's SinkFailed
        report.left -= len(batch)
        unknown.update(dict.fromkeys(spans))
        if batch[0].position is None:
            report.spans_sent += sent
        else:
            report.documents_sent += sent
    sent = report.documents_sent + report.spans_sent
    logger.info(f"export: {sent:,} annotation(s) sent", extra=progress_extra())


def span_annotation_name(name: str) -> str:
    """The span annotations' name: the documents' without `_relevance`, else + `_precision`
    (context_precision_relevance -> context_precision)."""
    stem = name.removesuffix("_relevance")
    return stem if stem and stem != name else f"{name}_precision"


def export(options: ExportOptions, key_env: str, headers: dict[str, str], out: TextIO) -> int:
    """Export as `options` say, the key (a bearer token) read from `key_env`: 0 or 1."""
    started = time.monotonic()
    published = load_run(options.root.store(), options.run)
    target = f"Phoenix at {options.endpoint} project {options.project!r}"
    report = ExportReport(published.run_id, target)
    metadata = {"run_id": published.run_id, "judge_model": published.judge_model}
    metadata["prompt_version"] = published.prompt_version
    if key := os.environ.get(key_env):
        headers = {**headers, "Authorization": f"Bearer {key}"}
    sink = PhoenixSink(options.endpoint, options.project, headers, metadata, options.retry_seconds)
    unknown = export_run(published, sink, report, options)
    if unknown:
        data = "".join(f"{span}\n" for span in unknown).encode()
        name = f"exports/{published.run_id}-phoenix-unknown-spans.txt"
        report.unknown_spans_file = write_file(published.store, None, name, data, {})
    report.seconds = round(time.monotonic() - started, 3)
    print(json.dumps(asdict(report)) if options.as_json else report.summary(), file=out)
    if report.left:
        print(f"to send the rest, run again: {export_command(options)}", file=out)
    return 1 if report.left else 0


def run(options: ExportOptions, out: TextIO | None = None) -> int:
    return export(options, "PHOENIX_API_KEY", {}, out or sys.stdout)


def export_command(options: ExportOptions) -> str:
    return (
        f"ctxprec export phoenix {options.run} --output {options.root.output} "
        f"--endpoint {options.endpoint} --project {options.project} --name {options.name}"
    )


def export_after_run(config: JobConfig, outcome: RunOutcome) -> int:
    """`export.phoenix` once the run is published: 1 on a failure, naming the command that
    completes it (the run stays published)."""
    if (target := config.export.phoenix) is None:
        return 0
    root = PublishedRoot(config.output.path, config.output.storage_options)
    options = ExportOptions("phoenix", outcome.run_id, target.endpoint, target.project, root)
    options = replace(options, name=target.name, span_id_column=target.span_id_column)
    try:
        return export(options, target.api_key_env, dict(target.headers), sys.stderr)
    except CtxPrecError as exc:
        print(
            f"run {outcome.run_id} is published but its export failed: {exc}; complete it "
            f"with: {export_command(options)}",
            file=sys.stderr,
        )
        return 1
